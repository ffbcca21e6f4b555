"""Validation of a network domain's name.

A domain's name appears in DNS-like places (worker environment, tunnel device names, Kafka keys),
so it is one DNS label as RFC 1123 defines it: 1 to 63 lower-case letters, digits and hyphens,
starting and ending with a letter or digit.
"""

from __future__ import annotations

import re
from typing import Final

from rlark_contracts.messages import Text, text

from rlark_netdomain.domain.errors import DomainValidationError, NetDomainErrorCode

MAX_DOMAIN_NAME_CHARS: Final = 63
_LABEL: Final = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?")
RESERVED: Final = frozenset({"none"})
"""Names no domain may take: a job's ``spec.networkDomain: none`` means "no domain" (the scheduler)."""


def validate_domain_name(name: str, field: str = "name") -> str:
    """Return ``name`` if it is a DNS label, or raise ``invalid_domain_name`` saying what is wrong."""
    if not name:
        raise _invalid(text("invalid_domain_name.empty"), field)
    if len(name) > MAX_DOMAIN_NAME_CHARS:
        raise _invalid(
            text("invalid_domain_name.too_long", length=len(name), max=MAX_DOMAIN_NAME_CHARS), field
        )
    if not _LABEL.fullmatch(name):
        said = (
            text("invalid_domain_name.not_dns_label", name=repr(name))
            if name.isprintable()
            else text("invalid_domain_name.not_dns_label_unshown")
        )
        raise _invalid(said, field)
    if name in RESERVED:
        raise _invalid(text("invalid_domain_name.reserved", name=repr(name), value=name), field)
    return name


def _invalid(message: Text, field: str) -> DomainValidationError:
    return DomainValidationError(NetDomainErrorCode.INVALID_DOMAIN_NAME, message, field)
