"""Node state rules: what counts as a change worth an event, node status words, match funnels,
credentials and heartbeat freshness."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from rlark_contracts.events.agent import NodeObservation
from rlark_contracts.events.inventory import NodeState

from rlark_inventory.domain import credentials, health
from rlark_inventory.domain.nodes import (
    MatchedNode,
    changed,
    match_summary,
    node_document,
    search_text,
    status_of,
)
from rlark_inventory.domain.workers import is_active

pytestmark = pytest.mark.unit

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def observed(**fields: object) -> NodeObservation:
    return NodeObservation.model_validate({"name": "n1", "gpu_count": 8, "labels": {"a": "1"}, **fields})


def test_only_observed_at_moving_is_not_a_change() -> None:
    first = node_document("c", observed(), T0)
    again = node_document("c", observed(), T0 + timedelta(seconds=30))
    assert not changed(first, again)
    assert changed(None, first)


@pytest.mark.parametrize(
    "difference",
    [
        {"ready": False},
        {"schedulable": False},
        {"gpu_allocated": 1},
        {"gpu_allocated_foreign": 1},
        {"cpu_allocated_millis": 100},
        {"labels": {"a": "2"}},
        {"addresses": ["10.0.0.1"]},
        {"gpu_model": "H100"},
    ],
)
def test_any_fact_about_the_node_is_a_change(difference: dict[str, object]) -> None:
    assert changed(node_document("c", observed(), T0), node_document("c", observed(**difference), T0))


def test_negative_counts_from_an_agent_are_clamped() -> None:
    doc = node_document("c", observed(gpu_count=-1, memory_bytes=-5, gpu_allocated_foreign=-2), T0)
    assert (doc["gpu_count"], doc["memory_bytes"], doc["gpu_allocated_foreign"]) == (0, 0, 0)


def test_a_node_document_is_a_valid_node_state() -> None:
    doc = node_document("c", observed(addresses=["10.0.0.1"]), T0)
    state = NodeState.model_validate(doc)
    assert state.model_dump() == doc


@pytest.mark.parametrize(
    ("ready", "schedulable", "gone", "status"),
    [
        (True, True, False, "ready"),
        (True, False, False, "cordoned"),
        (False, True, False, "not_ready"),
        (False, False, False, "not_ready"),
        (True, True, True, "gone"),
    ],
)
def test_status_words(ready: bool, schedulable: bool, gone: bool, status: str) -> None:
    assert status_of(ready, schedulable, gone) == status


def test_search_text_holds_name_addresses_and_labels_lower_cased() -> None:
    assert search_text("GPU-1", ["10.0.0.1"], {"Zone": "Z1"}) == "gpu-1 10.0.0.1 zone=z1"


def test_match_funnel_narrows_step_by_step() -> None:
    nodes = [
        MatchedNode("a", True, True, "A100", 8),
        MatchedNode("b", True, True, "A100", 2),
        MatchedNode("c", True, False, "A100", 8),
        MatchedNode("d", False, True, "A100", 8),
    ]
    summary = match_summary(10, nodes, gpus=4)
    assert (summary.total, summary.matching, summary.ready, summary.schedulable, summary.with_free_gpus) == (
        10,
        4,
        3,
        2,
        1,
    )
    assert [n.fits(4) for n in nodes] == [True, False, False, False]


def test_credentials_are_random_prefixed_and_checked_by_hash() -> None:
    one, two = credentials.new_credential(), credentials.new_credential()
    assert one != two
    assert one.startswith("rlark-agent-")
    assert credentials.plausible(one)
    digest = credentials.hash_credential(one)
    assert credentials.matches(one, digest)
    assert not credentials.matches(two, digest)
    assert one not in credentials.fingerprint(digest)
    assert not credentials.plausible("rlark-agent-")
    assert not credentials.plausible("password123456789012345")


def test_heartbeats_from_the_future_count_as_now_and_stale_ones_are_not_fresh() -> None:
    assert health.seen_at(T0 + timedelta(hours=1), T0) == T0
    assert health.is_fresh(T0 - timedelta(seconds=10), T0, 30)
    assert not health.is_fresh(T0 - timedelta(seconds=31), T0, 30)
    assert health.offline_before(T0, 30) == T0 - timedelta(seconds=30)


@pytest.mark.parametrize(
    ("phase", "active"),
    [
        ("Created", True),
        ("Preparing", True),
        ("RayHeadUp", True),
        ("Running", True),
        ("Succeeded", False),
        ("Failed", False),
        ("Stopped", False),
        ("stopped", False),
        ("SomeNewerPhase", True),
    ],
)
def test_workers_run_until_a_terminal_phase(phase: str, active: bool) -> None:
    assert is_active(phase) is active
