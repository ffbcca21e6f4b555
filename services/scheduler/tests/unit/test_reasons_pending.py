"""Pending reasons: exact funnel counts, offline clusters, suggestions, gang conflicts, can_ever_fit."""

from __future__ import annotations

import functools

import pytest
import scheduler_fleet
from rlark_scheduler.domain.capacity import CapacityModel, NodeState
from rlark_scheduler.domain.placement import JobRequest, RoleRequest
from rlark_scheduler.domain.reasons import (
    Alternative,
    PendingCode,
    can_ever_fit,
    explain_pending,
)
from scheduler_fleet import A100, H100

pytestmark = pytest.mark.unit

gpu_node = functools.partial(scheduler_fleet.gpu_node, cluster="gpu-b")


def single_role_job(
    replicas: int,
    gpus: int = 8,
    cluster: str = "gpu-b",
    selector: dict[str, str] | None = None,
    name: str = "rollout",
) -> JobRequest:
    role = RoleRequest(name, cluster, A100 if selector is None else selector, replicas, gpus)
    return JobRequest("job-1", 0, 1, [role], name)


def funnel_cluster() -> list[NodeState]:
    """gpu-b: 8 nodes, 6 match A100, 5 of them ready, 5 schedulable, 2 with ≥ 8 GPUs free."""
    return [
        gpu_node("a1"),
        gpu_node("a2"),
        gpu_node("a3", used=1),
        gpu_node("a4", gpus=4),
        gpu_node("a5", used=8),
        gpu_node("a6", ready=False),
        gpu_node("h1", labels=H100),
        gpu_node("h2", labels=H100),
        gpu_node("old", gone=True),
    ]


def test_role_reason_counts_every_stage_of_the_funnel_exactly() -> None:
    model = CapacityModel.from_nodes(funnel_cluster())
    reason = explain_pending(model, single_role_job(4))
    (role,) = reason.roles
    assert (role.in_cluster, role.matching, role.ready, role.schedulable, role.enough, role.needed) == (
        8,
        6,
        5,
        5,
        2,
        4,
    )
    assert role.code is PendingCode.TOO_FEW_NODES_WITH_GPUS
    assert reason.code is PendingCode.TOO_FEW_NODES_WITH_GPUS
    assert role.message == (
        'role "rollout" needs 4 nodes with ≥ 8 free GPUs matching rlark.io/gpu-model=A100 '
        "in cluster gpu-b: 6 match, 5 ready, 5 schedulable, 2 with enough free GPUs; "
        "GPUs in use on those 5 schedulable nodes: 9 of 36 (9 by workloads RLark did not place)"
    )
    assert (role.gpus_allocatable, role.gpus_used_external, role.gpus_held) == (36, 9, 0)
    assert reason.message == role.message


def test_our_own_allocations_count_against_free_gpus_in_the_reason() -> None:
    model = CapacityModel.from_nodes(funnel_cluster())
    model.allocate("earlier", [(("gpu-b", "a1"), 1)])
    role = explain_pending(model, single_role_job(4)).roles[0]
    assert role.enough == 1
    assert (role.gpus_used_external, role.gpus_held) == (9, 1)
    assert role.message.endswith("GPUs in use on those 5 schedulable nodes: 10 of 36 "
                                 "(9 by workloads RLark did not place, 1 by RLark jobs)")  # fmt: skip


def test_a_job_that_waits_for_gpus_others_hold_says_whose_they_are() -> None:
    # One 8-GPU node; a pod RLark did not create holds all of it.
    model = CapacityModel.from_nodes([gpu_node("a1", used=8)])
    reason = explain_pending(model, single_role_job(1))
    assert reason.code is PendingCode.TOO_FEW_NODES_WITH_GPUS
    assert reason.message.endswith(
        "0 with enough free GPUs; GPUs in use on that schedulable node: 8 of 8 "
        "(8 by workloads RLark did not place)"
    )
    # Held by an RLark job instead: the sentence says so.
    ours = CapacityModel.from_nodes([gpu_node("a1")])
    ours.allocate("earlier", [(("gpu-b", "a1"), 8)])
    assert explain_pending(ours, single_role_job(1)).message.endswith("8 of 8 (8 by RLark jobs)")


def test_other_shortfalls_do_not_cite_gpu_usage() -> None:
    model = CapacityModel.from_nodes([gpu_node("a1", ready=False, used=8)])
    assert "in use" not in explain_pending(model, single_role_job(1)).message


def test_code_is_the_first_stage_that_falls_short() -> None:
    model = CapacityModel.from_nodes(
        [gpu_node("a1"), gpu_node("a2", ready=False), gpu_node("a3", schedulable=False)]
    )
    assert explain_pending(model, single_role_job(4)).code is PendingCode.TOO_FEW_MATCHING_NODES
    assert explain_pending(model, single_role_job(3)).code is PendingCode.TOO_FEW_READY_NODES
    assert explain_pending(model, single_role_job(2)).code is PendingCode.TOO_FEW_SCHEDULABLE_NODES
    assert explain_pending(model, single_role_job(1)).code is PendingCode.FITS


def test_offline_cluster_is_named_as_the_reason() -> None:
    model = CapacityModel.from_nodes([gpu_node("a1"), gpu_node("a2")], offline=["gpu-b"])
    reason = explain_pending(model, single_role_job(1))
    (role,) = reason.roles
    assert role.code is PendingCode.CLUSTER_OFFLINE
    assert not role.cluster_online
    assert role.matching == 2
    assert role.message.endswith("in cluster gpu-b: the cluster is offline")


def test_unknown_cluster_is_named_as_the_reason() -> None:
    model = CapacityModel.from_nodes([gpu_node("a1")])
    reason = explain_pending(model, single_role_job(1, cluster="gpu-x"))
    assert reason.code is PendingCode.CLUSTER_UNKNOWN
    assert "no nodes of this cluster are known" in reason.message


def test_suggests_other_online_clusters_where_the_role_would_fit_now() -> None:
    nodes = funnel_cluster()
    nodes += [gpu_node(f"c{i}", cluster="gpu-c") for i in range(7)]
    nodes += [gpu_node(f"d{i}", cluster="gpu-d") for i in range(5)]
    nodes += [gpu_node(f"e{i}", cluster="gpu-e") for i in range(3)]  # too few
    nodes += [gpu_node(f"f{i}", cluster="gpu-f") for i in range(9)]  # offline
    nodes += [gpu_node(f"g{i}", cluster="gpu-g", labels=H100) for i in range(9)]  # wrong model
    model = CapacityModel.from_nodes(nodes, offline=["gpu-f"])
    (role,) = explain_pending(model, single_role_job(4)).roles
    assert role.alternatives == (Alternative("gpu-c", 7), Alternative("gpu-d", 5))
    assert role.message.endswith("; would fit now on clusters gpu-c (7 nodes), gpu-d (5 nodes)")


def test_single_suggestion_reads_naturally() -> None:
    nodes = [*funnel_cluster(), *(gpu_node(f"c{i}", cluster="gpu-c") for i in range(7))]
    (role,) = explain_pending(CapacityModel.from_nodes(nodes), single_role_job(4)).roles
    assert role.message.endswith("; would fit now on cluster gpu-c (7 nodes)")


def test_gang_conflict_is_reported_when_every_role_fits_alone() -> None:
    model = CapacityModel.from_nodes([gpu_node(f"a{i}") for i in range(5)] + [gpu_node("h1", labels=H100)])
    roles = [
        RoleRequest("header", "gpu-b", H100, 1, 8),
        RoleRequest("actor", "gpu-b", A100, 3, 8),
        RoleRequest("rollout", "gpu-b", A100, 3, 8),
    ]
    reason = explain_pending(model, JobRequest("job-1", 0, 1, roles, "header"))
    assert all(role.fits_alone for role in reason.roles)
    assert reason.code is PendingCode.ROLES_COMPETE_FOR_NODES
    (conflict,) = reason.conflicts
    assert (conflict.cluster, conflict.roles, conflict.needed, conflict.nodes) == (
        "gpu-b",
        ("actor", "rollout"),
        6,
        5,
    )
    assert reason.message == (
        'every role fits alone, but roles "actor" and "rollout" compete for the same nodes in '
        "cluster gpu-b: together they need 6 nodes, only 5 suit any of them "
        "(one worker of a job per node)"
    )


def test_explains_a_job_that_fits_as_fitting() -> None:
    model = CapacityModel.from_nodes(funnel_cluster())
    reason = explain_pending(model, single_role_job(2))
    assert reason.fits
    assert reason.conflicts == ()


def test_zero_gpu_roles_and_empty_selectors_leave_their_clauses_out() -> None:
    model = CapacityModel.from_nodes([gpu_node("a1", ready=False)])
    reason = explain_pending(model, single_role_job(1, gpus=0, selector={}))
    assert reason.message == (
        'role "rollout" needs 1 node in cluster gpu-b: 1 match, 0 ready, 0 schedulable, '
        "0 with enough free GPUs"
    )


def test_can_ever_fit_ignores_readiness_cordons_usage_and_offline() -> None:
    nodes = [
        gpu_node("a1", ready=False),
        gpu_node("a2", schedulable=False),
        gpu_node("a3", used=8),
    ]
    model = CapacityModel.from_nodes(nodes, offline=["gpu-b"])
    model.allocate("other", [(("gpu-b", "a1"), 8)])
    assert can_ever_fit(model, single_role_job(3)) == (True, None)


def test_can_ever_fit_refuses_a_job_larger_than_the_cluster() -> None:
    model = CapacityModel.from_nodes(
        [gpu_node("a1"), gpu_node("a2"), gpu_node("a3", gpus=4), gpu_node("gone", gone=True)]
    )
    ok, reason = can_ever_fit(model, single_role_job(3))
    assert not ok
    assert reason is not None
    (role,) = reason.roles
    assert (role.matching, role.enough, role.code) == (3, 2, PendingCode.TOO_FEW_NODES_WITH_GPUS)
    assert role.hypothetical
    assert role.message == (
        'role "rollout" can never get 3 nodes with ≥ 8 GPUs matching rlark.io/gpu-model=A100 '
        "in cluster gpu-b: 3 match, 2 with enough allocatable GPUs"
    )
    big_gpus, _ = can_ever_fit(model, single_role_job(1, gpus=16))
    assert not big_gpus


def test_can_ever_fit_sees_roles_competing_for_too_few_nodes() -> None:
    model = CapacityModel.from_nodes([gpu_node("a1"), gpu_node("a2")])
    roles = [RoleRequest("header", "gpu-b", A100, 1, 8), RoleRequest("w", "gpu-b", {}, 2, 8)]
    ok, reason = can_ever_fit(model, JobRequest("job-1", 0, 1, roles, "header"))
    assert not ok
    assert reason is not None
    assert reason.code is PendingCode.ROLES_COMPETE_FOR_NODES
