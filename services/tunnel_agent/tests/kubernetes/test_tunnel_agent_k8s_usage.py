"""Kubernetes workers' usage (issue 19 item 1, ADR 0017): the driver joins its live workers' PodMetrics (read
per worker namespace from the metrics API; here PodMetrics JSON in metrics-server's format) with the DCGM
exporter's GPUs; where the cluster does not serve the metrics API nothing is sampled and the log says so
once, until it is served."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from rlark_tunnel_agent.runtime.driver import WorkerSpec
from rlark_tunnel_agent.runtime.kubernetes import names
from rlark_tunnel_agent.runtime.kubernetes.config import KubernetesDriverConfig
from rlark_tunnel_agent.runtime.kubernetes.driver import KubernetesDriver
from structlog.testing import capture_logs

pytestmark = pytest.mark.unit

FIXTURE = Path(__file__).parents[1] / "runtime" / "usage_fixtures" / "pod-metrics.json"
NOT_SAMPLED = "workers' CPU and memory not sampled"


class MetricsKube:
    """The one Kube call sampling makes: ``list_pod_metrics`` answering recorded items, or None (not served)."""

    def __init__(self, items: list[dict[str, Any]] | None) -> None:
        self.items = items
        self.asked: list[tuple[str, str]] = []

    def list_pod_metrics(self, namespace: str, selector: str) -> list[dict[str, Any]] | None:
        self.asked.append((namespace, selector))
        if self.items is None:
            return None
        return [i for i in self.items if (i.get("metadata") or {}).get("namespace") == namespace]


def _driver(kube: MetricsKube, worker_ids: list[str]) -> KubernetesDriver:
    driver = KubernetesDriver(KubernetesDriverConfig(), kube=kube)  # type: ignore[arg-type]
    for index, worker_id in enumerate(worker_ids):
        driver._specs[worker_id] = WorkerSpec(
            job_id="job-7f3c",
            worker_id=worker_id,
            role="actor",
            index=index,
            rank=index,
            num_nodes=len(worker_ids),
            is_header=index == 0,
            node_name="",
            run_script="true",
            header_address="",
            join_deadline_s=60,
        )
    return driver


def _recorded(pod: str) -> list[dict[str, Any]]:
    """The fixture's first item as the metrics API would name the worker's pod in the restricted namespace."""
    item = json.loads(FIXTURE.read_text())["items"][0]
    item["metadata"]["name"] = pod
    return [item]


async def test_a_live_workers_cpu_and_memory_come_from_its_pods_metrics() -> None:
    kube = MetricsKube(_recorded(names.pod_name("job-7f3c-actor-0")))
    driver = _driver(kube, ["job-7f3c-actor-0"])

    (sample,) = await driver.sample_usage()

    assert (sample.worker_id, sample.job_id) == ("job-7f3c-actor-0", "job-7f3c")
    assert sample.cpu_cores_used == 3.514
    assert sample.memory_bytes == (8418304 + 23460) * 1024
    assert sample.gpus == []  # no DCGM exporter configured
    assert kube.asked == [(KubernetesDriverConfig().namespace, names.managed_selector())]


async def test_without_the_metrics_api_nothing_is_sampled_and_the_log_says_so_once() -> None:
    kube = MetricsKube(None)
    driver = _driver(kube, ["job-7f3c-actor-0"])
    with capture_logs() as logs:
        assert await driver.sample_usage() == []
        assert await driver.sample_usage() == []
        kube.items = _recorded(names.pod_name("job-7f3c-actor-0"))
        (sample,) = await driver.sample_usage()
        kube.items = None
        assert await driver.sample_usage() == []
    assert sample.memory_bytes > 0
    said = [entry["event"] for entry in logs]
    assert [e for e in said if e.startswith(NOT_SAMPLED)] == [said[0], said[2]]  # once per absence
    assert len(said) == 3  # not sampled; served again; not sampled


async def test_no_live_worker_asks_nothing() -> None:
    kube = MetricsKube([])
    assert await _driver(kube, []).sample_usage() == []
    assert kube.asked == []
