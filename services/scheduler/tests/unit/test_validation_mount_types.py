"""A mount type the role's cluster's runtime cannot mount is refused at validation, naming the mount's
``type`` field: a local cluster runs workers as processes, so it mounts hostPath, emptyDir and (through the
agent's rclone, ADR 0024) objectStorage, never a PVC; before this, ``rlark jobs preview`` said "the job can be
submitted" and the worker failed once placed."""

from __future__ import annotations

from typing import Any

import pytest
from rlark_contracts.runtimes import KUBERNETES, mounts
from rlark_scheduler.domain.capacity import CapacityModel, ClusterFacts, NodeState
from rlark_scheduler.domain.document.model import MountType
from rlark_scheduler.domain.document.parsing import parse_job_document
from rlark_scheduler.domain.document.validation import (
    ValidationContext,
    ValidationReport,
    mount_type_refusals,
    validate_job,
)
from rlark_scheduler.domain.placement import can_mount

pytestmark = pytest.mark.unit

BUCKET = {"name": "models", "type": "objectStorage", "source": "s3://models/rl", "path": "/models"}
CLAIM = {"name": "ckpt", "type": "pvc", "source": "checkpoints", "path": "/ckpt"}
HOST = {"name": "data", "type": "hostPath", "source": "/srv/data", "path": "/data"}
BUCKET_SECRET = {**BUCKET, "secretRef": "s3-ro"}


def _ctx(runtimes: dict[str, str]) -> ValidationContext:
    model = CapacityModel.from_nodes([NodeState("laptop", "n1"), NodeState("gpu-a", "g1")])
    clusters = {"laptop": ("/srv",), "gpu-a": ("/srv",)}
    return ValidationContext.build(model, clusters, ["k"], ["dom-a"], runtimes=runtimes)


def _job(*roles: tuple[str, str, list[dict[str, Any]]]) -> dict[str, Any]:
    tasks = [
        {"name": name, "cluster": cluster, "image": "python:3.11-slim", "mounts": mounts}
        for name, cluster, mounts in roles
    ]
    spec = {"header": roles[0][0], "sshKeys": ["k"], "runScript": "true\n", "tasks": tasks}
    return {"metadata": {"name": "mount-types"}, "spec": spec}


def _validate(job: dict[str, Any], runtimes: dict[str, str]) -> ValidationReport:
    return validate_job(parse_job_document(job), _ctx(runtimes))


LOCAL_CLUSTERS = {"laptop": "local", "gpu-a": "kubernetes"}


def test_a_pvc_on_a_local_cluster_is_refused_naming_its_type_field_and_a_bucket_is_not() -> None:
    report = _validate(_job(("header", "laptop", [HOST, BUCKET_SECRET, CLAIM])), LOCAL_CLUSTERS)
    refused = [e for e in report.errors if e.code == "mount_type_unsupported"]
    assert [e.field for e in refused] == ["spec.tasks[0].mounts[2].type"]
    assert refused[0].message == (
        'spec.tasks[0].mounts[2].type: cluster "laptop" runs workers as local processes: it mounts '
        "hostPath, emptyDir, objectStorage only, not pvc. Run this role on a Kubernetes cluster to mount pvc"
    )
    assert {e.code for e in report.errors} == {
        "mount_type_unsupported"
    }  # the hostPath and bucket are allowed
    bucket_only = _validate(_job(("header", "laptop", [HOST, BUCKET_SECRET])), LOCAL_CLUSTERS)
    assert not [e for e in bucket_only.errors if e.code == "mount_type_unsupported"]


def test_the_refusal_is_a_catalogue_sentence_in_chinese_too() -> None:
    report = _validate(_job(("header", "laptop", [CLAIM])), LOCAL_CLUSTERS)
    [error] = report.errors
    said = error.to_dict()
    assert said["message_key"] == "mount_type_unsupported.local"
    assert said["params"] == {
        "field": "spec.tasks[0].mounts[0].type",
        "cluster": "laptop",
        "type": "pvc",
        "supported": "hostPath, emptyDir, objectStorage",
    }
    chinese = error.message.render("zh-CN")  # type: ignore[attr-defined]
    assert chinese.startswith('spec.tasks[0].mounts[0].type：集群 "laptop" 以本地进程运行工作节点')
    assert "不能挂载 pvc" in chinese


def test_the_role_s_own_cluster_s_runtime_decides() -> None:
    job = _job(("header", "gpu-a", [BUCKET_SECRET, CLAIM]), ("rollout", "laptop", [HOST, CLAIM]))
    job["spec"]["networkDomain"] = "dom-a"  # a job across two clusters needs one
    report = _validate(job, LOCAL_CLUSTERS)
    assert [(e.code, e.field) for e in report.errors] == [
        ("mount_type_unsupported", "spec.tasks[1].mounts[1].type")
    ]
    assert _validate(job, {"laptop": "kubernetes", "gpu-a": "kubernetes"}).ok


def test_a_cluster_whose_runtime_is_not_known_is_not_judged() -> None:
    assert _validate(_job(("header", "laptop", [CLAIM])), {}).ok
    assert _validate(_job(("header", "laptop", [CLAIM])), {"laptop": "slurm"}).ok


def test_the_placement_time_check_names_every_type_the_runtimes_refuse_now() -> None:
    doc = parse_job_document(_job(("header", "laptop", [HOST, CLAIM])))
    assert mount_type_refusals(doc.spec, {"laptop": "kubernetes"}) == []
    assert mount_type_refusals(doc.spec, {}) == []
    [(field, message)] = mount_type_refusals(doc.spec, {"laptop": "local"})
    assert field == "spec.tasks[0].mounts[1].type"
    assert message.startswith(f'{field}: cluster "laptop" runs workers as local processes')


@pytest.mark.parametrize("kind", list(MountType))
def test_every_mount_type_a_job_may_name_is_one_the_runtimes_table_knows(kind: MountType) -> None:
    assert mounts(KUBERNETES, kind), "rlark_contracts.runtimes.MOUNT_TYPES must say which runtime mounts it"


def test_a_bucket_on_a_cluster_whose_agent_names_no_csi_driver_is_refused_at_preview_and_not_chosen() -> None:
    """Issue 33: a Kubernetes agent naming no object-storage CSI driver reports objectStorage unmountable; the
    preview refuses a bucket there (naming the setting) instead of saying "ok" and failing the worker."""
    model = CapacityModel.from_nodes([NodeState("laptop", "n1"), NodeState("gpu-a", "g1")])
    ctx = ValidationContext.build(
        model,
        {"laptop": ("/srv",), "gpu-a": ("/srv",)},
        ["k"],
        ["dom-a"],
        runtimes={"gpu-a": "kubernetes"},
        unmountable={"gpu-a": ["objectStorage"]},
    )
    report = validate_job(parse_job_document(_job(("header", "gpu-a", [BUCKET_SECRET, CLAIM]))), ctx)
    [refused] = report.errors
    assert (refused.code, refused.field) == ("mount_type_unsupported", "spec.tasks[0].mounts[0].type")
    assert "RLARK_K8S_OBJECT_STORAGE_CSI_DRIVER" in str(refused.message)
    doc = parse_job_document(_job(("header", "gpu-a", [BUCKET_SECRET])))
    assert mount_type_refusals(doc.spec, {"gpu-a": "kubernetes"}) == []
    [(field, _)] = mount_type_refusals(doc.spec, {"gpu-a": "kubernetes"}, None, {"gpu-a": ("objectStorage",)})
    assert field == "spec.tasks[0].mounts[0].type"
    bucket = [(MountType.OBJECT_STORAGE.value, "s3://models/rl")]
    assert can_mount(ClusterFacts(runtime="kubernetes"), bucket)
    assert not can_mount(ClusterFacts(runtime="kubernetes", unmountable=("objectStorage",)), bucket)
