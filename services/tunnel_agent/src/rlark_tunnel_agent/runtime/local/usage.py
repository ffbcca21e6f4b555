"""What the local runtime reports per virtual node: capacity, allocatable and allocated. Pure.

A virtual node's capacity is what the cluster file declares. With real GPUs on the machine
(`gpus.py`) the machine's GPUs are one pool shared by every virtual node: a node offers at most its
declared count (all of the pool when it declares none), and the model is the real one.

Accounting rules (`node_observations`):
- a worker holds its GPUs from its creation until it is stopped (the driver hands its real GPU
  indices to another worker only after the stop), so every worker that is not stopped counts;
- `gpu_allocated` of a node is what its own workers hold; with a real pool it is also at least what
  the pool has left to offer: a node whose declared 8 GPUs are free but whose machine has 2 GPUs
  left can give a new worker only 2, so it reports 6 allocated. The part its own workers do not hold
  is `gpu_allocated_foreign` — GPUs of the machine held by workers of other virtual nodes;
- workers carry no CPU or memory request (a `WorkerSpec` has none), so CPU and memory allocated are 0;
  allocatable equals capacity (nothing is reserved for the system on a virtual node).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from rlark_contracts.events.agent import NodeObservation
from rlark_tunnel_agent.runtime.local.cluster import LocalCluster, LocalNode
from rlark_tunnel_agent.runtime.local.gpus import Gpu


def node_gpus(node: LocalNode, pool: Sequence[Gpu]) -> tuple[int, str]:
    """(GPU count, model) a virtual node offers: as declared, or bounded by the machine's real GPUs."""
    if not pool:
        return node.gpus, node.gpu_model
    count = min(node.gpus, len(pool)) if node.gpus else len(pool)
    return count, pool[0].model


def node_observations(
    cluster: LocalCluster,
    pool: Sequence[Gpu],
    address: str,
    held: Iterable[tuple[str, int]],
    pod_cidrs: Sequence[str] = (),
) -> list[NodeObservation]:
    """Every virtual node of ``cluster`` with what the workers in ``held`` — (node name, GPUs) of each
    worker not stopped — hold on it (see the module docstring); ``pod_cidrs`` is the network the workers
    take their addresses from (the cluster's bridge subnet; shared by every virtual node)."""
    own: dict[str, int] = {}
    for node_name, gpus in held:
        own[node_name] = own.get(node_name, 0) + gpus
    pool_free = max(len(pool) - sum(own.values()), 0)
    observations = []
    for node in cluster.nodes:
        count, model = node_gpus(node, pool)
        mine = own.get(node.name, 0)
        free = max(count - mine, 0)
        if pool:
            free = min(free, pool_free)
        allocated = max(count - free, mine)
        cpu_millis = int(node.cpu * 1000)
        observations.append(
            NodeObservation(
                name=node.name,
                ready=True,
                schedulable=not node.unschedulable,
                gpu_count=count,
                gpu_model=model,
                gpu_allocatable=count,
                gpu_allocated=allocated,
                gpu_allocated_foreign=allocated - mine,
                cpu_millis=cpu_millis,
                cpu_allocatable_millis=cpu_millis,
                memory_bytes=node.memory,
                memory_allocatable_bytes=node.memory,
                labels=dict(node.labels),
                addresses=[address],
                pod_cidrs=list(pod_cidrs),
            )
        )
    return observations
