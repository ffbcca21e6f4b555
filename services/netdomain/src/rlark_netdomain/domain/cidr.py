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

from rlark_contracts import messages
from rlark_contracts.messages import Text

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
        raise _error(
            NetDomainErrorCode.INVALID_CIDR, messages.text("invalid_cidr.empty", example=_EXAMPLE), field
        )
    if ":" in text:
        raise _error(
            NetDomainErrorCode.CIDR_NOT_IPV4,
            messages.text("cidr_not_ipv4", example=_EXAMPLE),
            field,
        )
    match = _CIDR_SHAPE.fullmatch(text)
    if match is None:
        raise _error(
            NetDomainErrorCode.INVALID_CIDR,
            _shown("invalid_cidr.shape", "invalid_cidr.shape_unshown", text, example=_EXAMPLE),
            field,
        )
    try:
        address = IPv4Address(match.group(1))
        network = IPv4Network(text, strict=False)
    except ValueError as exc:
        raise _error(
            NetDomainErrorCode.INVALID_CIDR,
            _shown("invalid_cidr", "invalid_cidr.unshown", text, detail=str(exc)),
            field,
        ) from None
    if address != network.network_address:
        raise _error(
            NetDomainErrorCode.CIDR_HOST_BITS_SET,
            messages.text("cidr_host_bits_set", cidr=text, network=str(network)),
            field,
        )
    if network.prefixlen < MIN_PREFIX:
        raise _error(
            NetDomainErrorCode.CIDR_PREFIX_OUT_OF_RANGE,
            messages.text(
                "cidr_prefix_out_of_range.too_large", network=str(network), min=MIN_PREFIX, max=MAX_PREFIX
            ),
            field,
        )
    if network.prefixlen > MAX_PREFIX:
        smallest = IPv4Network(f"10.0.0.0/{MAX_PREFIX}")
        raise _error(
            NetDomainErrorCode.CIDR_PREFIX_OUT_OF_RANGE,
            messages.text(
                "cidr_prefix_out_of_range.too_small",
                network=str(network),
                addresses=count_assignable(network),
                min=MIN_PREFIX,
                max=MAX_PREFIX,
                smallest=count_assignable(smallest),
            ),
            field,
        )
    if not any(network.subnet_of(private) for private in PRIVATE_RANGES):
        ranges = ", ".join(str(private) for private in PRIVATE_RANGES)
        raise _error(
            NetDomainErrorCode.CIDR_NOT_PRIVATE,
            messages.text("cidr_not_private", network=str(network), ranges=ranges),
            field,
        )
    return network


def _shown(key: str, unshown: str, value: str, **params: str) -> Text:
    """Sentence ``key`` quoting the user's input when it is short and printable, else ``unshown``,
    which names no value."""
    if len(value) <= 64 and value.isprintable():
        return messages.text(key, value=repr(value), **params)
    return messages.text(unshown, **params)


def _error(code: NetDomainErrorCode, message: Text, field: str) -> DomainValidationError:
    return DomainValidationError(code, message, field)
