"""The job saga through the real service: agents' worker reports fold into the job's status, every
ending stops every worker and gives the capacity back, cancel and lost clusters too; logs and
outputs outlive the workers; SSH keys rotate without a restart; forged reports change nothing."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest
from rlark_contracts import TopicNames
from rlark_devinfra.testing import RunningService, TopicReader
from rlark_platform.messaging import KafkaAccess
from scheduler_it_support import (
    PUBLIC_KEY,
    World,
    eventually,
    get_job,
    has_event,
    job_doc,
    job_status,
    nodes_synced,
    placed_count,
    role,
    sse_events,
    start_job,
    stops_for,
    submitted,
    synced,
)

pytestmark = pytest.mark.integration

OTHER_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHn0yQ1vZ6h8Wb2pR3xK9mT4sLq7uD5cF1gE0aJ2kN8o alice@desktop"


async def test_header_exit_0_succeeds_and_every_worker_is_stopped(
    scheduler: RunningService,
    world: World,
    placements: TopicReader,
    job_topic: TopicReader,
    database_url: str,
) -> None:
    job, placed = await start_job(scheduler, world, placements, database_url)
    header = placed[0]
    for p in placed:
        await world.worker(p, "Created")
    await world.worker(header, "RayHeadUp", ray_nodes_joined=1, ray_nodes_expected=3)
    progress = await eventually(
        lambda: get_job(scheduler, job["id"]), lambda j: j["ray_nodes"] == {"joined": 1, "expected": 3}
    )
    assert progress["status"] == "Starting"
    await world.bring_up(placed)
    running = await job_status(scheduler, job["id"], "Running")
    assert running["ray_nodes"] == {"joined": 3, "expected": 3}
    assert all(w["ray_joined"] for w in running["workers"])
    assert running["ssh_command"] == "ssh rlark@10.9.0.1"  # the Kubernetes workers' user (issue 32)
    assert running["ray_dashboard_url"] == f"/api/v1/jobs/{job['id']}/tools/ray-dashboard/"
    assert stops_for(placements, job["id"]) == set()

    await world.worker(header, "Succeeded", exit_code=0)
    done = await job_status(scheduler, job["id"], "Succeeded")
    assert done["exit_code"] == 0
    assert done["reason"] == "run script exited with 0"
    assert done["ray_dashboard_url"] is None  # the dashboard ended with the job
    await placements.until(lambda _: len(stops_for(placements, job["id"])) == 3)
    assert stops_for(placements, job["id"]) == {p["worker_id"] for p in placed}
    assert [(e["from_status"], e["to_status"]) for e in done["timeline"]] == [
        ("", "Pending"),
        ("Pending", "Scheduled"),
        ("Scheduled", "Starting"),
        ("Starting", "Running"),
        ("Running", "Succeeded"),
    ]
    await job_topic.until(has_event("scheduler.job.status_changed.v1", job["id"], to_status="Succeeded"))
    changes = job_topic.of("scheduler.job.status_changed.v1", job["id"])
    assert [(c["from_status"], c["to_status"]) for c in changes] == [
        (e["from_status"], e["to_status"]) for e in done["timeline"]
    ]
    assert all(c["reason"] and c["at"] for c in changes)
    assert job_topic.of("scheduler.job.submitted.v1", job["id"])[0]["owner"] == "alice"

    # The capacity is free again: the same job fits at once.
    again = await submitted(scheduler, job_doc(*done["spec"]["spec"]["tasks"], header="actor"))
    await placements.until(placed_count(again["id"], 3))


async def test_workers_stopped_after_the_header_succeeded_say_the_platform_stopped_them(
    scheduler: RunningService, world: World, placements: TopicReader, database_url: str
) -> None:
    job, placed = await start_job(scheduler, world, placements, database_url, rollouts=1)
    await world.bring_up(placed)
    await job_status(scheduler, job["id"], "Running")
    await world.worker(placed[0], "Succeeded", exit_code=0)
    await job_status(scheduler, job["id"], "Succeeded")
    await placements.until(lambda _: stops_for(placements, job["id"]) == {p["worker_id"] for p in placed})
    # What the agent says of a worker it was asked to stop: SIGTERM's exit code, "stopped on request".
    await world.worker(placed[1], "Stopped", exit_code=143, reason="stopped on request")
    done = await eventually(
        lambda: get_job(scheduler, job["id"]),
        lambda j: next(w for w in j["workers"] if w["id"] == placed[1]["worker_id"])["phase"] == "Stopped",
    )
    rollout = next(w for w in done["workers"] if w["id"] == placed[1]["worker_id"])
    assert (rollout["exit_code"], rollout["reason"]) == (
        143,
        "stopped by the platform: the Header's run script ended",
    )
    assert rollout["reason_said"] == {"message_key": "worker.stopped.run_ended", "params": {}}
    assert done["status"] == "Succeeded"


async def test_header_exit_3_fails_with_the_run_script_exit_code(
    scheduler: RunningService, world: World, placements: TopicReader, database_url: str
) -> None:
    job, placed = await start_job(scheduler, world, placements, database_url, rollouts=1)
    await world.bring_up(placed)
    await job_status(scheduler, job["id"], "Running")
    await world.worker(placed[0], "Failed", exit_code=3, reason="run script exited with 3")
    failed = await job_status(scheduler, job["id"], "Failed")
    assert failed["reason"] == "run script exited with 3"
    assert failed["exit_code"] == 3
    assert failed["details"]["worker_id"] == placed[0]["worker_id"]
    await placements.until(lambda _: stops_for(placements, job["id"]) == {p["worker_id"] for p in placed})


async def test_prepare_failure_fails_the_job_with_that_workers_code_reason_and_last_lines(
    scheduler: RunningService, world: World, placements: TopicReader, database_url: str
) -> None:
    job, placed = await start_job(scheduler, world, placements, database_url)
    rollout = placed[2]
    await world.worker(placed[0], "Preparing")
    await world.logs(rollout, 1, ["pip install flash-attn", "ERROR: could not build wheels", "exit 2"])
    await world.worker(
        rollout,
        "Failed",
        exit_code=2,
        reason="prepare script exited with 2",
        reason_key="worker.prepare_failed",
        reason_params={"code": 2},
    )
    failed = await job_status(scheduler, job["id"], "Failed")
    assert failed["exit_code"] == 2
    assert failed["reason"] == f"worker {rollout['worker_id']}: prepare script exited with 2"
    # The agent keyed its reason, so the job's and the worker's can be said in Chinese (ADR 0011).
    assert failed["reason_said"] == {
        "message_key": "worker.prepare_failed.worker",
        "params": {"code": 2, "worker": rollout["worker_id"]},
    }
    assert failed["details"]["last_lines"] == [
        "pip install flash-attn",
        "ERROR: could not build wheels",
        "exit 2",
    ]
    assert failed["details"]["role"] == "rollout"
    worker = next(w for w in failed["workers"] if w["id"] == rollout["worker_id"])
    assert (worker["phase"], worker["exit_code"]) == ("Failed", 2)
    assert worker["reason_said"] == {"message_key": "worker.prepare_failed", "params": {"code": 2}}
    await placements.until(lambda _: stops_for(placements, job["id"]) == {p["worker_id"] for p in placed})


async def test_join_timeout_fails_the_job_with_the_joined_count(
    scheduler: RunningService, world: World, placements: TopicReader, database_url: str
) -> None:
    job, placed = await start_job(scheduler, world, placements, database_url)
    for p in placed:
        await world.worker(p, "Created")
    await world.worker(placed[1], "Joined")
    await world.worker(
        placed[0],
        "Failed",
        exit_code=124,
        ray_nodes_joined=2,
        ray_nodes_expected=3,
        reason="2/3 Ray nodes joined after 120s",
    )
    failed = await job_status(scheduler, job["id"], "Failed")
    assert failed["reason"] == "2/3 Ray nodes joined after 120s"
    assert failed["exit_code"] == 124
    assert failed["ray_nodes"] == {"joined": 2, "expected": 3}


async def test_cancel_stops_every_worker_releases_capacity_and_a_queued_job_is_placed(
    scheduler: RunningService,
    world: World,
    placements: TopicReader,
    job_topic: TopicReader,
    database_url: str,
) -> None:
    job, placed = await start_job(scheduler, world, placements, database_url, rollouts=1, nodes=2)
    await world.bring_up(placed)
    await job_status(scheduler, job["id"], "Running")
    queued = await submitted(
        scheduler, job_doc(role("solo", "gpu-a", gpusPerWorker=8), role("peer", "gpu-a", gpusPerWorker=8))
    )
    waiting = await eventually(lambda: get_job(scheduler, queued["id"]), lambda j: j["pending"] is not None)
    assert "0 with enough free GPUs" in waiting["reason"]

    async with scheduler.client("mallory") as stranger:
        foreign = await stranger.post(f"/api/v1/jobs/{queued['id']}:cancel")
    async with scheduler.client() as client:
        response = await client.post(f"/api/v1/jobs/{job['id']}:cancel")
        again = await client.post(f"/api/v1/jobs/{job['id']}:cancel")
    assert response.status_code == 200, response.text
    assert response.json()["status"] == "Cancelled"
    assert response.json()["reason"] == "cancelled by alice"
    assert again.status_code == 200
    assert again.json()["status"] == "Cancelled"
    assert foreign.status_code == 404
    await placements.until(lambda _: stops_for(placements, job["id"]) == {p["worker_id"] for p in placed})
    assert {s["reason"] for s in placements.of("scheduler.worker.stop_requested.v1", job["id"])} == {
        "cancelled by alice"
    }
    await placements.until(placed_count(queued["id"], 2))
    assert job_topic.of("scheduler.job.addresses_released.v1", job["id"]) == []  # no network domain


async def test_cancelling_a_pending_job_takes_it_out_of_the_queue(
    scheduler: RunningService, world: World, placements: TopicReader, database_url: str
) -> None:
    await world.cluster("gpu-a")
    await world.node("gpu-a", "n0", gpu_allocated=8)
    await nodes_synced(database_url, "gpu-a", 1)
    job = await submitted(scheduler, job_doc(role("w", "gpu-a", gpusPerWorker=8)))
    await eventually(lambda: get_job(scheduler, job["id"]), lambda j: j["pending"] is not None)
    async with scheduler.client() as client:
        cancelled = await client.post(f"/api/v1/jobs/{job['id']}:cancel")
    assert cancelled.json()["status"] == "Cancelled"
    await world.node("gpu-a", "n0", gpu_allocated=0)  # capacity comes back: the cancelled job stays out
    await placements.settle(1.5)
    assert placements.of("scheduler.worker.placed.v1", job["id"]) == []
    async with scheduler.client() as client:
        ended = await client.post(f"/api/v1/jobs/{job['id']}:cancel")
    assert ended.status_code == 200


async def test_a_cluster_offline_past_its_grace_loses_its_running_jobs(
    scheduler: RunningService, world: World, placements: TopicReader, database_url: str
) -> None:
    job, placed = await start_job(scheduler, world, placements, database_url, rollouts=1)
    await world.bring_up(placed)
    await job_status(scheduler, job["id"], "Running")
    await world.cluster("gpu-a", online=False)
    lost = await job_status(scheduler, job["id"], "Lost")
    assert lost["reason"] == "cluster gpu-a went offline while the job's workers were running"
    # First the grace (2 s here), said on the timeline with the status kept; then Lost.
    kinds = [(e["kind"], e["to_status"]) for e in lost["timeline"]]
    assert kinds.index(("cluster", "Running")) < kinds.index(("status", "Lost")), kinds
    await placements.until(lambda _: stops_for(placements, job["id"]) == {p["worker_id"] for p in placed})
    # Jobs submitted meanwhile wait for the cluster with that reason.
    waiting = await submitted(scheduler, job_doc(role("w", "gpu-a")))
    pending = await eventually(lambda: get_job(scheduler, waiting["id"]), lambda j: j["pending"] is not None)
    assert "the cluster is offline" in pending["reason"]
    await world.cluster("gpu-a", online=True)
    await placements.until(placed_count(waiting["id"], 1))


async def test_logs_are_kept_after_the_job_ended_and_can_be_followed(
    scheduler: RunningService, world: World, placements: TopicReader, database_url: str
) -> None:
    job, placed = await start_job(scheduler, world, placements, database_url, rollouts=1)
    header, rollout = placed
    await world.bring_up(placed)
    await world.logs(header, 1, ["step 1", "step 2"])
    await world.logs(rollout, 1, ["rollout ready"])
    await world.logs(header, 1, ["step 1", "step 2"])  # redelivered batch: stored once
    url = f"/api/v1/jobs/{job['id']}/logs"

    async def lines(query: str = "") -> list[dict[str, Any]]:
        async with scheduler.client() as client:
            response = await client.get(url + query)
        assert response.status_code == 200, response.text
        return [httpx.Response(200, content=line).json() for line in response.text.splitlines()]

    got = await eventually(lines, lambda items: len(items) == 3)
    assert [(i["worker_id"], i["seq"], i["line"]) for i in got if i["worker_id"] == header["worker_id"]] == [
        (header["worker_id"], 1, "step 1"),
        (header["worker_id"], 2, "step 2"),
    ]
    assert [i["line"] for i in await lines(f"?worker={header['worker_id']}&since_seq=1")] == ["step 2"]

    async with scheduler.client(timeout=30) as client, client.stream("GET", url + "?follow=true") as stream:
        assert stream.headers["content-type"].startswith("text/event-stream")
        received = ""
        chunks = stream.aiter_text()

        async def read_until(predicate: Any) -> None:
            nonlocal received
            while not predicate(sse_events(received)):
                received += await asyncio.wait_for(chunks.__anext__(), 15)

        await read_until(lambda evs: len([e for e in evs if e.get("event") == "log"]) >= 3)
        await world.logs(header, 3, ["step 3"])
        await read_until(
            lambda evs: any(e.get("data", {}).get("line") == "step 3" for e in evs if e.get("event") == "log")
        )
        await world.worker(header, "Succeeded", exit_code=0)
        await world.outputs(header, [("/data/out/model.pt", 1024)])
        await read_until(lambda evs: any(e.get("event") == "end" for e in evs))
    events = sse_events(received)
    logs = [e for e in events if e.get("event") == "log"]
    assert [e["data"]["line"] for e in logs][-1] == "step 3"
    assert [int(e["id"]) for e in logs] == sorted(int(e["id"]) for e in logs)
    assert events[-1]["data"]["status"] == "Succeeded"

    done = await eventually(lambda: get_job(scheduler, job["id"]), lambda j: j["outputs"] != [])
    assert done["outputs"] == [
        {
            "worker_id": header["worker_id"],
            "files": [{"path": "/data/out/model.pt", "size": 1024}],
            "truncated": False,
        }
    ]
    assert [i["line"] for i in await lines()] == ["step 1", "step 2", "rollout ready", "step 3"]
    async with scheduler.client() as client:
        text = await client.get(url + "?format=text&worker=" + header["worker_id"])
    async with scheduler.client("mallory") as stranger:
        hidden = await stranger.get(url)
    assert text.text == "step 1\nstep 2\nstep 3\n"
    assert hidden.status_code == 404


async def test_events_stream_follows_the_job_until_it_ends(
    scheduler: RunningService, world: World, placements: TopicReader, database_url: str
) -> None:
    job, placed = await start_job(scheduler, world, placements, database_url, rollouts=1)
    url = f"/api/v1/jobs/{job['id']}/events?follow=true"
    async with scheduler.client(timeout=30) as client, client.stream("GET", url) as stream:
        received = ""
        chunks = stream.aiter_text()
        await world.bring_up(placed)
        await world.worker(placed[0], "Succeeded", exit_code=0)
        while not any(e.get("event") == "end" for e in sse_events(received)):
            received += await asyncio.wait_for(chunks.__anext__(), 15)
    events = sse_events(received)
    statuses = [e["data"]["to_status"] for e in events if e.get("event") == "status"]
    assert statuses == ["Pending", "Scheduled", "Starting", "Running", "Succeeded"]
    assert any(e.get("event") == "worker" and e["data"]["phase"] == "Joined" for e in events)
    assert events[-1]["event"] == "end"
    assert events[-1]["data"]["status"] == "Succeeded"


async def test_ssh_keys_rotate_on_running_workers_without_a_restart(
    scheduler: RunningService, world: World, placements: TopicReader, database_url: str
) -> None:
    await world.key("alice", "laptop")
    await world.key("alice", "desktop", OTHER_KEY)
    await synced(database_url, "SELECT count(*) FROM ssh_keys WHERE owner = 'alice'", expect=2)
    job, placed = await start_job(scheduler, world, placements, database_url, rollouts=1, sshKeys=["laptop"])
    assert {tuple(p["ssh_public_keys"]) for p in placed} == {(PUBLIC_KEY,)}
    await world.bring_up(placed)
    await job_status(scheduler, job["id"], "Running")

    async with scheduler.client() as client:
        unknown = await client.put(f"/api/v1/jobs/{job['id']}/ssh-keys", json={"ssh_keys": ["nope"]})
        extra = await client.put(f"/api/v1/jobs/{job['id']}/ssh-keys", json={"ssh_keys": [], "x": 1})
        response = await client.put(f"/api/v1/jobs/{job['id']}/ssh-keys", json={"ssh_keys": ["desktop"]})
    assert unknown.status_code == 422
    assert unknown.json()["error"]["code"] == "ssh_key_unknown"
    assert unknown.json()["error"]["field"] == "ssh_keys[0]"
    assert extra.status_code == 422
    assert response.status_code == 200, response.text
    assert response.json()["ssh_keys"] == ["desktop"]
    assert response.json()["status"] == "Running"
    await placements.until(has_event("scheduler.job.keys_updated.v1", job["id"]))
    update = placements.of("scheduler.job.keys_updated.v1", job["id"])[0]
    assert update["ssh_public_keys"] == [OTHER_KEY]
    assert update["clusters"] == ["gpu-a"]
    assert sorted(update["worker_ids"]) == sorted(p["worker_id"] for p in placed)
    assert stops_for(placements, job["id"]) == set()  # nothing restarts
    assert len(placements.of("scheduler.worker.placed.v1", job["id"])) == 2

    # Deleting a key in the keys service takes it off the running job too.
    await world.key("alice", "desktop", OTHER_KEY, deleted=True)
    await placements.until(lambda _: len(placements.of("scheduler.job.keys_updated.v1", job["id"])) == 2)
    assert placements.of("scheduler.job.keys_updated.v1", job["id"])[1]["ssh_public_keys"] == []


async def test_reports_on_another_clusters_topic_or_about_its_workers_change_nothing(
    scheduler: RunningService,
    world: World,
    placements: TopicReader,
    database_url: str,
    kafka_admin: KafkaAccess,
    names: TopicNames,
) -> None:
    """gpu-b's agent is the only writer of gpu-b's reports topic (the broker's ACLs, ADR 0004); nothing
    it writes there finishes a worker of gpu-a."""
    job, placed = await start_job(scheduler, world, placements, database_url, rollouts=1)
    header = placed[0]
    assert header["cluster"] == "gpu-a"
    # On gpu-b's topic: as gpu-a's agent, about gpu-a as gpu-b's agent, and about gpu-a's worker as gpu-b.
    await world.worker(header, "Succeeded", exit_code=0, on="gpu-b")
    await world.worker(header, "Succeeded", exit_code=0, on="gpu-b", source="agent/gpu-b")
    await world.worker(header, "Succeeded", exit_code=0, cluster="gpu-b")
    async with TopicReader(kafka_admin, names.physical("agent.reports.dlq")) as dlq:
        await dlq.until(lambda events: len(events) >= 3)
        kinds = sorted(headers["rlark-error-kind"] for _, _, headers in dlq.records)
    assert kinds == [b"PoisonMessage", b"cluster_mismatch", b"source_mismatch"]
    await asyncio.sleep(0.5)
    shown = await get_job(scheduler, job["id"])
    assert shown["status"] == "Starting"
    assert {w["phase"] for w in shown["workers"]} == {"Placed"}
