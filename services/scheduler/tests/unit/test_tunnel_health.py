"""A broken tunnel of a job's domain: named in the job's reason, failing the job after the grace."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from rlark_scheduler.domain.jobs import JobStatus
from rlark_scheduler.domain.tunnels import Action, LinkObservation, decide, job_outage

T0 = datetime(2026, 11, 29, 12, 0, 5, tzinfo=UTC)


def link(cluster: str, peer: str, up: bool, since: datetime = T0, error: str = "") -> LinkObservation:
    return LinkObservation("dom-a", cluster, peer, up, since, error)


def test_a_down_link_between_two_of_the_jobs_clusters_is_named_precisely() -> None:
    outage = job_outage(
        "dom-a",
        ["alpha", "beta"],
        [link("beta", "alpha", False, error="Connection reset by peer"), link("alpha", "beta", True)],
    )
    assert outage is not None
    assert outage.reason == (
        "tunnel alpha ↔ beta of domain dom-a is down since 12:00:05 UTC: Connection reset by peer"
    )


def test_links_of_other_domains_or_clusters_do_not_concern_the_job() -> None:
    other_domain = LinkObservation("dom-b", "alpha", "beta", False, T0, "x")
    other_cluster = link("alpha", "gamma", False, error="x")
    assert job_outage("dom-a", ["alpha", "beta"], [other_domain, other_cluster]) is None
    assert job_outage("dom-a", ["alpha"], [link("alpha", "beta", False)]) is None
    assert job_outage("dom-a", ["alpha", "beta"], [link("alpha", "beta", True)]) is None


def test_the_link_down_longest_is_named_with_the_first_error_reported() -> None:
    later = T0 + timedelta(seconds=10)
    outage = job_outage(
        "dom-a",
        ["alpha", "beta", "gamma"],
        [
            link("beta", "gamma", False, since=T0 - timedelta(seconds=1), error="no route"),
            link("alpha", "beta", False, since=later, error="refused"),
            link("gamma", "beta", False, since=later, error=""),
        ],
    )
    assert outage is not None
    assert (outage.a, outage.b, outage.last_error) == ("beta", "gamma", "no route")
    assert outage.since == T0 - timedelta(seconds=1)


def test_within_the_grace_the_reason_is_set_once_and_the_status_kept() -> None:
    outage = job_outage("dom-a", ["alpha", "beta"], [link("alpha", "beta", False, error="eof")])
    first = decide(JobStatus.RUNNING, None, outage, T0 + timedelta(seconds=59), 60)
    assert first.action is Action.MARK
    assert first.reason.startswith("tunnel alpha ↔ beta of domain dom-a is down since 12:00:05")
    again = decide(JobStatus.RUNNING, first.reason, outage, T0 + timedelta(seconds=30), 60)
    assert again.action is Action.NONE


def test_still_down_after_the_grace_the_job_fails_with_that_reason() -> None:
    outage = job_outage("dom-a", ["alpha", "beta"], [link("alpha", "beta", False, error="eof")])
    assert outage is not None
    verdict = decide(JobStatus.STARTING, outage.reason, outage, T0 + timedelta(seconds=60), 60)
    assert verdict.action is Action.FAIL
    assert verdict.reason == outage.reason


def test_back_up_within_the_grace_clears_the_reason() -> None:
    assert decide(JobStatus.RUNNING, "tunnel ...", None, T0, 60).action is Action.CLEAR
    assert decide(JobStatus.RUNNING, None, None, T0, 60).action is Action.NONE


def test_only_starting_and_running_jobs_are_judged() -> None:
    outage = job_outage("dom-a", ["alpha", "beta"], [link("alpha", "beta", False)])
    late = T0 + timedelta(hours=1)
    for status in (JobStatus.SCHEDULED, JobStatus.PENDING, JobStatus.FAILED, JobStatus.SUCCEEDED):
        assert decide(status, None, outage, late, 60).action is Action.NONE
    assert outage is not None
    assert "no error reported" in outage.reason


def test_a_report_made_before_the_job_was_placed_says_nothing_about_its_tunnels() -> None:
    placed = T0 + timedelta(minutes=5)
    # the previous job's teardown left "down" behind: not this job's outage
    stale = LinkObservation("dom-a", "beta", "alpha", False, T0, "closed", reported_at=T0)
    assert job_outage("dom-a", ["alpha", "beta"], [stale], not_before=placed) is None
    # reported again since the placement and still down: an outage, counted from the placement
    fresh = LinkObservation(
        "dom-a", "beta", "alpha", False, T0, "refused", reported_at=placed + timedelta(seconds=3)
    )
    outage = job_outage("dom-a", ["alpha", "beta"], [fresh], not_before=placed)
    assert outage is not None
    assert (outage.since, outage.last_error) == (placed, "refused")
