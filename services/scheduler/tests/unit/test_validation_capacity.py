"""Node-capacity rules: never satisfiable → error, satisfiable later → warning with counts."""

from __future__ import annotations

from typing import Any

import pytest
from rlark_scheduler.domain.capacity import CapacityModel, NodeState
from rlark_scheduler.domain.document.parsing import parse_job_document
from rlark_scheduler.domain.document.validation import (
    ValidationContext,
    ValidationReport,
    selector_matches,
    validate_job,
)
from rlark_scheduler.domain.jobs import job_request
from rlark_scheduler.domain.reasons import can_ever_fit
from scheduler_fleet import A100, gpu_node

H100 = {"rlark.io/gpu-model": "H100"}


def _node(
    name: str, labels: dict[str, str], *, gpu_total: int = 8, gpu_free: int | None = None, **state: Any
) -> NodeState:
    """A node of gpu-a; the GPUs not free are used by workloads RLark did not place."""
    free = gpu_total if gpu_free is None else gpu_free
    return gpu_node(name, labels=labels, gpus=gpu_total, used=gpu_total - free, **state)


def _ctx(*nodes: NodeState, online: bool = True) -> ValidationContext:
    model = CapacityModel.from_nodes(nodes, offline=() if online else ["gpu-a"])
    return ValidationContext.build(model, ["gpu-a"], ["k"], ["dom-a"])


def _role(name: str, selector: dict[str, str], replicas: int = 1, gpus: int = 8) -> dict[str, Any]:
    return {
        "name": name,
        "cluster": "gpu-a",
        "nodeSelector": selector,
        "replicas": replicas,
        "gpusPerWorker": gpus,
        "image": "rlinf:v1",
    }


def _validate(roles: list[dict[str, Any]], ctx: ValidationContext) -> ValidationReport:
    spec: dict[str, Any] = {"header": roles[0]["name"], "runScript": "python t.py", "tasks": roles}
    if len({role["cluster"] for role in roles}) > 1:
        spec["networkDomain"] = "dom-a"  # roles across clusters need one
    doc = parse_job_document({"metadata": {"name": "job"}, "spec": spec})
    return validate_job(doc, ctx)


def _codes(issues: tuple[Any, ...]) -> set[tuple[str, str]]:
    return {(issue.code, issue.field) for issue in issues}


def test_selector_matches_is_an_and_of_equalities() -> None:
    labels = {"rlark.io/gpu-model": "A100", "zone": "z1"}
    assert selector_matches({}, labels)
    assert selector_matches({"zone": "z1"}, labels)
    assert selector_matches({"zone": "z1", "rlark.io/gpu-model": "A100"}, labels)
    assert not selector_matches({"zone": "z2"}, labels)
    assert not selector_matches({"rack": ""}, labels)


def test_selector_matching_no_node_is_an_error() -> None:
    report = _validate([_role("w", H100)], _ctx(_node("a", A100)))
    assert _codes(report.errors) == {("selector_matches_too_few", "spec.tasks[0].nodeSelector")}
    assert "none of the 1 nodes" in report.errors[0].message


def test_more_gpus_than_the_largest_matching_node_is_an_error() -> None:
    report = _validate([_role("w", A100, gpus=16)], _ctx(_node("a", A100), _node("b", H100, gpu_total=16)))
    assert _codes(report.errors) == {("gpus_exceed_node", "spec.tasks[0].gpusPerWorker")}
    assert "has 8 GPUs" in report.errors[0].message


def test_fewer_capable_nodes_than_replicas_is_an_error_even_if_some_are_down() -> None:
    ctx = _ctx(_node("a", A100), _node("b", A100, ready=False), _node("c", A100, gpu_total=4))
    report = _validate([_role("h", {}, gpus=0), _role("w", A100, replicas=3)], ctx)
    assert ("selector_matches_too_few", "spec.tasks[1].replicas") in _codes(report.errors)
    assert "only 2 nodes" in report.errors[0].message


def test_enough_nodes_that_are_busy_or_cordoned_now_is_only_a_warning_with_counts() -> None:
    ctx = _ctx(
        _node("a", A100),
        _node("b", A100, schedulable=False),
        _node("c", A100, gpu_free=0),
        _node("d", A100, ready=False),
    )
    report = _validate([_role("w", A100, replicas=1), _role("r", A100, replicas=3)], ctx)
    assert report.ok
    warning = next(w for w in report.warnings if w.field == "spec.tasks[1].nodeSelector")
    assert warning.code == "selector_matches_too_few"
    assert "4 match the selector, 3 ready, 2 schedulable, 1 with 8 free GPUs" in warning.message


def test_offline_cluster_can_only_run_later() -> None:
    report = _validate([_role("w", A100)], _ctx(_node("a", A100), online=False))
    assert report.ok
    assert ("selector_matches_too_few", "spec.tasks[0].nodeSelector") in _codes(report.warnings)
    assert ("cluster_offline", "spec.tasks[0].cluster") in _codes(report.warnings)


def test_overlapping_roles_of_one_job_compete_for_distinct_nodes() -> None:
    # Each role fits alone (2 and 2 of the 3 A100 nodes) but the job needs 4 distinct nodes.
    ctx = _ctx(_node("a", A100), _node("b", A100), _node("c", A100))
    report = _validate([_role("actor", A100), _role("rollout", A100, replicas=3)], ctx)
    assert _codes(report.errors) == {("selector_matches_too_few", "spec.tasks")}
    message = report.errors[0].message
    assert '"actor", "rollout"' in message
    assert "4 distinct nodes" in message
    assert "only 3 nodes" in message


def test_roles_with_disjoint_selectors_do_not_compete() -> None:
    ctx = _ctx(_node("a", A100), _node("b", H100), _node("c", H100))
    report = _validate([_role("actor", A100), _role("rollout", H100, replicas=2)], ctx)
    assert report.errors == ()
    assert report.warnings == ()


def test_overlap_check_is_exact_not_greedy() -> None:
    # actor can use a or b, rollout only a: feasible (actor→b, rollout→a) although a greedy
    # assignment in spec order would give a to actor and strand rollout.
    ctx = _ctx(_node("a", {"pool": "x", "fast": "yes"}), _node("b", {"pool": "x"}))
    roles = [_role("actor", {"pool": "x"}), _role("rollout", {"fast": "yes"})]
    assert _validate(roles, ctx).errors == ()


def test_hall_violation_names_only_the_roles_that_cannot_all_fit() -> None:
    ctx = _ctx(
        _node("a", {"pool": "x", "fast": "yes"}),
        _node("b", {"pool": "x"}),
        _node("c", {"pool": "y"}),
    )
    roles = [
        _role("actor", {"pool": "y"}),
        _role("rollout", {"pool": "x"}, replicas=2),
        _role("env", {"fast": "yes"}),
    ]
    report = _validate(roles, ctx)
    assert _codes(report.errors) == {("selector_matches_too_few", "spec.tasks")}
    message = report.errors[0].message
    assert '"rollout", "env"' in message
    assert '"actor"' not in message
    assert "need 3 distinct nodes" in message
    assert "only 2 nodes" in message


def test_roles_on_different_clusters_never_share_nodes() -> None:
    nodes = [
        NodeState(cluster, f"n{i}", A100, gpu_allocatable=8)
        for cluster in ("gpu-a", "gpu-b")
        for i in range(2)
    ]
    ctx = ValidationContext.build(CapacityModel.from_nodes(nodes), ["gpu-a", "gpu-b"], [], ["dom-a"])
    roles = [_role("actor", A100), {**_role("rollout", A100, replicas=2), "cluster": "gpu-b"}]
    assert _validate(roles, ctx).errors == ()


def test_shared_nodes_busy_now_is_a_warning_for_the_group() -> None:
    ctx = _ctx(_node("a", A100), _node("b", A100), _node("c", A100, schedulable=False))
    report = _validate([_role("actor", A100), _role("rollout", A100, replicas=2)], ctx)
    assert report.ok
    assert ("selector_matches_too_few", "spec.tasks") in _codes(report.warnings)


def test_capacity_is_not_judged_for_roles_whose_own_fields_are_wrong() -> None:
    ctx = _ctx(_node("a", A100))
    report = _validate([_role("w", {"bad key!": "x"}, replicas=1)], ctx)
    assert {code for code, _ in _codes(report.errors)} == {"selector_key_invalid"}


def test_gpus_the_scheduler_holds_for_other_jobs_are_not_free_now() -> None:
    # Validation asks the placement loop's model: its allocations count, not only the cluster's figure.
    ctx = _ctx(_node("a", A100), _node("b", A100), _node("c", H100))
    ctx.capacity.allocate("job-other", [(("gpu-a", "a"), 8)])
    report = _validate([_role("h", {}, gpus=0), _role("w", A100, replicas=2)], ctx)
    assert report.ok
    warning = next(w for w in report.warnings if w.field == "spec.tasks[1].nodeSelector")
    assert "2 schedulable, 1 with 8 free GPUs" in warning.message


def test_a_gone_node_counts_for_neither_tier() -> None:
    ctx = _ctx(_node("a", A100), _node("b", A100, gone=True))
    report = _validate([_role("w", A100)], ctx)
    assert report.ok
    report = _validate([_role("h", {}, gpus=0), _role("w", A100, replicas=2)], ctx)
    assert ("selector_matches_too_few", "spec.tasks[1].replicas") in _codes(report.errors)


@pytest.mark.parametrize(
    ("nodes", "roles"),
    [
        ([_node("a", A100)], [_role("w", A100)]),
        ([_node("a", A100)], [_role("w", A100), _role("r", A100)]),
        ([_node("a", A100, gpu_total=4)], [_role("w", A100)]),
        ([_node("a", H100)], [_role("w", A100)]),
        ([_node("a", A100, ready=False, gpu_free=0), _node("b", A100)], [_role("w", A100), _role("r", A100)]),
        ([_node(n, A100) for n in "abc"], [_role("x", A100), _role("y", A100, replicas=3)]),
        ([_node(n, A100) for n in "abcd"], [_role("x", A100), _role("y", A100, replicas=3)]),
        (
            [_node("a", {"pool": "x", "fast": "yes"}), _node("b", {"pool": "x"})],
            [_role("x", {"pool": "x"}), _role("y", {"fast": "yes"})],
        ),
    ],
)
def test_validation_and_can_ever_fit_agree_on_what_could_ever_be_placed(
    nodes: list[NodeState], roles: list[dict[str, Any]]
) -> None:
    ctx = _ctx(*nodes)
    spec: dict[str, Any] = {"header": roles[0]["name"], "runScript": "python t.py", "tasks": roles}
    doc = parse_job_document({"metadata": {"name": "job"}, "spec": spec})
    report = validate_job(doc, ctx)
    assert {e.code for e in report.errors} <= {"selector_matches_too_few", "gpus_exceed_node"}
    fits, _ = can_ever_fit(ctx.capacity, job_request("job", doc.spec, 0))
    assert report.ok == fits
