"""How jobs fail, end to end: through the gateway, with real Kafka, PostgreSQL and Ray on the local
runtime. Every failure ends the job with a reason a user can act on — in ``GET /api/v1/jobs/{id}``
and in its timeline — and leaves no process or network namespace of the job behind. Gang placement
never lets two jobs hold half a cluster each, and a job no cluster can ever hold is refused at once."""

from __future__ import annotations

import asyncio
import os
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from agents import local_agent, write_cluster_file
from jobs import add_key, document, job, make_public_key, role, submit, wait_placeable, wait_status
from rlark_tunnel_agent.agent.loop import Agent
from rlark_tunnel_agent.runtime.local.driver import LocalDriver
from stack import QUICK_OVERRIDES, Stack, eventually, platform

pytestmark = pytest.mark.e2e

NODES = [
    {"name": f"cpu-{i}", "labels": {"rlark.io/node-category": "cloud"}, "cpu": 2, "memory": "4Gi"}
    for i in range(3)
]
GPU_NODES = [{**node, "gpus": 2, "gpu_model": "T4"} for node in NODES]
"""Virtual GPUs (the driver is told not to look for real ones): two per node, so a 3 x 2-GPU job fills
the cluster and a second one must wait for all of it."""

JOIN_DEADLINE_S = 40


@pytest.fixture
async def short_deadline_stack(
    postgres_server_url: str, kafka_bootstrap: str, tmp_path: Path
) -> AsyncIterator[Stack]:
    """The platform with a short join deadline (the scheduler's ``join_deadline_s`` setting, which every
    placement carries to its Header), so a worker that never joins fails the job quickly."""
    overrides = {**QUICK_OVERRIDES, "scheduler": {"join_deadline_s": JOIN_DEADLINE_S}}
    async with platform(postgres_server_url, kafka_bootstrap, tmp_path, **overrides) as running:
        yield running


def statuses(detail: dict[str, Any]) -> list[tuple[str, str]]:
    return [(e["to_status"], e["reason"]) for e in detail["timeline"] if e["kind"] == "status"]


def driver_of(agent: Agent) -> LocalDriver:
    driver = agent.driver
    assert isinstance(driver, LocalDriver)
    return driver


def leftover_processes(driver: LocalDriver) -> list[str]:
    """Processes of this driver's workers: a working directory or command line under its state dir or
    its Ray temp dirs, or its bootstrap token in the environment."""
    state = str(driver.state_dir)
    ray_tmp = f"/tmp/rlark-{driver.tag}-"
    token = f"RLARK_BOOTSTRAP_TOKEN={driver.tag}/".encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            cwd = os.readlink(f"/proc/{entry}/cwd")
            cmdline = (
                Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            )
            environ = Path(f"/proc/{entry}/environ").read_bytes()
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue  # gone meanwhile
        if stat.rsplit(")", 1)[1].split()[0] == "Z":
            continue
        if cwd.startswith(state) or state in cmdline or ray_tmp in cmdline or token in environ:
            found.append(f"{entry} cwd={cwd} cmd={cmdline[:160]}")
    return found


def process_alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def namespaces() -> set[str]:
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=False).stdout
    return {line.split()[0] for line in listed.splitlines() if line.strip()}


async def no_process_left(driver: LocalDriver, timeout_s: float = 60) -> None:
    """Wait until none of the driver's worker processes is left; fail naming the survivors."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while left := leftover_processes(driver):
        if loop.time() > deadline:
            raise AssertionError(f"processes left after {timeout_s}s: {left}")
        await asyncio.sleep(0.5)


async def cancel(stack: Stack, job_id: str) -> dict[str, Any]:
    async with stack.client() as client:
        response = await client.post(f"/api/v1/jobs/{job_id}:cancel")
        assert response.status_code == 200, response.text
        return response.json()  # type: ignore[no-any-return]


# ----------------------------------------------------------------------------------------- scripts


async def test_failing_prepare_script_fails_the_job_with_its_exit_code_and_last_lines(
    stack: Stack, tmp_path: Path
) -> None:
    credential = await stack.register_cluster("lab")
    cluster_file = write_cluster_file(tmp_path / "lab.yaml", "lab", NODES)
    prepare = """
echo "downloading dataset shard"
echo "error: bucket s3://missing-bucket does not exist" >&2
exit 7
"""
    async with local_agent(stack.url, credential, cluster_file, tmp_path / "agent") as agent:
        doc = document(
            "bad prepare", [role("actor", 1, prepareScript=prepare), role("rollout", 1)], "echo never"
        )
        await wait_placeable(stack, doc)
        submitted = await submit(stack, doc)
        final = await wait_status(stack, submitted["id"], {"Failed"})

        assert final["exit_code"] == 7
        assert final["reason"] == "prepare script exited with 7"
        assert statuses(final)[-1] == ("Failed", "prepare script exited with 7")
        last = final["details"]["last_lines"]
        assert "downloading dataset shard" in last
        assert "error: bucket s3://missing-bucket does not exist" in last
        header = next(w for w in final["workers"] if w["is_header"])
        assert (header["phase"], header["exit_code"]) == ("Failed", 7)

        # The other worker (waiting for a Ray head that never came) is stopped with the job.
        driver = driver_of(agent)
        await no_process_left(driver)


async def test_run_script_exit_code_fails_the_job_with_that_code(stack: Stack, tmp_path: Path) -> None:
    credential = await stack.register_cluster("lab")
    cluster_file = write_cluster_file(tmp_path / "lab.yaml", "lab", NODES)
    run = 'echo "evaluating checkpoint"\necho "accuracy 0.12 below threshold 0.5" >&2\nexit 3\n'
    async with local_agent(stack.url, credential, cluster_file, tmp_path / "agent"):
        doc = document("bad run", [role("actor", 1)], run)
        await wait_placeable(stack, doc)
        submitted = await submit(stack, doc)
        final = await wait_status(stack, submitted["id"], {"Failed"})

    assert final["exit_code"] == 3
    assert final["reason"] == "run script exited with 3"
    history = statuses(final)
    assert history[-1] == ("Failed", "run script exited with 3")
    assert "Running" in [status for status, _ in history]
    assert "accuracy 0.12 below threshold 0.5" in final["details"]["last_lines"]


async def test_worker_that_never_joins_fails_the_job_at_the_join_deadline(
    short_deadline_stack: Stack, tmp_path: Path
) -> None:
    stack = short_deadline_stack
    credential = await stack.register_cluster("lab")
    cluster_file = write_cluster_file(tmp_path / "lab.yaml", "lab", NODES)
    async with local_agent(stack.url, credential, cluster_file, tmp_path / "agent") as agent:
        doc = document(
            "late worker",
            [role("actor", 1), role("rollout", 1), role("slow", 1, prepareScript="sleep 600")],
            "echo never",
        )
        await wait_placeable(stack, doc)
        submitted = await submit(stack, doc)
        final = await wait_status(stack, submitted["id"], {"Failed"}, timeout_s=240)

        assert final["reason"].startswith("2/3 Ray nodes joined after "), final["reason"]
        waited = int(final["reason"].removeprefix("2/3 Ray nodes joined after ").removesuffix("s"))
        assert JOIN_DEADLINE_S <= waited <= JOIN_DEADLINE_S + 5
        assert final["exit_code"] == 124
        assert final["ray_nodes"] == {"joined": 2, "expected": 3}
        assert statuses(final)[-1] == ("Failed", final["reason"])
        slow = next(w for w in final["workers"] if w["role"] == "slow")
        assert not slow["ray_joined"]

        driver = driver_of(agent)
        await no_process_left(driver)


# ------------------------------------------------------------------------------- running jobs


async def test_cancelling_a_running_job_leaves_no_process_or_namespace_behind(
    stack: Stack, tmp_path: Path
) -> None:
    credential = await stack.register_cluster("lab")
    cluster_file = write_cluster_file(tmp_path / "lab.yaml", "lab", NODES)
    async with local_agent(stack.url, credential, cluster_file, tmp_path / "agent") as agent:
        driver = driver_of(agent)
        doc = document(
            "long run",
            [role("actor", 1), role("rollout", 2)],
            'echo "training forever"\nsleep 600\n',
        )
        await wait_placeable(stack, doc)
        submitted = await submit(stack, doc)
        running = await wait_status(stack, submitted["id"], {"Running"})
        worker_ids = [w["id"] for w in running["workers"]]
        records = [driver.record(wid) for wid in worker_ids]
        assert all(records)
        job_namespaces = {r.netns for r in records if r is not None and r.netns}
        if driver.use_netns:
            assert len(job_namespaces) == 3
            assert job_namespaces <= namespaces()
        assert leftover_processes(driver), "the running job's processes should be visible"

        cancelled = await cancel(stack, submitted["id"])
        assert cancelled["status"] == "Cancelled"
        final = await job(stack, submitted["id"])
        assert final["status"] == "Cancelled"
        assert final["reason"] == "cancelled by root"
        assert statuses(final)[-1] == ("Cancelled", "cancelled by root")

        await no_process_left(driver)

        async def namespaces_gone() -> bool:
            # The driver removes a worker's namespace right after its last process exits.
            return not (job_namespaces & namespaces())

        await eventually(namespaces_gone, timeout_s=30, what="the job's network namespaces removed")

        async def workers_stopped() -> bool:
            detail = await job(stack, submitted["id"])
            return all(w["phase"] == "Stopped" for w in detail["workers"])

        await eventually(workers_stopped, timeout_s=30, what="every worker reported Stopped")
        assert (await job(stack, submitted["id"]))["status"] == "Cancelled"


async def test_changing_a_running_jobs_ssh_keys_updates_its_workers_without_a_restart(
    stack: Stack, tmp_path: Path
) -> None:
    credential = await stack.register_cluster("lab")
    cluster_file = write_cluster_file(tmp_path / "lab.yaml", "lab", NODES)
    laptop, desktop = make_public_key(tmp_path, "laptop"), make_public_key(tmp_path, "desktop")
    await add_key(stack, "laptop", laptop)
    await add_key(stack, "desktop", desktop)
    async with local_agent(stack.url, credential, cluster_file, tmp_path / "agent") as agent:
        driver = driver_of(agent)
        doc = document("keys", [role("actor", 1), role("rollout", 1)], "sleep 600\n", sshKeys=["laptop"])
        await wait_placeable(stack, doc)
        submitted = await submit(stack, doc)
        running = await wait_status(stack, submitted["id"], {"Running"})
        worker_ids = [w["id"] for w in running["workers"]]

        def authorized(wid: str) -> set[str]:
            path = driver.worker_dir(wid) / "scripts" / "authorized_keys"  # the file the worker's sshd reads
            return {line for line in path.read_text().splitlines() if line.strip()}

        assert all(authorized(wid) == {laptop} for wid in worker_ids)
        pids = {wid: driver.record(wid).pid for wid in worker_ids}  # type: ignore[union-attr]

        async with stack.client() as client:
            response = await client.put(
                f"/api/v1/jobs/{submitted['id']}/ssh-keys", json={"ssh_keys": ["desktop", "laptop"]}
            )
            assert response.status_code == 200, response.text
            assert response.json()["ssh_keys"] == ["desktop", "laptop"]

        async def updated() -> bool:
            return all(authorized(wid) == {desktop, laptop} for wid in worker_ids)

        await eventually(updated, timeout_s=30, what="the new keys in every worker")
        for wid in worker_ids:
            mode = (driver.worker_dir(wid) / "scripts" / "authorized_keys").stat().st_mode
            assert mode & 0o007 == 0  # root's file, readable by the worker's group at most
            record = driver.record(wid)
            assert record is not None
            assert record.pid == pids[wid], "the worker was restarted"
            assert record.pid is not None
            assert process_alive(record.pid), "the worker's bootstrap is gone"
        detail = await job(stack, submitted["id"])
        assert detail["status"] == "Running"
        assert detail["ssh_keys"] == ["desktop", "laptop"]
        assert not [w for w in detail["workers"] if w["phase"] in {"Failed", "Stopped", "Succeeded"}]
        async with stack.client() as client:
            events = (await client.get(f"/api/v1/jobs/{submitted['id']}/events")).json()["items"]
        keys_events = [e for e in events if e["kind"] == "keys"]
        assert [(e["reason"], e["details"]["ssh_keys"]) for e in keys_events] == [
            ("SSH keys updated", ["desktop", "laptop"])
        ]
        # the timeline row keeps the sentence's catalogue key, for the console in the user's language
        assert keys_events[0]["details"]["said"]["message_key"] == "job.keys_updated"
        await cancel(stack, submitted["id"])


# ------------------------------------------------------------------------------------------- gang


async def test_two_jobs_competing_for_the_same_nodes_never_both_hold_part_of_them(
    stack: Stack, tmp_path: Path
) -> None:
    credential = await stack.register_cluster("lab")
    cluster_file = write_cluster_file(tmp_path / "lab.yaml", "lab", GPU_NODES)
    holds = {"prepareScript": "sleep 600", "gpusPerWorker": 2}
    async with local_agent(stack.url, credential, cluster_file, tmp_path / "agent", detect_gpus=False):
        docs = [
            document(f"gang {n}", [role("actor", 1, **holds), role("rollout", 2, **holds)], "true")
            for n in ("a", "b")
        ]
        await wait_placeable(stack, docs[0])
        first, second = await asyncio.gather(*(submit(stack, doc) for doc in docs))
        ids = [first["id"], second["id"]]
        seen: list[dict[str, tuple[str, int]]] = []

        async def observe() -> dict[str, dict[str, Any]]:
            details = {jid: await job(stack, jid) for jid in ids}
            held = {jid: d for jid, d in details.items() if d["workers"] and d["status"] not in _ENDED}
            for detail in details.values():
                assert len(detail["workers"]) in (0, 3), f"partial placement: {detail['workers']}"
            assert len(held) <= 1, f"both jobs hold nodes: {[d['status'] for d in held.values()]}"
            seen.append({jid: (d["status"], len(d["workers"])) for jid, d in details.items()})
            return held

        async def one_placed() -> dict[str, dict[str, Any]] | None:
            held = await observe()
            return held or None

        holder_id = next(iter(await eventually(one_placed, timeout_s=60, what="one job placed")))
        waiter_id = next(jid for jid in ids if jid != holder_id)
        for _ in range(10):  # the waiter keeps waiting while the holder holds the GPUs
            await observe()
            await asyncio.sleep(0.3)
        waiting = await job(stack, waiter_id)
        assert waiting["status"] == "Pending"
        assert waiting["workers"] == []
        assert waiting["reason"], "a waiting job says why"

        await cancel(stack, holder_id)

        async def waiter_placed() -> bool:
            held = await observe()
            return waiter_id in held

        await eventually(waiter_placed, timeout_s=90, what="the waiting job placed after the other ended")
        placed = await job(stack, waiter_id)
        assert len(placed["workers"]) == 3
        assert {w["node"] for w in placed["workers"]} == {"cpu-0", "cpu-1", "cpu-2"}
        await cancel(stack, waiter_id)
    assert len(seen) > 10


async def test_job_larger_than_the_cluster_can_ever_hold_is_refused_at_submit(
    stack: Stack, tmp_path: Path
) -> None:
    credential = await stack.register_cluster("lab")
    cluster_file = write_cluster_file(tmp_path / "lab.yaml", "lab", GPU_NODES)
    async with local_agent(stack.url, credential, cluster_file, tmp_path / "agent", detect_gpus=False):
        gpus = {"gpusPerWorker": 2}
        fits = document("fits", [role("actor", 1, **gpus), role("rollout", 2, **gpus)], "true")
        await wait_placeable(stack, fits)  # the cluster is known and its nodes are in
        too_big = document("too big", [role("actor", 1, **gpus), role("rollout", 3, **gpus)], "true")
        async with stack.client() as client:
            response = await client.post("/api/v1/jobs", json=too_big)
            listed = await client.get("/api/v1/jobs")
        assert response.status_code == 422, response.text
        error = response.json()["error"]
        assert error["code"] == "selector_matches_too_few"
        assert error["field"] == "spec.tasks"
        assert "together need 4 distinct nodes, but only 3 nodes can host them" in error["message"]
        assert listed.json()["total"] == 0


_ENDED = {"Succeeded", "Failed", "Cancelled", "Lost"}
