"""Which webhook URLs the notifier calls: https to public addresses, nothing the platform itself can reach
that a user should not (SSRF). Pure; the sender checks resolved addresses again with ``address_allowed``.

- ``https`` only; ``http`` when the deployment allows it (``RLARK_NOTIFIER_ALLOW_HTTP``).
- Never link-local (``169.254.0.0/16``: cloud metadata services; ``fe80::/10``), unspecified, multicast
  or reserved addresses, nor the well-known metadata host names.
- Loopback and private (RFC 1918, ``fc00::/7``, CGNAT) addresses only when the deployment allows it
  (``RLARK_NOTIFIER_ALLOW_PRIVATE``: a receiver inside the company network, or a test's local receiver).
- No user name or password in the URL (they would be stored and shown in plain text: use the secret).

A host is read as the sender will reach it (:func:`literal_address`, used at registration and by the
sender): NFKC first (``１２７.０.０.１`` is 127.0.0.1 to IDNA), then every numeric form the system resolver's
``inet_aton`` accepts (``127.1``, ``2130706433``, ``0x7f000001``, ``0177.0.0.1``) is the address it names, so
``address_allowed`` judges it at once instead of the send-time resolution alone.
"""

from __future__ import annotations

import ipaddress
import re
import unicodedata
from dataclasses import dataclass
from urllib.parse import urlsplit

from rlark_notifier.domain.errors import NotifierInputError

MAX_URL_CHARS = 2048
_METADATA_HOSTS = frozenset({"metadata.google.internal", "metadata", "instance-data", "metadata.azure.com"})
_CGNAT = ipaddress.ip_network("100.64.0.0/10")

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


@dataclass(frozen=True, slots=True)
class UrlPolicy:
    allow_http: bool = False
    allow_private: bool = False


def _refuse(code: str, message: str) -> NotifierInputError:
    return NotifierInputError(code, message, "url")


def address_allowed(address: IPAddress, policy: UrlPolicy) -> str | None:
    """Why the notifier must not call ``address``, or None when it may."""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address_allowed(address.ipv4_mapped, policy)
    if address.is_link_local:
        return f"{address} is link-local (cloud metadata services live there)"
    if address.is_unspecified or address.is_multicast or address.is_reserved:
        return f"{address} is not a unicast address"
    private = address.is_loopback or address.is_private or address in _CGNAT
    if private and not policy.allow_private:
        return f"{address} is a loopback or private address"
    return None


_ATON_PART = re.compile(r"0[xX](?P<hex>[0-9a-fA-F]*)|0(?P<oct>[0-7]+)|(?P<dec>[1-9][0-9]*|0)")
"""One part of an inet_aton address: hex, octal or decimal (ASCII digits only: ``int()`` would take more)."""
_DOTS = str.maketrans({"\u3002": ".", "\uff61": "."})
"""The label separators IDNA reads as dots besides ``.`` (U+FF0E, the full-width one, NFKC already maps)."""


def normalized_host(host: str) -> str:
    """``host`` as IDNA will read it: NFKC, ideographic full stops as dots, lower case, no trailing dot."""
    return unicodedata.normalize("NFKC", host).translate(_DOTS).rstrip(".").lower()


def _inet_aton(host: str) -> ipaddress.IPv4Address | None:
    """The IPv4 address ``inet_aton(3)`` reads ``host`` as, or None when it reads no address.

    One to four parts separated by dots, each decimal, octal (a leading ``0``) or hex (``0x``); the last part
    fills the bytes the others leave: ``127.1`` is 127.0.0.1, ``2130706433`` and ``0x7f000001`` are too."""
    parts = host.split(".")
    if not 1 <= len(parts) <= 4:
        return None
    values: list[int] = []
    for part in parts:
        number = _ATON_PART.fullmatch(part)
        if number is None:
            return None
        if number["hex"] is not None:
            values.append(int(number["hex"] or "0", 16))  # "0x" alone is 0 to inet_aton
        elif number["oct"] is not None:
            values.append(int(number["oct"], 8))
        else:
            values.append(int(number["dec"]))
    *leading, last = values
    if any(value > 0xFF for value in leading) or last >= 1 << (8 * (4 - len(leading))):
        return None
    address = last
    for index, value in enumerate(leading):
        address |= value << (8 * (3 - index))
    return ipaddress.IPv4Address(address)


def literal_address(host: str) -> IPAddress | None:
    """The address ``host`` names by itself (an IPv6 or any IPv4 form the resolver accepts), or None for a
    name that must be resolved. The one reading of a host for registration and for the sender."""
    host = normalized_host(host)
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        return _inet_aton(host)


def validate_url(url: str, policy: UrlPolicy) -> str:
    """``url`` stripped, or ``NotifierInputError`` (field ``url``) saying why it is refused."""
    url = url.strip()
    if not url:
        raise _refuse("invalid_url", "url: a webhook URL is required")
    if len(url) > MAX_URL_CHARS:
        raise _refuse("invalid_url", f"url: at most {MAX_URL_CHARS} characters")
    try:
        parts = urlsplit(url)
        host = parts.hostname
        _ = parts.port
    except ValueError:
        raise _refuse("invalid_url", "url: not a valid URL") from None
    if parts.scheme not in ("https", "http"):
        raise _refuse("invalid_url", "url: must start with https://")
    if parts.scheme == "http" and not policy.allow_http:
        raise _refuse("insecure_url", "url: must use https (plain http is not allowed on this platform)")
    if not host:
        raise _refuse("invalid_url", "url: has no host")
    if parts.username is not None or parts.password is not None:
        raise _refuse("credentials_in_url", "url: must not carry a user name or password (use secret)")
    if parts.fragment:
        raise _refuse("invalid_url", "url: must not have a #fragment")
    host = normalized_host(host)
    if host in _METADATA_HOSTS:
        raise _refuse("forbidden_address", f"url: host {host} is a cloud metadata service")
    literal = literal_address(host)
    if literal is not None:
        why = address_allowed(literal, policy)
        if why:
            raise _refuse("forbidden_address", f"url: {why}")
    elif (host == "localhost" or host.endswith(".localhost")) and not policy.allow_private:
        raise _refuse("forbidden_address", "url: localhost is a loopback address")
    return url
