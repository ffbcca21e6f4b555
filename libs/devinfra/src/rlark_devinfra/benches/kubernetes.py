"""Benchmarks of the Kubernetes driver against the Go-built test bed (real API server + KWOK).

- placement → all pods created, for one 64-worker job (one worker per node, 8 GPUs each): the
  time ``ensure_worker`` takes for all 64 placements at once (job ConfigMap and Service, 64
  worker ConfigMaps, 64 pods, 64 annotations), then until KWOK reports every pod Running and
  the driver has folded it into a Starting worker;
- node ingest for 500 KWOK nodes: a driver already watching sees 500 nodes being POSTed (time
  from the first POST until all 500 are in its cache; the POSTs themselves bound it), until all
  are Ready (KWOK's heartbeat), and a cold ``start()`` that lists the 500 at once.

Runs on the second test-bed cluster (``beta``) in a fresh namespace; deletes its nodes and workers
at the end. ``python -m rlark_devinfra.benches.kubernetes`` (needs the dev workspace:
rlark_devinfra starts the bed). Numbers from the shared 2-core machines are noisy.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from rlark_tunnel_agent.runtime.driver import WorkerPhase, WorkerSpec
from rlark_tunnel_agent.runtime.kubernetes.config import KubernetesDriverConfig
from rlark_tunnel_agent.runtime.kubernetes.driver import KubernetesDriver
from rlark_tunnel_agent.runtime.kubernetes.kube import Kube, load_api_client

from rlark_devinfra.k8s import testbed

WORKERS = 64
NODES = 500


async def _until(predicate: Any, timeout_s: float, what: str) -> float:
    started = time.perf_counter()
    while time.perf_counter() - started < timeout_s:
        if await predicate():
            return time.perf_counter() - started
        await asyncio.sleep(0.02)
    raise TimeoutError(f"{what} not reached in {timeout_s:.0f}s")


def _specs(job_id: str, nodes: list[str]) -> list[WorkerSpec]:
    specs = []
    for rank, node in enumerate(nodes):
        header = rank == 0
        specs.append(
            WorkerSpec(
                job_id=job_id,
                worker_id=f"{job_id}-{'header' if header else 'actor'}-{0 if header else rank - 1}",
                role="header" if header else "actor",
                index=0 if header else rank - 1,
                rank=rank,
                num_nodes=len(nodes),
                is_header=header,
                node_name=node,
                gpus=8,
                total_gpus=8 * len(nodes),
                image="registry.example.com/rlinf/rlinf:0.2.1",
                run_script="python train.py\n" if header else "",
                header_address="" if header else f"rlark-{job_id}-header-0.rlark-{job_id}.bench.svc",
                ssh_public_keys=(
                    "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOv2TSqGvpmqLhJLgaETmq2Jm1kfBpvGb0aZ1Y3kq7Qq b@x",
                ),
            )
        )
    return specs


async def run(cluster_name: str = "beta") -> dict[str, Any]:
    """Run both measurements once; return the numbers (seconds)."""
    clusters = await asyncio.to_thread(testbed.up, 2)
    cluster = next(c for c in clusters.clusters if c.name == cluster_name)
    admin = Kube(load_api_client(cluster.kubeconfig))
    namespace = f"bench-{uuid.uuid4().hex[:8]}"
    admin.core.create_namespace({"metadata": {"name": namespace}})  # type: ignore[arg-type]
    prefix = f"bench-{uuid.uuid4().hex[:5]}"
    nodes = [testbed.GpuNode(name=f"{prefix}-{i:03d}", gpus=8) for i in range(NODES)]
    config = KubernetesDriverConfig(  # plain workers only: one namespace of the bench's own
        namespace=namespace,
        privileged_namespace=namespace,
        kubeconfig=cluster.kubeconfig,
        follow_logs=False,
        resync_interval_s=3600,
    )
    results: dict[str, Any] = {"nodes": NODES, "workers": WORKERS}
    watcher = KubernetesDriver(config)
    await watcher.start()
    try:

        async def seen(ready: bool) -> bool:
            mine = [n for n in await watcher.observe_nodes() if n.name.startswith(prefix)]
            return len(mine) == NODES and (not ready or all(n.ready for n in mine))

        started = time.perf_counter()
        with ThreadPoolExecutor(8) as pool:
            creating = asyncio.get_running_loop().run_in_executor(
                None, lambda: list(pool.map(lambda n: testbed.create_gpu_nodes(cluster, [n]), nodes))
            )
            all_seen = asyncio.create_task(_until(lambda: seen(False), 300, "500 nodes observed"))
            await creating
            posted = time.perf_counter() - started
            await all_seen
        observed = time.perf_counter() - started
        await _until(lambda: seen(True), 300, "500 nodes Ready")
        results["node_post_500_s"] = round(posted, 3)
        results["node_watch_ingest_500_s"] = round(observed, 3)
        results["node_watch_ingest_after_last_post_s"] = round(observed - posted, 3)
        results["nodes_ready_500_s"] = round(time.perf_counter() - started, 3)

        cold = KubernetesDriver(config)
        started = time.perf_counter()
        await cold.start()
        results["cold_start_list_nodes_s"] = round(time.perf_counter() - started, 3)
        results["cold_start_nodes_seen"] = len(await cold.observe_nodes())
        await cold.close()

        job = f"bench-{uuid.uuid4().hex[:6]}"
        specs = _specs(job, [n.name for n in nodes[:WORKERS]])
        started = time.perf_counter()
        await asyncio.gather(*(watcher.ensure_worker(s) for s in specs))
        results["placement_to_all_pods_created_64_s"] = round(time.perf_counter() - started, 3)

        async def all_running() -> bool:
            statuses = [await watcher.get_status(s.worker_id) for s in specs]
            return all(st is not None and st.phase == WorkerPhase.STARTING for st in statuses)

        await _until(all_running, 300, "64 pods Running")
        results["placement_to_all_pods_running_64_s"] = round(time.perf_counter() - started, 3)

        started = time.perf_counter()
        await asyncio.gather(*(watcher.stop_worker(s.worker_id) for s in specs))
        results["stop_64_s"] = round(time.perf_counter() - started, 3)
    finally:
        await watcher.close()
        await asyncio.to_thread(testbed.delete_nodes, cluster, [n.name for n in nodes])
    return results


def main() -> None:
    cluster = sys.argv[1] if len(sys.argv) > 1 else "beta"
    print(json.dumps(asyncio.run(run(cluster)), indent=2))


if __name__ == "__main__":
    main()
