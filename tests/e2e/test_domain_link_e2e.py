"""Issue 8's must-show, cutting the link: through the whole platform, with a real network cut.

Two "clusters" are network namespaces joined by ONE veth link (``rlark_devinfra.netns``). The real agents
(local driver) run in the test's process and its host namespace — their control-plane traffic stays there —
but each agent's tunnel sockets (the domain's SSH server and its dialer) live in its cluster's namespace and
it advertises its end of the link (``TunnelOptions.netns``). The workers' TUN devices are created by the
agents as always, so every Ray packet between ``alpha`` and ``beta`` crosses that one veth inside the SSH
tunnel. A 3-worker job (Header in ``alpha``, two workers in ``beta``) keeps running Ray tasks pinned to all
three nodes until told to stop (a file the test creates).

- (a) The link is cut mid-run: while the job is Running its reason names the broken tunnel (domain, both
  clusters); the link is restored within the grace: the reason clears, the same Ray cluster (same node ids)
  goes on running tasks on all nodes, and the job Succeeds.
- (b) A second job: the link is cut and stays cut past the grace: the job Fails with that reason.

Timing for the test: agents ping every 0.5 s and declare a link dead after 2 s of silence; the scheduler's
grace (``RLARK_TUNNEL_GRACE_S``) is 10 s, below Ray's own failure detection (tens of seconds), so the job's
fate is decided by the tunnel rule, and the cut in (a) stays well under Ray's timeouts.
"""

from __future__ import annotations

import re
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from jobs import document, job, logs, role, submit, wait_placeable, wait_status
from namespaced import ClusterPlan, NamespacedClusters, namespaced_clusters
from ray_rounds import control_role_fields, rounds, run_script, summary, wait_rounds
from rlark_tunnel_agent.agent.loop import Agent
from stack import eventually

pytestmark = [pytest.mark.e2e, pytest.mark.netns]

DOMAIN_CIDR = "10.201.0.0/16"
GRACE_S = 10.0

RUN = run_script("LINK_CONTROL", deadline_s=240)


LinkedClusters = NamespacedClusters


@pytest.fixture(scope="module")
def controls(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where each test's control directory lives: the clusters' only allowed hostPath."""
    return tmp_path_factory.mktemp("link-controls")


@pytest.fixture
def control(controls: Path, request: pytest.FixtureRequest) -> Path:
    return controls / request.node.name


@pytest.fixture(scope="module")
async def linked(
    postgres_server_url: str,
    kafka_bootstrap: str,
    tmp_path_factory: pytest.TempPathFactory,
    controls: Path,
) -> AsyncIterator[LinkedClusters]:
    """The platform (short tunnel grace), a two-cluster namespace bed and one agent per cluster whose
    tunnel sockets live in its cluster's namespace."""
    async with namespaced_clusters(
        postgres_server_url,
        kafka_bootstrap,
        tmp_path_factory.mktemp("link"),
        clusters={"alpha": ClusterPlan(1, towards="beta"), "beta": ClusterPlan(2, towards="alpha")},
        cidr=DOMAIN_CIDR,
        services={"scheduler": {"tunnel_grace_s": GRACE_S, "placement_poll_s": 0.5}},
        hostpath_allow=[str(controls)],
    ) as clusters:
        yield clusters


def link_document(linked: LinkedClusters, name: str, control: Path) -> dict[str, Any]:
    return document(
        name,
        [
            role("actor", 1, cluster="alpha", **control_role_fields(control, "LINK_CONTROL")),
            role("rollout", 2, cluster="beta"),
        ],
        RUN,
        networkDomain=linked.domain,
    )


async def start_job(linked: LinkedClusters, name: str, control: Path) -> str:
    """Submit the job and return once it is Running with Ray tasks completing on all three nodes."""
    doc = link_document(linked, name, control)
    await wait_placeable(linked.stack, doc)
    submitted = await submit(linked.stack, doc)
    await wait_status(linked.stack, submitted["id"], {"Running"}, timeout_s=300)
    await wait_rounds(control, 2, timeout_s=120)
    return str(submitted["id"])


def tunnel_reason(linked: LinkedClusters) -> str:
    return f"tunnel alpha ↔ beta of domain {linked.domain} is down since "


async def wait_reason(linked: LinkedClusters, job_id: str, down: bool, timeout_s: float) -> dict[str, Any]:
    """Poll the job until its reason names the down tunnel (``down``) or no longer does; it stays Running."""

    async def reached() -> dict[str, Any] | None:
        current = await job(linked.stack, job_id)
        assert current["status"] == "Running", (current["status"], current["reason"])
        shown = current["reason"].startswith(tunnel_reason(linked))
        return current if shown == down else None

    what = "the tunnel reason" if down else "the tunnel reason cleared"
    return await eventually(reached, timeout_s=timeout_s, interval_s=0.1, what=what)  # type: ignore[no-any-return]


def peer_link(agent: Agent, domain: str, peer: str) -> Any:
    assert agent.tunnels is not None
    state = next(s for s in agent.tunnels.supervisor.states() if s.domain == domain)
    return state.peer(peer)


async def test_a_cut_link_is_named_and_a_repair_within_the_grace_resumes_the_same_ray_cluster(
    linked: LinkedClusters, control: Path
) -> None:
    job_id = await start_job(linked, "link cut and repaired", control)
    connects = peer_link(linked.agents["alpha"], linked.domain, "beta").connects
    done_before_cut, _ = rounds(control)

    cut_at = time.monotonic()
    linked.bed.set_link("alpha", "beta", False)
    try:
        down = await wait_reason(linked, job_id, down=True, timeout_s=GRACE_S)
        named_at = time.monotonic()
        assert peer_link(linked.agents["alpha"], linked.domain, "beta").state != "up"
    finally:
        linked.bed.set_link("alpha", "beta", True)
    restored_at = time.monotonic()
    assert re.search(r"is down since \d\d:\d\d:\d\d UTC: .+", down["reason"]), down["reason"]

    cleared = await wait_reason(linked, job_id, down=False, timeout_s=GRACE_S)
    cleared_at = time.monotonic()
    assert "tunnel" not in cleared["reason"], cleared["reason"]
    # The tunnel came back on a new SSH connection; the workers never noticed beyond a stall.
    assert peer_link(linked.agents["alpha"], linked.domain, "beta").connects > connects
    await wait_rounds(control, done_before_cut + 3, timeout_s=30)
    (control / "stop").touch()
    final = await wait_status(linked.stack, job_id, {"Succeeded"}, timeout_s=120)

    text = "\n".join(entry["line"] for entry in await logs(linked.stack, job_id))
    ended = summary(text)
    nodes_before, nodes_after = ended.nodes_before, ended.nodes_after
    assert len(nodes_before) == 3
    assert nodes_after == nodes_before  # the same Ray nodes: nothing restarted
    assert sorted(address for _, address in nodes_before) == sorted(w["virtual_ip"] for w in final["workers"])
    assert ended.errors == 0, text[-3000:]
    async with linked.stack.client() as client:
        response = await client.get(f"/api/v1/jobs/{job_id}/events")
        assert response.status_code == 200, response.text
    tunnel_events = [e for e in response.json()["items"] if e["kind"] == "tunnel"]
    assert tunnel_events, response.json()["items"]
    # the cut's mark, made while Running (a heavily loaded machine may also show a mark while the
    # domain's tunnels first come up, during Starting)
    marked = next(
        (
            e
            for e in tunnel_events
            if e["to_status"] == "Running" and e["reason"].startswith(tunnel_reason(linked))
        ),
        None,
    )
    assert marked is not None, tunnel_events
    cleared_event = tunnel_events[-1]
    assert (marked["details"]["domain"], marked["details"]["clusters"]) == (linked.domain, ["alpha", "beta"])
    assert cleared_event["details"].get("tunnel_up") is True, tunnel_events
    print(
        f"\nlink cut → reason named {named_at - cut_at:.1f} s; restored → reason cleared "
        f"{cleared_at - restored_at:.1f} s (cut lasted {restored_at - cut_at:.1f} s); "
        f"rounds {ended.rounds}, slowest round {ended.slowest_s:.2f} s; reason: {down['reason']}"
    )


async def test_a_link_down_past_the_grace_fails_the_job_with_the_tunnel_reason(
    linked: LinkedClusters, control: Path
) -> None:
    job_id = await start_job(linked, "link cut for good", control)
    cut_at = time.monotonic()
    linked.bed.set_link("alpha", "beta", False)
    try:
        await wait_reason(linked, job_id, down=True, timeout_s=GRACE_S)
        named_at = time.monotonic()
        shown = await linked.stack.cli("jobs", "show", job_id)
        assert shown.returncode == 0, shown.stderr
        assert f"Running: {tunnel_reason(linked)}" in shown.stdout, shown.stdout
        failed = await wait_status(linked.stack, job_id, {"Failed"}, timeout_s=GRACE_S + 30)
        failed_at = time.monotonic()
    finally:
        linked.bed.set_link("alpha", "beta", True)
    assert failed["reason"].startswith(tunnel_reason(linked)), failed["reason"]
    assert failed["status"] == "Failed"
    # Not before the grace: the outage started at most when the cut did.
    assert failed_at - cut_at >= GRACE_S
    print(
        f"\nlink cut → reason named {named_at - cut_at:.1f} s → job Failed {failed_at - cut_at:.1f} s "
        f"after the cut (grace {GRACE_S:.0f} s): {failed['reason']}"
    )
