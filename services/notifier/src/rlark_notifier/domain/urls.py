"""Which webhook URLs the notifier calls: https to public addresses, nothing the platform itself can reach
that a user should not (SSRF). Pure; the sender checks resolved addresses again with ``address_allowed``.

- ``https`` only; ``http`` when the deployment allows it (``RLARK_NOTIFIER_ALLOW_HTTP``).
- Never link-local (``169.254.0.0/16``: cloud metadata services; ``fe80::/10``), unspecified, multicast
  or reserved addresses, nor the well-known metadata host names.
- Loopback and private (RFC 1918, ``fc00::/7``, CGNAT) addresses only when the deployment allows it
  (``RLARK_NOTIFIER_ALLOW_PRIVATE``: a receiver inside the company network, or a test's local receiver).
- No user name or password in the URL (they would be stored and shown in plain text: use the secret).
"""

from __future__ import annotations

import ipaddress
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
    host = host.rstrip(".").lower()
    if host in _METADATA_HOSTS:
        raise _refuse("forbidden_address", f"url: host {host} is a cloud metadata service")
    try:
        literal: IPAddress | None = ipaddress.ip_address(host)
    except ValueError:
        literal = None
    if literal is not None:
        why = address_allowed(literal, policy)
        if why:
            raise _refuse("forbidden_address", f"url: {why}")
    elif (host == "localhost" or host.endswith(".localhost")) and not policy.allow_private:
        raise _refuse("forbidden_address", "url: localhost is a loopback address")
    return url
