"""The workers' usage samples on Kubernetes (``KubernetesDriver.sample_usage``, ADR 0017).

CPU and memory come from the metrics API (each worker pod's PodMetrics, where the cluster serves
``metrics.k8s.io``); GPU use from the DCGM exporter at ``dcgm_url`` where set, else from the worker's own
``gpus_sampled`` markers in its followed log (its bootstrap runs ``nvidia-smi`` in the container every
``gpu_sample_interval_s``), the latest fresh one. A worker no source measures is left out.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime
from typing import Any

import structlog
import urllib3
from kubernetes.client.exceptions import ApiException

from rlark_tunnel_agent.runtime import worker_usage
from rlark_tunnel_agent.runtime.driver import WorkerUsage
from rlark_tunnel_agent.runtime.kubernetes import names, pod_metrics
from rlark_tunnel_agent.runtime.kubernetes.config import KubernetesDriverConfig
from rlark_tunnel_agent.runtime.markers import GpusSampled

log = structlog.get_logger(__name__)

ListPodMetrics = Callable[[str, str], Awaitable[list[dict[str, Any]] | None]]
"""``(namespace, label selector)``: the PodMetrics there, None where the metrics API is not served."""


class UsageSampler:
    """Samples the live workers' usage each round; keeps each worker's latest report of its own GPUs."""

    def __init__(self, config: KubernetesDriverConfig, list_pod_metrics: ListPodMetrics) -> None:
        self._config = config
        self._list_pod_metrics = list_pod_metrics
        self.reported_gpus = worker_usage.ReportedGpus(max_age_s=3 * config.gpu_sample_interval_s)
        """Each worker's latest ``gpus_sampled`` report of its own GPUs (used where DCGM does not measure it)."""
        self._metrics_unserved = False
        """Whether the last round found no metrics API (so its absence is logged once)."""

    def gpus_reported(self, worker_id: str, marker: GpusSampled, gpus_given: int) -> None:
        """Keep a worker's report of its own GPUs, when it is plausibly its own (``worker_usage.own_gpus``)."""
        gpus = worker_usage.own_gpus(marker.nvidia_smi, gpus_given)
        if gpus is None:
            # Anything in the job can print the line; a flood of bad ones must not flood the agent's log.
            log.debug("a gpus_sampled report that is not the worker's own GPUs ignored", worker_id=worker_id)
            return
        self.reported_gpus.report(worker_id, gpus, time.monotonic())

    async def sample(self, live: Sequence[worker_usage.PodWorker]) -> list[WorkerUsage]:
        """The ``live`` workers' samples (see the module docstring)."""
        self.reported_gpus.keep_only(w.worker_id for w in live)
        if not live:
            return []
        gpus = (
            worker_usage.parse_dcgm(await worker_usage.fetch_text(self._config.dcgm_url))
            if self._config.dcgm_url
            else {}
        )
        measured = await self._pod_metrics(sorted({w.namespace for w in live}))
        reported = self.reported_gpus.fresh(time.monotonic())
        return worker_usage.pod_samples(live, datetime.now(UTC), usage=measured, gpus=gpus, reported=reported)

    async def _pod_metrics(
        self, namespaces: Sequence[str]
    ) -> dict[tuple[str, str], worker_usage.PodMeasured]:
        """The workers' pods' PodMetrics in ``namespaces``; where the metrics API is not served (or not to the
        agent) nothing, said once in the log until it is served again."""
        found: dict[tuple[str, str], worker_usage.PodMeasured] = {}
        for namespace in namespaces:
            try:
                items = await self._list_pod_metrics(namespace, names.managed_selector())
            except (ApiException, OSError, urllib3.exceptions.HTTPError) as exc:
                log.debug("pod metrics not read this round", namespace=namespace, error=str(exc)[:300])
                continue
            if items is None:
                if not self._metrics_unserved:
                    log.warning(
                        "workers' CPU and memory not sampled: the cluster does not serve the metrics API "
                        "(metrics.k8s.io/v1beta1 pods) or the agent may not list it (deploy/agent/rbac.yaml)",
                        namespace=namespace,
                    )
                self._metrics_unserved = True
                continue
            if self._metrics_unserved:
                log.info(
                    "the metrics API serves pod metrics: workers' CPU and memory sampled", namespace=namespace
                )
                self._metrics_unserved = False
            found.update(pod_metrics.parse_pod_metrics(items))
        return found
