"""Local runtime pieces without Ray: cluster file, GPUs, specs, bootstrap inputs, nodes."""

from __future__ import annotations

import os
import subprocess
from ipaddress import IPv4Network
from pathlib import Path

import pytest
from local_runtime_helpers import CLUSTER, make_options, plain_spec, process_env, spec
from pydantic import ValidationError
from rlark_tunnel_agent.runtime.bootstrap import BOOTSTRAP_DIR
from rlark_tunnel_agent.runtime.driver import RuntimeDriver, WorkerPhase, WorkerSpec, worker_id_for
from rlark_tunnel_agent.runtime.local.cluster import load_cluster, parse_memory
from rlark_tunnel_agent.runtime.local.driver import LocalDriver
from rlark_tunnel_agent.runtime.local.gpus import Gpu, parse_nvidia_smi_list
from rlark_tunnel_agent.runtime.markers import EXIT_BAD_INPUT


def test_cluster_file_declares_virtual_nodes(tmp_path: Path) -> None:
    path = tmp_path / "cluster.yaml"
    path.write_text(
        "cluster: local-dev\n"
        "nodes:\n"
        "  - name: gpu-0\n"
        "    labels: {rlark.io/gpu-model: A100, rlark.io/node-category: local}\n"
        "    gpus: 8\n"
        "    gpu_model: A100\n"
        "    cpu: 16\n"
        "    memory: 64Gi\n"
        "  - name: cpu-0\n"
        "    unschedulable: true\n"
    )
    cluster = load_cluster(path)
    assert cluster.cluster == "local-dev"
    gpu = cluster.node("gpu-0")
    assert gpu is not None
    assert (gpu.gpus, gpu.gpu_model, gpu.cpu, gpu.memory) == (8, "A100", 16.0, 64 << 30)
    assert gpu.labels["rlark.io/gpu-model"] == "A100"
    assert cluster.node("cpu-0").unschedulable  # type: ignore[union-attr]
    assert cluster.node("nope") is None


def test_cluster_file_refuses_duplicate_node_names(tmp_path: Path) -> None:
    path = tmp_path / "cluster.yaml"
    path.write_text("cluster: c\nnodes:\n  - name: a\n  - name: a\n")
    with pytest.raises(ValidationError, match="duplicate node names: a"):
        load_cluster(path)


@pytest.mark.parametrize(
    ("quantity", "expected"),
    [(1024, 1024), ("512Mi", 512 << 20), ("64Gi", 64 << 30), ("16G", 16 * 10**9), ("1.5Ki", 1536)],
)
def test_memory_quantities_are_read_like_kubernetes(quantity: int | str, expected: int) -> None:
    assert parse_memory(quantity) == expected


def test_memory_quantity_garbage_is_refused() -> None:
    with pytest.raises(ValueError, match="not a memory quantity"):
        parse_memory("lots")


def test_nvidia_smi_list_is_parsed_into_gpus() -> None:
    output = (
        "GPU 0: NVIDIA H200 (UUID: GPU-8b1c2d3e-0000-1111-2222-333344445555)\n"
        "GPU 1: NVIDIA A100-SXM4-80GB (UUID: GPU-99999999-aaaa-bbbb-cccc-dddddddddddd)\n"
        "  MIG 1g.10gb     Device  0: (UUID: MIG-1234)\n"
        "No devices were found\n"
    )
    assert parse_nvidia_smi_list(output) == [
        Gpu(0, "H200", "GPU-8b1c2d3e-0000-1111-2222-333344445555"),
        Gpu(1, "A100-SXM4-80GB", "GPU-99999999-aaaa-bbbb-cccc-dddddddddddd"),
    ]


def test_worker_ids_are_job_role_index() -> None:
    assert worker_id_for("job-7", "rollout", 2) == "job-7-rollout-2"


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"rank": 3}, "rank must be below num_nodes"),
        ({"run_script": "python train.py", "rank": 1}, "only the Header has a run script"),
        ({"rank": 1, "header_address": ""}, "needs the Header's address"),
        ({"worker_id": "Job_1/../x"}, "lower-case letters"),
        ({"env": {"BAD-NAME": "x"}}, "not a valid variable name"),
        ({"outputs": ("/data/../../etc",)}, "without ':' or '..'"),
        ({"tensorboard_dir": "/logs:/tb"}, "without ':' or '..'"),
        (
            {"ssh_public_keys": ("-----BEGIN OPENSSH PRIVATE KEY----- b3BlbnNzaA",)},
            "looks like a private key",
        ),
    ],
)
def test_worker_specs_refuse_inconsistent_fields(fields: dict[str, object], message: str) -> None:
    with pytest.raises(ValidationError, match=message) as caught:
        spec("job-1", "header", 0, **{"rank": 0, "num_nodes": 3, **fields})  # type: ignore[arg-type]
    assert "b3BlbnNzaA" not in str(caught.value)  # key material is never echoed


def test_a_valid_worker_spec_keeps_its_keys_without_blank_lines() -> None:
    worker = spec("job-1", "rollout", 1, rank=2, num_nodes=3,
                  ssh_public_keys=["ssh-ed25519 AAAA a@b", "  ", "ssh-rsa BBBB c@d "])  # fmt: skip
    assert isinstance(worker, WorkerSpec)
    assert worker.ssh_public_keys == ("ssh-ed25519 AAAA a@b", "ssh-rsa BBBB c@d")


def test_bootstrap_refuses_to_start_without_its_inputs(tmp_path: Path) -> None:
    done = subprocess.run(
        ["bash", str(BOOTSTRAP_DIR / "bootstrap.sh")],
        env={"PATH": os.environ["PATH"], "HOME": str(tmp_path), "RLARK_JOB_ID": "j"},
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == EXIT_BAD_INPUT
    assert "missing required variables: RLARK_WORKER_ID" in done.stderr
    assert "RLARK_HEADER_ADDRESS" in done.stderr


async def test_nodes_are_observed_as_declared_without_real_gpus(tmp_path: Path) -> None:
    driver = LocalDriver(CLUSTER, make_options(tmp_path / "state", use_netns=False))
    assert isinstance(driver, RuntimeDriver)
    nodes = {node.name: node for node in await driver.observe_nodes()}
    assert set(nodes) == {"node-a", "node-b", "node-c"}
    a = nodes["node-a"]
    assert (a.gpu_count, a.gpu_model, a.ready, a.schedulable) == (2, "A100", True, True)
    assert a.labels == {"rlark.io/gpu-model": "A100"}
    assert (nodes["node-c"].memory_bytes, nodes["node-c"].memory_allocatable_bytes) == (8 << 30, 8 << 30)
    assert (a.gpu_allocatable, a.gpu_allocated, a.gpu_allocated_foreign) == (2, 0, 0)


async def test_every_node_reports_the_clusters_bridge_subnet_as_its_pod_network(tmp_path: Path) -> None:
    options = make_options(tmp_path / "state", use_netns=True, subnet=IPv4Network("10.254.7.0/24"))
    nodes = await LocalDriver(CLUSTER, options).observe_nodes()
    assert {n.name: n.pod_cidrs for n in nodes} == {
        n: [str(options.subnet)] for n in ("node-a", "node-b", "node-c")
    }
    # Without network namespaces workers share the host's network: the agent knows no pod network.
    shared = await LocalDriver(CLUSTER, make_options(tmp_path / "other", use_netns=False)).observe_nodes()
    assert [n.pod_cidrs for n in shared] == [[], [], []]


async def test_ensure_refuses_a_node_outside_the_cluster(tmp_path: Path) -> None:
    driver = LocalDriver(CLUSTER, make_options(tmp_path / "state", use_netns=False))
    await driver.start()
    try:
        with pytest.raises(ValueError, match="node 'elsewhere' is not in cluster local-test"):
            await driver.ensure_worker(plain_spec("job-x", "header", 0, rank=0, num_nodes=1,
                                            node_name="elsewhere", run_script="true"))  # fmt: skip
        assert await driver.list_workers() == []
    finally:
        await driver.close()


async def test_real_gpus_are_handed_out_once_each(tmp_path: Path) -> None:
    # As if `nvidia-smi -L` had listed two GPUs; the workers below never get to run Ray.
    gpus = [Gpu(0, "H200", "GPU-a"), Gpu(1, "H200", "GPU-b")]
    driver = LocalDriver(CLUSTER, make_options(tmp_path / "state", use_netns=False), gpus=gpus)
    await driver.start()
    hold = 'while [ ! -e "$HOME/go" ]; do sleep 0.2; done\n'
    first = plain_spec("job-g", "header", 0, rank=0, num_nodes=3, gpus=1, prepare_script=hold,
                 run_script="true")  # fmt: skip
    second = plain_spec("job-g", "rollout", 0, rank=1, num_nodes=3, gpus=1, prepare_script=hold)
    third = plain_spec("job-g", "rollout", 1, rank=2, num_nodes=3, gpus=1, prepare_script=hold)
    try:
        nodes = {node.name: node for node in await driver.observe_nodes()}
        assert (nodes["node-a"].gpu_count, nodes["node-a"].gpu_model) == (2, "H200")
        assert nodes["node-c"].gpu_count == 2  # declared none: the machine's GPUs
        await driver.ensure_worker(first)
        await driver.ensure_worker(second)
        # The machine's two GPUs are taken: node-c, which offers the whole pool, is full too.
        held = {n.name: (n.gpu_allocated, n.gpu_allocated_foreign) for n in await driver.observe_nodes()}
        assert held == {"node-a": (2, 0), "node-b": (2, 2), "node-c": (2, 2)}
        with pytest.raises(RuntimeError, match="1 GPUs asked, 0 free"):
            await driver.ensure_worker(third)
        devices = []
        for worker in (first, second):
            record = driver.record(worker.worker_id)
            assert record is not None
            assert record.pid is not None
            devices.append(process_env(record.pid)["CUDA_VISIBLE_DEVICES"])
        assert sorted(devices) == ["0", "1"]
        await driver.stop_worker(first.worker_id)
        await driver.ensure_worker(third)  # the stopped worker's GPU is free again
        assert driver.record(third.worker_id).gpu_indices == driver.record(first.worker_id).gpu_indices  # type: ignore[union-attr]
        assert (await driver.get_status(first.worker_id)).phase == WorkerPhase.STOPPED  # type: ignore[union-attr]
    finally:
        for worker in (first, second, third):
            await driver.stop_worker(worker.worker_id)
        await driver.close()


async def test_a_workers_gpus_are_allocated_on_its_node_until_it_is_stopped(tmp_path: Path) -> None:
    driver = LocalDriver(CLUSTER, make_options(tmp_path / "state", use_netns=False), gpus=[])
    await driver.start()
    hold = 'while [ ! -e "$HOME/go" ]; do sleep 0.2; done\n'
    header = plain_spec("job-u", "header", 0, rank=0, num_nodes=2, gpus=2, prepare_script=hold,
                  run_script="true")  # fmt: skip
    other = plain_spec(
        "job-u", "rollout", 0, rank=1, num_nodes=2, gpus=1, node_name="node-b", prepare_script=hold
    )

    async def allocated() -> dict[str, int]:
        return {n.name: n.gpu_allocated for n in await driver.observe_nodes()}

    try:
        assert await allocated() == {"node-a": 0, "node-b": 0, "node-c": 0}
        await driver.ensure_worker(header)
        await driver.ensure_worker(other)
        assert await allocated() == {"node-a": 2, "node-b": 1, "node-c": 0}
        await driver.stop_worker(header.worker_id)
        assert await allocated() == {"node-a": 0, "node-b": 1, "node-c": 0}
        await driver.stop_worker(other.worker_id)
        assert await allocated() == {"node-a": 0, "node-b": 0, "node-c": 0}
    finally:
        for worker in (header, other):
            await driver.stop_worker(worker.worker_id)
        await driver.close()
