"""Restart policy (ADR 0014): how failures are classified, when a failure starts a new attempt, the
spec's ``restartPolicy`` as parsed and validated, and the attempts a job's detail lists."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from rlark_contracts.events.scheduler import worker_id_for
from rlark_contracts.messages import text
from rlark_scheduler.domain.capacity import CapacityModel, NodeState
from rlark_scheduler.domain.document.errors import SpecParseError
from rlark_scheduler.domain.document.model import DEFAULT_RESTART_ON, RestartOn, RestartPolicy
from rlark_scheduler.domain.document.parsing import parse_job_document
from rlark_scheduler.domain.document.validation import ValidationContext, validate_job
from rlark_scheduler.domain.jobs import JobStatus, WorkerFacts, WorkerReport, fold_report
from rlark_scheduler.domain.render import render_yaml
from rlark_scheduler.domain.restarts import Failure, attempt_history, classify_worker_failure, decide, on_node

pytestmark = pytest.mark.unit

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def policy(**fields: Any) -> RestartPolicy:
    return RestartPolicy.model_validate(fields)


# ------------------------------------------------------------------------------------- worker ids


def test_the_first_attempt_keeps_the_plain_worker_id_and_later_ones_get_their_own() -> None:
    assert worker_id_for("job-1", "rollout", 2) == "job-1-rollout-2"
    assert worker_id_for("job-1", "rollout", 2, 1) == "job-1-rollout-2"
    assert worker_id_for("job-1", "rollout", 2, 3) == "job-1-rollout-2-a3"
    ids = {worker_id_for("job-1", "rollout", 2, attempt) for attempt in range(1, 6)}
    assert len(ids) == 5


def test_no_role_name_makes_a_later_attempts_worker_id_equal_another_workers() -> None:
    # Role names are DNS labels and may look like an attempt marker: "a2-b" in attempt 1, "b" in attempt 2.
    assert worker_id_for("job-1", "a2-b", 0, 1) != worker_id_for("job-1", "b", 0, 2)
    assert worker_id_for("job-1", "b-0", 1, 1) != worker_id_for("job-1", "b", 0, 2)
    roles = ["b", "a2-b", "b-0-a2", "x"]
    ids = [worker_id_for("job-1", r, i, a) for r in roles for i in range(3) for a in range(1, 4)]
    assert len(set(ids)) == len(ids)


# ---------------------------------------------------------------------------------- classification


@pytest.mark.parametrize(
    ("reason", "code", "kind"),
    [
        ("killed by signal 9", 137, RestartOn.WORKER_LOST),
        ("pod deleted outside RLark", None, RestartOn.WORKER_LOST),
        ("OOMKilled: the worker exceeded its memory limit", 137, RestartOn.OOM_KILLED),
        ("Evicted: The node was low on resource: memory.", None, RestartOn.EVICTED),
        ("NodeGone: node gpu-b1 was deleted from the cluster", None, RestartOn.NODE_GONE),
        (text("worker.run_failed", code=3), 3, RestartOn.EXIT_CODE),
        (text("worker.prepare_failed", code=7), 7, RestartOn.EXIT_CODE),
        (text("worker.stalled", worker="j-actor-0", seconds=60, step=12), None, RestartOn.STALLED),
        (text("worker.stalled_no_step", worker="j-actor-0", seconds=60), None, RestartOn.STALLED),
        ("worker exited with 2", 2, RestartOn.EXIT_CODE),
        ("", None, RestartOn.WORKER_LOST),
        ("", 139, RestartOn.WORKER_LOST),
    ],
)
def test_a_workers_failure_is_classified_from_what_its_agent_reported(
    reason: str, code: int | None, kind: RestartOn
) -> None:
    assert classify_worker_failure(reason, code) is kind


def crew() -> list[WorkerFacts]:
    return [
        WorkerFacts(
            worker_id=worker_id_for("job-1", role, index),
            role=role,
            index=index,
            rank=rank,
            is_header=rank == 0,
            cluster="lab",
            node=f"n{rank}",
            gpus=0,
            phase="Running" if rank == 0 else "Joined",
            present=True,
        )
        for rank, (role, index) in enumerate([("actor", 0), ("rollout", 0), ("rollout", 1)])
    ]


def test_a_sigkilled_worker_fails_the_job_as_worker_lost_naming_the_worker() -> None:
    workers = crew()
    report = WorkerReport(workers[2].worker_id, "Failed", reason="killed by signal 9", exit_code=137)
    step = fold_report(JobStatus.RUNNING, workers, report).transition
    assert step is not None
    assert (step.to_status, step.failure) == (JobStatus.FAILED, RestartOn.WORKER_LOST)
    assert workers[2].worker_id in step.reason


def test_a_worker_whose_node_was_deleted_fails_the_job_as_node_gone_naming_the_worker_and_node() -> None:
    """The Kubernetes driver says so in the report (it saw the Node go): no inventory record needed."""
    workers = crew()
    reason = "NodeGone: node n2 was deleted from the cluster"
    step = fold_report(
        JobStatus.RUNNING, workers, WorkerReport(workers[2].worker_id, "Failed", reason)
    ).transition
    assert step is not None
    assert (step.to_status, step.failure) == (JobStatus.FAILED, RestartOn.NODE_GONE)
    assert workers[2].worker_id in step.reason
    assert "node n2 was deleted" in step.reason


def test_a_worker_ending_while_the_job_runs_is_worker_lost() -> None:
    workers = crew()
    report = WorkerReport(workers[1].worker_id, "Stopped", exit_code=143)
    step = fold_report(JobStatus.RUNNING, workers, report).transition
    assert step is not None
    assert step.failure is RestartOn.WORKER_LOST


def test_the_headers_run_script_failure_is_an_exit_code_failure() -> None:
    workers = crew()
    report = WorkerReport(
        workers[0].worker_id, "Failed", reason=text("worker.run_failed", code=3), exit_code=3
    )
    step = fold_report(JobStatus.RUNNING, workers, report).transition
    assert step is not None
    assert (step.failure, step.exit_code) == (RestartOn.EXIT_CODE, 3)


# ------------------------------------------------------------------------------------------ decide


def test_without_a_policy_no_failure_restarts_the_job() -> None:
    assert decide(None, 1, 0, Failure(RestartOn.WORKER_LOST, "lost"), NOW) is None


def test_a_named_failure_with_restarts_left_starts_the_next_attempt_after_the_backoff() -> None:
    restart = decide(
        policy(maxRestarts=2, on=["WorkerLost"], backoffSeconds=30),
        1,
        0,
        Failure(RestartOn.WORKER_LOST, "worker job-1-rollout-1: killed by signal 9"),
        NOW,
    )
    assert restart is not None
    assert (restart.attempt, restart.restarts) == (2, 1)
    assert restart.not_before == NOW + timedelta(seconds=30)
    assert restart.reason == "attempt 2 starts after WorkerLost: worker job-1-rollout-1: killed by signal 9"
    assert restart.reason.key == "job.restarting"  # type: ignore[attr-defined]


def test_a_failure_the_policy_does_not_name_ends_the_job() -> None:
    assert (
        decide(policy(maxRestarts=2, on=["OOMKilled"]), 1, 0, Failure(RestartOn.WORKER_LOST, "x"), NOW)
        is None
    )


def test_no_restart_is_left_once_max_restarts_were_used() -> None:
    rules = policy(maxRestarts=2, on=["WorkerLost"])
    assert decide(rules, 2, 1, Failure(RestartOn.WORKER_LOST, "x"), NOW) is not None
    assert decide(rules, 3, 2, Failure(RestartOn.WORKER_LOST, "x"), NOW) is None
    assert (
        decide(policy(maxRestarts=0, on=["WorkerLost"]), 1, 0, Failure(RestartOn.WORKER_LOST, "x"), NOW)
        is None
    )


def test_exit_codes_narrow_which_exit_code_failures_restart() -> None:
    listed = policy(maxRestarts=1, on=["ExitCode"], exitCodes=[75])
    assert (
        decide(listed, 1, 0, Failure(RestartOn.EXIT_CODE, "run script exited with 75", 75), NOW) is not None
    )
    assert decide(listed, 1, 0, Failure(RestartOn.EXIT_CODE, "run script exited with 1", 1), NOW) is None
    any_code = policy(maxRestarts=1, on=["ExitCode"])
    assert (
        decide(any_code, 1, 0, Failure(RestartOn.EXIT_CODE, "run script exited with 1", 1), NOW) is not None
    )


def test_on_left_out_restarts_on_every_infrastructure_failure_but_not_on_exit_codes() -> None:
    rules = policy(maxRestarts=1)
    assert set(rules.on) == set(DEFAULT_RESTART_ON) == set(RestartOn) - {RestartOn.EXIT_CODE}
    assert decide(rules, 1, 0, Failure(RestartOn.NODE_GONE, "gone"), NOW) is not None
    assert decide(rules, 1, 0, Failure(RestartOn.EXIT_CODE, "exited with 1", 1), NOW) is None


# ------------------------------------------------------------------------------------- the document


def document(restart_policy: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "restarts"},
        "spec": {
            "header": "actor",
            "runScript": "python train.py\n",
            "restartPolicy": restart_policy,
            "tasks": [
                {"name": "actor", "cluster": "lab", "image": "python:3.11-slim", "gpusPerWorker": 0},
            ],
        },
    }


CTX = ValidationContext.build(
    CapacityModel.from_nodes([NodeState("lab", "n0", {}, gpu_allocatable=0)]),
    {"lab": ()},
    ssh_key_names=[],
    network_domains=[],
)


def test_restart_policy_is_read_in_camel_case_and_written_back_in_the_preview() -> None:
    doc = parse_job_document(
        document({"maxRestarts": 2, "on": ["WorkerLost", "Stalled"], "exitCodes": [], "backoffSeconds": 5})
    )
    assert doc.spec.restart_policy == policy(maxRestarts=2, on=["WorkerLost", "Stalled"], backoffSeconds=5)
    rendered = render_yaml(doc)
    assert "restartPolicy:" in rendered
    assert parse_job_document(rendered) == doc


def test_a_job_without_restart_policy_renders_without_it() -> None:
    data = document(None)
    del data["spec"]["restartPolicy"]
    doc = parse_job_document(data)
    assert doc.spec.restart_policy is None
    assert "restartPolicy" not in render_yaml(doc)


def test_an_unknown_failure_kind_is_refused_naming_its_place_in_on() -> None:
    with pytest.raises(SpecParseError) as caught:
        parse_job_document(document({"maxRestarts": 1, "on": ["WorkerLost", "Crashed"]}))
    fields = {(e.code, e.field) for e in caught.value.errors}
    assert ("field_invalid", "spec.restartPolicy.on[1]") in fields
    message = next(e.message for e in caught.value.errors if e.field == "spec.restartPolicy.on[1]")
    assert "WorkerLost" in message  # the accepted values are listed


def test_an_unknown_restart_policy_field_is_refused() -> None:
    with pytest.raises(SpecParseError) as caught:
        parse_job_document(document({"maxRetries": 1}))
    assert ("field_unknown", "spec.restartPolicy.maxRetries") in {
        (e.code, e.field) for e in caught.value.errors
    }


@pytest.mark.parametrize(
    ("fields", "code", "field"),
    [
        ({"maxRestarts": -1}, "restart_max_out_of_range", "spec.restartPolicy.maxRestarts"),
        ({"maxRestarts": 101}, "restart_max_out_of_range", "spec.restartPolicy.maxRestarts"),
        ({"backoffSeconds": -5}, "restart_backoff_out_of_range", "spec.restartPolicy.backoffSeconds"),
        ({"backoffSeconds": 86_401}, "restart_backoff_out_of_range", "spec.restartPolicy.backoffSeconds"),
        (
            {"on": ["ExitCode"], "exitCodes": [3, 0]},
            "restart_exit_code_invalid",
            "spec.restartPolicy.exitCodes[1]",
        ),
        (
            {"on": ["ExitCode"], "exitCodes": [256]},
            "restart_exit_code_invalid",
            "spec.restartPolicy.exitCodes[0]",
        ),
    ],
)
def test_restart_policy_values_out_of_range_are_refused_naming_the_field(
    fields: dict[str, Any], code: str, field: str
) -> None:
    report = validate_job(parse_job_document(document({"maxRestarts": 1, **fields})), CTX)
    assert (code, field) in {(e.code, e.field) for e in report.errors}


def test_exit_codes_without_exit_code_in_on_is_a_warning() -> None:
    report = validate_job(parse_job_document(document({"maxRestarts": 1, "exitCodes": [3]})), CTX)
    assert report.errors == ()
    assert {(w.code, w.field) for w in report.warnings} == {
        ("restart_exit_codes_unused", "spec.restartPolicy.exitCodes")
    }


def test_a_valid_restart_policy_has_no_errors() -> None:
    report = validate_job(
        parse_job_document(
            document({"maxRestarts": 3, "on": ["ExitCode"], "exitCodes": [75], "backoffSeconds": 10})
        ),
        CTX,
    )
    assert report.errors == ()


# ---------------------------------------------------------------------------------------- attempts


def test_attempts_are_listed_from_the_restarts_and_the_current_state() -> None:
    t1, t2, end = NOW + timedelta(minutes=5), NOW + timedelta(minutes=9), NOW + timedelta(minutes=20)
    history = attempt_history(
        NOW,
        [(t2, 2, "worker b: killed by signal 9"), (t1, 1, "worker a: killed by signal 9")],
        3,
        end,
        "run script exited with 0",
    )
    assert [(a.number, a.started_at, a.ended_at, a.reason) for a in history] == [
        (1, NOW, t1, "worker a: killed by signal 9"),
        (2, t1, t2, "worker b: killed by signal 9"),
        (3, t2, end, "run script exited with 0"),
    ]


def test_a_running_jobs_current_attempt_has_not_ended() -> None:
    [only] = attempt_history(NOW, [], 1, None, "all 3 Ray nodes joined; the run script started")
    assert (only.number, only.ended_at, only.reason) == (1, None, "")


def test_a_worker_lost_on_a_gone_or_unready_node_went_with_its_node() -> None:
    assert on_node(RestartOn.WORKER_LOST, node_gone=True) is RestartOn.NODE_GONE
    assert on_node(RestartOn.WORKER_LOST, node_gone=False) is RestartOn.WORKER_LOST
    assert on_node(RestartOn.OOM_KILLED, node_gone=True) is RestartOn.OOM_KILLED
