"""Validation of roles whose cluster the scheduler chooses (ADR 0026): what they list exists, what they
select is valid, some cluster is one they may use and can mount their mounts — asked of the capacity model
the placer decides on — and ``spec.placement`` names roles of the job."""

from __future__ import annotations

from typing import Any

import pytest
from rlark_scheduler.domain.capacity import CapacityModel, ClusterFacts, NodeState, cluster_labels
from rlark_scheduler.domain.document.errors import SpecError, SpecParseError
from rlark_scheduler.domain.document.parsing import parse_job_document
from rlark_scheduler.domain.document.validation import ValidationContext, hostpath_refusals, validate_job
from scheduler_fleet import A100

pytestmark = pytest.mark.unit

MODEL = CapacityModel.from_nodes(
    NodeState(name, f"{name}-n{i}", A100, gpu_allocatable=8) for name in ("north", "south") for i in range(2)
)
MODEL.set_cluster_facts(
    "north",
    ClusterFacts(labels=cluster_labels({}, region="cn-north"), runtime="local", hostpath_allow=("/data",)),
)
MODEL.set_cluster_facts(
    "south", ClusterFacts(labels=cluster_labels({}, region="cn-south"), runtime="local", hostpath_allow=())
)
CTX = ValidationContext.build(
    MODEL, {"north": ("/data",), "south": ()}, runtimes={"north": "local", "south": "local"}
)


def document(*roles: dict[str, Any], **spec: Any) -> dict[str, Any]:
    tasks = [{"name": "actor", "image": "rl:v1", **role} for role in roles] or [
        {"name": "actor", "image": "rl:v1"}
    ]
    return {
        "metadata": {"name": "rl"},
        "spec": {"header": "actor", "runScript": "python t.py", "tasks": tasks, **spec},
    }


def errors(data: dict[str, Any]) -> set[tuple[str, str]]:
    return {(e.code, e.field) for e in validate_job(parse_job_document(data), CTX).errors}


def test_a_role_naming_no_cluster_is_valid_and_needs_no_network_domain() -> None:
    assert errors(document({}, {"name": "rollout", "image": "rl:v1", "replicas": 2})) == set()


def test_a_role_names_its_cluster_or_lets_the_scheduler_choose_not_both() -> None:
    assert errors(document({"cluster": "north", "clusters": ["south"]})) == {
        ("cluster_choice_conflict", "spec.tasks[0].clusters")
    }
    assert errors(document({"cluster": "north", "clusterSelector": {"rlark.io/region": "cn-south"}})) == {
        ("cluster_choice_conflict", "spec.tasks[0].clusterSelector")
    }


def test_listed_clusters_must_exist_and_a_cluster_selector_must_be_valid_and_match_one() -> None:
    assert errors(document({"clusters": ["north", "west"]})) == {
        ("cluster_unknown", "spec.tasks[0].clusters[1]")
    }
    assert ("selector_key_invalid", 'spec.tasks[0].clusterSelector["bad key"]') in errors(
        document({"clusterSelector": {"bad key": "x"}})
    )
    assert errors(document({"clusterSelector": {"rlark.io/region": "cn-west"}})) == {
        ("cluster_choice_empty", "spec.tasks[0].clusterSelector")
    }
    assert errors(document({"clusterSelector": {"rlark.io/region": "cn-south"}})) == set()


def test_a_role_whose_mounts_no_cluster_it_may_use_allows_is_refused_naming_its_mounts() -> None:
    mounts = [{"name": "d", "type": "hostPath", "source": "/data/x", "path": "/d"}]
    assert errors(document({"mounts": mounts})) == set()  # north allows /data: the scheduler goes there
    refused = validate_job(parse_job_document(document({"mounts": mounts, "clusters": ["south"]})), CTX)
    assert {(e.code, e.field) for e in refused.errors} == {("cluster_choice_mounts", "spec.tasks[0].mounts")}
    assert refused.errors[0].message == (
        'role "actor": none of the clusters it may use (south) can mount its mounts '
        "(their runtime or hostPath policy refuses them)"
    )


def test_keep_together_names_roles_of_the_job() -> None:
    placement = {"spanClusters": "never", "keepTogether": ["rollout", "critic"]}
    found = errors(document({}, {"name": "rollout", "image": "rl:v1"}, placement=placement))
    assert found == {("placement_role_unknown", "spec.placement.keepTogether[1]")}
    assert ("field_invalid", "spec.placement.spanClusters") in {
        (e.code, e.field) for e in _parse_errors(document(placement={"spanClusters": "sometimes"}))
    }


def _parse_errors(data: dict[str, Any]) -> list[SpecError]:
    try:
        parse_job_document(data)
    except SpecParseError as exc:
        return list(exc.errors)
    return []


def test_the_placement_loop_judges_mounts_on_the_clusters_the_placer_chose() -> None:
    doc = parse_job_document(
        document({"mounts": [{"name": "d", "type": "hostPath", "source": "/data/x", "path": "/d"}]})
    )
    policies = {"north": ("/data",), "south": ()}
    assert hostpath_refusals(doc.spec, policies, {"actor": ["north"]}) == []
    [(field, _)] = hostpath_refusals(doc.spec, policies, {"actor": ["south"]})
    assert field == "spec.tasks[0].mounts[0].source"
