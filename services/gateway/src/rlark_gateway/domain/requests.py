"""Rules about incoming HTTP requests, pure: who the client is, whether a browser request is foreign, which
bodies are accepted, and the security headers every answer carries.

- The client address is the TCP peer, unless the peer is a configured trusted proxy: then
  ``X-Forwarded-For`` is read from the right, skipping trusted proxies, and the first other address is the
  client (a client can prepend anything; only what our proxies appended counts).
- A state-changing request is foreign when its ``Origin`` is neither the gateway's own (the ``Host`` it was
  sent to) nor an allowed origin, or — without ``Origin`` — when ``Sec-Fetch-Site`` says another site sent
  it. Clients that are not browsers send neither and are not affected.
- Bodies are JSON or YAML: a form or ``text/plain`` body (what a cross-site HTML form can send without a
  CORS preflight) is refused — except on the tools origin (ADR 0012: a job's TensorBoard posts forms; the
  Origin rule still holds there).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence
from ipaddress import IPv4Address, IPv4Network, IPv6Address, IPv6Network
from urllib.parse import urlsplit

Network = IPv4Network | IPv6Network

BODY_MEDIA_TYPES = frozenset(
    {"application/json", "application/yaml", "application/x-yaml", "text/yaml", "text/x-yaml"}
)

CONTENT_SECURITY_POLICY = "; ".join(
    (
        "default-src 'self'",
        "script-src 'self'",
        # Ant Design and CodeMirror put their CSS in <style> elements at run time; scripts stay strict.
        "style-src 'self' 'unsafe-inline'",
        "img-src 'self' data:",
        "font-src 'self' data:",
        "connect-src 'self'",
        "object-src 'none'",
        "base-uri 'self'",
        "form-action 'self'",
        "frame-ancestors 'none'",
    )
)

SECURITY_HEADERS: tuple[tuple[str, str], ...] = (
    ("content-security-policy", CONTENT_SECURITY_POLICY),
    ("x-frame-options", "DENY"),
    ("x-content-type-options", "nosniff"),
    ("referrer-policy", "no-referrer"),
    ("cross-origin-opener-policy", "same-origin"),
)
HSTS = ("strict-transport-security", "max-age=31536000")


def _ip(text: str) -> IPv4Address | IPv6Address | None:
    try:
        return ipaddress.ip_address(text.strip().strip("[]"))
    except ValueError:
        return None


def _trusted(address: IPv4Address | IPv6Address, trusted: Sequence[Network]) -> bool:
    return any(address.version == net.version and address in net for net in trusted)


def client_address(peer: str | None, forwarded_for: Sequence[str], trusted: Sequence[Network]) -> str:
    """The client's address: the peer, or what trusted proxies recorded in ``X-Forwarded-For``."""
    if peer is None:
        return "unknown"
    address = _ip(peer)
    if address is None or not _trusted(address, trusted):
        return peer
    hops = [hop for value in forwarded_for for hop in value.split(",") if hop.strip()]
    client = peer
    for hop in reversed(hops):
        hop_address = _ip(hop)
        if hop_address is None:
            break  # garbage from before our proxies: the last good hop is the client
        client = str(hop_address)
        if not _trusted(hop_address, trusted):
            break
    return client


def from_trusted_proxy(peer: str | None, trusted: Sequence[Network]) -> bool:
    address = _ip(peer) if peer is not None else None
    return address is not None and _trusted(address, trusted)


def foreign_request(
    origin: str | None, sec_fetch_site: str | None, host: str | None, allowed_origins: Sequence[str]
) -> str | None:
    """Why a browser request is foreign (a message), or None when it is not."""
    if origin is not None:
        normalized = origin.strip().lower().rstrip("/")
        if normalized in allowed_origins:
            return None
        parts = urlsplit(normalized)
        if parts.scheme in ("http", "https") and host is not None and parts.netloc == host.strip().lower():
            return None
        return f"requests from {origin[:100]!r} may not make changes here"
    if sec_fetch_site is not None and sec_fetch_site.strip().lower() not in ("same-origin", "none"):
        return "requests sent by another site may not make changes here"
    return None


def media_type(content_type: str | None) -> str:
    return (content_type or "").split(";", 1)[0].strip().lower()


def body_media_type_allowed(content_type: str | None) -> bool:
    kind = media_type(content_type)
    return kind in BODY_MEDIA_TYPES or (kind.startswith("application/") and kind.endswith("+json"))
