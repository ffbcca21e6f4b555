"""Behaviour of domain name validation: one DNS label, refusals with a stable code and the field."""

from __future__ import annotations

import pytest
from rlark_netdomain.domain import DomainValidationError, NetDomainErrorCode, validate_domain_name

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("name", ["train", "train-net", "a", "x" * 63, "0net", "net-0"])
def test_dns_labels_are_accepted(name: str) -> None:
    assert validate_domain_name(name) == name


@pytest.mark.parametrize(
    ("name", "fragment"),
    [
        ("", "empty"),
        ("x" * 64, "maximum is 63"),
        ("Train", "not a DNS label"),
        ("-train", "not a DNS label"),
        ("train-", "not a DNS label"),
        ("train.net", "not a DNS label"),
        ("train net", "not a DNS label"),
        ("tr\u200bain", "not a DNS label"),
        ("none", "reserved"),
    ],
)
def test_other_names_are_refused_naming_the_field(name: str, fragment: str) -> None:
    with pytest.raises(DomainValidationError) as info:
        validate_domain_name(name)

    assert info.value.code is NetDomainErrorCode.INVALID_DOMAIN_NAME
    assert info.value.field == "name"
    assert fragment in info.value.message
