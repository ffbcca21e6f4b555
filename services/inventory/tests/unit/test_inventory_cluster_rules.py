"""Cluster registration rules: DNS-label names and pod/service CIDRs that parse and do not overlap."""

from __future__ import annotations

import pytest

from rlark_inventory.domain.clusters import ClusterSpec, validate_spec
from rlark_inventory.domain.errors import InvalidInput

pytestmark = pytest.mark.unit


def spec(**fields: object) -> ClusterSpec:
    base: dict[str, object] = {
        "name": "gpu-a",
        "runtime": "kubernetes",
        "pod_cidrs": ("10.244.0.0/16",),
        "service_cidrs": ("10.96.0.0/12",),
    }
    return ClusterSpec(**{**base, **fields})  # type: ignore[arg-type]


def refusal(**fields: object) -> InvalidInput:
    with pytest.raises(InvalidInput) as caught:
        validate_spec(spec(**fields))
    return caught.value


def test_a_valid_spec_comes_back_in_canonical_form() -> None:
    checked = validate_spec(spec(pod_cidrs=(" 10.244.0.0/16 ", "fd00:10::/56"), display_name="  A  "))
    assert checked.pod_cidrs == ("10.244.0.0/16", "fd00:10::/56")
    assert checked.display_name == "A"


@pytest.mark.parametrize("name", ["", "A", "gpu_a", "-a", "a-", "a" * 64, "a.b"])
def test_names_must_be_dns_labels(name: str) -> None:
    assert refusal(name=name).field == "name"


def test_dlq_is_not_a_cluster_name_since_it_names_each_topic_familys_dead_letters() -> None:
    refused = refusal(name="dlq")
    assert (refused.field, "reserved" in str(refused)) == ("name", True)


def test_names_up_to_63_characters_are_fine() -> None:
    assert validate_spec(spec(name="a" * 63)).name == "a" * 63


@pytest.mark.parametrize(
    ("pods", "field", "needle"),
    [
        (("10.244.0.0/16", "banana/8"), "pod_cidrs[1]", "not a network"),
        (("10.244.0.5/16",), "pod_cidrs[0]", "the network is 10.244.0.0/16"),
        (("10.244.0.0",), "pod_cidrs[0]", "CIDR notation"),
        (("10.0.0.0/8", "10.244.0.0/16"), "pod_cidrs[1]", "overlaps pod_cidrs[0] 10.0.0.0/8"),
    ],
)
def test_bad_pod_ranges_are_named(pods: tuple[str, ...], field: str, needle: str) -> None:
    error = refusal(pod_cidrs=pods)
    assert error.field == field
    assert needle in error.message


def test_pod_and_service_ranges_must_not_overlap_and_the_message_says_which() -> None:
    error = refusal(
        pod_cidrs=("10.1.0.0/16", "10.96.0.0/16"), service_cidrs=("10.200.0.0/16", "10.96.0.0/12")
    )
    assert error.code == "cidr_overlap"
    assert error.field == "service_cidrs[1]"
    assert "10.96.0.0/12 overlaps pod_cidrs[1] 10.96.0.0/16" in error.message


def test_ranges_of_different_ip_versions_never_overlap() -> None:
    validate_spec(spec(pod_cidrs=("::/0",), service_cidrs=("10.96.0.0/12",)))


def test_adjacent_ranges_are_fine() -> None:
    validate_spec(spec(pod_cidrs=("10.96.0.0/13",), service_cidrs=("10.104.0.0/13",)))


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"runtime": "nomad"}, "runtime"),
        ({"category": "two words"}, "category"),
        ({"region": "x" * 64}, "region"),
        ({"display_name": "x" * 129}, "display_name"),
        ({"labels": {"ok": "no spaces allowed"}}, "labels.ok"),
        ({"pod_cidrs": tuple(f"10.{i}.0.0/16" for i in range(33))}, "pod_cidrs"),
    ],
)
def test_other_fields_are_checked(fields: dict[str, object], field: str) -> None:
    assert refusal(**fields).field == field
