"""Behaviour of ``validate_domain_cidr``: private IPv4 networks from /8 to /28 only."""

from __future__ import annotations

from ipaddress import IPv4Network

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from netdomain_strategies import private_networks
from rlark_netdomain.domain import (
    DomainValidationError,
    NetDomainErrorCode,
    validate_domain_cidr,
)

pytestmark = pytest.mark.unit


def refusal(cidr: str) -> DomainValidationError:
    with pytest.raises(DomainValidationError) as info:
        validate_domain_cidr(cidr)
    assert info.value.field == "cidr"
    return info.value


@pytest.mark.parametrize(
    "cidr",
    [
        "10.100.0.0/16",
        "10.0.0.0/8",
        "172.16.0.0/12",
        "192.168.10.0/24",
        "100.64.0.0/10",
        "172.31.255.240/28",
        " 10.1.0.0/16\n",
    ],
)
def test_private_networks_between_8_and_28_are_accepted(cidr: str) -> None:
    assert validate_domain_cidr(cidr) == IPv4Network(cidr.strip())


@pytest.mark.parametrize(
    "cidr",
    [
        "",
        "   ",
        "10.100.0.0",
        "10.100.0.0/",
        "ten/8",
        "10.100.0/16",
        "10.256.0.0/16",
        "10.0.0.0/255.0.0.0",
        "010.0.0.0/8",
        "10.0.0.0/33",
        "10.0.0.0/16/2",
    ],
)
def test_text_that_is_not_an_ipv4_cidr_is_refused_as_invalid(cidr: str) -> None:
    assert refusal(cidr).code is NetDomainErrorCode.INVALID_CIDR


def test_ipv6_is_refused_as_not_ipv4() -> None:
    assert refusal("fd00::/64").code is NetDomainErrorCode.CIDR_NOT_IPV4


def test_host_bits_set_is_refused_naming_the_normalised_network() -> None:
    error = refusal("10.100.5.7/16")

    assert error.code is NetDomainErrorCode.CIDR_HOST_BITS_SET
    assert "10.100.0.0/16" in error.message


@pytest.mark.parametrize("cidr", ["0.0.0.0/0", "8.0.0.0/7", "10.0.0.0/7"])
def test_prefix_shorter_than_8_is_refused_saying_why(cidr: str) -> None:
    error = refusal(cidr)

    assert error.code is NetDomainErrorCode.CIDR_PREFIX_OUT_OF_RANGE
    assert "/8" in error.message
    assert "/28" in error.message


@pytest.mark.parametrize("cidr", ["10.0.0.0/29", "10.0.0.0/30", "10.0.0.4/32"])
def test_prefix_longer_than_28_is_refused_saying_how_few_addresses_it_has(cidr: str) -> None:
    error = refusal(cidr)

    assert error.code is NetDomainErrorCode.CIDR_PREFIX_OUT_OF_RANGE
    assert "assignable addresses" in error.message
    assert "/28" in error.message


@pytest.mark.parametrize(
    "cidr",
    [
        "8.8.8.0/24",
        "172.15.0.0/16",
        "172.32.0.0/16",
        "172.0.0.0/8",
        "192.169.0.0/16",
        "100.128.0.0/10",
        "100.0.0.0/8",
        "169.254.0.0/16",
        "11.0.0.0/8",
    ],
)
def test_networks_not_wholly_inside_a_private_range_are_refused(cidr: str) -> None:
    error = refusal(cidr)

    assert error.code is NetDomainErrorCode.CIDR_NOT_PRIVATE
    assert "10.0.0.0/8" in error.message
    assert "100.64.0.0/10" in error.message


def test_refusals_carry_the_field_name_given() -> None:
    with pytest.raises(DomainValidationError) as info:
        validate_domain_cidr("nope", field="spec.cidr")

    assert info.value.field == "spec.cidr"


@settings(max_examples=200, deadline=None)
@given(private_networks())
def test_any_private_network_from_8_to_28_round_trips(network: IPv4Network) -> None:
    assert validate_domain_cidr(str(network)) == network


@settings(max_examples=200, deadline=None)
@given(private_networks(max_prefix=28), st.data())
def test_any_host_address_with_a_prefix_is_refused_naming_its_network(
    network: IPv4Network, data: st.DataObject
) -> None:
    offset = data.draw(st.integers(1, network.num_addresses - 1))
    text = f"{network.network_address + offset}/{network.prefixlen}"

    error = refusal(text)

    assert error.code is NetDomainErrorCode.CIDR_HOST_BITS_SET
    assert str(network) in error.message
