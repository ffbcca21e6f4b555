"""hostPath mounts are checked against the role's cluster's policy at validation: default deny, an
allow-list of prefixes, every refusal naming the mount's source field and the rule that refused it."""

from __future__ import annotations

from typing import Any

import pytest
from rlark_scheduler.domain.capacity import CapacityModel, NodeState
from rlark_scheduler.domain.document.parsing import parse_job_document
from rlark_scheduler.domain.document.validation import (
    ValidationContext,
    ValidationReport,
    hostpath_refusals,
    validate_job,
)

pytestmark = pytest.mark.unit

SOURCE_FIELD = "spec.tasks[0].mounts[1].source"


def _ctx(allow: tuple[str, ...]) -> ValidationContext:
    model = CapacityModel.from_nodes([NodeState("lab", "n1")])
    return ValidationContext.build(model, {"lab": allow}, ["k"])


def _job(source: str, *, read_only: bool = False) -> dict[str, Any]:
    mounts = [
        {"name": "scratch", "type": "hostPath", "source": "/srv/scratch", "path": "/scratch"},
        {"name": "data", "type": "hostPath", "source": source, "path": "/data", "readOnly": read_only},
    ]
    role = {"name": "header", "cluster": "lab", "image": "python:3.11-slim", "mounts": mounts}
    spec = {"header": "header", "sshKeys": ["k"], "runScript": "true\n", "tasks": [role]}
    return {"metadata": {"name": "hostpaths"}, "spec": spec}


def _validate(source: str, allow: tuple[str, ...] = ("/srv",)) -> ValidationReport:
    return validate_job(parse_job_document(_job(source)), _ctx(allow))


def _refusal(report: ValidationReport) -> tuple[str, str, str]:
    [error] = [e for e in report.errors if e.field == SOURCE_FIELD]
    return error.code, error.field, error.message


def test_a_source_under_an_allowed_prefix_is_accepted() -> None:
    report = _validate("/srv/datasets/imagenet")
    assert report.ok, report.errors


@pytest.mark.parametrize(
    ("source", "rule"),
    [
        ("/", "the root directory"),
        ("/etc", "protected host path /etc"),
        ("/var/run/docker.sock", "socket"),
        ("/run/containerd/containerd.sock", "socket"),
        ("/run/containerd", "protected host path /run"),
        ("/srv2/x", "not under an allowed prefix (/srv)"),
        ("/srv/./x", "'.' or '..'"),
        ("/srv/datasets/containerd.sock", "socket"),
    ],
)
def test_a_source_outside_the_policy_is_refused_naming_the_field_and_the_rule(source: str, rule: str) -> None:
    code, field, message = _refusal(_validate(source))
    assert (code, field) == ("hostpath_not_allowed", SOURCE_FIELD)
    assert rule in message
    assert message.startswith(SOURCE_FIELD)
    assert 'cluster "lab"' in message


def test_a_cluster_without_a_policy_allows_no_host_path() -> None:
    report = _validate("/srv/datasets", allow=())
    fields = {e.field for e in report.errors if e.code == "hostpath_not_allowed"}
    assert fields == {"spec.tasks[0].mounts[0].source", SOURCE_FIELD}
    assert "default deny" in _refusal(report)[2]


def test_dot_dot_is_refused_once_as_a_path_error_not_resolved() -> None:
    report = _validate("/etc/../")
    assert [(e.code, e.field) for e in report.errors] == [("path_not_absolute", SOURCE_FIELD)]


def test_the_policy_of_the_role_s_own_cluster_decides() -> None:
    model = CapacityModel.from_nodes([NodeState("lab", "n1"), NodeState("other", "m1")])
    ctx = ValidationContext.build(model, {"lab": ("/srv",), "other": ("/data",)}, ["k"])
    job = _job("/data/x")
    assert {e.code for e in validate_job(parse_job_document(job), ctx).errors} == {"hostpath_not_allowed"}
    job["spec"]["tasks"][0]["cluster"] = "other"
    job["spec"]["tasks"][0]["mounts"] = job["spec"]["tasks"][0]["mounts"][1:]
    assert validate_job(parse_job_document(job), ctx).ok


def test_the_placement_time_check_names_every_source_the_current_policies_refuse() -> None:
    doc = parse_job_document(_job("/data/x"))
    assert hostpath_refusals(doc.spec, {"lab": ("/srv", "/data")}) == []
    refused = hostpath_refusals(doc.spec, {"lab": ("/srv",)})
    assert [field for field, _ in refused] == [SOURCE_FIELD]
    assert "not under an allowed prefix (/srv)" in refused[0][1]
    everything = hostpath_refusals(doc.spec, {})
    assert [field for field, _ in everything] == ["spec.tasks[0].mounts[0].source", SOURCE_FIELD]
