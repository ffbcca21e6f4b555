"""Job templates build documents that pass validation and keep RLinf's cluster section consistent."""

from __future__ import annotations

from typing import Any

import pytest
from rlark_scheduler.domain.capacity import CapacityModel, NodeState
from rlark_scheduler.domain.document.errors import SpecParseError
from rlark_scheduler.domain.document.facts import worker_slots
from rlark_scheduler.domain.document.model import JobType
from rlark_scheduler.domain.document.parsing import parse_job_document
from rlark_scheduler.domain.document.validation import ValidationContext, validate_job
from rlark_scheduler.domain.render import normalized_document, render_yaml
from rlark_scheduler.domain.templates import TEMPLATES

IMAGE = "registry.example.com/rlinf:v0.3.0-cuda12.4"


def _ctx(*clusters: str, nodes: int = 4, gpus: int = 8) -> ValidationContext:
    model = CapacityModel.from_nodes(
        NodeState(name, f"{name}-{i}", gpu_allocatable=gpus) for name in clusters for i in range(nodes)
    )
    return ValidationContext.build(model, clusters, ["laptop"], ["dom-a"])


def test_catalog_has_the_three_templates_with_both_languages() -> None:
    assert list(TEMPLATES) == ["single-node", "rl-actor-rollout", "rl-actor-rollout-env"]
    for template_id, template in TEMPLATES.items():
        assert template.id == template_id
        for text in (template.title_en, template.title_zh, template.description_en, template.description_zh):
            assert text.strip()
        assert template.params_schema()["properties"]["image"]


def test_single_node_is_one_worker_role_that_is_the_header() -> None:
    doc = TEMPLATES["single-node"].build({"image": IMAGE, "cluster": "gpu-a", "sshKeys": ["laptop"]})
    assert doc.spec.type is JobType.TEMPLATE
    assert doc.spec.template == "single-node"
    assert doc.spec.header == "worker"
    assert [(r.name, r.cluster, r.replicas, r.gpus_per_worker) for r in doc.spec.tasks] == [
        ("worker", "gpu-a", 1, 8)
    ]
    assert doc.spec.rlinf_config == {"cluster": {"num_nodes": 1}}
    report = validate_job(doc, _ctx("gpu-a"))
    assert report.errors == ()
    assert report.warnings == ()


def test_actor_rollout_env_puts_each_role_on_its_cluster_with_consistent_rlinf() -> None:
    params = {
        "image": IMAGE,
        "actorCluster": "gpu-a",
        "rolloutCluster": "gpu-b",
        "envCluster": "cpu-c",
        "rolloutNodes": 3,
        "envNodes": 2,
        "gpusPerWorker": 4,
        "name": "embodied ppo",
    }
    doc = TEMPLATES["rl-actor-rollout-env"].build(params)
    assert doc.metadata.name == "embodied ppo"
    assert doc.spec.header == "actor"
    assert [(r.name, r.cluster, r.replicas) for r in doc.spec.tasks] == [
        ("actor", "gpu-a", 1),
        ("rollout", "gpu-b", 3),
        ("env", "cpu-c", 2),
    ]
    cluster = doc.spec.rlinf_config["cluster"] if doc.spec.rlinf_config else {}
    assert cluster["num_nodes"] == len(worker_slots(doc.spec)) == 6
    assert cluster["node_groups"] == [
        {"label": "actor", "node_ranks": "0-0"},
        {"label": "rollout", "node_ranks": "1-3"},
        {"label": "env", "node_ranks": "4-5"},
    ]
    assert cluster["component_placement"]["rollout"] == {"node_group": "rollout", "placement": "0-11"}
    filled = doc.model_copy(update={"spec": doc.spec.model_copy(update={"network_domain": "dom-a"})})
    report = validate_job(filled, _ctx("gpu-a", "gpu-b", "cpu-c"))
    assert report.errors == ()
    assert report.warnings == ()


@pytest.mark.parametrize("gpus", [0, 1, 8])
def test_multi_role_templates_pass_the_rlinf_checks_for_any_gpu_count(gpus: int) -> None:
    params: dict[str, Any] = {
        "image": IMAGE,
        "actor_cluster": "a",
        "rollout_cluster": "a",
        "rollout_nodes": 2,
        "gpus_per_worker": gpus,
    }
    for template_id, extra in [("rl-actor-rollout", {}), ("rl-actor-rollout-env", {"env_cluster": "a"})]:
        doc = TEMPLATES[template_id].build({**params, **extra})
        report = validate_job(doc, _ctx("a", nodes=4, gpus=8))
        assert report.errors == (), template_id
        assert not {w.code for w in report.warnings if w.code.startswith("rlinf_")}


def test_template_documents_survive_the_yaml_preview() -> None:
    doc = TEMPLATES["rl-actor-rollout"].build(
        {"image": IMAGE, "actorCluster": "a", "rolloutCluster": "b", "runScript": "set -e\npython t.py\n"}
    )
    assert parse_job_document(render_yaml(doc)) == doc
    assert "runScript: |" in render_yaml(doc)


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"cluster": "a"}, "params.image"),
        ({"image": IMAGE, "cluster": 3}, "params.cluster"),
        ({"image": IMAGE, "cluster": "a", "gpusPerWorker": 65}, "params.gpusPerWorker"),
        ({"image": IMAGE, "cluster": "a", "replicas": 2}, "params.replicas"),
    ],
)
def test_bad_template_parameters_are_refused_with_their_name(params: dict[str, Any], field: str) -> None:
    with pytest.raises(SpecParseError) as caught:
        TEMPLATES["single-node"].build(params)
    assert [(e.code, e.field) for e in caught.value.errors] == [("template_param_invalid", field)]


def test_rollout_nodes_must_be_at_least_one() -> None:
    with pytest.raises(SpecParseError):
        TEMPLATES["rl-actor-rollout"].build(
            {"image": IMAGE, "actorCluster": "a", "rolloutCluster": "b", "rolloutNodes": 0}
        )


def test_template_builds_are_validated_like_any_document() -> None:
    doc = TEMPLATES["single-node"].build({"image": "rlinf:latest", "cluster": "gpu-a"})
    codes = {e.code for e in validate_job(doc, _ctx("gpu-a")).errors}
    assert codes == {"image_latest_refused"}


def test_templates_take_max_restarts_into_the_restart_policy() -> None:
    without = TEMPLATES["single-node"].build({"image": IMAGE, "cluster": "gpu-a"})
    assert without.spec.restart_policy is None
    doc = TEMPLATES["rl-actor-rollout"].build(
        {"image": IMAGE, "actorCluster": "gpu-a", "rolloutCluster": "gpu-a", "maxRestarts": 2}
    )
    assert doc.spec.restart_policy is not None
    assert doc.spec.restart_policy.max_restarts == 2
    assert "maxRestarts" in TEMPLATES["single-node"].params_schema()["properties"]
    assert validate_job(doc, _ctx("gpu-a")).errors == ()


def test_max_restarts_out_of_range_is_refused_with_its_name() -> None:
    with pytest.raises(SpecParseError) as caught:
        TEMPLATES["single-node"].build({"image": IMAGE, "cluster": "gpu-a", "maxRestarts": 101})
    assert [e.field for e in caught.value.errors] == ["params.maxRestarts"]


@pytest.mark.parametrize("template_id", sorted(TEMPLATES))
def test_a_template_without_clusters_names_none_and_the_scheduler_chooses(template_id: str) -> None:
    doc = TEMPLATES[template_id].build({"image": IMAGE})
    assert all(role.cluster is None for role in doc.spec.tasks)
    assert all("cluster" not in task for task in normalized_document(doc)["spec"]["tasks"])
    model = CapacityModel.from_nodes(NodeState("a", f"a-{i}", gpu_allocatable=8) for i in range(4))
    assert validate_job(doc, ValidationContext.build(model, ["a"], ["laptop"], ["dom-a"])).ok
