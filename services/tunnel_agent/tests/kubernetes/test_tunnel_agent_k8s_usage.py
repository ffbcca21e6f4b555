"""Kubernetes workers' usage (issue 19 item 1, ADR 0017): the driver joins its live workers' PodMetrics (read
per worker namespace from the metrics API; here PodMetrics JSON in metrics-server's format) with the DCGM
exporter's GPUs, else the workers' own `gpus_sampled` reports in their followed logs; where the cluster does not
serve the metrics API nothing is sampled and the log says so once, until it is served."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from rlark_tunnel_agent.runtime import worker_usage
from rlark_tunnel_agent.runtime.driver import WorkerMarkerSeen, WorkerSpec
from rlark_tunnel_agent.runtime.kubernetes import names
from rlark_tunnel_agent.runtime.kubernetes.config import KubernetesDriverConfig
from rlark_tunnel_agent.runtime.kubernetes.driver import KubernetesDriver
from rlark_tunnel_agent.runtime.markers import GpusSampled, format_marker
from structlog.testing import capture_logs

pytestmark = pytest.mark.unit

FIXTURES = Path(__file__).parents[1] / "runtime" / "usage_fixtures"
FIXTURE = FIXTURES / "pod-metrics.json"
RECORDED_GPUS = (FIXTURES / "nvidia-smi-4gpu.csv").read_text()
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


def _driver(
    kube: MetricsKube, worker_ids: list[str], *, gpus: int = 0, config: KubernetesDriverConfig | None = None
) -> KubernetesDriver:
    driver = KubernetesDriver(config or KubernetesDriverConfig(), kube=kube)  # type: ignore[arg-type]
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
            run_script="true" if index == 0 else "",
            header_address="" if index == 0 else "rlark-job-7f3c-actor-0.rlark-job-7f3c",
            join_deadline_s=60,
            gpus=gpus,
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


def _log(driver: KubernetesDriver, worker_id: str, *lines: str) -> None:
    """Lines of the worker's followed log, as the log follower hands them over (numbered after what came)."""
    for line in lines:
        driver._on_log_line(worker_id, driver._logs.last_seq(worker_id) + 1, line)


async def test_a_workers_own_gpus_sampled_marker_becomes_its_gpus_in_the_round() -> None:
    kube = MetricsKube(_recorded(names.pod_name("job-7f3c-actor-0")))
    driver = _driver(kube, ["job-7f3c-actor-0", "job-7f3c-actor-1"], gpus=4)
    older = format_marker("gpus_sampled", nvidia_smi="0, 1, 0, 81920\n1, 1, 0, 81920")
    _log(
        driver,
        "job-7f3c-actor-0",
        "step 1",
        older,
        "step 2" + format_marker("gpus_sampled", nvidia_smi=RECORDED_GPUS),
    )

    actor, *others = await driver.sample_usage()

    assert others == []  # actor-1 reported nothing and the metrics API has no pod of it
    assert actor.worker_id == "job-7f3c-actor-0"
    assert actor.cpu_cores_used == 3.514  # the metrics API's, beside the reported GPUs
    assert [(g.index, g.util_pct, g.memory_used_bytes) for g in actor.gpus] == [
        (0, 97, 61234 * 1024 * 1024),
        (1, 3, 1024 * 1024 * 1024),
        (2, 0, 512 * 1024 * 1024),
        (3, 45, 40960 * 1024 * 1024),
    ]  # the latest report, parsed by the local runtime's parser
    seen = []
    while not driver._events.empty():
        event = driver._events.get_nowait()
        if isinstance(event, WorkerMarkerSeen):
            seen.append(event.marker)
    assert len(seen) == 2  # the agent sees both as markers, and they stay log lines
    assert all(isinstance(m, GpusSampled) for m in seen)


async def test_the_dcgm_exporter_wins_over_a_workers_report(monkeypatch: pytest.MonkeyPatch) -> None:
    async def exporter(url: str, timeout_s: float = 5.0) -> str:
        assert url == "http://dcgm-exporter.gpu-operator:9400/metrics"
        return (FIXTURES / "dcgm-exporter.prom").read_text()

    monkeypatch.setattr(worker_usage, "fetch_text", exporter)
    config = KubernetesDriverConfig(dcgm_url="http://dcgm-exporter.gpu-operator:9400/metrics")
    driver = _driver(MetricsKube([]), ["job-7f3c-actor-0", "job-7f3c-actor-1"], gpus=4, config=config)
    for worker_id in ("job-7f3c-actor-0", "job-7f3c-actor-1"):
        _log(driver, worker_id, format_marker("gpus_sampled", nvidia_smi=RECORDED_GPUS))

    by_worker = {s.worker_id: s for s in await driver.sample_usage()}

    # The exporter's fixture attributes GPU 0 (88 %) to actor-0's pod; it measures no pod of actor-1.
    assert [g.util_pct for g in by_worker["job-7f3c-actor-0"].gpus] == [88]
    assert [g.util_pct for g in by_worker["job-7f3c-actor-1"].gpus] == [97, 3, 0, 45]


@pytest.mark.parametrize(
    "line",
    [
        pytest.param(
            format_marker("gpus_sampled", nvidia_smi=RECORDED_GPUS), id="4 GPUs from a worker holding 1"
        ),
        pytest.param(format_marker("gpus_sampled", nvidia_smi="0, 250, 1024, 81920"), id="250 % busy"),
        pytest.param(format_marker("gpus_sampled", nvidia_smi="not a GPU"), id="no GPU row"),
        pytest.param(format_marker("gpus_sampled"), id="no answer field"),
        pytest.param('##rlark {"event":"gpus_sampled","nvidia_smi":"0, 97, 61234, 81920"', id="cut JSON"),
        pytest.param(
            format_marker("gpus_sampled", nvidia_smi="0, 1, 2, 3\n" * 500), id="longer than allowed"
        ),
    ],
)
async def test_a_malformed_or_forged_report_is_ignored(line: str) -> None:
    driver = _driver(MetricsKube([]), ["job-7f3c-actor-0"], gpus=1)
    _log(driver, "job-7f3c-actor-0", line)
    assert await driver.sample_usage() == []
    # A plausible report of its own single GPU still counts.
    _log(driver, "job-7f3c-actor-0", format_marker("gpus_sampled", nvidia_smi="0, 12, 1024, 81920"))
    (sample,) = await driver.sample_usage()
    assert [g.util_pct for g in sample.gpus] == [12]


async def test_a_report_goes_stale_once_the_worker_stops_reporting() -> None:
    driver = _driver(MetricsKube([]), ["job-7f3c-actor-0"], gpus=1)
    _log(driver, "job-7f3c-actor-0", format_marker("gpus_sampled", nvidia_smi="0, 12, 1024, 81920"))
    assert len(await driver.sample_usage()) == 1
    driver._usage.reported_gpus.max_age_s = -1.0  # as if three sampling intervals passed without a report
    assert await driver.sample_usage() == []
