"""The hostPath policy's path rules: normalisation, component-wise prefixes, protected paths."""

from __future__ import annotations

import posixpath

import pytest
from hypothesis import given
from hypothesis import strategies as st
from rlark_contracts.hostpaths import (
    MAX_PREFIXES,
    PROTECTED,
    HostPathError,
    PolicyError,
    is_under,
    normalise,
    normalise_policy,
    policy_problem,
    source_decision,
)

pytestmark = pytest.mark.unit

NAMES = st.text(alphabet="abcdefgh_-.", min_size=1, max_size=6).filter(lambda n: n not in (".", ".."))
PATHS = st.lists(NAMES, min_size=1, max_size=5).map(lambda parts: "/" + "/".join(parts))
ALLOWED_ROOT = "/srv/datasets"


@pytest.mark.parametrize(
    "source",
    [
        "/",
        "/etc",
        "/etc/",
        "//etc",
        "/etc/passwd",
        "/var/run/docker.sock",
        "/run/containerd/containerd.sock",
        "/proc/1/root",
        "/var/lib/kubelet/pods",
        "/dev/sda",
        "/root/.ssh",
    ],
)
def test_protected_host_paths_are_refused_even_when_the_policy_allows_everything_else(source: str) -> None:
    decision = source_decision(source, ("/srv", "/data"))
    assert not decision.allowed
    assert any(word in decision.rule for word in ("protected", "root directory", "socket"))


@pytest.mark.parametrize("source", ["/etc/..", "/etc/../", "/srv/../etc", "/srv/./x", "srv", "", "/srv/\x00"])
def test_dot_components_relative_paths_and_control_characters_are_refused_not_resolved(source: str) -> None:
    decision = source_decision(source, ("/srv",))
    assert not decision.allowed


def test_an_empty_policy_denies_every_host_path() -> None:
    decision = source_decision("/srv/datasets", ())
    assert not decision.allowed
    assert "default deny" in decision.rule


def test_a_prefix_matches_whole_components_only() -> None:
    assert source_decision("/srv/datasets", (ALLOWED_ROOT,)).allowed
    assert source_decision("/srv/datasets/imagenet", (ALLOWED_ROOT,)).allowed
    assert source_decision("/srv//datasets/imagenet/", (ALLOWED_ROOT,)).allowed
    assert not source_decision("/srv/datasets2", (ALLOWED_ROOT,)).allowed
    assert not source_decision("/srv", (ALLOWED_ROOT,)).allowed


def test_a_socket_under_an_allowed_prefix_is_still_refused() -> None:
    decision = source_decision("/srv/datasets/docker.sock", (ALLOWED_ROOT,))
    assert not decision.allowed
    assert "socket" in decision.rule


@pytest.mark.parametrize(
    ("prefix", "words"),
    [
        ("/", "root directory"),
        ("//", "root directory"),
        ("/etc", "protected host path /etc"),
        ("/var", "protected host path /var/lib/containerd"),
        ("/var/run/x", "protected host path /var/run"),
        ("relative/path", "absolute"),
        ("/srv/../etc", "'..'"),
        ("/srv/./x", "'..'"),
        ("/srv/a\nb", "control characters"),
        ("/srv/" + "a" * 2000, "at most"),
        ("/srv/docker.sock", "socket"),
    ],
)
def test_policy_entries_that_would_open_the_host_are_refused(prefix: str, words: str) -> None:
    problem = policy_problem(prefix)
    assert problem is not None
    assert words in problem


def test_a_checkout_in_root_s_home_can_be_allowed_but_not_root_s_ssh_directory() -> None:
    assert policy_problem("/root/rlark/.state/demo/outputs") is None
    assert source_decision("/root/rlark/.state/demo/outputs/x", ("/root/rlark/.state/demo/outputs",)).allowed
    assert (
        policy_problem("/root")
        == "/root overlaps the protected host path /root/.ssh, which no policy can allow"
    )
    assert not source_decision("/root/.ssh/authorized_keys", ("/srv",)).allowed


def test_a_policy_is_stored_normalised_sorted_and_without_covered_entries() -> None:
    got = normalise_policy(["/srv/datasets/", "/data//shared", "/srv/datasets/imagenet", "/data/shared"])
    assert got == ("/data/shared", "/srv/datasets")


def test_a_bad_policy_entry_is_named_by_its_index() -> None:
    with pytest.raises(PolicyError) as raised:
        normalise_policy(["/srv/datasets", "/etc"])
    assert raised.value.problem.index == 1


def test_a_policy_has_a_bounded_length() -> None:
    with pytest.raises(PolicyError) as raised:
        normalise_policy([f"/srv/p{i}" for i in range(MAX_PREFIXES + 1)])
    assert raised.value.problem.index is None


@given(PATHS)
def test_normalising_is_idempotent_and_agrees_with_posixpath_on_clean_paths(path: str) -> None:
    once = normalise(path)
    assert normalise(once) == once
    assert once == posixpath.normpath(path)


@given(PATHS, PATHS)
def test_is_under_is_component_wise_prefix(path: str, prefix: str) -> None:
    expected = path == prefix or path.startswith(prefix.rstrip("/") + "/")
    assert is_under(path, prefix) is expected


@given(PATHS, st.lists(NAMES, max_size=3))
def test_a_source_is_allowed_exactly_when_it_lies_under_the_allowed_prefix(
    tail: str, extra: list[str]
) -> None:
    source = ALLOWED_ROOT + tail + ("/" + "/".join(extra) if extra else "")
    decision = source_decision(source, (ALLOWED_ROOT,))
    assert decision.allowed is (not source.rsplit("/", 1)[-1].endswith(".sock"))
    sibling = ALLOWED_ROOT + "x" + tail
    assert not source_decision(sibling, (ALLOWED_ROOT,)).allowed


@given(PATHS, st.sampled_from(["..", "."]), PATHS)
def test_no_dot_trick_ever_reaches_outside_an_allowed_prefix(head: str, dots: str, tail: str) -> None:
    source = ALLOWED_ROOT + head + "/" + dots + tail
    assert not source_decision(source, (ALLOWED_ROOT,)).allowed
    with pytest.raises(HostPathError):
        normalise(source)


@given(st.sampled_from(PROTECTED), st.lists(NAMES, max_size=3))
def test_nothing_under_a_protected_path_is_allowed_whatever_the_policy(
    protected: str, tail: list[str]
) -> None:
    source = protected + ("/" + "/".join(tail) if tail else "")
    assert not source_decision(source, ("/srv", "/data", "/opt")).allowed
    assert policy_problem(source) is not None
