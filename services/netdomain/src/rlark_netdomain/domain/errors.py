"""Refusals raised by the netdomain domain.

Each carries a stable machine code (``NetDomainErrorCode``) and a human message; validation errors
also name the request field, so the API layer maps them onto 4xx responses without parsing text.
"""

from __future__ import annotations

from enum import StrEnum


class NetDomainErrorCode(StrEnum):
    """Stable machine codes; clients and the web console switch on these."""

    INVALID_CIDR = "invalid_cidr"
    CIDR_NOT_IPV4 = "cidr_not_ipv4"
    CIDR_HOST_BITS_SET = "cidr_host_bits_set"
    CIDR_NOT_PRIVATE = "cidr_not_private"
    CIDR_PREFIX_OUT_OF_RANGE = "cidr_prefix_out_of_range"
    CIDR_OVERLAPS = "cidr_overlaps"
    ADDRESS_POOL_EXHAUSTED = "address_pool_exhausted"
    INVALID_DOMAIN_NAME = "invalid_domain_name"
    INVALID_TUNNEL_ENDPOINT = "invalid_tunnel_endpoint"


class NetDomainError(Exception):
    """Base of the domain's refusals: ``code`` for machines, ``message`` for people."""

    def __init__(self, code: NetDomainErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message

    def __repr__(self) -> str:
        return f"{type(self).__name__}(code={self.code.value!r}, message={self.message!r})"


class DomainValidationError(NetDomainError):
    """A network domain request was refused; ``field`` names the request field (``cidr``...)."""

    def __init__(self, code: NetDomainErrorCode, message: str, field: str = "cidr") -> None:
        super().__init__(code, message)
        self.field = field
