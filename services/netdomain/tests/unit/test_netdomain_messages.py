"""Every netdomain refusal can be said in every language (ADR 0011)."""

from __future__ import annotations

from ipaddress import IPv4Network

import pytest
from rlark_contracts.messages import LANGUAGES, Text, catalogue
from rlark_netdomain.domain.cidr import validate_domain_cidr
from rlark_netdomain.domain.errors import DomainValidationError, NetDomainErrorCode
from rlark_netdomain.domain.overlaps import DomainCidr, ensure_no_overlaps


@pytest.mark.parametrize("code", list(NetDomainErrorCode))
def test_every_netdomain_error_code_has_a_sentence_in_every_language(code: NetDomainErrorCode) -> None:
    for lang in LANGUAGES:
        assert any(key == code.value or key.startswith(f"{code.value}.") for key in catalogue(lang)), lang


def test_a_cidr_refusal_carries_its_key_and_params() -> None:
    with pytest.raises(DomainValidationError) as caught:
        validate_domain_cidr("10.100.0.1/16")
    said = caught.value.message
    assert isinstance(said, Text)
    assert said.key == "cidr_host_bits_set"
    assert dict(said.params) == {"cidr": "10.100.0.1/16", "network": "10.100.0.0/16"}
    assert said.render("zh-CN") == "10.100.0.1/16 的主机位不为零；它所属的网络是 10.100.0.0/16。"


def test_a_single_overlap_is_one_sentence_in_each_language() -> None:
    with pytest.raises(DomainValidationError) as caught:
        ensure_no_overlaps(IPv4Network("10.1.0.0/16"), [], [DomainCidr("a", IPv4Network("10.0.0.0/8"))])
    said = caught.value.message
    assert isinstance(said, Text)
    assert said.english == '10.1.0.0/16 overlaps CIDR 10.0.0.0/8 of network domain "a".'
    assert said.render("zh-CN") == '10.1.0.0/16 与网络域 "a" 的 CIDR 10.0.0.0/8 重叠。'
