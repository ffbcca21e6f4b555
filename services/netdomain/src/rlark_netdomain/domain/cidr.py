"""Validation of a network domain's CIDR.

Role: decide whether a CIDR typed by an administrator can become a network domain, and say why not
in words an administrator can act on. The rules come from the user guide: a private IPv4 range,
written as its network (no host bits), sized between /8 and /28.

Overlap with clusters and other domains needs state the caller loads; see ``overlaps``.
"""

from __future__ import annotations

import re
from ipaddress import IPv4Address, IPv4Network
from typing import Final

from rlark_netdomain.domain.addresses import count_assignable
from rlark_netdomain.domain.errors import DomainValidationError, NetDomainErrorCode

#: Ranges a domain may use: RFC 1918 and the RFC 6598 shared address space.
PRIVATE_RANGES: Final = (
    IPv4Network("10.0.0.0/8"),
    IPv4Network("172.16.0.0/12"),
    IPv4Network("192.168.0.0/16"),
    IPv4Network("100.64.0.0/10"),
)
#: /8 is the largest private range; nothing shorter can be private.
MIN_PREFIX: Final = 8
#: /28 still leaves 14 assignable addresses; anything smaller is too tight for a multi-worker job.
MAX_PREFIX: Final = 28

_CIDR_SHAPE: Final = re.compile(r"(\d{1,3}(?:\.\d{1,3}){3})/(\d{1,2})")
_EXAMPLE: Final = "10.100.0.0/16"


def validate_domain_cidr(cidr: str, field: str = "cidr") -> IPv4Network:
    """Return the network ``cidr`` denotes, or raise ``DomainValidationError`` saying why not.

    Codes: ``invalid_cidr`` (not ``a.b.c.d/n``), ``cidr_not_ipv4``, ``cidr_host_bits_set`` (the
    message names the network meant), ``cidr_prefix_out_of_range`` (outside /8../28, with the
    reason), ``cidr_not_private`` (not wholly inside one of ``PRIVATE_RANGES``).
    """
    text = cidr.strip()
    if not text:
        raise _error(NetDomainErrorCode.INVALID_CIDR, f"The CIDR is empty; use e.g. {_EXAMPLE}.", field)
    if ":" in text:
        raise _error(
            NetDomainErrorCode.CIDR_NOT_IPV4,
            f"Network domains are IPv4 only; use a private IPv4 CIDR such as {_EXAMPLE}.",
            field,
        )
    match = _CIDR_SHAPE.fullmatch(text)
    if match is None:
        raise _error(
            NetDomainErrorCode.INVALID_CIDR,
            f"{_shown(text)} is not an IPv4 CIDR; write address/prefix-length, e.g. {_EXAMPLE}.",
            field,
        )
    try:
        address = IPv4Address(match.group(1))
        network = IPv4Network(text, strict=False)
    except ValueError as exc:
        raise _error(
            NetDomainErrorCode.INVALID_CIDR, f"{_shown(text)} is not a valid CIDR: {exc}.", field
        ) from None
    if address != network.network_address:
        raise _error(
            NetDomainErrorCode.CIDR_HOST_BITS_SET,
            f"{text} has host bits set; the network it belongs to is {network}.",
            field,
        )
    if network.prefixlen < MIN_PREFIX:
        raise _error(
            NetDomainErrorCode.CIDR_PREFIX_OUT_OF_RANGE,
            f"{network} is too large: the prefix must be between /{MIN_PREFIX} and /{MAX_PREFIX}, "
            f"and no private range is larger than a /{MIN_PREFIX} (10.0.0.0/8).",
            field,
        )
    if network.prefixlen > MAX_PREFIX:
        smallest = IPv4Network(f"10.0.0.0/{MAX_PREFIX}")
        raise _error(
            NetDomainErrorCode.CIDR_PREFIX_OUT_OF_RANGE,
            f"{network} is too small: it has {count_assignable(network)} assignable addresses; "
            f"the prefix must be between /{MIN_PREFIX} and /{MAX_PREFIX} "
            f"(a /{MAX_PREFIX} has {count_assignable(smallest)}).",
            field,
        )
    if not any(network.subnet_of(private) for private in PRIVATE_RANGES):
        ranges = ", ".join(str(private) for private in PRIVATE_RANGES)
        raise _error(
            NetDomainErrorCode.CIDR_NOT_PRIVATE,
            f"{network} is not a private range; a domain CIDR must lie wholly inside one of {ranges}.",
            field,
        )
    return network


def _shown(text: str) -> str:
    """The user's input, quoted, when it is short and printable; otherwise a neutral word."""
    if len(text) <= 64 and text.isprintable():
        return repr(text)
    return "The value"


def _error(code: NetDomainErrorCode, message: str, field: str) -> DomainValidationError:
    return DomainValidationError(code, message, field)
