"""``spec.resume`` (ADR 0015): parsed, validated naming the field, rendered in the preview, and carried on the
Header's placement as the container path its agent searches for the newest complete checkpoint."""

from __future__ import annotations

from typing import Any

import pytest
from rlark_scheduler.domain.capacity import CapacityModel, NodeState
from rlark_scheduler.domain.document.errors import SpecParseError
from rlark_scheduler.domain.document.model import Resume, ResumeFrom
from rlark_scheduler.domain.document.parsing import parse_job_document
from rlark_scheduler.domain.document.validation import ValidationContext, validate_job
from rlark_scheduler.domain.render import render_yaml

pytestmark = pytest.mark.unit

OUTPUTS_MOUNT = {"name": "out", "type": "hostPath", "source": "/srv/out", "path": "/outputs"}


def document(
    resume: Any, *, outputs: list[str] | None = None, mounts: list[Any] | None = None
) -> dict[str, Any]:
    return {
        "metadata": {"name": "resumes"},
        "spec": {
            "header": "actor",
            "runScript": "python train.py\n",
            "outputs": ["/outputs/rlinf"] if outputs is None else outputs,
            "resume": resume,
            "tasks": [
                {
                    "name": "actor",
                    "cluster": "lab",
                    "image": "python:3.11-slim",
                    "mounts": [OUTPUTS_MOUNT] if mounts is None else mounts,
                },
            ],
        },
    }


CTX = ValidationContext.build(
    CapacityModel.from_nodes([NodeState("lab", "n0", {}, gpu_allocatable=0)]),
    {"lab": ("/srv",)},
    ssh_key_names=[],
    network_domains=[],
)


def problems(resume: Any, **kwargs: Any) -> tuple[set[tuple[str, str]], set[tuple[str, str]]]:
    report = validate_job(parse_job_document(document(resume, **kwargs)), CTX)
    return {(e.code, e.field) for e in report.errors}, {(w.code, w.field) for w in report.warnings}


def test_resume_is_read_with_its_from_key_and_written_back_in_the_preview() -> None:
    doc = parse_job_document(document({"from": "latestCheckpoint", "dir": "exp/checkpoints"}))
    assert doc.spec.resume == Resume.model_validate({"from": "latestCheckpoint", "dir": "exp/checkpoints"})
    assert doc.spec.resume is not None
    assert doc.spec.resume.from_ is ResumeFrom.LATEST_CHECKPOINT
    rendered = render_yaml(doc)
    assert "resume:" in rendered
    assert "from: latestCheckpoint" in rendered
    assert parse_job_document(rendered) == doc


def test_the_searched_directory_is_resume_dir_under_the_first_output() -> None:
    resume = Resume.model_validate({"from": "latestCheckpoint", "dir": "exp/checkpoints/"})
    assert resume.checkpoints_dir(["/outputs/rlinf/", "/other"]) == "/outputs/rlinf/exp/checkpoints"
    assert resume.checkpoints_dir([]) == ""


def test_a_resume_source_other_than_the_latest_checkpoint_is_refused_naming_spec_resume_from() -> None:
    with pytest.raises(SpecParseError) as caught:
        parse_job_document(document({"from": "bestCheckpoint", "dir": "ckpt"}))
    errors = {e.field: e.message for e in caught.value.errors}
    assert "spec.resume.from" in errors
    assert "latestCheckpoint" in errors["spec.resume.from"]


def test_resume_without_a_dir_or_with_an_unknown_field_is_refused_naming_it() -> None:
    with pytest.raises(SpecParseError) as caught:
        parse_job_document(document({"from": "latestCheckpoint", "path": "ckpt"}))
    fields = {(e.code, e.field) for e in caught.value.errors}
    assert ("field_required", "spec.resume.dir") in fields
    assert ("field_unknown", "spec.resume.path") in fields


@pytest.mark.parametrize(
    "bad", ["", "  ", "/outputs/ckpt", "../elsewhere", "exp/../../etc", "exp\\ckpt", "a\nb"]
)
def test_a_resume_dir_that_is_not_a_relative_path_under_the_outputs_is_refused_naming_spec_resume_dir(
    bad: str,
) -> None:
    errors, _ = problems({"from": "latestCheckpoint", "dir": bad})
    assert ("resume_dir_invalid", "spec.resume.dir") in errors


def test_resume_needs_an_output_to_be_relative_to() -> None:
    errors, _ = problems({"from": "latestCheckpoint", "dir": "ckpt"}, outputs=[])
    assert ("resume_outputs_missing", "spec.resume.dir") in errors


def test_checkpoints_on_no_volume_of_the_header_are_a_warning_they_would_not_outlive_an_attempt() -> None:
    errors, warnings = problems({"from": "latestCheckpoint", "dir": "ckpt"}, mounts=[])
    assert errors == set()
    assert ("resume_dir_not_on_mount", "spec.resume.dir") in warnings
    read_only = [{**OUTPUTS_MOUNT, "readOnly": True}]
    _, warnings = problems({"from": "latestCheckpoint", "dir": "ckpt"}, mounts=read_only)
    assert ("resume_dir_not_on_mount", "spec.resume.dir") in warnings


def test_a_valid_resume_on_a_volume_has_no_problems() -> None:
    errors, warnings = problems({"from": "latestCheckpoint", "dir": "rlinf-cpu-smoke/checkpoints"})
    assert errors == set()
    assert not {w for w in warnings if w[1].startswith("spec.resume")}
