"""A broken tunnel of a job's network domain, reported as the agents report it: the job's reason names
the link while it is down, clears when it is back within the grace, and the job fails when it is not — or
starts its next attempt when its restart policy names TunnelDown (ADR 0014)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from rlark_contracts.events.agent import TunnelStateChanged
from rlark_devinfra.testing import RunningService, TopicReader
from scheduler_it_support import (
    World,
    eventually,
    get_job,
    has_event,
    job_doc,
    job_status,
    nodes_synced,
    placed_count,
    role,
    submitted,
    synced,
)

pytestmark = pytest.mark.integration

GRACE_S = 4.0
RUNNING_REASON = "all 2 Ray nodes joined; the run script started"


@pytest.fixture
def scheduler_settings() -> dict[str, Any]:
    return {"placement_poll_s": 0.5, "stream_poll_s": 0.5, "tunnel_grace_s": GRACE_S}


async def link(world: World, cluster: str, peer: str, state: str, error: str = "") -> None:
    await world.report(
        TunnelStateChanged(
            cluster=cluster,
            domain="dom-a",
            peer=peer,
            state=state,
            rtt_ms=0.4 if state == "up" else None,
            bytes_sent=1000,
            bytes_received=2000,
            last_error=error,
            at=datetime.now(UTC),
        ),
        cluster,
    )


async def test_a_down_link_names_itself_clears_when_back_and_fails_the_job_after_the_grace(
    scheduler: RunningService,
    world: World,
    placements: TopicReader,
    job_topic: TopicReader,
    database_url: str,
) -> None:
    await world.cluster("alpha")
    await world.cluster("beta")
    await world.node("alpha", "a1")
    await world.node("beta", "b1")
    await world.domain("dom-a", "10.100.0.0/16")
    await nodes_synced(database_url, "alpha", 1)
    await nodes_synced(database_url, "beta", 1)
    await synced(database_url, "SELECT count(*) FROM network_domains", expect=1)
    job = await submitted(scheduler, job_doc(role("actor", "alpha"), role("rollout", "beta")))
    await job_topic.until(has_event("scheduler.job.addresses_requested.v1", job["id"]))
    request = job_topic.envelopes("scheduler.job.addresses_requested.v1", job["id"])[0]
    await world.allocate(request, "10.100.0.0/16")
    await placements.until(placed_count(job["id"], 2))
    placed = placements.of("scheduler.worker.placed.v1", job["id"])
    await world.bring_up(placed)
    await job_status(scheduler, job["id"], "Running")

    # A link of the domain with a cluster the job does not use changes nothing.
    await link(world, "alpha", "gamma", "down", "no route to host")
    await link(world, "alpha", "beta", "up")
    await link(world, "beta", "alpha", "down", "Connection reset by peer")
    marked = await eventually(
        lambda: get_job(scheduler, job["id"]), lambda j: j["reason"].startswith("tunnel ")
    )
    assert marked["status"] == "Running"
    assert marked["reason"].startswith("tunnel alpha ↔ beta of domain dom-a is down since ")
    assert marked["reason"].endswith(" UTC: Connection reset by peer")

    await link(world, "beta", "alpha", "up")
    cleared = await eventually(
        lambda: get_job(scheduler, job["id"]), lambda j: not j["reason"].startswith("tunnel ")
    )
    assert (cleared["status"], cleared["reason"]) == ("Running", RUNNING_REASON)
    assert placements.of("scheduler.worker.stop_requested.v1", job["id"]) == []  # nothing restarted

    await link(world, "alpha", "beta", "down", "ssh: connection lost")
    failed = await job_status(scheduler, job["id"], "Failed", timeout_s=GRACE_S + 15)
    assert failed["reason"].startswith("tunnel alpha ↔ beta of domain dom-a is down since ")
    assert failed["reason"].endswith(" UTC: ssh: connection lost")
    await job_topic.until(has_event("scheduler.job.addresses_released.v1", job["id"], domain="dom-a"))
    stops = await placements.until(
        lambda events: (
            sum(e.type == "scheduler.worker.stop_requested.v1" and e.subject == job["id"] for e in events)
            == 2
        )
    )
    assert stops

    # The job's workers are gone: alpha's agent closes its links and the scheduler forgets them.
    await synced(database_url, "SELECT count(*) FROM tunnel_links WHERE cluster = 'alpha'", expect=2)
    await link(world, "alpha", "beta", "closed")
    await link(world, "alpha", "gamma", "closed")
    await synced(database_url, "SELECT count(*) FROM tunnel_links WHERE cluster = 'alpha'", expect=0)
    await synced(database_url, "SELECT count(*) FROM tunnel_links WHERE cluster = 'beta'", expect=1)


async def test_a_link_down_past_the_grace_restarts_a_job_whose_policy_names_tunnel_down(
    scheduler: RunningService,
    world: World,
    placements: TopicReader,
    job_topic: TopicReader,
    database_url: str,
) -> None:
    await world.cluster("alpha")
    await world.cluster("beta")
    await world.node("alpha", "a1")
    await world.node("beta", "b1")
    await world.domain("dom-a", "10.100.0.0/16")
    await nodes_synced(database_url, "alpha", 1)
    await nodes_synced(database_url, "beta", 1)
    await synced(database_url, "SELECT count(*) FROM network_domains", expect=1)
    doc = job_doc(
        role("actor", "alpha"),
        role("rollout", "beta"),
        restartPolicy={"maxRestarts": 1, "on": ["TunnelDown"]},
    )
    job = await submitted(scheduler, doc)
    await job_topic.until(has_event("scheduler.job.addresses_requested.v1", job["id"]))
    request = job_topic.envelopes("scheduler.job.addresses_requested.v1", job["id"])[0]
    await world.allocate(request, "10.100.0.0/16")
    await placements.until(placed_count(job["id"], 2))
    placed = placements.of("scheduler.worker.placed.v1", job["id"])
    await world.bring_up(placed)
    await job_status(scheduler, job["id"], "Running")

    await link(world, "alpha", "beta", "down", "ssh: connection lost")
    restarting = await eventually(
        lambda: get_job(scheduler, job["id"]),
        lambda j: j["status"] == "Pending" and j["attempt"] == 2,
        timeout_s=GRACE_S + 15,
    )
    assert restarting["reason"].startswith(
        "attempt 2 starts after TunnelDown: tunnel alpha ↔ beta of domain dom-a"
    )
    assert restarting["timeline"][-1]["details"]["failure"] == "TunnelDown"

    # The link comes back, the old workers are gone: attempt 2 asks for addresses and is placed.
    await link(world, "alpha", "beta", "up")
    for p in placed:
        await world.worker(p, "Stopped", exit_code=143)
    await job_topic.until(
        lambda _: len(job_topic.envelopes("scheduler.job.addresses_requested.v1", job["id"])) == 2
    )
    again = job_topic.envelopes("scheduler.job.addresses_requested.v1", job["id"])[1]
    assert sorted(w["worker_id"] for w in again.data["workers"]) == [
        f"{job['id']}-actor-0-a2",
        f"{job['id']}-rollout-0-a2",
    ]
    await world.allocate(again, "10.100.0.0/16")
    await placements.until(placed_count(job["id"], 4))
    second = [
        p for p in placements.of("scheduler.worker.placed.v1", job["id"]) if p["worker_id"].endswith("-a2")
    ]
    await world.bring_up(second)
    running = await job_status(scheduler, job["id"], "Running")
    assert (running["attempt"], running["restarts"]) == (2, 1)
