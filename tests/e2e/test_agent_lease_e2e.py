"""Two tunnel-agents for one cluster (issue 18 item 2, ADR 0018): one active, the other standing by; the
active one SIGKILLed under a running job → the standby takes the lease with the next epoch, adopts the
worker (not a second one), a report the deposed agent could still send is refused, and the job Succeeds.

Agent ``A`` runs in a child process (the real Agent and LocalDriver, as ``local_agent`` builds them) so it
can be SIGKILLed: no goodbye, no lease release — the standby takes over once inventory's lease expires
(``RLARK_AGENT_LEASE_TTL_S`` = 6 s here: at 2 s a busy machine delayed the active agent's renewals past it
and the standby took over before the kill). Agent ``B`` runs in the test's process on the same cluster file
and state directory (one machine, the local runtime), so the test sees its ``standing_by`` and its lease.
The cluster's liveness timeout stays at 30 s, far above the takeover, so the job's fate is the lease's.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

import asyncpg
import pytest
from agents import nodes, spawn_child_agent, write_cluster_file
from jobs import document, role, submit, wait_placeable, wait_status
from ray_rounds import control_role_fields
from rlark_contracts import TopicNames, encode, new_envelope
from rlark_contracts.events.agent import WorkerStatusChanged
from rlark_platform.messaging import create_producer
from rlark_tunnel_agent.agent.loop import Agent
from rlark_tunnel_agent.runtime.local.cluster import load_cluster
from rlark_tunnel_agent.runtime.local.driver import LocalDriver, LocalDriverOptions
from stack import Stack, eventually, platform

pytestmark = pytest.mark.e2e

CLUSTER = "solo"
OVERRIDES = {
    "inventory": {"agent_timeout_s": 30.0, "agent_check_interval_s": 1.0, "agent_lease_ttl_s": 6.0},
    "scheduler": {"placement_poll_s": 0.5},
}

RUN = """#!/bin/bash
echo LEASE_JOB_STARTED
while [ ! -e "$LEASE_CONTROL/stop" ]; do sleep 0.2; done
echo LEASE_JOB_DONE
"""


async def is_set(event: asyncio.Event) -> bool:
    return event.is_set()


async def fence_marks(stack: Stack) -> list[int]:
    """The lease epoch each report consumer of inventory and the scheduler has read last for the cluster."""
    marks: list[int] = []
    for service in ("inventory", "scheduler"):
        conn = await asyncpg.connect(stack.databases[service])
        try:
            rows = await conn.fetch("SELECT epoch FROM agent_epochs WHERE cluster = $1", CLUSTER)
        finally:
            await conn.close()
        marks += [row["epoch"] for row in rows] or [0]
    return marks


async def lease_row(stack: Stack) -> tuple[str, int] | None:
    conn = await asyncpg.connect(stack.databases["inventory"])
    try:
        row = await conn.fetchrow("SELECT holder, epoch FROM agent_leases WHERE cluster = $1", CLUSTER)
    finally:
        await conn.close()
    return (row["holder"], row["epoch"]) if row else None


@contextlib.asynccontextmanager
async def standby_agent(
    stack: Stack, credential: str, cluster_file: Path, state_dir: Path
) -> AsyncIterator[Agent]:
    """Agent ``B``: the real Agent and LocalDriver in this process, started without waiting to be ready."""
    declared = load_cluster(cluster_file)
    agent = Agent(
        gateway_url=stack.url,
        credential=credential,
        make_driver=lambda cluster, tunnels, _: LocalDriver(
            declared, LocalDriverOptions(state_dir=state_dir / cluster), virtual_ip_hooks=tunnels
        ),
        runtime="local",
        state_dir=state_dir,
        heartbeat_interval_s=0.5,
        observe_interval_s=1.0,
    )
    task = asyncio.create_task(agent.run())
    try:
        yield agent
    finally:
        if agent.ready.is_set():
            for worker_id in await agent.driver.list_workers():
                await agent.driver.stop_worker(worker_id)
            assert isinstance(agent.driver, LocalDriver)
            await agent.driver.remove_network()
        agent.stop()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait_for(task, 60)


async def test_two_agents_for_one_cluster_one_stands_by_and_takes_over_a_sigkilled_one_without_a_second_worker(
    postgres_server_url: str, kafka_bootstrap: str, tmp_path: Path
) -> None:
    async with platform(postgres_server_url, kafka_bootstrap, tmp_path, **OVERRIDES) as stack:
        control = tmp_path / "control"
        credential = await stack.register_cluster(CLUSTER, hostpath_allow=[str(control)])
        cluster_file = write_cluster_file(tmp_path / f"{CLUSTER}.yaml", CLUSTER, nodes(CLUSTER, 1))
        state_dir = tmp_path / "agent-state"
        ready_file = tmp_path / "a.ready"
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(Path(__file__).parent), os.environ.get("PYTHONPATH", "")]),
            "AGENT_GATEWAY": stack.url,
            "AGENT_CREDENTIAL": credential,
            "AGENT_CLUSTER_FILE": str(cluster_file),
            "AGENT_STATE_DIR": str(state_dir),
            "AGENT_READY_FILE": str(ready_file),
            "AGENT_STOP_WORKERS": "0",
        }
        log_path = tmp_path / "agent-a.log"
        first = spawn_child_agent(env, log_path)
        try:

            async def a_ready() -> bool:
                assert first.poll() is None, f"agent A exited: {log_path.read_text()[-3000:]}"
                return ready_file.exists()

            await eventually(a_ready, timeout_s=90, interval_s=0.1, what="agent A active")
            a_lease = await lease_row(stack)
            assert a_lease is not None
            a_holder, a_epoch = a_lease
            assert a_holder.split(":")[1] == str(first.pid)  # host:pid:random

            async with standby_agent(stack, credential, cluster_file, state_dir) as second:
                await eventually(
                    lambda: is_set(second.standing_by),
                    timeout_s=60,
                    interval_s=0.1,
                    what="agent B standing by",
                )
                assert not second.ready.is_set()
                assert second.lease is None

                doc = document(
                    "leased",
                    [role("actor", 1, cluster=CLUSTER, **control_role_fields(control, "LEASE_CONTROL"))],
                    RUN,
                )
                await wait_placeable(stack, doc)
                submitted = await submit(stack, doc)
                running = await wait_status(stack, submitted["id"], {"Running"})
                (worker_id,) = [w["id"] for w in running["workers"]]
                # The standby read no placement and created nothing: it has no driver yet.
                assert second.standing_by.is_set()
                assert not hasattr(second, "driver")

                first.send_signal(signal.SIGKILL)
                first.wait(10)

                await eventually(
                    lambda: is_set(second.ready), timeout_s=60, interval_s=0.1, what="agent B active"
                )
                assert second.lease is not None
                assert second.lease.epoch == a_epoch + 1
                assert await lease_row(stack) == (second.holder, a_epoch + 1)
                # B adopted A's worker from the runtime: one worker, the same one, not a second.
                assert await second.driver.list_workers() == [worker_id]

                # B's first reports (its heartbeat) arm every consumer's fence with the new epoch.
                async def armed() -> bool:
                    return set(await fence_marks(stack)) == {a_epoch + 1}

                await eventually(
                    armed, timeout_s=60, interval_s=0.2, what="the new epoch read by the consumers"
                )
                # A report the deposed agent could still have sent (its epoch, the worker failed) is refused.
                stale = new_envelope(
                    WorkerStatusChanged(
                        cluster=CLUSTER,
                        job_id=submitted["id"],
                        worker_id=worker_id,
                        phase="Failed",
                        reason="stale report of the deposed agent",
                        exit_code=1,
                        at=datetime.now(UTC),
                        lease_epoch=a_epoch,
                    ),
                    source=f"agent/{CLUSTER}",
                    subject=CLUSTER,
                )
                producer = await create_producer(stack.kafka_admin, "stale-agent")
                try:
                    await producer.send_and_wait(
                        TopicNames(stack.topic_prefix).for_cluster("agent.reports", CLUSTER),
                        encode(stale),
                        key=CLUSTER.encode(),
                    )
                finally:
                    await producer.stop()

                # Reports after it (B's, epoch a_epoch + 1) end the job: it Succeeds, never Failed.
                (control / "stop").touch()
                final = await wait_status(stack, submitted["id"], {"Succeeded"}, timeout_s=120)
                assert (final["attempt"], final["restarts"]) == (1, 0)  # the stale failure restarted nothing
                assert [(w["id"], w["phase"]) for w in final["workers"]] == [(worker_id, "Succeeded")]
        finally:
            if first.poll() is None:
                first.kill()
                first.wait(10)
