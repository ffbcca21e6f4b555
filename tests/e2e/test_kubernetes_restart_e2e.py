"""Restart attempts on the Kubernetes test bed (issue 17, ADR 0014): a KWOK node deleted under a running
worker → ``NodeGone`` → the whole gang is placed again, on other nodes.

The bed, its agents and its job are `test_kubernetes_e2e`'s (two API servers with KWOK, a real agent
each, every service through the gateway). Deleting a Node object is what a cloud does to a node it took
back: KWOK stops simulating it, and with no pod garbage collector on the test bed the worker's pod stays
bound to a node that no longer exists. The agent's driver reports that worker failed with
"NodeGone: node <name> was deleted from the cluster"; the inventory marks the node gone (it left the
agent's node list); the scheduler restarts the job as attempt 2 under new worker ids, on the nodes left.
"""

from __future__ import annotations

from typing import Any

import pytest
import test_kubernetes_e2e as kubernetes_e2e
from jobs import TERMINAL, job, submit, wait_status
from rlark_devinfra.k8s import testbed
from stack import eventually
from test_kubernetes_e2e import Bed, prepare_job

stack, gpu_nodes, bed = kubernetes_e2e.stack, kubernetes_e2e.gpu_nodes, kubernetes_e2e.bed
"""The Kubernetes bed's fixtures (the platform with inventory's default liveness, the pool's nodes, the
clusters and their agents), shared with its own tests."""

pytestmark = [pytest.mark.k8s, pytest.mark.e2e, pytest.mark.timeout(300)]


async def events(bed: Bed, job_id: str) -> list[dict[str, Any]]:
    async with bed.stack.client() as client:
        response = await client.get(f"/api/v1/jobs/{job_id}/events")
    assert response.status_code == 200, response.text
    return response.json()["items"]  # type: ignore[no-any-return]


async def test_a_node_deleted_under_a_running_worker_restarts_the_gang_on_other_nodes(bed: Bed) -> None:
    doc = await prepare_job(bed, "node gone")
    doc["spec"]["restartPolicy"] = {"maxRestarts": 1, "on": ["NodeGone"]}
    job_id = (await submit(bed.stack, doc))["id"]
    running = await wait_status(bed.stack, job_id, {"Running"}, timeout_s=90)
    assert running["attempt"] == 1
    victim = next(w for w in running["workers"] if w["cluster"] == "beta" and w["index"] == 1)
    lost_node = victim["node"]
    first_pods = bed.pods(job_id)
    assert first_pods[victim["id"]]["spec"]["nodeName"] == lost_node

    testbed.delete_nodes(bed.clusters["beta"], [lost_node])

    async def second_attempt_running() -> dict[str, Any] | None:
        current = await job(bed.stack, job_id)
        if current["status"] in TERMINAL:
            raise AssertionError(f"job ended {current['status']}: {current['reason']}")
        return current if current["attempt"] == 2 and current["status"] == "Running" else None

    final = await eventually(second_attempt_running, timeout_s=150, what="attempt 2 running")

    # The gang was placed again under attempt 2's ids, its beta workers on the two nodes left.
    assert final["restarts"] == 1
    workers = {w["id"]: w for w in final["workers"]}
    assert set(workers) == {f"{w['id']}-a2" for w in running["workers"]}
    beta_nodes = sorted(w["node"] for w in workers.values() if w["cluster"] == "beta")
    assert beta_nodes == sorted(n for n in bed.nodes["beta"] if n != lost_node)
    assert all(w["phase"] == "Joined" for w in workers.values()), workers

    failure = f"worker {victim['id']}: NodeGone: node {lost_node} was deleted from the cluster"
    first, second = final["attempts"]
    assert (first["number"], first["reason"]) == (1, failure)
    assert (second["number"], second["ended_at"]) == (2, None)
    restart = next(
        e
        for e in await events(bed, job_id)
        if e["kind"] == "status" and e["details"].get("failed_attempt") == 1
    )
    assert (restart["from_status"], restart["to_status"]) == ("Running", "Pending")
    assert restart["reason"] == f"attempt 2 starts after NodeGone: {failure}"
    assert restart["details"]["failure"] == "NodeGone"

    # The inventory says the node is gone; the pods are attempt 2's alone, each on its worker's node
    # (attempt 1's pod on the deleted node was deleted at once by its stop: no kubelet would finish it).
    async with bed.stack.client() as client:
        node = await client.get(f"/api/v1/clusters/beta/nodes/{lost_node}")
    assert node.status_code == 200, node.text
    assert node.json()["gone"] is True

    async def only_attempt_2_pods() -> dict[str, dict[str, Any]] | None:
        pods = bed.pods(job_id)
        return pods if set(pods) == set(workers) else None

    pods = await eventually(only_attempt_2_pods, timeout_s=60, what="attempt 1's pods deleted")
    for worker_id, pod in pods.items():
        assert (pod["cluster"], pod["spec"]["nodeName"]) == (
            workers[worker_id]["cluster"],
            workers[worker_id]["node"],
        )
        assert pod["status"]["phase"] == "Running"

    async with bed.stack.client() as client:
        assert (await client.post(f"/api/v1/jobs/{job_id}:cancel")).status_code == 200
    await wait_status(bed.stack, job_id, {"Cancelled"}, timeout_s=60)
