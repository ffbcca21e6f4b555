"""The YAML preview and the per-cluster plan shown before submission."""

from __future__ import annotations

from typing import Any

import yaml
from rlark_scheduler.domain.capacity import CapacityModel
from rlark_scheduler.domain.document.parsing import parse_job_document
from rlark_scheduler.domain.document.validation import ValidationContext
from rlark_scheduler.domain.render import AgentPlan, WorkerPlan, plan_preview, render_yaml

SOURCE = """\
spec:
  tasks:
    - env: {B: "2", A: "1"}
      image: rlinf:v1
      cluster: gpu-b
      nodeSelector: {zone: z1, rlark.io/gpu-model: A100}
      name: rollout
      replicas: 2
      gpusPerWorker: 4
      mounts:
        - {path: /data, source: /mnt/data, type: hostPath, name: data}
    - name: actor
      cluster: gpu-a
      image: rlinf:v1
      gpusPerWorker: 8
      prepareScript: "source /opt/venv/rlinf/bin/activate\\nmkdir -p /data/out\\n"
  runScript: |
    set -e
    python train.py
  header: actor
metadata:
  name: 多集群 grpo
"""


def _doc() -> Any:
    return parse_job_document(SOURCE)


def test_rendered_yaml_has_canonical_order_defaults_and_one_task_per_role() -> None:
    text = render_yaml(_doc())
    data = yaml.safe_load(text)
    assert list(data) == ["apiVersion", "kind", "metadata", "spec"]
    assert list(data["spec"]) == [
        "type",
        "header",
        "sshKeys",
        "runScript",
        "outputs",
        "priority",
        "tasks",
    ]
    assert len(data["spec"]["tasks"]) == 2
    rollout = data["spec"]["tasks"][0]
    assert list(rollout) == [
        "name",
        "cluster",
        "nodeSelector",
        "replicas",
        "gpusPerWorker",
        "image",
        "mounts",
        "env",
    ]
    assert list(rollout["nodeSelector"]) == ["rlark.io/gpu-model", "zone"]
    assert list(rollout["env"]) == ["B", "A"]
    assert rollout["mounts"] == [
        {"name": "data", "type": "hostPath", "source": "/mnt/data", "path": "/data", "readOnly": False}
    ]
    assert data["spec"]["tasks"][1]["replicas"] == 1
    assert data["spec"]["type"] == "custom"
    assert "networkDomain" not in data["spec"]
    assert "多集群 grpo" in text


def test_multi_line_scripts_are_literal_blocks() -> None:
    text = render_yaml(_doc())
    assert "  runScript: |\n    set -e\n    python train.py\n" in text
    assert "    prepareScript: |\n      source /opt/venv/rlinf/bin/activate\n" in text


def test_rendering_round_trips_and_is_stable() -> None:
    doc = _doc()
    text = render_yaml(doc)
    again = parse_job_document(text)
    assert again == doc
    assert render_yaml(again) == text
    reordered = parse_job_document(doc.model_dump(mode="json"))
    assert render_yaml(reordered) == text


def test_network_domain_is_rendered_when_set() -> None:
    data = _doc().model_dump(mode="json")
    data["spec"]["networkDomain"] = "dom-a"
    rendered = yaml.safe_load(render_yaml(parse_job_document(data)))
    assert rendered["spec"]["networkDomain"] == "dom-a"


def test_strings_that_look_like_other_yaml_types_stay_strings() -> None:
    data = _doc().model_dump(mode="json")
    data["spec"]["tasks"][0]["env"] = {"FLAG": "true", "N": "08", "EMPTY": "", "ON": "on"}
    doc = parse_job_document(data)
    assert parse_job_document(render_yaml(doc)) == doc


def test_plan_preview_lists_workers_per_cluster_with_header_rank_zero() -> None:
    ctx = ValidationContext.build(CapacityModel.from_nodes([], offline=["gpu-b"]), ["gpu-a", "gpu-b"])
    plans = plan_preview(_doc(), ctx)
    assert plans == [
        AgentPlan(
            cluster="gpu-a",
            known=True,
            online=True,
            workers=(WorkerPlan("actor", 0, 0, 8, "rlinf:v1", True),),
        ),
        AgentPlan(
            cluster="gpu-b",
            known=True,
            online=False,
            workers=(
                WorkerPlan("rollout", 0, 1, 4, "rlinf:v1", False),
                WorkerPlan("rollout", 1, 2, 4, "rlinf:v1", False),
            ),
        ),
    ]
    assert [plan.gpus for plan in plans] == [8, 8]
    assert plans[1].roles == ("rollout",)


def test_plan_preview_marks_unknown_clusters_and_keeps_ranks_contiguous() -> None:
    data = _doc().model_dump(mode="json")
    data["spec"]["tasks"].append(
        {"name": "env", "cluster": "gpu-a", "image": "env:v2", "replicas": 2, "gpusPerWorker": 0}
    )
    plans = plan_preview(parse_job_document(data), ValidationContext.build())
    assert [plan.known for plan in plans] == [False, False]
    ranks = sorted(worker.rank for plan in plans for worker in plan.workers)
    assert ranks == [0, 1, 2, 3, 4]
    assert plans[0].roles == ("actor", "env")
    assert [w.rank for w in plans[0].workers] == [0, 3, 4]
