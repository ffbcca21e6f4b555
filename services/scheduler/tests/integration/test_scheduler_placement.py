"""Placement through the real service: jobs wait with exact reasons and are placed when capacity
appears; gangs are all or nothing; placements carry everything an agent needs; jobs with a network
domain wait for their virtual IPs."""

from __future__ import annotations

import asyncio

import pytest
import yaml
from rlark_devinfra.testing import RunningService, TopicReader
from scheduler_it_support import (
    IMAGE,
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
    submitted,
    synced,
)

pytestmark = pytest.mark.integration


async def test_placed_events_carry_ids_ranks_keys_scripts_env_image_gpus_and_node(
    scheduler: RunningService, world: World, placements: TopicReader, database_url: str
) -> None:
    await world.cluster("gpu-a", hostpath_allow=["/mnt"])
    await world.cluster("gpu-b")
    # Roles in one cluster (across clusters a job needs a network domain; see the domain tests).
    for name in ("a1", "a2", "a3", "a4"):
        await world.node("gpu-a", name, address=f"192.168.10.{name[-1]}")
    await world.node("gpu-b", "b1")
    await world.key("alice", "laptop")
    await synced(database_url, "SELECT hostpath_allow FROM clusters WHERE name = 'gpu-a'", expect=["/mnt"])
    await nodes_synced(database_url, "gpu-a", 4)
    await nodes_synced(database_url, "gpu-b", 1)
    await world.secret("alice", "s3-reader")  # the bucket's credentials: a secret alice owns (ADR 0025)
    await synced(database_url, "SELECT count(*) FROM ssh_keys WHERE owner = 'alice'", expect=1)
    await synced(database_url, "SELECT count(*) FROM secret_names WHERE owner = 'alice'", expect=1)

    doc = job_doc(
        role(
            "rollout",
            "gpu-a",
            replicas=3,
            gpusPerWorker=4,
            prepareScript="pip list\n",
            env={"NCCL_DEBUG": "INFO"},
            mounts=[
                {"name": "data", "type": "hostPath", "source": "/mnt/data", "path": "/data"},
                {
                    "name": "models",
                    "type": "objectStorage",
                    "source": "s3://models/rl",
                    "path": "/models",
                    "readOnly": True,
                    "secretRef": "s3-reader",
                },
            ],
        ),
        role("actor", "gpu-a", gpusPerWorker=8, env={"ROLE": "actor"}),
        header="actor",
        sshKeys=["laptop"],
        outputs=["/data/out"],
        tensorboardDir="/data/out/tb",
        rlinfConfig={"cluster": {"num_nodes": 4}, "runner": {"save_interval": 10, "output_dir": "/data/out"}},
        resume={"from": "latestCheckpoint", "dir": "exp/checkpoints"},
    )
    job = await submitted(scheduler, doc)
    assert job["status"] == "Pending"
    assert job["id"].startswith("job-")
    assert len(job["id"]) == len("job-") + 12
    assert job["owner"] == "alice"

    await placements.until(placed_count(job["id"], 4))
    placed = {p["worker_id"]: p for p in placements.of("scheduler.worker.placed.v1", job["id"])}
    jid = job["id"]
    assert set(placed) == {f"{jid}-actor-0", f"{jid}-rollout-0", f"{jid}-rollout-1", f"{jid}-rollout-2"}
    header = placed[f"{jid}-actor-0"]
    assert header["rank"] == 0
    assert header["is_header"]
    assert sorted(p["rank"] for p in placed.values()) == [0, 1, 2, 3]
    assert [placed[f"{jid}-rollout-{i}"]["rank"] for i in range(3)] == [1, 2, 3]
    assert {p["num_nodes"] for p in placed.values()} == {4}
    assert {p["total_gpus"] for p in placed.values()} == {8 + 3 * 4}  # every placement: the job's GPUs
    # The checked RLinf config is the one every worker gets, as Hydra YAML.
    assert len({p["rlinf_config"] for p in placed.values()}) == 1
    assert yaml.safe_load(header["rlinf_config"]) == {
        "cluster": {"num_nodes": 4},
        "runner": {"save_interval": 10, "output_dir": "/data/out"},
    }
    # Only the Header's agent looks for the checkpoint to resume from: spec.resume.dir under the first output.
    assert header["resume_checkpoints_dir"] == "/data/out/exp/checkpoints"
    assert {p["resume_checkpoints_dir"] for p in placed.values() if not p["is_header"]} == {""}
    assert header["cluster"] == "gpu-a"
    assert header["node"] in ("a1", "a2", "a3", "a4")
    assert header["gpus"] == 8
    assert header["run_script"] == "python train.py\n"
    assert header["env"] == {"ROLE": "actor"}
    # No domain: the Header's own address (its pod's IP) is for its agent to fill in, not its node's.
    assert header["header_address"] == ""
    rollouts = [placed[f"{jid}-rollout-{i}"] for i in range(3)]
    assert {r["node"] for r in rollouts} == {"a1", "a2", "a3", "a4"} - {header["node"]}
    for r in rollouts:
        assert r["cluster"] == "gpu-a"
        assert r["gpus"] == 4
        assert r["image"] == IMAGE
        assert r["run_script"] == ""
        assert r["prepare_script"] == "pip list\n"
        assert r["env"] == {"NCCL_DEBUG": "INFO"}
        assert r["mounts"] == [
            {"name": "data", "type": "hostPath", "source": "/mnt/data", "path": "/data", "read_only": False,
             "secret_ref": None},
            {"name": "models", "type": "objectStorage", "source": "s3://models/rl", "path": "/models",
             "read_only": True, "secret_ref": "s3-reader"},
        ]  # fmt: skip
        assert r["header_address"] == header["header_address"]
    for p in placed.values():
        assert p["ssh_public_keys"] == [PUBLIC_KEY]
        assert p["outputs"] == ["/data/out"]
        assert p["tensorboard_dir"] == "/data/out/tb"
        assert p["virtual_ip"] is None
        assert p["domain"] is None

    shown = await job_status(scheduler, jid, "Starting")
    # Its tools open through the gateway (ADR 0012): TensorBoard as it declares a dir, Ray's dashboard once it runs.
    assert shown["tensorboard_url"] == f"/api/v1/jobs/{jid}/tools/tensorboard/"
    assert shown["ray_dashboard_url"] is None
    assert [(e["from_status"], e["to_status"]) for e in shown["timeline"]] == [
        ("", "Pending"),
        ("Pending", "Scheduled"),
        ("Scheduled", "Starting"),
    ]
    assert {(w["id"], w["rank"], w["cluster"], w["phase"]) for w in shown["workers"]} == {
        (wid, p["rank"], p["cluster"], "Placed") for wid, p in placed.items()
    }


async def test_a_job_that_fits_later_waits_with_exact_counts_then_is_placed_when_a_node_appears(
    scheduler: RunningService, world: World, placements: TopicReader, database_url: str
) -> None:
    await world.cluster("gpu-a")
    await world.node("gpu-a", "n1")
    await world.node("gpu-a", "n2", gpu_allocated=4)  # another tenant uses 4 of its 8 GPUs
    await world.node("gpu-a", "n3", ready=False)
    await world.node("gpu-a", "n4", schedulable=False)
    await world.node("gpu-a", "other", labels={"rlark.io/gpu-model": "H100"})
    await nodes_synced(database_url, "gpu-a", 5)

    doc = job_doc(
        role("worker", "gpu-a", replicas=1, gpusPerWorker=8),
        role("rollout", "gpu-a", replicas=2, gpusPerWorker=8, nodeSelector={"rlark.io/gpu-model": "A100"}),
        header="worker",
    )
    job = await submitted(scheduler, doc)
    waiting = await eventually(lambda: get_job(scheduler, job["id"]), lambda j: j["pending"] is not None)
    assert waiting["status"] == "Pending"
    rollout = next(r for r in waiting["pending"]["roles"] if r["role"] == "rollout")
    assert (rollout["matching"], rollout["ready"], rollout["schedulable"], rollout["enough"]) == (4, 3, 2, 1)
    assert rollout["needed"] == 2
    assert "4 match, 3 ready, 2 schedulable, 1 with enough free GPUs" in waiting["reason"]
    assert waiting["reason"] == waiting["pending"]["message"]
    pending_events = [e for e in (await events_of(scheduler, job["id"])) if e["kind"] == "pending"]
    assert len(pending_events) == 1
    # The same counts as catalogue clauses, so the console says them in Chinese (ADR 0011).
    main = rollout["parts"][0]
    assert main["message_key"] == "pending.needs"
    assert {k: main["params"][k] for k in ("matching", "ready", "schedulable", "enough")} == {
        "matching": 4,
        "ready": 3,
        "schedulable": 2,
        "enough": 1,
    }
    assert pending_events[0]["details"]["parts"] == waiting["pending"]["parts"]
    assert waiting["reason_said"] == {"parts": waiting["pending"]["parts"]}  # the job's reason, keyed

    await world.node("gpu-a", "n5")
    await world.node("gpu-a", "n6")
    await placements.until(placed_count(job["id"], 3))
    nodes = {p["node"] for p in placements.of("scheduler.worker.placed.v1", job["id"])}
    assert len(nodes) == 3
    assert nodes <= {"n1", "n5", "n6", "other"}
    assert "n2" not in nodes  # only 4 of its GPUs are free
    placed = await job_status(scheduler, job["id"], "Starting")
    assert placed["pending"] is None


async def events_of(svc: RunningService, job_id: str) -> list[dict[str, object]]:
    async with svc.client() as client:
        response = await client.get(f"/api/v1/jobs/{job_id}/events")
    assert response.status_code == 200, response.text
    items: list[dict[str, object]] = response.json()["items"]
    return items


async def test_two_jobs_competing_for_the_same_nodes_never_both_hold_part_of_a_gang(
    scheduler: RunningService, world: World, placements: TopicReader, database_url: str
) -> None:
    await world.cluster("gpu-a")
    for i in range(3):
        await world.node("gpu-a", f"n{i}")
    await nodes_synced(database_url, "gpu-a", 3)
    # Each job needs 2 of the 3 nodes whole: one can run, the other must not take the third node.
    doc = job_doc(role("w", "gpu-a", gpusPerWorker=8), role("r", "gpu-a", gpusPerWorker=8), header="w")
    first, second = await asyncio.gather(submitted(scheduler, doc), submitted(scheduler, doc))
    winner = await eventually(
        lambda: asyncio.gather(get_job(scheduler, first["id"]), get_job(scheduler, second["id"])),
        lambda jobs: any(j["status"] == "Starting" for j in jobs) and any(j["pending"] for j in jobs),
    )
    running = next(j for j in winner if j["status"] == "Starting")
    waiting = next(j for j in winner if j["status"] == "Pending")
    assert {running["id"], waiting["id"]} == {first["id"], second["id"]}
    await placements.until(placed_count(running["id"], 2))
    await placements.settle(0.5)
    assert placements.of("scheduler.worker.placed.v1", waiting["id"]) == []
    assert waiting["workers"] == []
    assert "together they need 2 nodes, only 1 suit any of them" in waiting["reason"]

    async with scheduler.client() as client:
        assert (await client.post(f"/api/v1/jobs/{running['id']}:cancel")).status_code == 200
    await placements.until(placed_count(waiting["id"], 2))
    assert {p["node"] for p in placements.of("scheduler.worker.placed.v1", waiting["id"])} <= {
        "n0",
        "n1",
        "n2",
    }


async def test_domain_job_waits_for_addresses_then_placements_carry_the_virtual_ips(
    scheduler: RunningService,
    world: World,
    placements: TopicReader,
    job_topic: TopicReader,
    database_url: str,
) -> None:
    await world.cluster("gpu-a")
    await world.cluster("gpu-b")
    await world.node("gpu-a", "a1")
    await world.node("gpu-b", "b1")
    await world.domain("dom-b", "10.200.0.0/16")
    await world.domain("dom-a", "10.100.0.0/16")
    await nodes_synced(database_url, "gpu-b", 1)
    await nodes_synced(database_url, "gpu-a", 1)
    await synced(database_url, "SELECT count(*) FROM network_domains", expect=2)

    job = await submitted(scheduler, job_doc(role("actor", "gpu-a"), role("rollout", "gpu-b")))
    assert job["network_domain"] == "dom-a"  # the first domain by name fills the default
    await job_topic.until(has_event("scheduler.job.addresses_requested.v1", job["id"]))
    request = job_topic.envelopes("scheduler.job.addresses_requested.v1", job["id"])[0]
    assert request.data["domain"] == "dom-a"
    assert sorted(w["worker_id"] for w in request.data["workers"]) == [
        f"{job['id']}-actor-0",
        f"{job['id']}-rollout-0",
    ]
    await placements.settle(0.5)
    assert placements.of("scheduler.worker.placed.v1", job["id"]) == []
    assert (await get_job(scheduler, job["id"]))["status"] == "Scheduled"

    addresses = await world.allocate(request, "10.100.0.0/16")
    await placements.until(placed_count(job["id"], 2))
    placed = {p["worker_id"]: p for p in placements.of("scheduler.worker.placed.v1", job["id"])}
    header_ip = addresses[f"{job['id']}-actor-0"]
    for wid, p in placed.items():
        assert p["virtual_ip"] == addresses[wid]
        assert p["domain"] == "dom-a"
        assert p["domain_cidr"] == "10.100.0.0/16"
        assert p["header_address"] == header_ip
    shown = await job_status(scheduler, job["id"], "Starting")
    assert {w["address"] for w in shown["workers"]} == set(addresses.values())

    async with scheduler.client() as client:
        assert (await client.post(f"/api/v1/jobs/{job['id']}:cancel")).status_code == 200
    await job_topic.until(has_event("scheduler.job.addresses_released.v1", job["id"], domain="dom-a"))
    stops = await placements.until(
        lambda events: (
            sum(e.type == "scheduler.worker.stop_requested.v1" and e.subject == job["id"] for e in events)
            == 2
        )
    )
    assert {
        (e.data["worker_id"], e.data["cluster"]) for e in stops if e.type.endswith("stop_requested.v1")
    } == {(wid, p["cluster"]) for wid, p in placed.items()}


async def test_address_shortage_sends_the_job_back_to_pending_until_addresses_are_released(
    scheduler: RunningService,
    world: World,
    placements: TopicReader,
    job_topic: TopicReader,
    database_url: str,
) -> None:
    await world.cluster("gpu-a")
    await world.node("gpu-a", "a1")
    await world.domain("dom-a", "10.100.0.0/24")
    await nodes_synced(database_url, "gpu-a", 1)
    await synced(database_url, "SELECT count(*) FROM network_domains", expect=1)
    job = await submitted(scheduler, job_doc(role("w", "gpu-a")))
    await job_topic.until(has_event("scheduler.job.addresses_requested.v1", job["id"]))
    first = job_topic.envelopes("scheduler.job.addresses_requested.v1", job["id"])[0]
    await world.refuse_allocation(
        first, "address_pool_exhausted", 'Network domain "dom-a" has no free address.'
    )
    back = await eventually(
        lambda: get_job(scheduler, job["id"]),
        lambda j: j["status"] == "Pending" and "no free address" in j["reason"],
    )
    assert back["workers"] == []
    # The hold ends (address_retry_s) and the job asks again with a fresh request.
    await job_topic.until(
        lambda _: len(job_topic.envelopes("scheduler.job.addresses_requested.v1", job["id"])) >= 2
    )
    second = job_topic.envelopes("scheduler.job.addresses_requested.v1", job["id"])[1]
    await world.allocate(first, "10.100.0.0/24")  # a stale answer to the first request is ignored
    await placements.settle(0.5)
    assert placements.of("scheduler.worker.placed.v1", job["id"]) == []
    await world.allocate(second, "10.100.0.0/24", first_host=7)
    await placements.until(placed_count(job["id"], 1))
    assert placements.of("scheduler.worker.placed.v1", job["id"])[0]["virtual_ip"] == "10.100.0.7"


async def test_domain_not_found_fails_the_job(
    scheduler: RunningService, world: World, job_topic: TopicReader, database_url: str
) -> None:
    await world.cluster("gpu-a")
    await world.node("gpu-a", "a1")
    await world.domain("dom-a", "10.100.0.0/24")
    await nodes_synced(database_url, "gpu-a", 1)
    await synced(database_url, "SELECT count(*) FROM network_domains", expect=1)
    job = await submitted(scheduler, job_doc(role("w", "gpu-a")))
    await job_topic.until(has_event("scheduler.job.addresses_requested.v1", job["id"]))
    request = job_topic.envelopes("scheduler.job.addresses_requested.v1", job["id"])[0]
    await world.refuse_allocation(request, "domain_not_found", 'Network domain "dom-a" does not exist.')
    failed = await job_status(scheduler, job["id"], "Failed")
    assert failed["reason"] == 'Network domain "dom-a" does not exist.'


async def test_gpu_accounting_counts_other_tenants_and_rlark_pods_once(
    scheduler: RunningService, world: World, placements: TopicReader, database_url: str
) -> None:
    await world.cluster("gpu-a")
    await world.node("gpu-a", "n1", gpu_allocated=4)  # another tenant uses 4 of the 8 GPUs
    await nodes_synced(database_url, "gpu-a", 1)
    first = await submitted(scheduler, job_doc(role("w", "gpu-a", gpusPerWorker=4)))
    await placements.until(placed_count(first["id"], 1))
    (worker,) = placements.of("scheduler.worker.placed.v1", first["id"])
    second = await submitted(scheduler, job_doc(role("w", "gpu-a", gpusPerWorker=4)))

    async def reason() -> str:
        job = await eventually(lambda: get_job(scheduler, second["id"]), lambda j: j["pending"] is not None)
        assert job["status"] == "Pending"
        return str(job["reason"])

    # Placed but not created yet: the tenant's 4 GPUs and the first job's 4 fill the node.
    assert "0 with enough free GPUs" in await reason()
    # The pod exists and the cluster counts it: it is not counted twice.
    await world.worker(worker, "Created")
    await world.node("gpu-a", "n1", gpu_allocated=8)
    await synced(
        database_url, "SELECT present::int FROM workers WHERE id = $1", worker["worker_id"], expect=1
    )
    await placements.settle(0.5)
    assert placements.of("scheduler.worker.placed.v1", second["id"]) == []
    # The first job ends: its GPUs are free only once the cluster says its pod is gone.
    await world.worker(worker, "Running")
    await world.worker(worker, "Succeeded", exit_code=0)
    await job_status(scheduler, first["id"], "Succeeded")
    await placements.settle(0.5)
    assert placements.of("scheduler.worker.placed.v1", second["id"]) == []
    await world.node("gpu-a", "n1", gpu_allocated=4)
    await placements.until(placed_count(second["id"], 1))
