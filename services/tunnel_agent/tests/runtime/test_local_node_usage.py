"""What the local runtime reports as allocated on its virtual nodes (runtime/local/usage.py)."""

from __future__ import annotations

import pytest
from local_runtime_helpers import CLUSTER
from rlark_tunnel_agent.runtime.local.gpus import Gpu
from rlark_tunnel_agent.runtime.local.usage import node_observations

pytestmark = pytest.mark.unit


def observed(pool: list[Gpu], held: list[tuple[str, int]]) -> dict[str, tuple[int, int, int, int]]:
    """(count, allocatable, allocated, allocated_foreign) per node."""
    return {
        n.name: (n.gpu_count, n.gpu_allocatable, n.gpu_allocated, n.gpu_allocated_foreign)
        for n in node_observations(CLUSTER, pool, "127.0.0.1", held)
    }


def test_without_workers_every_declared_gpu_is_allocatable_and_none_allocated() -> None:
    nodes = node_observations(CLUSTER, [], "127.0.0.1", [])
    a = next(n for n in nodes if n.name == "node-a")
    assert (a.gpu_count, a.gpu_allocatable, a.gpu_allocated, a.gpu_model) == (2, 2, 0, "A100")
    c = next(n for n in nodes if n.name == "node-c")
    assert (c.cpu_millis, c.cpu_allocatable_millis, c.cpu_allocated_millis) == (4000, 4000, 0)
    assert (c.memory_bytes, c.memory_allocatable_bytes, c.memory_allocated_bytes) == (8 << 30, 8 << 30, 0)
    assert c.addresses == ["127.0.0.1"]


def test_virtual_gpus_held_by_workers_count_on_their_own_node_only() -> None:
    held = [("node-a", 1), ("node-a", 1), ("node-b", 1), ("node-c", 0)]
    assert observed([], held) == {
        "node-a": (2, 2, 2, 0),
        "node-b": (2, 2, 1, 0),
        "node-c": (0, 0, 0, 0),
    }


def test_real_gpus_are_one_pool_so_a_node_reports_what_workers_on_other_nodes_took_as_foreign() -> None:
    pool = [Gpu(i, "H200", f"GPU-{i}") for i in range(3)]
    # node-a declares 2, node-b 2, node-c none (the whole pool: 3). Two workers hold 1 GPU each.
    assert observed(pool, [("node-a", 1), ("node-b", 1)]) == {
        "node-a": (2, 2, 1, 0),  # 1 free on the node, 1 left in the pool
        "node-b": (2, 2, 1, 0),
        "node-c": (3, 3, 2, 2),  # only 1 of the machine's 3 is left; both taken ones are elsewhere
    }
    # The pool is spent: every node is full, whoever holds the GPUs.
    assert observed(pool, [("node-a", 2), ("node-b", 1)]) == {
        "node-a": (2, 2, 2, 0),
        "node-b": (2, 2, 2, 1),
        "node-c": (3, 3, 3, 3),
    }


def test_a_node_never_reports_less_than_its_own_workers_hold() -> None:
    assert observed([], [("node-a", 3)])["node-a"] == (2, 2, 3, 0)
