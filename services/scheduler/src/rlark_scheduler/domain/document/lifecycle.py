"""How a job's attempts run and end: ``spec.restartPolicy`` (ADR 0014), ``spec.progressDeadlineSeconds`` and
``spec.terminationGracePeriodSeconds``, and ``spec.resume`` — where an attempt resumes from a checkpoint
(ADR 0015)."""

from __future__ import annotations

from rlark_contracts.messages import text

from rlark_scheduler.domain.document.check import CONTROL, Check, under
from rlark_scheduler.domain.document.fields import child_path
from rlark_scheduler.domain.document.model import RestartOn

MAX_RESTARTS_RANGE = (0, 100)
BACKOFF_SECONDS_RANGE = (0, 86_400)
PROGRESS_DEADLINE_RANGE = (10, 604_800)
"""``spec.progressDeadlineSeconds``: ten seconds to a week."""
TERMINATION_GRACE_RANGE = (0, 3_600)
"""``spec.terminationGracePeriodSeconds``: up to an hour."""


def check_restart_policy(check: Check) -> None:
    """``spec.restartPolicy`` (ADR 0014): the kinds in ``on`` were checked by the parser."""
    policy = check.spec.restart_policy
    if policy is None:
        return
    low, high = MAX_RESTARTS_RANGE
    if not low <= policy.max_restarts <= high:
        check.add(
            "restart_max_out_of_range",
            text("restart_max_out_of_range", min=low, max=high),
            "spec.restartPolicy.maxRestarts",
        )
    low, high = BACKOFF_SECONDS_RANGE
    if not low <= policy.backoff_seconds <= high:
        check.add(
            "restart_backoff_out_of_range",
            text("restart_backoff_out_of_range", min=low, max=high),
            "spec.restartPolicy.backoffSeconds",
        )
    for index, code in enumerate(policy.exit_codes):
        if not 1 <= code <= 255:
            path = child_path("spec.restartPolicy.exitCodes", index)
            check.add(
                "restart_exit_code_invalid",
                text("restart_exit_code_invalid", field=path, code=code),
                path,
            )
    if policy.exit_codes and RestartOn.EXIT_CODE not in policy.on:
        check.add(
            "restart_exit_codes_unused",
            text("restart_exit_codes_unused"),
            "spec.restartPolicy.exitCodes",
            warning=True,
        )


def check_run_limits(check: Check) -> None:
    """``spec.progressDeadlineSeconds`` and ``spec.terminationGracePeriodSeconds`` within their ranges."""
    spec = check.spec
    deadline = spec.progress_deadline_seconds
    low, high = PROGRESS_DEADLINE_RANGE
    if deadline is not None and not low <= deadline <= high:
        check.add(
            "progress_deadline_out_of_range",
            text("progress_deadline_out_of_range", min=low, max=high),
            "spec.progressDeadlineSeconds",
        )
    grace = spec.termination_grace_period_seconds
    low, high = TERMINATION_GRACE_RANGE
    if grace is not None and not low <= grace <= high:
        check.add(
            "termination_grace_out_of_range",
            text("termination_grace_out_of_range", min=low, max=high),
            "spec.terminationGracePeriodSeconds",
        )


def check_resume(check: Check) -> None:
    """``spec.resume`` (ADR 0015): ``from`` was checked by the parser; ``dir`` is a relative path under the
    first output, and checkpoints only outlive an attempt on a volume."""
    resume = check.spec.resume
    if resume is None:
        return
    field_path = "spec.resume.dir"
    parts = resume.dir.split("/")
    if (
        not resume.dir.strip()
        or resume.dir.startswith("/")
        or ".." in parts
        or "\\" in resume.dir
        or CONTROL.search(resume.dir)
    ):
        check.add("resume_dir_invalid", text("resume_dir_invalid", field=field_path), field_path)
        return
    if not check.spec.outputs:
        check.add("resume_outputs_missing", text("resume_outputs_missing"), field_path)
        return
    searched = resume.checkpoints_dir(check.spec.outputs)
    header = check.spec.role(check.spec.header)
    volumes = [m.path for m in header.mounts if not m.read_only] if header is not None else []
    if check.spec.outputs[0].startswith("/") and not any(under(searched, v) for v in volumes):
        check.add(
            "resume_dir_not_on_mount",
            text("resume_dir_not_on_mount", field=field_path, path=searched),
            field_path,
            warning=True,
        )
