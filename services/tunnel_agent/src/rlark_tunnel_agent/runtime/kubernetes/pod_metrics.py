"""Workers' CPU and memory on Kubernetes from the metrics API (issue 19 item 1, ADR 0017).

The cluster's metrics pipeline (metrics-server, or any adapter serving ``metrics.k8s.io/v1beta1``) measures
each container's CPU as a rate over its ``window`` and its memory as the working set; a PodMetrics object
lists a pod's containers. A worker's figures are its pod's — every container summed (the worker and its
sidecars), as the local runtime sums the worker's processes. Pure: takes the listed objects, so it is tested
on recorded PodMetrics JSON; ``Kube.list_pod_metrics`` reads them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from decimal import Decimal
from typing import Any

from rlark_tunnel_agent.runtime.kubernetes.observe import quantity
from rlark_tunnel_agent.runtime.worker_usage import PodMeasured


def parse_pod_metrics(items: Iterable[Mapping[str, Any]]) -> dict[tuple[str, str], PodMeasured]:
    """Each PodMetrics item's CPU cores and memory bytes, by (namespace, pod); an item without a name is
    left out; a quantity that does not parse counts 0."""
    pods: dict[tuple[str, str], PodMeasured] = {}
    for item in items:
        metadata = item.get("metadata") or {}
        name, namespace = metadata.get("name"), metadata.get("namespace", "")
        if not name:
            continue
        cpu = memory = Decimal(0)
        for container in item.get("containers") or []:
            used = container.get("usage") or {}
            cpu += quantity(used, "cpu")
            memory += quantity(used, "memory")
        pods[(namespace, name)] = PodMeasured(cpu_cores=float(cpu), memory_bytes=int(memory))
    return pods
