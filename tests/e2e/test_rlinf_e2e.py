"""Real RLinf jobs run unchanged (issue 13): the shipped example, `examples/rlinf-cpu.yaml`, written the way
RLinf's docs write a job, through the whole platform with the real `rlinf` 0.3.0 package.

Only what a user edits changes between the runs: the clusters the roles name and the two hostPath sources
(the example's code from this checkout, a fresh outputs directory). Its env and scripts stay as shipped — no
RLark-specific variable or workaround — so what must hold is on the platform's side: the code at `/code` and
the outputs at `/outputs` (container paths) inside every worker, workers resolving each other's names, Gloo
picking the interface that carries Ray, and the Header waiting for every node.

(a) three workers on the local runtime; (b) the same job across two clusters in one network domain (Gloo and
RLinf's point-to-point traffic over the tunnel); (c) its config given inline as `spec.rlinfConfig`: the
config the server checked is the file every worker runs (`$RLARK_RLINF_CONFIG`, Hydra's `--config-path`).
"""

from __future__ import annotations

import copy
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml
from agents import local_agent, nodes, write_cluster_file
from jobs import job, logs, submit, wait_placeable, wait_status
from rlark_tunnel_agent.agent.tunnels import TunnelOptions
from stack import Stack, eventually

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "rlinf-cpu.yaml"
STEPS, SAVE_EVERY, RANKS = 12, 4, 3
EXPERIMENT = "rlinf-cpu-smoke"


def host_paths(tmp_path: Path) -> list[str]:
    """The clusters' hostPath policy: the example's two sources (the code and ``tmp_path/outputs``)."""
    return [str(REPO / "examples" / "rlinf_cpu"), str(tmp_path / "outputs")]


def example(outputs: Path, clusters: dict[str, str], **spec: Any) -> dict[str, Any]:
    """The shipped document with this checkout's code, ``outputs`` and the given role → cluster."""
    doc: dict[str, Any] = yaml.safe_load(EXAMPLE.read_text())
    doc = copy.deepcopy(doc)
    for task in doc["spec"]["tasks"]:
        task["cluster"] = clusters[task["name"]]
        for mount in task["mounts"]:
            if mount["path"] == "/code":
                mount["source"] = str(REPO / "examples" / "rlinf_cpu")
            elif mount["path"] == "/outputs":
                mount["source"] = str(outputs)
        assert "env" not in task, "the example must not need platform-specific variables"
    doc["spec"].update(spec)
    return doc


async def manifest(stack: Stack, job_id: str) -> set[str]:
    async def listed() -> set[str] | None:
        files = {f["path"] for o in (await job(stack, job_id))["outputs"] for f in o["files"]}
        return files if any("global_step_" in f for f in files) else None

    found: set[str] = await eventually(listed, timeout_s=60, what="checkpoints in the output manifest")
    return found


def check_training(text: str, files: set[str], outputs: Path, experiment: str = EXPERIMENT) -> None:
    assert "done: loss" in text, text[-4000:]
    assert "on 3 ranks" in text
    for step in range(SAVE_EVERY, STEPS + 1, SAVE_EVERY):
        for rank in range(RANKS):
            relative = f"rlinf/{experiment}/checkpoints/global_step_{step}/actor/model_rank_{rank}.pt"
            assert (outputs / relative).is_file(), relative  # on the host, through the mount
            assert f"/outputs/{relative}" in files, sorted(files)[:20]
    events = [f for f in files if f.startswith("/outputs/rlinf/logs/tensorboard/") and ".tfevents." in f]
    assert events, sorted(files)[:40]


async def test_the_rlinf_example_runs_unchanged_on_three_local_workers(stack: Stack, tmp_path: Path) -> None:
    credential = await stack.register_cluster("local", hostpath_allow=host_paths(tmp_path))
    cluster_file = write_cluster_file(tmp_path / "local.yaml", "local", nodes("local", 3))
    outputs = tmp_path / "outputs"
    outputs.mkdir()
    outputs.chmod(0o1777)  # shared by the job's unprivileged workers, as an admin would set it up
    async with local_agent(stack.url, credential, cluster_file, tmp_path / "agent"):
        doc = example(outputs, {"header": "local", "worker": "local"})
        await wait_placeable(stack, doc)
        submitted = await submit(stack, doc)
        final = await wait_status(stack, submitted["id"], {"Succeeded"}, timeout_s=600)
        files = await manifest(stack, submitted["id"])

    assert len(final["workers"]) == 3
    check_training("\n".join(entry["line"] for entry in await logs(stack, submitted["id"])), files, outputs)


async def test_the_rlinf_example_runs_across_two_clusters_of_a_network_domain(
    stack: Stack, tmp_path: Path
) -> None:
    alpha = await stack.register_cluster("alpha", hostpath_allow=host_paths(tmp_path))
    beta = await stack.register_cluster("beta", hostpath_allow=host_paths(tmp_path))
    domain = f"net-{uuid.uuid4().hex[:6]}"
    async with stack.client() as client:
        created = await client.post("/api/v1/domains", json={"name": domain, "cidr": "10.201.0.0/16"})
        assert created.status_code == 201, created.text
    alpha_file = write_cluster_file(tmp_path / "alpha.yaml", "alpha", nodes("alpha", 1))
    beta_file = write_cluster_file(tmp_path / "beta.yaml", "beta", nodes("beta", 2))
    outputs = tmp_path / "outputs"
    outputs.mkdir()
    outputs.chmod(0o1777)  # shared by the job's unprivileged workers, as an admin would set it up
    loopback = TunnelOptions(listen_host="127.0.0.1", advertise_host="127.0.0.1")
    async with (
        local_agent(stack.url, alpha, alpha_file, tmp_path / "agent-alpha", tunnels=loopback),
        local_agent(stack.url, beta, beta_file, tmp_path / "agent-beta", tunnels=loopback),
    ):
        doc = example(outputs, {"header": "alpha", "worker": "beta"}, networkDomain=domain)
        await wait_placeable(stack, doc)
        submitted = await submit(stack, doc)
        final = await wait_status(stack, submitted["id"], {"Succeeded"}, timeout_s=600)
        files = await manifest(stack, submitted["id"])

    assert sorted(w["cluster"] for w in final["workers"]) == ["alpha", "beta", "beta"]
    assert all(w["virtual_ip"] for w in final["workers"])
    check_training("\n".join(entry["line"] for entry in await logs(stack, submitted["id"])), files, outputs)


async def test_an_inline_rlinf_config_is_the_file_every_worker_runs(stack: Stack, tmp_path: Path) -> None:
    credential = await stack.register_cluster("local", hostpath_allow=host_paths(tmp_path))
    cluster_file = write_cluster_file(tmp_path / "local.yaml", "local", nodes("local", 3))
    outputs = tmp_path / "outputs"
    outputs.mkdir()
    outputs.chmod(0o1777)  # shared by the job's unprivileged workers, as an admin would set it up
    config: dict[str, Any] = yaml.safe_load((REPO / "examples/rlinf_cpu/config/cpu_smoke.yaml").read_text())
    config["runner"]["experiment_name"] = "inline-config"  # only the checked config says so
    run = (
        "cd /code\n"
        'python train_cpu_smoke.py --config-path "$(dirname "$RLARK_RLINF_CONFIG")" --config-name rlinf\n'
    )
    async with local_agent(stack.url, credential, cluster_file, tmp_path / "agent"):
        doc = example(outputs, {"header": "local", "worker": "local"}, rlinfConfig=config, runScript=run)
        await wait_placeable(stack, doc)
        submitted = await submit(stack, doc)
        await wait_status(stack, submitted["id"], {"Succeeded"}, timeout_s=600)
        files = await manifest(stack, submitted["id"])

    text = "\n".join(entry["line"] for entry in await logs(stack, submitted["id"]))
    check_training(text, files, outputs, experiment="inline-config")
    assert not (outputs / "rlinf" / EXPERIMENT).exists()
