"""Issue 35's must-show through the whole platform: the same job document, naming no cluster, runs where it
fits (ADR 0026).

(a) The shipped RLinf example (`examples/rlinf-cpu.yaml`) with its clusters left out, run by RLinf's own code:
with three local clusters of 1, 2 and 3 nodes it lands on the one that holds its three workers — no network
domain, no virtual IP — and Succeeds (RLinf's Gloo all-reduce and point-to-point traffic: the worker contract
following the layout chosen); with that cluster's agent gone, no cluster holds it alone, so the same document
spans the two others through the network domain that joins them: its Ray nodes join over virtual IPs and the
agents' tunnels and RLinf starts (the whole RLinf run across a domain, to a resume, is `test_rlinf_e2e.py`'s).
(b) The same three workers with ``spanClusters: never`` on clusters of 1 and 2 nodes wait, and the queue says
that spanning the two through the domain would run them now (no Ray starts: a light test).
"""

from __future__ import annotations

import contextlib
import copy
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml
from agents import local_agent, nodes, write_cluster_file
from jobs import document, logs, role, submit, wait_placeable, wait_status
from rlark_tunnel_agent.agent.tunnels import TunnelOptions
from stack import Stack, eventually
from test_rlinf_e2e import EXAMPLE, REPO, check_training, host_paths, manifest

pytestmark = pytest.mark.e2e

LOOPBACK = TunnelOptions(listen_host="127.0.0.1", advertise_host="127.0.0.1")


def example_naming_no_cluster(outputs: Path, **spec: Any) -> dict[str, Any]:
    """The shipped RLinf document with this checkout's code and ``outputs``, and no ``cluster`` on any role."""
    doc: dict[str, Any] = copy.deepcopy(yaml.safe_load(EXAMPLE.read_text()))
    for task in doc["spec"]["tasks"]:
        del task["cluster"]
        for mount in task["mounts"]:
            if mount["path"] == "/code":
                mount["source"] = str(REPO / "examples" / "rlinf_cpu")
            elif mount["path"] == "/outputs":
                mount["source"] = str(outputs)
    doc["spec"].update(spec)
    return doc


async def create_domain(stack: Stack, cidr: str) -> str:
    name = f"lab-{uuid.uuid4().hex[:6]}"
    async with stack.client() as client:
        created = await client.post("/api/v1/domains", json={"name": name, "cidr": cidr})
        assert created.status_code == 201, created.text
    return name


def scheduled_reason(job: dict[str, Any]) -> str:
    return str(next(e["reason"] for e in job["timeline"] if e["to_status"] == "Scheduled"))


@pytest.mark.heavy
@pytest.mark.timeout(1500)
async def test_the_rlinf_example_naming_no_cluster_runs_on_the_cluster_that_fits_then_across_two_of_a_domain(
    stack: Stack, tmp_path: Path
) -> None:
    allow = host_paths(tmp_path)
    credentials = {
        c: await stack.register_cluster(c, hostpath_allow=allow) for c in ("alpha", "beta", "gamma")
    }
    domain = await create_domain(stack, "10.202.0.0/16")
    files = {
        c: write_cluster_file(tmp_path / f"{c}.yaml", c, nodes(c, n))
        for c, n in (("alpha", 1), ("beta", 2), ("gamma", 3))
    }
    outputs = tmp_path / "outputs"
    outputs.mkdir()
    outputs.chmod(0o1777)  # shared by the job's unprivileged workers, as an admin would set it up

    def agent(cluster: str) -> contextlib.AbstractAsyncContextManager[Any]:
        return local_agent(
            stack.url, credentials[cluster], files[cluster], tmp_path / f"agent-{cluster}", tunnels=LOOPBACK
        )

    async with agent("alpha"), agent("beta"):
        # (1) gamma holds the three workers alone: the job lands there, outside any domain.
        async with agent("gamma"):
            doc = example_naming_no_cluster(outputs)
            # Placeable as soon as alpha and beta are online (spanning); wait until gamma's nodes count too.
            said: list[str] = []

            async def fits_on_gamma() -> bool:
                async with stack.client() as client:
                    preview = (await client.post("/api/v1/jobs:preview", json=doc)).json()
                said[:] = [preview["layout"]["message"] if preview["layout"] else str(preview["errors"])]
                return said[0] == "fits on gamma alone"

            try:
                await eventually(
                    fits_on_gamma, timeout_s=60, interval_s=0.5, what="the preview placing it on gamma"
                )
            except AssertionError as exc:
                raise AssertionError(f"{exc}; the preview said: {said}") from None
            first = await submit(stack, doc)
            one = await wait_status(stack, first["id"], {"Succeeded"}, timeout_s=600)
            one_files = await manifest(stack, first["id"])
        assert {w["cluster"] for w in one["workers"]} == {"gamma"}
        assert one["network_domain"] is None
        assert {w["virtual_ip"] for w in one["workers"]} == {None}
        assert scheduled_reason(one) == "placed 3 worker(s) on gamma: it fits there alone"
        check_training(
            "\n".join(entry["line"] for entry in await logs(stack, first["id"])), one_files, outputs
        )

        # (2) gamma's agent is gone: no cluster holds them alone, and the same document spans alpha and beta.
        async def spans() -> bool:
            async with stack.client() as client:
                said = (await client.post("/api/v1/jobs:preview", json=doc)).json()
            return bool(said["layout"]) and said["layout"]["kind"] == "span"

        await eventually(spans, timeout_s=60, interval_s=0.5, what="gamma offline and the job spanning")
        again = await submit(stack, doc)
        # Running: its three Ray nodes joined over the virtual IPs and RLinf's script started. The rest of an
        # RLinf run across a domain is `test_rlinf_e2e.py`'s (the same code, to its end and a resume).
        running = await wait_status(stack, again["id"], {"Running"}, timeout_s=600)
        async with stack.client() as client:
            cancelled = await client.post(f"/api/v1/jobs/{again['id']}:cancel")
        assert cancelled.status_code in (200, 202), cancelled.text
        await wait_status(stack, again["id"], {"Cancelled"}, timeout_s=120)

    assert sorted(w["cluster"] for w in running["workers"]) == ["alpha", "beta", "beta"]
    assert running["network_domain"] == domain
    assert all(w["virtual_ip"] for w in running["workers"])
    assert running["ray_nodes"] == {"joined": 3, "expected": 3}
    assert scheduled_reason(running).startswith(
        f"placed 3 worker(s) across alpha, beta through network domain {domain}, as no single cluster fits them now:"
        " header → alpha, worker → beta"
    )


async def test_with_span_clusters_never_a_job_no_cluster_holds_waits_and_the_queue_says_what_spanning_would_change(
    stack: Stack, tmp_path: Path
) -> None:
    alpha = await stack.register_cluster("alpha")
    beta = await stack.register_cluster("beta")
    domain = await create_domain(stack, "10.203.0.0/16")
    # beta holds two workers now and three some day (a third node, cordoned): the job waits, it is not refused.
    beta_nodes = [*nodes("beta", 3)]
    beta_nodes[2]["unschedulable"] = True
    alpha_file = write_cluster_file(tmp_path / "alpha.yaml", "alpha", nodes("alpha", 1))
    beta_file = write_cluster_file(tmp_path / "beta.yaml", "beta", beta_nodes)
    async with (
        local_agent(stack.url, alpha, alpha_file, tmp_path / "agent-alpha"),
        local_agent(stack.url, beta, beta_file, tmp_path / "agent-beta"),
    ):
        tasks = [role("header", 1), role("worker", 2)]
        for task in tasks:
            del task["cluster"]
        doc = document("never spans", tasks, "echo never runs\n", placement={"spanClusters": "never"})
        await wait_placeable(stack, doc)
        waiting = await submit(stack, doc)

        async def explained() -> dict[str, Any] | None:
            async with stack.client() as client:
                found = (await client.get(f"/api/v1/jobs/{waiting['id']}")).json()
            return found if found.get("pending") else None

        job = await eventually(explained, timeout_s=60, interval_s=0.5, what="the job's pending reason")
        assert job["status"] == "Pending"
        assert job["reason"].startswith("no cluster fits the whole job now; closest: beta (2 of 3 workers)")
        assert job["reason"].endswith(
            f"spanning alpha, beta through network domain {domain} would place it now "
            "(spec.placement.spanClusters is never)"
        )
        async with stack.client() as client:
            detail = (await client.get(f"/api/v1/queue/{waiting['id']}")).json()
            cancelled = await client.post(f"/api/v1/jobs/{waiting['id']}:cancel")
        assert cancelled.status_code in (200, 202), cancelled.text
    hints = {h["kind"]: h for h in detail["hints"]}
    assert hints["span"]["message"] == (
        "with spec.placement.spanClusters: whenNeeded it would run now across alpha, beta through network domain "
        f"{domain}"
    )
    assert hints["span"]["message_key"] == "queue.hint.span"
    assert detail["job"]["any_cluster"] is True
