"""Server-side job rules: every bad input gets its stable code and field, all at once."""

from __future__ import annotations

from typing import Any

import pytest
from rlark_scheduler.domain.capacity import CapacityModel, NodeState
from rlark_scheduler.domain.document.fields import child_path
from rlark_scheduler.domain.document.model import MAX_REPLICAS
from rlark_scheduler.domain.document.parsing import parse_job_document
from rlark_scheduler.domain.document.validation import (
    ValidationContext,
    ValidationReport,
    image_problem,
    parse_image,
    validate_job,
)
from scheduler_fleet import A100

HOSTPATH_ALLOW = ("/a", "/b", "/mnt")
"""The clusters' hostPath policy: the host directories these tests mount (the policy's own rules are
tested in test_validation_hostpaths.py)."""


CLUSTERS = ("gpu-a", "gpu-b", "gpu-down")
CTX = ValidationContext.build(
    CapacityModel.from_nodes(
        (NodeState(name, f"{name}-n{i}", A100, gpu_allocatable=8) for name in CLUSTERS for i in range(4)),
        offline=["gpu-down"],
    ),
    dict.fromkeys(CLUSTERS, HOSTPATH_ALLOW),
    ssh_key_names=["my-workstation", "laptop"],
    network_domains=["dom-a", "dom-b"],
)


def _role(name: str = "actor", **fields: Any) -> dict[str, Any]:
    role: dict[str, Any] = {
        "name": name,
        "cluster": "gpu-a",
        "nodeSelector": dict(A100),
        "replicas": 1,
        "gpusPerWorker": 8,
        "image": "registry.example.com/rlinf:v0.3.0-cuda12.4",
        "mounts": [{"name": "data", "type": "hostPath", "source": "/mnt/data", "path": "/data"}],
    }
    role.update(fields)
    return role


def _job(tasks: list[dict[str, Any]] | None = None, **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "header": "actor",
        "networkDomain": "dom-a",
        "sshKeys": ["my-workstation"],
        "runScript": "python train.py\n",
        "outputs": ["/data/outputs"],
        "tasks": tasks if tasks is not None else [_role()],
    }
    body.update(spec)
    return {"apiVersion": "rlark.io/v1", "kind": "Job", "metadata": {"name": "grpo"}, "spec": body}


def _validate(data: dict[str, Any] | str, ctx: ValidationContext = CTX) -> ValidationReport:
    return validate_job(parse_job_document(data), ctx)


def _errors(data: dict[str, Any] | str, ctx: ValidationContext = CTX) -> set[tuple[str, str]]:
    return {(e.code, e.field) for e in _validate(data, ctx).errors}


def _warnings(data: dict[str, Any] | str, ctx: ValidationContext = CTX) -> set[tuple[str, str]]:
    return {(w.code, w.field) for w in _validate(data, ctx).warnings}


def test_a_correct_job_has_no_errors_and_no_warnings() -> None:
    report = _validate(_job())
    assert report.errors == ()
    assert report.warnings == ()
    assert report.ok
    assert report.to_dict() == {"ok": True, "errors": [], "warnings": []}


@pytest.mark.parametrize("name", ["", "   ", "x" * 129])
def test_display_name_must_be_1_to_128_characters_after_strip(name: str) -> None:
    data = _job()
    data["metadata"]["name"] = name
    assert ("name_length", "metadata.name") in _errors(data)


def test_display_name_of_128_characters_with_spaces_around_is_fine() -> None:
    data = _job()
    data["metadata"]["name"] = "  " + "名" * 128 + "  "
    assert _errors(data) == set()


def test_display_name_with_a_line_break_is_refused() -> None:
    data = _job()
    data["metadata"]["name"] = "two\nlines"
    assert ("name_invalid", "metadata.name") in _errors(data)


def test_unsupported_api_version_and_kind_are_refused() -> None:
    data = _job()
    data["apiVersion"] = "rlark.io/v0"
    data["kind"] = "Deployment"
    assert {("api_version_unsupported", "apiVersion"), ("kind_unsupported", "kind")} <= _errors(data)


@pytest.mark.parametrize("name", ["Actor", "-actor", "actor-", "act_or", "a.b", "x" * 41, ""])
def test_role_names_must_be_dns_labels_of_at_most_40_characters(name: str) -> None:
    data = _job([_role(name)], header=name)
    assert ("role_name_invalid", "spec.tasks[0].name") in _errors(data)


def test_role_name_of_40_characters_is_fine() -> None:
    name = "a" + "-b" * 19 + "c"
    assert len(name) == 40
    assert _errors(_job([_role(name)], header=name)) == set()


def test_duplicate_role_names_are_refused_on_the_second() -> None:
    data = _job([_role("actor"), _role("rollout"), _role("rollout")])
    errors = _errors(data)
    assert ("role_name_duplicate", "spec.tasks[2].name") in errors
    assert ("role_name_duplicate", "spec.tasks[1].name") not in errors


def test_header_is_required() -> None:
    data = _job()
    del data["spec"]["header"]
    assert ("header_missing", "spec.header") in _errors(data)


def test_header_must_name_a_role() -> None:
    assert ("header_unknown_role", "spec.header") in _errors(_job(header="learner"))


def test_header_role_must_have_exactly_one_replica() -> None:
    data = _job([_role("rollout"), _role("actor", replicas=2)])
    assert ("header_replicas", "spec.tasks[1].replicas") in _errors(data)


def test_at_least_one_role_is_required() -> None:
    assert ("tasks_missing", "spec.tasks") in _errors(_job([]))


@pytest.mark.parametrize("script", [None, "", "  \n"])
def test_run_script_is_required(script: str | None) -> None:
    data = _job()
    data["spec"]["runScript"] = script
    assert ("run_script_missing", "spec.runScript") in _errors(data)


@pytest.mark.parametrize(
    "image",
    [
        "registry.example.com/rlinf:v0.3.0-cuda12.4",
        "rlinf/rlinf:agentic-rlinf0.3-maniskill",
        "ubuntu:22.04",
        "localhost:5000/team/rlinf:1.0",
        "host:5000/img:v1",
        "[::1]:5000/img:v1",
        "Registry.Example.com/img:1",
        "img@sha256:" + "a" * 64,
        "img:v1@sha256:" + "b" * 64,
        "img:latest@sha256:" + "c" * 64,
    ],
)
def test_images_with_an_explicit_tag_or_digest_are_accepted(image: str) -> None:
    assert image_problem(image) is None


@pytest.mark.parametrize(
    ("image", "code"),
    [
        ("rlinf", "image_tag_required"),
        ("registry.example.com/rlinf", "image_tag_required"),
        ("host:5000/img", "image_tag_required"),
        ("img:latest", "image_latest_refused"),
        ("registry.example.com:443/img:Latest", "image_latest_refused"),
        ("Rlinf:1", "image_invalid"),
        ("img:", "image_invalid"),
        ("img:v1 ", "image_invalid"),
        ("img@sha256:abc", "image_invalid"),
        ("img:-v1", "image_invalid"),
        ("img//x:1", "image_invalid"),
        ("", "image_invalid"),
    ],
)
def test_bad_images_get_their_code(image: str, code: str) -> None:
    problem = image_problem(image)
    assert problem is not None
    assert problem[0] == code
    assert (code, "spec.tasks[0].image") in _errors(_job([_role(image=image)]))


def test_registry_port_is_not_mistaken_for_a_tag() -> None:
    ref = parse_image("host:5000/team/img:v2")
    assert (ref.domain, ref.path, ref.tag, ref.digest) == ("host:5000", "team/img", "v2", None)


@pytest.mark.parametrize(
    ("key", "value", "code"),
    [
        ("rlark.io/", "x", "selector_key_invalid"),
        ("/gpu", "x", "selector_key_invalid"),
        ("Bad.IO/gpu", "x", "selector_key_invalid"),
        ("k" * 64, "x", "selector_key_invalid"),
        ("gpu model", "x", "selector_key_invalid"),
        ("gpu", "-A100", "selector_value_invalid"),
        ("gpu", "v" * 64, "selector_value_invalid"),
        ("gpu", "a b", "selector_value_invalid"),
    ],
)
def test_selector_syntax_follows_kubernetes_labels(key: str, value: str, code: str) -> None:
    data = _job([_role(nodeSelector={key: value})])
    assert (code, child_path("spec.tasks[0].nodeSelector", key)) in _errors(data)


def test_empty_label_value_is_valid_syntax() -> None:
    data = _job([_role(nodeSelector={"rlark.io/spare": ""})])
    assert not {c for c, _ in _errors(data)} & {"selector_key_invalid", "selector_value_invalid"}


def test_unknown_cluster_is_refused_and_offline_cluster_only_warned() -> None:
    assert ("cluster_unknown", "spec.tasks[0].cluster") in _errors(_job([_role(cluster="gpu-z")]))
    data = _job([_role(cluster="gpu-down")])
    assert ("cluster_offline", "spec.tasks[0].cluster") in _warnings(data)
    assert _errors(data) == set()


@pytest.mark.parametrize("replicas", [0, -1, MAX_REPLICAS + 1])
def test_replicas_must_be_between_1_and_the_maximum(replicas: int) -> None:
    data = _job([_role(), _role("rollout", replicas=replicas)])
    assert ("replicas_invalid", "spec.tasks[1].replicas") in _errors(data)


@pytest.mark.parametrize("gpus", [-1, 65])
def test_gpus_per_worker_must_be_between_0_and_64(gpus: int) -> None:
    assert ("gpus_invalid", "spec.tasks[0].gpusPerWorker") in _errors(_job([_role(gpusPerWorker=gpus)]))


def test_priority_must_be_between_minus_100_and_100() -> None:
    assert ("priority_out_of_range", "spec.priority") in _errors(_job(priority=101))
    assert _errors(_job(priority=-100)) == set()


@pytest.mark.parametrize(
    ("mount", "code", "field"),
    [
        ({"name": "Data", "type": "hostPath", "source": "/mnt", "path": "/d"}, "mount_invalid", "name"),
        ({"name": "d", "type": "hostPath", "source": "mnt", "path": "/d"}, "path_not_absolute", "source"),
        ({"name": "d", "type": "hostPath", "source": "/mnt", "path": "data"}, "path_not_absolute", "path"),
        ({"name": "d", "type": "hostPath", "source": "/mnt", "path": "/a/../b"}, "path_not_absolute", "path"),
        ({"name": "d", "type": "hostPath", "source": "/mnt", "path": "/"}, "mount_invalid", "path"),
        ({"name": "d", "type": "pvc", "source": "Bad_Claim", "path": "/d"}, "mount_invalid", "source"),
        (
            {"name": "d", "type": "objectStorage", "source": "s3://b/p", "path": "/d"},
            "mount_invalid",
            "secretRef",
        ),
        (
            {"name": "d", "type": "objectStorage", "source": "bucket/p", "path": "/d", "secretRef": "s3"},
            "mount_invalid",
            "source",
        ),
        (
            {"name": "d", "type": "hostPath", "source": "/mnt", "path": "/d", "secretRef": "s3"},
            "mount_invalid",
            "secretRef",
        ),
    ],
)
def test_mount_rules(mount: dict[str, Any], code: str, field: str) -> None:
    data = _job([_role(mounts=[mount])])
    assert (code, f"spec.tasks[0].mounts[0].{field}") in _errors(data)


def test_valid_pvc_and_object_storage_mounts_are_accepted() -> None:
    mounts = [
        {"name": "data", "type": "pvc", "source": "shared-data", "path": "/data"},
        {
            "name": "ckpt",
            "type": "objectStorage",
            "source": "s3://ckpt/grpo",
            "path": "/ckpt",
            "secretRef": "s3-creds",
        },
    ]
    assert _errors(_job([_role(mounts=mounts)])) == set()


def test_mount_names_and_paths_are_unique_within_a_role() -> None:
    mounts = [
        {"name": "data", "type": "hostPath", "source": "/a", "path": "/data"},
        {"name": "data", "type": "hostPath", "source": "/b", "path": "/data/"},
    ]
    errors = _errors(_job([_role(mounts=mounts)]))
    assert ("mount_invalid", "spec.tasks[0].mounts[1].name") in errors
    assert ("mount_invalid", "spec.tasks[0].mounts[1].path") in errors


def test_object_storage_credentials_in_the_url_are_refused() -> None:
    mount = {
        "name": "ckpt",
        "type": "objectStorage",
        "source": "s3://admin:Sup3rS3cret@minio.internal/ckpt",
        "path": "/ckpt",
        "secretRef": "s3-creds",
    }
    errors = _errors(_job([_role(mounts=[mount])]))
    assert ("mount_invalid", "spec.tasks[0].mounts[0].source") in errors
    assert ("secret_detected", "spec.tasks[0].mounts[0].source") in errors


def test_env_names_must_be_shell_identifiers_and_not_reserved() -> None:
    env = {"1BAD": "x", "WITH-DASH": "x", "RLARK_JOB_ID": "x", "RLINF_NODE_RANK": "3", "RAY_ADDRESS": "h:1"}
    errors = _errors(_job([_role(env=env)]))
    assert ("env_name_invalid", 'spec.tasks[0].env["1BAD"]') in errors
    assert ("env_name_invalid", "spec.tasks[0].env.WITH-DASH") in errors
    assert ("env_name_reserved", "spec.tasks[0].env.RLARK_JOB_ID") in errors
    assert ("env_name_reserved", "spec.tasks[0].env.RLINF_NODE_RANK") in errors
    assert ("env_name_reserved", "spec.tasks[0].env.RAY_ADDRESS") in errors


def test_env_that_rlinf_overwrites_is_a_warning() -> None:
    data = _job([_role(env={"CUDA_VISIBLE_DEVICES": "0,1", "NCCL_DEBUG": "INFO"})])
    assert _warnings(data) == {("env_overridden", "spec.tasks[0].env.CUDA_VISIBLE_DEVICES")}
    assert _errors(data) == set()


def test_output_paths_must_be_absolute_and_should_be_on_a_mount() -> None:
    data = _job(tensorboardDir="tb", outputs=["/data/ok", "/tmp/lost", "rel", "/data/../etc"])
    errors = _errors(data)
    assert ("path_not_absolute", "spec.tensorboardDir") in errors
    assert ("path_not_absolute", "spec.outputs[2]") in errors
    assert ("path_not_absolute", "spec.outputs[3]") in errors
    assert _warnings(data) == {("output_not_on_mount", "spec.outputs[1]")}


def test_ssh_keys_must_belong_to_the_user() -> None:
    errors = _errors(_job(sshKeys=["laptop", "someone-elses"]))
    assert errors == {("ssh_key_unknown", "spec.sshKeys[1]")}


def test_network_domain_must_exist() -> None:
    assert _errors(_job(networkDomain="dom-z")) == {("network_domain_unknown", "spec.networkDomain")}


def test_roles_across_clusters_need_a_network_domain() -> None:
    data = _job([_role(), _role("rollout", cluster="gpu-b")], networkDomain=None)
    assert ("network_domain_missing", "spec.networkDomain") in _errors(data)
    one_cluster = _job([_role(), _role("rollout")], networkDomain=None)
    assert ("network_domain_missing", "spec.networkDomain") not in _errors(one_cluster)
    assert _warnings(one_cluster) == set()


def test_a_misspelt_cluster_is_unknown_not_a_second_cluster_needing_a_domain() -> None:
    data = _job([_role(), _role("rollout", cluster="gpu-aa")], networkDomain=None)
    assert _errors(data) == {("cluster_unknown", "spec.tasks[1].cluster")}


def test_network_domain_none_is_not_a_domain_and_needs_one_cluster() -> None:
    assert _errors(_job(networkDomain="none")) == set()
    data = _job([_role(), _role("rollout", cluster="gpu-b")], networkDomain="none")
    assert ("network_domain_missing", "spec.networkDomain") in _errors(data)


def test_template_jobs_must_name_a_known_template() -> None:
    assert ("template_missing", "spec.template") in _errors(_job(type="template"))
    assert ("template_unknown", "spec.template") in _errors(_job(type="template", template="nope"))
    assert _errors(_job(type="template", template="single-node")) == set()


def test_every_problem_is_reported_in_one_pass_with_yaml_lines() -> None:
    text = """\
metadata:
  name: ""
spec:
  header: learner
  sshKeys: [ghost]
  runScript: python train.py
  tasks:
    - name: Actor
      cluster: nowhere
      replicas: 0
      image: rlinf:latest
      env: {RLARK_ROLE: x}
"""
    report = _validate(text)
    found = {(e.code, e.field, e.line) for e in report.errors}
    assert found >= {
        ("name_length", "metadata.name", 2),
        ("header_unknown_role", "spec.header", 4),
        ("ssh_key_unknown", "spec.sshKeys[0]", 5),
        ("role_name_invalid", "spec.tasks[0].name", 8),
        ("cluster_unknown", "spec.tasks[0].cluster", 9),
        ("replicas_invalid", "spec.tasks[0].replicas", 10),
        ("image_latest_refused", "spec.tasks[0].image", 11),
        ("env_name_reserved", "spec.tasks[0].env.RLARK_ROLE", 12),
    }
    assert all(error.message for error in report.errors)
