"""A job names secrets, never carries them (ADR 0025): ``env`` takes a value from a named secret in the mapping
form (``HF_TOKEN: {secret: hf-token}``) or Kubernetes' list form; an objectStorage mount's ``secretRef`` names one
too. Validation refuses a name that is not a secret's, and one the owner (or the job's project) does not have,
naming the field; the placement carries the names only."""

from __future__ import annotations

from typing import Any

import pytest
from rlark_scheduler.domain.capacity import CapacityModel, NodeState
from rlark_scheduler.domain.document.model import SecretRef
from rlark_scheduler.domain.document.parsing import parse_job_document
from rlark_scheduler.domain.document.validation import ValidationContext, validate_job
from rlark_scheduler.domain.jobs import WorkerFacts
from rlark_scheduler.domain.placed import PlacedJob, worker_placements
from rlark_scheduler.domain.render import render_yaml

pytestmark = pytest.mark.unit

BUCKET = {
    "name": "models",
    "type": "objectStorage",
    "source": "s3://models/rl",
    "path": "/models",
    "secretRef": "s3",
}


def _ctx(secrets: dict[str, tuple[str, str]] | None) -> ValidationContext:
    model = CapacityModel.from_nodes([NodeState("gpu-a", "g1")])
    return ValidationContext.build(
        model, {"gpu-a": ()}, ["k"], [], runtimes={"gpu-a": "kubernetes"}, secrets=secrets
    )


def _job(env: Any, mounts: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    task = {
        "name": "actor",
        "cluster": "gpu-a",
        "image": "python:3.11-slim",
        "env": env,
        "mounts": mounts or [],
    }
    return {
        "metadata": {"name": "secrets"},
        "spec": {"header": "actor", "sshKeys": ["k"], "runScript": "true\n", "tasks": [task]},
    }


def test_both_forms_of_env_read_alike_and_render_as_the_mapping() -> None:
    mapping = parse_job_document(_job({"HF_TOKEN": {"secret": "hf-token"}, "LEVEL": "info", "STEPS": 3}))
    listed = parse_job_document(
        _job(
            [
                {"name": "HF_TOKEN", "secret": "hf-token"},
                {"name": "LEVEL", "value": "info"},
                {"name": "STEPS", "value": 3},
            ]
        )
    )
    assert mapping.spec.tasks[0] == listed.spec.tasks[0]
    role = mapping.spec.tasks[0]
    assert role.plain_env() == {"LEVEL": "info", "STEPS": "3"}
    assert role.secret_env() == {"HF_TOKEN": "hf-token"}
    assert role.env["HF_TOKEN"] == SecretRef(secret="hf-token")
    assert "HF_TOKEN:\n" in render_yaml(mapping)
    assert "secret: hf-token" in render_yaml(mapping)


def test_a_secret_the_owner_has_passes_and_one_they_lack_or_misname_is_refused_naming_its_field() -> None:
    doc = parse_job_document(
        _job({"HF_TOKEN": {"secret": "hf-token"}, "W": {"secret": "Bad Name"}}, [BUCKET])
    )
    report = validate_job(doc, _ctx({"hf-token": ("user", "alice")}))
    refused = {(e.code, e.field) for e in report.errors}
    assert refused == {
        ("secret_name_invalid", "spec.tasks[0].env.W.secret"),
        ("secret_unknown", "spec.tasks[0].mounts[0].secretRef"),
    }
    unknown = next(e for e in report.errors if e.code == "secret_unknown")
    assert "rlark secrets set s3 --from-stdin" in unknown.message
    ok = validate_job(
        parse_job_document(_job({"HF_TOKEN": {"secret": "hf-token"}}, [BUCKET])),
        _ctx({"hf-token": ("user", "alice"), "s3": ("project", "lab")}),
    )
    assert not [e for e in ok.errors if e.code.startswith("secret")]


def test_without_a_directory_only_the_names_form_is_judged() -> None:
    report = validate_job(parse_job_document(_job({"HF_TOKEN": {"secret": "hf-token"}})), _ctx(None))
    assert not [e for e in report.errors if e.code.startswith("secret")]


def test_the_placement_carries_the_secrets_names_never_a_value() -> None:
    doc = parse_job_document(_job({"HF_TOKEN": {"secret": "hf-token"}, "LEVEL": "info"}, [BUCKET]))
    worker = WorkerFacts(
        role="actor",
        index=0,
        rank=0,
        is_header=True,
        cluster="gpu-a",
        node="g1",
        gpus=0,
        worker_id="job-1-actor-0",
    )
    job = PlacedJob("job-1", "alice", ["ssh-ed25519 AAAA k"], "", None, 6379, 120)
    [placed] = worker_placements(job, doc, [worker])
    assert placed.env == {"LEVEL": "info"}
    assert placed.secret_env == {"HF_TOKEN": "hf-token"}
    assert placed.secrets == ["hf-token", "s3"]


def test_in_yaml_a_reference_is_no_finding_and_a_token_pasted_as_its_name_still_is() -> None:
    source = """\
metadata: {name: secrets}
spec:
  header: actor
  sshKeys: [k]
  runScript: "true"
  tasks:
  - name: actor
    cluster: gpu-a
    image: python:3.11-slim
    env:
    - name: HF_TOKEN
      secret: hf-token
    - {name: WANDB_API_KEY, secret: wandb}
"""
    report = validate_job(
        parse_job_document(source), _ctx({"hf-token": ("user", "a"), "wandb": ("user", "a")})
    )
    assert not report.errors
    pasted = source.replace("secret: hf-token", "secret: ghp_" + "a1B2c3D4e5F6g7H8i9J0" * 2)
    found = [
        e for e in validate_job(parse_job_document(pasted), _ctx({})).errors if e.code == "secret_detected"
    ]
    assert found


def test_a_one_line_json_document_naming_secrets_is_no_finding() -> None:
    import json

    doc = _job([{"name": "HF_TOKEN", "secret": "hf-token"}], [BUCKET])
    doc["spec"]["rlinfConfig"] = {"cluster": {"num_nodes": 1, "component_placement": {"actor": "0-0"}}}
    report = validate_job(
        parse_job_document(json.dumps(doc)), _ctx({"hf-token": ("user", "a"), "s3": ("user", "a")})
    )
    assert not [e for e in report.errors if e.code == "secret_detected"]
