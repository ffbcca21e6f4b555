"""Step 1 of the user guide end to end: a registered local cluster's agent reports its nodes; they show
through the gateway API and the CLI; liveness follows the agent; cordon reaches the agent and shows."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from agents import local_agent, write_cluster_file
from stack import Stack, eventually

pytestmark = pytest.mark.e2e

NODES = [
    {
        "name": "node-a100-0",
        "labels": {"rlark.io/node-category": "cloud", "rlark.io/gpu-model": "A100"},
        "gpus": 8,
        "gpu_model": "A100",
        "cpu": 32,
        "memory": "256Gi",
    },
    {
        "name": "node-a100-1",
        "labels": {"rlark.io/node-category": "cloud", "rlark.io/gpu-model": "A100"},
        "gpus": 8,
        "gpu_model": "A100",
        "cpu": 32,
        "memory": "256Gi",
    },
    {
        "name": "node-l40-0",
        "labels": {"rlark.io/node-category": "edge", "rlark.io/gpu-model": "L40"},
        "gpus": 4,
        "gpu_model": "L40",
        "cpu": 16,
        "memory": "64Gi",
    },
]


async def cluster(stack: Stack, name: str) -> dict:  # type: ignore[type-arg]
    async with stack.client() as admin:
        response = await admin.get(f"/api/v1/clusters/{name}")
        assert response.status_code == 200, response.text
        return response.json()  # type: ignore[no-any-return]


async def test_agent_nodes_appear_liveness_follows_the_agent_and_cordon_shows(
    stack: Stack, tmp_path: Path
) -> None:
    credential = await stack.register_cluster(
        "lab", pod_cidrs=["10.244.0.0/16"], service_cidrs=["10.96.0.0/16"]
    )
    cluster_file = write_cluster_file(tmp_path / "lab.yaml", "lab", NODES)

    async with local_agent(stack.url, credential, cluster_file, tmp_path / "agent"):

        async def three_nodes() -> list | None:  # type: ignore[type-arg]
            async with stack.client() as admin:
                items = (await admin.get("/api/v1/nodes", params={"cluster": "lab"})).json()["items"]
            return items if len(items) == 3 else None

        nodes = {n["name"]: n for n in await eventually(three_nodes, what="3 nodes in inventory")}
        assert nodes["node-l40-0"]["labels"]["rlark.io/gpu-model"] == "L40"
        assert nodes["node-a100-0"]["gpu_count"] == 8
        assert (await cluster(stack, "lab"))["online"] is True

        async with stack.client() as admin:
            selected = (
                await admin.get("/api/v1/nodes", params={"selector": "rlark.io/gpu-model=A100"})
            ).json()
        assert sorted(n["name"] for n in selected["items"]) == ["node-a100-0", "node-a100-1"]

        listed = await stack.cli("nodes", "list", "--cluster", "lab", "-o", "json")
        assert listed.returncode == 0, listed.stderr
        assert {n["name"] for n in json.loads(listed.stdout)["items"]} == set(nodes)
        table = await stack.cli("nodes", "list", "--cluster", "lab")
        assert "node-l40-0" in table.stdout
        assert "L40" in table.stdout

        cordon = await stack.cli("nodes", "cordon", "lab", "node-a100-1")
        assert cordon.returncode == 0, cordon.stderr

        async def cordoned() -> bool:
            async with stack.client() as admin:
                node = (await admin.get("/api/v1/clusters/lab/nodes/node-a100-1")).json()
            return node["schedulable"] is False

        await eventually(cordoned, what="node-a100-1 unschedulable after cordon")

    async def offline() -> bool:
        return (await cluster(stack, "lab"))["online"] is False

    await eventually(offline, timeout_s=60, what="cluster offline after the agent stopped")

    async with local_agent(stack.url, credential, cluster_file, tmp_path / "agent"):

        async def online() -> bool:
            return (await cluster(stack, "lab"))["online"] is True

        await eventually(online, what="cluster online after the agent restarted")


async def test_agent_with_an_unknown_credential_is_refused(stack: Stack, tmp_path: Path) -> None:
    from rlark_tunnel_agent.agent.session import SessionRefused

    cluster_file = write_cluster_file(tmp_path / "x.yaml", "x", NODES[:1])
    with pytest.raises(SessionRefused):
        async with local_agent(
            stack.url, "rlark-agent-not-a-real-credential", cluster_file, tmp_path / "agent"
        ):
            pass


async def test_users_cannot_register_clusters_and_anonymous_calls_get_401(stack: Stack) -> None:
    _, token = await stack.new_user()
    async with stack.client(token) as user:
        refused = await user.post("/api/v1/clusters", json={"name": "mine", "runtime": "local"})
        assert refused.status_code == 403
    async with stack.client("not-a-token") as anonymous:
        assert (await anonymous.get("/api/v1/clusters")).status_code == 401
