"""Folding agents' worker reports into a job's status (domain.jobs), and the small job facts."""

from __future__ import annotations

import pytest
from rlark_contracts.messages import Text, render
from rlark_scheduler.domain.document.parsing import parse_job_document
from rlark_scheduler.domain.jobs import (
    JobStatus,
    WorkerFacts,
    WorkerReport,
    apply_report,
    domain_capacity,
    fold_report,
    job_request,
    ray_progress,
    stopped_by_platform,
    worker_id,
)

pytestmark = pytest.mark.unit


def workers(count: int = 3) -> list[WorkerFacts]:
    return [
        WorkerFacts(
            worker_id=worker_id("job-1", "actor" if i == 0 else "rollout", 0 if i == 0 else i - 1),
            role="actor" if i == 0 else "rollout",
            index=0 if i == 0 else i - 1,
            rank=i,
            is_header=i == 0,
            cluster="gpu-a",
            node=f"n{i}",
            gpus=8,
        )
        for i in range(count)
    ]


def test_header_success_ends_the_job_succeeded() -> None:
    crew = workers()
    fold = fold_report(JobStatus.RUNNING, crew, WorkerReport(crew[0].worker_id, "Succeeded", exit_code=0))
    assert fold.transition is not None
    assert (fold.transition.to_status, fold.transition.reason, fold.transition.exit_code) == (
        JobStatus.SUCCEEDED,
        "run script exited with 0",
        0,
    )
    assert not fold.worker.present


def test_a_reason_lasts_while_its_phase_does_and_goes_when_the_phase_moves() -> None:
    worker = workers()[1]
    waiting = apply_report(worker, WorkerReport(worker.worker_id, "Created", reason="ContainerCreating"))
    assert apply_report(waiting, WorkerReport(worker.worker_id, "Created")).reason == "ContainerCreating"
    joined = apply_report(waiting, WorkerReport(worker.worker_id, "Joined"))
    assert (joined.phase, joined.reason) == ("Joined", "")
    said = apply_report(waiting, WorkerReport(worker.worker_id, "Joined", reason="node lost"))
    assert said.reason == "node lost"


def test_header_run_failure_keeps_the_agents_reason_and_code() -> None:
    crew = workers()
    report = WorkerReport(crew[0].worker_id, "Failed", exit_code=3, reason="run script exited with 3")
    fold = fold_report(JobStatus.RUNNING, crew, report)
    assert fold.transition is not None
    assert (fold.transition.to_status, fold.transition.reason, fold.transition.exit_code) == (
        JobStatus.FAILED,
        "run script exited with 3",
        3,
    )


def test_header_failure_without_a_reason_gets_one_from_the_exit_code() -> None:
    crew = workers()
    fold = fold_report(JobStatus.RUNNING, crew, WorkerReport(crew[0].worker_id, "Failed", exit_code=7))
    assert fold.transition is not None
    assert fold.transition.reason == "run script exited with 7"


def test_join_timeout_without_a_reason_says_how_many_nodes_joined() -> None:
    crew = workers()
    report = WorkerReport(
        crew[0].worker_id, "Failed", exit_code=124, ray_nodes_joined=2, ray_nodes_expected=3
    )
    fold = fold_report(JobStatus.STARTING, crew, report)
    assert fold.transition is not None
    assert fold.transition.reason == "2/3 Ray nodes joined"
    assert ray_progress(report, crew[0]) == (2, 3)


def test_a_failing_worker_names_itself_in_the_reason() -> None:
    crew = workers()
    report = WorkerReport(crew[2].worker_id, "Failed", exit_code=2, reason="prepare script exited with 2")
    fold = fold_report(JobStatus.STARTING, crew, report)
    assert fold.transition is not None
    assert fold.transition.reason == f"worker {crew[2].worker_id}: prepare script exited with 2"
    assert fold.transition.details["role"] == "rollout"
    assert fold.transition.exit_code == 2


def test_a_non_header_ending_while_running_fails_the_job() -> None:
    crew = workers()
    fold = fold_report(JobStatus.RUNNING, crew, WorkerReport(crew[1].worker_id, "Succeeded", exit_code=0))
    assert fold.transition is not None
    assert fold.transition.to_status is JobStatus.FAILED
    assert "ended while the job was running" in fold.transition.reason


def test_running_once_the_header_runs_or_every_worker_joined() -> None:
    crew = workers()
    fold = fold_report(JobStatus.STARTING, crew, WorkerReport(crew[0].worker_id, "Running"))
    assert fold.transition is not None
    assert fold.transition.to_status is JobStatus.RUNNING

    joined = [fold_report(JobStatus.STARTING, crew, WorkerReport(w.worker_id, "Joined")).worker for w in crew]
    partial = fold_report(
        JobStatus.STARTING, [*joined[:2], crew[2]], WorkerReport(crew[1].worker_id, "Joined")
    )
    assert partial.transition is None
    last = fold_report(JobStatus.STARTING, [*joined[:2], crew[2]], WorkerReport(crew[2].worker_id, "Joined"))
    assert last.transition is not None
    assert last.transition.to_status is JobStatus.RUNNING
    assert last.transition.details == {"ray_nodes_joined": 3, "ray_nodes_expected": 3}


def test_progress_without_a_status_change_changes_no_status() -> None:
    crew = workers()
    fold = fold_report(JobStatus.STARTING, crew, WorkerReport(crew[1].worker_id, "Preparing"))
    assert fold.changed
    assert fold.transition is None
    assert fold.worker.present


def test_a_terminal_phase_is_never_overwritten_by_a_late_report() -> None:
    crew = workers()
    failed = fold_report(
        JobStatus.RUNNING, crew, WorkerReport(crew[1].worker_id, "Failed", exit_code=1)
    ).worker
    late = fold_report(
        JobStatus.FAILED, [crew[0], failed, crew[2]], WorkerReport(crew[1].worker_id, "Running")
    )
    assert late.worker == failed
    assert not late.changed


def test_reports_after_the_end_update_the_worker_only() -> None:
    crew = workers()
    fold = fold_report(JobStatus.CANCELLED, crew, WorkerReport(crew[1].worker_id, "Stopped", exit_code=143))
    assert fold.changed
    assert fold.transition is None
    assert fold.worker.phase == "Stopped"


def test_a_repeated_report_changes_nothing() -> None:
    crew = workers()
    first = fold_report(JobStatus.STARTING, crew, WorkerReport(crew[1].worker_id, "Created"))
    again = fold_report(
        JobStatus.STARTING, [crew[0], first.worker, crew[2]], WorkerReport(crew[1].worker_id, "Created")
    )
    assert first.changed
    assert not again.changed
    assert again.transition is None


@pytest.mark.parametrize(
    ("cidr", "usable"),
    [("10.0.0.0/24", 254), ("10.0.0.0/16", 256 * 254), ("10.0.0.0/28", 14), ("10.0.0.0/23", 508)],
)
def test_domain_capacity_skips_addresses_ending_in_0_and_255(cidr: str, usable: int) -> None:
    assert domain_capacity(cidr) == usable


def test_job_request_follows_the_spec() -> None:
    doc = parse_job_document(
        "metadata: {name: x}\n"
        "spec:\n  header: actor\n  priority: 7\n  runScript: run\n  tasks:\n"
        "    - {name: rollout, cluster: b, replicas: 2, gpusPerWorker: 4, image: 'a/b:1',"
        " nodeSelector: {zone: z1}}\n"
        "    - {name: actor, cluster: a, image: 'a/b:1'}\n"
    )
    request = job_request("job-1", doc.spec, 42)
    assert (request.priority, request.submitted_seq, request.header_role) == (7, 42, "actor")
    assert [(r.name, r.cluster, dict(r.selector), r.replicas, r.gpus_per_worker) for r in request.roles] == [
        ("rollout", "b", {"zone": "z1"}, 2, 4),
        ("actor", "a", {}, 1, 0),
    ]
    assert worker_id("job-1", "rollout", 1) == "job-1-rollout-1"


@pytest.mark.parametrize(
    ("status", "said"),
    [
        (JobStatus.SUCCEEDED, "stopped by the platform: the Header's run script ended"),
        (JobStatus.FAILED, "stopped by the platform: the job failed"),
        (JobStatus.CANCELLED, "stopped by the platform: the job was cancelled"),
        (JobStatus.LOST, "stopped by the platform: the job was lost when a cluster went offline"),
    ],
)
def test_a_worker_stopped_after_its_job_ended_says_the_platform_stopped_it_and_why(
    status: JobStatus, said: str
) -> None:
    crew = workers()
    sigterm = WorkerReport(crew[1].worker_id, "Stopped", reason="stopped on request", exit_code=143)
    fold = fold_report(status, crew, stopped_by_platform(sigterm, status))
    assert (fold.worker.phase, fold.worker.exit_code, fold.worker.reason) == ("Stopped", 143, said)
    assert isinstance(fold.worker.reason, Text)  # keyed: the console and the CLI say it in zh-CN too
    assert render(fold.worker.reason.key, fold.worker.reason.params, "zh-CN").startswith("已由平台停止")


def test_a_worker_of_an_ended_attempt_says_which_attempt_ended() -> None:
    report = WorkerReport("job-1-rollout-0", "Stopped", reason="stopped on request", exit_code=143)
    stopped = stopped_by_platform(report, JobStatus.PENDING, ended_attempt=1)
    assert stopped.reason == "stopped by the platform: attempt 1 of the job ended"


def test_only_a_stop_the_platform_made_is_said_to_be_the_platforms() -> None:
    crew = workers()
    while_running = WorkerReport(crew[1].worker_id, "Stopped", reason="stopped on request", exit_code=143)
    assert stopped_by_platform(while_running, JobStatus.RUNNING) == while_running
    failed = WorkerReport(crew[1].worker_id, "Failed", reason="run script exited with 3", exit_code=3)
    assert stopped_by_platform(failed, JobStatus.SUCCEEDED) == failed
