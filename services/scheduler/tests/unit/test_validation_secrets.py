"""Secrets in a submitted job are refused with the field and the document line named."""

from __future__ import annotations

import random
import string
from typing import Any

from rlark_scheduler.domain.capacity import CapacityModel, NodeState
from rlark_scheduler.domain.document.parsing import parse_job_document
from rlark_scheduler.domain.document.redaction import REDACTED
from rlark_scheduler.domain.document.validation import ValidationContext, validate_job
from rlark_scheduler.domain.render import plan_preview, redact_plan

RNG = random.Random(5)
GITHUB_TOKEN = "ghp_" + "".join(RNG.choice(string.ascii_letters + string.digits) for _ in range(35)) + "7"
HF_TOKEN = "hf_" + "".join(RNG.choice(string.ascii_letters) for _ in range(34))
CTX = ValidationContext.build(
    CapacityModel.from_nodes([NodeState("gpu-a", "n1", gpu_allocatable=8)]),
    {"gpu-a": ("/mnt",)},
    ["k"],
    ["dom-a"],
)

TEMPLATE = """\
metadata:
  name: grpo
spec:
  header: actor
  networkDomain: dom-a
  runScript: |
    set -e
    {run_line}
    python train.py
  outputs: [/data/out]
  tasks:
    - name: actor
      cluster: gpu-a
      gpusPerWorker: 8
      image: rlinf:v1
      prepareScript: |
        {prepare_line}
      mounts:
        - {{name: data, type: hostPath, source: /mnt, path: /data}}
      env:
        NCCL_DEBUG: INFO
        {env_line}
{trailer}"""


def _text(**lines: str) -> str:
    values = {"run_line": "echo start", "prepare_line": "true", "env_line": "A: b", "trailer": ""}
    values.update(lines)
    return TEMPLATE.format(**values)


def _secret_errors(source: str | dict[str, Any]) -> list[tuple[str, int | None]]:
    report = validate_job(parse_job_document(source), CTX)
    assert {e.code for e in report.errors} <= {"secret_detected"}
    return [(e.field, e.line) for e in report.errors]


def test_clean_job_has_no_secret_errors() -> None:
    assert _secret_errors(_text()) == []


def test_env_with_a_secret_name_and_literal_value_is_refused_at_its_line() -> None:
    assert _secret_errors(_text(env_line="DB_PASSWORD: changeme")) == [("spec.tasks[0].env.DB_PASSWORD", 22)]


def test_env_with_a_secret_name_and_a_reference_is_fine() -> None:
    assert _secret_errors(_text(env_line="DB_PASSWORD: $(DB_PASSWORD_FROM_SECRET)")) == []
    assert _secret_errors(_text(env_line="HF_TOKEN_FILE: /run/secrets/hf")) == []


def test_token_shape_in_an_innocent_env_name_is_refused() -> None:
    assert _secret_errors(_text(env_line=f"GIT_REMOTE_AUTH: {GITHUB_TOKEN}")) == [
        ("spec.tasks[0].env.GIT_REMOTE_AUTH", 22)
    ]


def test_secret_in_the_run_script_is_reported_at_its_document_line() -> None:
    assert _secret_errors(_text(run_line=f"export HF_TOKEN={HF_TOKEN}")) == [("spec.runScript", 8)]


def test_secret_in_the_prepare_script_is_reported_at_its_document_line() -> None:
    line = f"git clone https://{GITHUB_TOKEN}@github.com/x/y"
    assert _secret_errors(_text(prepare_line=line)) == [("spec.tasks[0].prepareScript", 17)]


def test_secret_in_a_yaml_comment_is_found_by_scanning_the_whole_text() -> None:
    trailer = f"# old token: {GITHUB_TOKEN}\n"
    assert _secret_errors(_text(trailer=trailer)) == [("", 23)]


def test_secret_in_the_rlinf_config_is_refused() -> None:
    data = parse_job_document(_text()).model_dump(mode="json")
    data["spec"]["rlinfConfig"] = {"runner": {"logger": {"wandb_api_key": "0123456789abcdef0123"}}}
    assert _secret_errors(data) == [("spec.rlinfConfig.runner.logger.wandb_api_key", None)]


def test_mapping_input_names_the_field_without_a_line() -> None:
    data = parse_job_document(_text()).model_dump(mode="json")
    data["spec"]["tasks"][0]["env"]["HF_TOKEN"] = HF_TOKEN
    assert _secret_errors(data) == [("spec.tasks[0].env.HF_TOKEN", None)]


def test_two_secrets_give_two_errors() -> None:
    text = _text(run_line="export PGPASSWORD=letmein", env_line=f"HF_TOKEN: {HF_TOKEN}")
    assert _secret_errors(text) == [("spec.runScript", 8), ("spec.tasks[0].env.HF_TOKEN", 22)]


def test_error_messages_never_contain_the_secret() -> None:
    text = _text(run_line=f"export HF_TOKEN={HF_TOKEN}", env_line="DB_PASSWORD: changeme")
    report = validate_job(parse_job_document(text), CTX)
    assert len(report.errors) == 2
    for error in report.errors:
        rendered = repr(error) + repr(error.to_dict())
        assert HF_TOKEN[:10] not in rendered
        assert "changeme" not in rendered


def test_a_token_in_an_image_tag_is_quoted_by_no_issue_and_the_plan_shows_it_redacted() -> None:
    image = f"registry.example.com/rlinf:{GITHUB_TOKEN}"
    doc = parse_job_document(
        _text(
            trailer=f"    - {{name: Bad_Role, cluster: gpu-a, image: 'r.example.com/{GITHUB_TOKEN}:v1'}}\n"
        ).replace("image: rlinf:v1", f"image: {image}")
    )
    report = validate_job(doc, CTX)
    codes = {e.code for e in report.errors}
    assert {
        "secret_detected",
        "image_invalid",
        "role_name_invalid",
    } <= codes  # the second image quotes its component
    shown = repr([e.to_dict() for e in (*report.errors, *report.warnings)])
    assert GITHUB_TOKEN not in shown
    assert GITHUB_TOKEN.lower() not in shown.lower()
    assert REDACTED in shown
    plans = [redact_plan(plan, report.secrets) for plan in plan_preview(doc, CTX)]
    images = [w.image for plan in plans for w in plan.workers]
    assert images == [f"registry.example.com/rlinf:{REDACTED}", f"r.example.com/{REDACTED}:v1"]


def test_a_secret_used_as_a_key_is_not_named_in_the_field_path() -> None:
    report = validate_job(parse_job_document(_text(env_line=f"{GITHUB_TOKEN}: x")), CTX)
    assert report.errors
    assert GITHUB_TOKEN not in repr([e.to_dict() for e in report.errors])
