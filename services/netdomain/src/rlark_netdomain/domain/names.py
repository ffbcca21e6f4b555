"""Validation of a network domain's name.

A domain's name appears in DNS-like places (worker environment, tunnel device names, Kafka keys),
so it is one DNS label as RFC 1123 defines it: 1 to 63 lower-case letters, digits and hyphens,
starting and ending with a letter or digit.
"""

from __future__ import annotations

import re
from typing import Final

from rlark_netdomain.domain.errors import DomainValidationError, NetDomainErrorCode

MAX_DOMAIN_NAME_CHARS: Final = 63
_LABEL: Final = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?")
RESERVED: Final = frozenset({"none"})
"""Names no domain may take: a job's ``spec.networkDomain: none`` means "no domain" (the scheduler)."""


def validate_domain_name(name: str, field: str = "name") -> str:
    """Return ``name`` if it is a DNS label, or raise ``invalid_domain_name`` saying what is wrong."""
    if not name:
        raise _invalid("The domain name is empty; use a DNS label such as train-net.", field)
    if len(name) > MAX_DOMAIN_NAME_CHARS:
        raise _invalid(
            f"The domain name has {len(name)} characters; the maximum is {MAX_DOMAIN_NAME_CHARS}.", field
        )
    if not _LABEL.fullmatch(name):
        shown = repr(name) if name.isprintable() else "The name"
        raise _invalid(
            f"{shown} is not a DNS label: use lower-case letters, digits and '-', starting and "
            "ending with a letter or digit (e.g. train-net).",
            field,
        )
    if name in RESERVED:
        raise _invalid(
            f"{name!r} is reserved: a job's networkDomain: {name} means it joins no domain; pick another name.",
            field,
        )
    return name


def _invalid(message: str, field: str) -> DomainValidationError:
    return DomainValidationError(NetDomainErrorCode.INVALID_DOMAIN_NAME, message, field)
