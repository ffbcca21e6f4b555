"""A restarted tunnel-agent gives its running domain workers their network back.

Two "clusters" are network namespaces joined by one veth link (``rlark_devinfra.netns``), as in
``test_domain_link_e2e.py``: each agent's tunnel sockets live in its cluster's namespace, on a FIXED port,
so a restarted agent announces exactly what it announced before and the netdomain service publishes no new
topology — the restarted agent can only learn its peer from the topics it re-reads from their beginning.
``beta``'s agent runs in the test's process; ``alpha``'s — the Header's cluster, and the side that dials —
runs in a child process so that it can be killed with SIGKILL: no goodbye, its TUN descriptors die with it.

A 2-worker job (Header in ``alpha``, one worker in ``beta``) keeps running Ray tasks pinned to both nodes
until told to stop (a file). Mid-run ``alpha``'s agent is SIGKILLed: the Header's TUN device disappears
(its virtual IP with it) and Ray stalls. The agent is started again on the same state: it adopts the
worker, creates its TUN again (same device, same address), re-reads allocations and topology, dials
``beta`` again — and the same Ray cluster (same node ids) goes on running tasks on both nodes; the job
Succeeds. The inventory's agent timeout and the scheduler's tunnel grace stay at their defaults (30 s,
60 s), far above the outage, so the job's fate is the data path's.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
import subprocess
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from agents import local_agent, nodes, spawn_child_agent, write_cluster_file
from jobs import document, job, logs, role, submit, wait_placeable, wait_status
from namespaced import BACKOFF_MAX_S, DEAD_AFTER_S, PING_INTERVAL_S
from ray_rounds import control_role_fields, rounds, run_script, summary, wait_rounds
from rlark_devinfra import netns
from rlark_tunnel_agent.agent.tunnels import TunnelOptions
from rlark_tunnel_agent.runtime.local.record import WorkerRecord
from stack import Stack, eventually, platform

pytestmark = [pytest.mark.e2e, pytest.mark.netns]

DOMAIN_CIDR = "10.202.0.0/16"
TUNNEL_PORT = 8200
OVERRIDES = {
    # The restarted agent is a new lease holder: it waits for the SIGKILLed one's lease to expire (ADR 0018).
    "inventory": {"agent_timeout_s": 30.0, "agent_check_interval_s": 1.0, "agent_lease_ttl_s": 6.0},
    "scheduler": {"placement_poll_s": 0.5},
}

RUN = run_script("RESTART_CONTROL", deadline_s=300)


class AgentProcess:
    """``alpha``'s agent in a child process (the real Agent and LocalDriver, as ``local_agent`` builds
    them); ``kill`` is SIGKILL, ``start`` runs it again on the same state directory."""

    def __init__(self, env: dict[str, str], log: Path) -> None:
        self._env = env
        self._log = log
        self._ready = Path(env["AGENT_READY_FILE"])
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0

    async def start(self) -> float:
        """Start and wait until the agent is ready; returns the seconds that took."""
        started = time.monotonic()
        self._ready.unlink(missing_ok=True)
        self.proc = self._spawn()
        self.starts += 1

        async def ready() -> bool:
            assert self.proc is not None
            assert self.proc.poll() is None, f"agent exited: {self._log.read_text()[-3000:]}"
            return self._ready.exists()

        await eventually(ready, timeout_s=90, interval_s=0.1, what="alpha's agent ready")
        return time.monotonic() - started

    def _spawn(self) -> subprocess.Popen[bytes]:
        return spawn_child_agent(self._env, self._log)

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    async def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        for _ in range(600):
            if self.proc.poll() is not None:
                return
            await asyncio.sleep(0.1)
        self.proc.kill()


@dataclass
class Restartable:
    stack: Stack
    bed: netns.TestBed
    domain: str
    alpha: AgentProcess
    alpha_state: Path


def tunnel_options(bed: netns.TestBed, cluster: str, peer: str) -> dict[str, Any]:
    address = bed.address_of(cluster, peer)
    return {
        "netns": f"/run/netns/{bed.agents[cluster]}",
        "listen_host": address,
        "advertise_host": address,
        "listen_port": TUNNEL_PORT,
        "listen_ports": 4,
        "ping_interval_s": PING_INTERVAL_S,
        "dead_after_s": DEAD_AFTER_S,
        "backoff_max_s": BACKOFF_MAX_S,
    }


@pytest.fixture
async def restartable(
    postgres_server_url: str, kafka_bootstrap: str, tmp_path: Path
) -> AsyncIterator[Restartable]:
    bed = netns.create(f"r{uuid.uuid4().hex[:5]}", {"alpha": [], "beta": []})
    alpha: AgentProcess | None = None
    try:
        async with (
            platform(postgres_server_url, kafka_bootstrap, tmp_path, **OVERRIDES) as stack,
            contextlib.AsyncExitStack() as running,
        ):
            domain = f"restart-{uuid.uuid4().hex[:6]}"
            async with stack.client() as client:
                created = await client.post("/api/v1/domains", json={"name": domain, "cidr": DOMAIN_CIDR})
                assert created.status_code == 201, created.text
            beta_credential = await stack.register_cluster("beta")
            await running.enter_async_context(
                local_agent(
                    stack.url,
                    beta_credential,
                    write_cluster_file(tmp_path / "beta.yaml", "beta", nodes("beta", 1)),
                    tmp_path / "agent-beta",
                    tunnels=TunnelOptions(**tunnel_options(bed, "beta", "alpha")),
                )
            )
            alpha_state = tmp_path / "agent-alpha"
            env = {
                **os.environ,
                "PYTHONPATH": os.pathsep.join([str(Path(__file__).parent), os.environ.get("PYTHONPATH", "")]),
                "AGENT_GATEWAY": stack.url,
                "AGENT_CREDENTIAL": await stack.register_cluster(
                    "alpha", hostpath_allow=[str(tmp_path / "control")]
                ),
                "AGENT_CLUSTER_FILE": str(
                    write_cluster_file(tmp_path / "alpha.yaml", "alpha", nodes("alpha", 1))
                ),
                "AGENT_STATE_DIR": str(alpha_state),
                "AGENT_TUNNELS": json.dumps(tunnel_options(bed, "alpha", "beta")),
                "AGENT_READY_FILE": str(tmp_path / "alpha.ready"),
            }
            alpha = AgentProcess(env, tmp_path / "agent-alpha.log")
            await alpha.start()
            try:
                yield Restartable(stack, bed, domain, alpha, alpha_state / "alpha")
            finally:
                await alpha.stop()
    finally:
        bed.destroy()


def header_record(restartable: Restartable) -> WorkerRecord:
    (path,) = restartable.alpha_state.glob("workers/*-actor-0/worker.json")
    return WorkerRecord.model_validate_json(path.read_text())


def tun_address(record: WorkerRecord) -> str:
    """The IPv4 address on the worker's TUN device, or "" when the device is gone."""
    assert record.netns is not None
    assert record.tun_device is not None
    shown = subprocess.run(
        ["ip", "-n", record.netns, "-o", "-4", "addr", "show", "dev", record.tun_device],
        capture_output=True,
        text=True,
        check=False,
    )
    match = re.search(r"inet (\S+)", shown.stdout)
    return match.group(1) if match else ""


async def test_a_sigkilled_and_restarted_agent_gives_its_running_domain_worker_its_network_back(
    restartable: Restartable, tmp_path: Path
) -> None:
    control = tmp_path / "control"  # alpha's only allowed hostPath (the fixture's policy)
    doc = document(
        "agent restart",
        [
            role("actor", 1, cluster="alpha", **control_role_fields(control, "RESTART_CONTROL")),
            role("rollout", 1, cluster="beta"),
        ],
        RUN,
        networkDomain=restartable.domain,
    )
    await wait_placeable(restartable.stack, doc)
    submitted = await submit(restartable.stack, doc)
    job_id = submitted["id"]
    await wait_status(restartable.stack, job_id, {"Running"}, timeout_s=300)
    await wait_rounds(control, 3, timeout_s=120)

    record = header_record(restartable)
    assert record.spec.domain == restartable.domain
    assert str(record.spec.domain_cidr) == DOMAIN_CIDR
    address = tun_address(record)
    assert address == f"{record.spec.virtual_ip}/16"

    done_before, _ = rounds(control)
    killed_at = time.monotonic()
    killed_wall = time.time()
    restartable.alpha.kill()
    # The TUN device lived on the agent's descriptor: the Header is cut off from its domain.
    assert tun_address(record) == ""
    await asyncio.sleep(2.0)
    stalled, _ = rounds(control)
    assert stalled <= done_before + 1  # at most a round that was already in flight

    startup_s = await restartable.alpha.start()
    assert tun_address(header_record(restartable)) == address  # the same device and address again
    await wait_rounds(control, stalled + 1, timeout_s=60)
    _, resumed_wall = rounds(control)
    resumed_after_s = resumed_wall - killed_wall
    await wait_rounds(control, stalled + 5, timeout_s=60)
    (control / "stop").touch()
    final = await wait_status(restartable.stack, job_id, {"Succeeded"}, timeout_s=120)

    text = "\n".join(entry["line"] for entry in await logs(restartable.stack, job_id))
    ended = summary(text)
    nodes_before, nodes_after = ended.nodes_before, ended.nodes_after
    assert len(nodes_before) == 2
    assert nodes_after == nodes_before  # the same Ray nodes: nothing restarted, nobody rejoined
    assert sorted(a for _, a in nodes_before) == sorted(w["virtual_ip"] for w in final["workers"])
    assert ended.errors == 0, text[-3000:]  # the outage was a stall, not a failed task
    current = await job(restartable.stack, job_id)
    assert current["status"] == "Succeeded"
    print(
        f"\nagent SIGKILLed → restarted in {startup_s:.1f} s; Ray tasks resumed {resumed_after_s:.1f} s after "
        f"the kill (total {time.monotonic() - killed_at:.1f} s to the end); rounds {ended.rounds}, "
        f"errors {ended.errors}, slowest round {ended.slowest_s:.2f} s"
    )
