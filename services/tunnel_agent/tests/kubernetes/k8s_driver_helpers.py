"""Shared builders for the Kubernetes driver tests (imported by name; pytest puts this dir on sys.path)."""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

from rlark_devinfra.k8s import testbed
from rlark_tunnel_agent.runtime.driver import Mount, MountType, WorkerSpec
from rlark_tunnel_agent.runtime.kubernetes import KubernetesDriverConfig

PUBLIC_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOv2TSqGvpmqLhJLgaETmq2Jm1kfBpvGb0aZ1Y3kq7Qq alice@laptop"
OTHER_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIK1R0vSZHOeDD4zP6pvJ4mD7G2jvCZdEmyqhxnJ1Hk3A bob@desk"


def header_spec(job_id: str, node: str, *, num_nodes: int = 2, gpus: int = 8, **extra: Any) -> WorkerSpec:
    fields: dict[str, Any] = {
        "job_id": job_id,
        "worker_id": f"{job_id}-header-0",
        "cluster": "gpu-a",
        "role": "header",
        "index": 0,
        "rank": 0,
        "num_nodes": num_nodes,
        "is_header": True,
        "node_name": node,
        "gpus": gpus,
        "total_gpus": gpus * num_nodes,
        "image": "registry.example.com/rlinf/rlinf:0.2.1",
        "prepare_script": "pip install -e .\n",
        "run_script": "python train.py --config $(CONFIG)\n",
        "env": {"CONFIG": "ppo.yaml", "PRICE": "$(HOME) costs $5"},
        "mounts": (
            Mount(type=MountType.HOST_PATH, source="/data/datasets", target="/datasets", read_only=True),
            Mount(type=MountType.HOST_PATH, source="pvc://checkpoints/job-a", target="/ckpt"),
            Mount(
                type=MountType.HOST_PATH,
                source="csi://s3.csi.example.com?bucket=models&prefix=a",
                target="/models",
                read_only=True,
            ),
            Mount(type=MountType.EMPTY_DIR, target="/scratch"),
        ),
        "ssh_public_keys": (PUBLIC_KEY,),
        "outputs": ("/ckpt/out",),
        "join_deadline_s": 300,
    }
    fields.update(extra)
    return WorkerSpec(**fields)


def worker_spec(
    job_id: str, node: str, index: int, *, num_nodes: int = 2, gpus: int = 8, **extra: Any
) -> WorkerSpec:
    fields: dict[str, Any] = {
        "job_id": job_id,
        "worker_id": f"{job_id}-actor-{index}",
        "cluster": "gpu-a",
        "role": "actor",
        "index": index,
        "rank": index + 1,
        "num_nodes": num_nodes,
        "is_header": False,
        "node_name": node,
        "gpus": gpus,
        "image": "registry.example.com/rlinf/rlinf:0.2.1",
        "header_address": f"rlark-{job_id}-header-0.rlark-{job_id}.ns.svc",
        "ssh_public_keys": (PUBLIC_KEY, OTHER_KEY),
    }
    fields.update(extra)
    return WorkerSpec(**fields)


async def eventually(check: Callable[[], Any], timeout_s: float = 30.0, what: str = "condition") -> Any:
    """Poll an (a)sync ``check`` until it returns something truthy; fail naming ``what``."""
    deadline = time.monotonic() + timeout_s
    last: Any = None
    while time.monotonic() < deadline:
        last = check()
        if asyncio.iscoroutine(last):
            last = await last
        if last:
            return last
        await asyncio.sleep(0.1)
    raise AssertionError(f"{what} not reached in {timeout_s}s (last: {last!r})")


def driver_config(cluster: testbed.Cluster, namespace: str, **extra: object) -> KubernetesDriverConfig:
    # Resync only when a test asks for it; KWOK serves no container logs.
    # One namespace for all workers unless a test names the privileged one (test_..._namespaces.py does).
    values: dict[str, object] = {
        "namespace": namespace,
        "privileged_namespace": namespace,
        "kubeconfig": cluster.kubeconfig,
        "resync_interval_s": 3600.0,
        "follow_logs": False,
        "termination_grace_period_s": 5,
    }
    values.update(extra)
    return KubernetesDriverConfig.model_validate(values)


def _ip(verb: str, address: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", "addr", verb, f"{address}/32", "dev", "lo"], capture_output=True, text=True)


@contextlib.asynccontextmanager
async def pod_address(address: str) -> AsyncIterator[None]:
    """``address`` (a pod's IP, which KWOK gives no container) on the loopback device while a stand-in listens."""
    added = await asyncio.to_thread(_ip, "add", address)
    assert added.returncode == 0 or "File exists" in added.stderr, added.stderr
    try:
        yield
    finally:
        if added.returncode == 0:
            await asyncio.to_thread(_ip, "del", address)
