"""The capacity model: free GPUs, allocations, indexes, versions and surveys."""

from __future__ import annotations

import dataclasses

import pytest
from rlark_scheduler.domain.capacity import CapacityModel, NodeState, gpus_used_by_others
from scheduler_fleet import A100, H100, gpu_node

pytestmark = pytest.mark.unit


def test_free_gpus_subtract_external_use_and_own_allocations() -> None:
    model = CapacityModel.from_nodes([gpu_node("n1", gpus=8, used=2)])
    assert model.free_gpus(("gpu-a", "n1")) == 6
    model.allocate("job-1", [(("gpu-a", "n1"), 4)])
    assert model.free_gpus(("gpu-a", "n1")) == 2


def test_free_gpus_never_go_below_zero_and_unknown_nodes_have_none() -> None:
    model = CapacityModel.from_nodes([gpu_node("n1", gpus=4, used=3)])
    model.allocate("job-1", [(("gpu-a", "n1"), 4)])  # recorded fact, even over capacity
    assert model.free_gpus(("gpu-a", "n1")) == 0
    assert model.free_gpus(("gpu-a", "nope")) == 0


def test_release_frees_the_gpus_and_is_idempotent() -> None:
    model = CapacityModel.from_nodes([gpu_node("n1"), gpu_node("n2")])
    model.allocate("job-1", [(("gpu-a", "n1"), 8), (("gpu-a", "n2"), 3)])
    assert (model.free_gpus(("gpu-a", "n1")), model.free_gpus(("gpu-a", "n2"))) == (0, 5)
    released = model.release("job-1")
    assert sorted(released) == [(("gpu-a", "n1"), 8), (("gpu-a", "n2"), 3)]
    assert (model.free_gpus(("gpu-a", "n1")), model.free_gpus(("gpu-a", "n2"))) == (8, 8)
    assert model.release("job-1") == ()
    assert model.allocated_jobs() == []


def test_cpu_only_workers_sharing_a_node_are_released_without_error() -> None:
    # Zero-GPU workers sharing a node (two of one job, or of two jobs): releasing the first once
    # dropped the node's held total and the next release failed the placement loop with a KeyError
    # — found by the chaos test with restarts (each restart releases its job's allocation).
    model = CapacityModel.from_nodes([gpu_node("n1"), gpu_node("n2")])
    model.allocate("job-1", [(("gpu-a", "n1"), 0), (("gpu-a", "n1"), 0)])
    model.allocate("job-2", [(("gpu-a", "n2"), 0), (("gpu-a", "n2"), 3)])
    model.allocate("job-3", [(("gpu-a", "n2"), 0)])
    assert model.release("job-1") == ((("gpu-a", "n1"), 0), (("gpu-a", "n1"), 0))
    assert model.release("job-3") == ((("gpu-a", "n2"), 0),)
    assert model.free_gpus(("gpu-a", "n2")) == 5
    assert model.release("job-2") == ((("gpu-a", "n2"), 0), (("gpu-a", "n2"), 3))
    assert (model.free_gpus(("gpu-a", "n1")), model.free_gpus(("gpu-a", "n2"))) == (8, 8)
    assert model.allocated_jobs() == []


def test_a_job_cannot_hold_two_allocations() -> None:
    model = CapacityModel.from_nodes([gpu_node("n1")])
    model.allocate("job-1", [(("gpu-a", "n1"), 1)])
    with pytest.raises(ValueError, match="already holds"):
        model.allocate("job-1", [(("gpu-a", "n1"), 1)])


def test_allocation_on_a_node_not_seen_yet_counts_when_it_arrives() -> None:
    model = CapacityModel()
    model.allocate("job-1", [(("gpu-a", "n1"), 5)])
    model.upsert_node(gpu_node("n1", gpus=8))
    assert model.free_gpus(("gpu-a", "n1")) == 3


def test_label_change_moves_the_node_between_index_sets() -> None:
    model = CapacityModel.from_nodes([gpu_node("n1", labels=A100), gpu_node("n2", labels=H100)])
    assert model.matching_names("gpu-a", A100) == {"n1"}
    model.upsert_node(gpu_node("n1", labels=H100))
    assert model.matching_names("gpu-a", A100) == set()
    assert model.matching_names("gpu-a", H100) == {"n1", "n2"}


def test_matching_intersects_every_pair_and_stays_within_the_cluster() -> None:
    both = {"rlark.io/gpu-model": "A100", "rlark.io/node-category": "cloud"}
    model = CapacityModel.from_nodes(
        [
            gpu_node("n1", labels=both),
            gpu_node("n2", labels=A100),
            gpu_node("n3", labels={**both, "rlark.io/node-category": "edge"}),
            gpu_node("n1", cluster="gpu-b", labels=both),
        ]
    )
    assert model.matching_names("gpu-a", both) == {"n1"}
    assert model.matching_names("gpu-a", A100) == {"n1", "n2", "n3"}
    assert model.matching_names("gpu-a", {}) == {"n1", "n2", "n3"}
    assert model.matching_names("gpu-a", {"missing": "label"}) == set()
    assert model.matching_names("gpu-z", {}) == set()


def test_removed_and_gone_nodes_are_neither_counted_nor_candidates() -> None:
    model = CapacityModel.from_nodes([gpu_node("n1"), gpu_node("n2"), gpu_node("n3", gone=True)])
    assert model.remove_node("gpu-a", "n2")
    assert not model.remove_node("gpu-a", "n2")
    survey = model.survey("gpu-a", A100, 8)
    assert (survey.in_cluster, survey.matching, survey.candidates) == (1, 1, ("n1",))
    assert model.free_gpus(("gpu-a", "n3")) == 0


def test_survey_funnel_counts_each_stage_and_orders_candidates_best_fit_first() -> None:
    model = CapacityModel.from_nodes(
        [
            gpu_node("big", gpus=8),
            gpu_node("small", gpus=4),
            gpu_node("tiny", gpus=2),
            gpu_node("mid", gpus=8, used=3),
            gpu_node("down", ready=False),
            gpu_node("cordoned", schedulable=False),
            gpu_node("other-model", labels=H100),
        ]
    )
    survey = model.survey("gpu-a", A100, 4)
    assert (survey.in_cluster, survey.matching, survey.ready, survey.schedulable, survey.enough) == (
        7,
        6,
        5,
        4,
        3,
    )
    assert survey.candidates == ("small", "mid", "big")


def test_hypothetical_survey_ignores_readiness_cordons_and_usage_but_not_gone() -> None:
    model = CapacityModel.from_nodes(
        [
            gpu_node("down", ready=False),
            gpu_node("cordoned", schedulable=False),
            gpu_node("busy", used=8),
            gpu_node("small", gpus=4),
            gpu_node("gone", gone=True),
        ],
        offline=["gpu-a"],
    )
    model.allocate("other", [(("gpu-a", "cordoned"), 8)])
    survey = model.survey("gpu-a", A100, 8, hypothetical=True)
    assert (survey.matching, survey.enough) == (4, 3)
    assert survey.candidates == ("busy", "cordoned", "down")
    assert model.survey("gpu-a", A100, 8).candidates == ()  # offline now


def test_offline_cluster_offers_no_candidates_until_back_online() -> None:
    model = CapacityModel.from_nodes([gpu_node("n1")])
    model.set_cluster_online("gpu-a", False)
    offline = model.survey("gpu-a", A100, 8)
    assert (offline.online, offline.enough, offline.candidates) == (False, 1, ())
    model.set_cluster_online("gpu-a", True)
    assert model.survey("gpu-a", A100, 8).candidates == ("n1",)


def test_versions_change_only_for_the_touched_cluster_and_never_repeat() -> None:
    model = CapacityModel.from_nodes([gpu_node("n1"), gpu_node("m1", cluster="gpu-b")])
    a, b = model.version("gpu-a"), model.version("gpu-b")
    model.upsert_node(gpu_node("n1", ready=False))
    assert model.version("gpu-a") > a
    assert model.version("gpu-b") == b
    a = model.version("gpu-a")
    model.allocate("j", [(("gpu-b", "m1"), 1)])
    assert model.version("gpu-a") == a
    assert model.version("gpu-b") > b
    seen = {model.version("gpu-b")}
    model.release("j")
    assert model.version("gpu-b") not in seen
    assert model.version("never-seen") == 0


def test_identical_observation_changes_nothing() -> None:
    model = CapacityModel.from_nodes([gpu_node("n1")])
    version = model.version("gpu-a")
    model.upsert_node(gpu_node("n1"))
    model.set_cluster_online("gpu-a", True)
    assert model.version("gpu-a") == version


def test_memoised_survey_is_refreshed_after_a_change() -> None:
    model = CapacityModel.from_nodes([gpu_node("n1")])
    assert model.survey("gpu-a", A100, 8).enough == 1
    model.upsert_node(gpu_node("n1", used=1))
    assert model.survey("gpu-a", A100, 8).enough == 0


def test_node_labels_are_frozen_copies() -> None:
    labels = {"rlark.io/gpu-model": "A100"}
    node = NodeState(cluster="c", name="n", labels=labels)
    labels["rlark.io/gpu-model"] = "H100"
    assert node.labels["rlark.io/gpu-model"] == "A100"
    with pytest.raises(TypeError):
        node.labels["x"] = "y"  # type: ignore[index]
    with pytest.raises(dataclasses.FrozenInstanceError):
        node.ready = False  # type: ignore[misc]


def test_negative_gpu_counts_are_refused() -> None:
    with pytest.raises(ValueError, match="GPU counts"):
        NodeState(cluster="c", name="n", gpu_allocatable=-1)
    model = CapacityModel()
    with pytest.raises(ValueError, match="negative"):
        model.allocate("j", [(("c", "n"), -1)])
    assert model.allocated_jobs() == []


# -- GPU accounting: what others use, from what the agent reports ------------------------------------


def test_others_usage_is_the_clusters_figure_minus_our_present_workers() -> None:
    # 8 allocated on the node, 4 of them our present worker's: others use 4.
    assert gpus_used_by_others(allocated=8, foreign=0, present=4) == 4


def test_others_usage_never_counts_our_present_worker_twice() -> None:
    # The agent reports our 8-GPU worker as allocated (not foreign): nothing is others'.
    assert gpus_used_by_others(allocated=8, foreign=0, present=8) == 0


def test_a_foreign_pod_counts_even_when_our_worker_is_reported_present_before_the_cluster_counts_it() -> None:
    # The observation predates our pod (allocated holds only the foreign pod's 8); our worker is
    # already present: allocated − present would hide the foreign pod, the foreign figure does not.
    assert gpus_used_by_others(allocated=8, foreign=8, present=8) == 8


def test_pods_of_an_ended_rlark_job_still_terminating_count_as_used() -> None:
    # Not ours any more (the job ended: not present), not foreign either: still held on the node.
    assert gpus_used_by_others(allocated=8, foreign=0, present=0) == 8


def test_others_usage_is_never_negative() -> None:
    assert gpus_used_by_others(allocated=0, foreign=0, present=8) == 0
