"""Per-worker usage readers (issue 19 item 1): GPUs from recorded `nvidia-smi` and DCGM exporter output
(hand-written fixtures, `usage_fixtures/README.md`: this machine has no GPU), CPU and memory from a live
process's real `/proc` accounting, from a cgroup v2 directory laid out as the kernel does, and on Kubernetes
from the metrics API's PodMetrics (a fixture in metrics-server's format)."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest
from pydantic import ValidationError
from rlark_tunnel_agent.runtime import worker_usage as usage
from rlark_tunnel_agent.runtime.kubernetes import pod_metrics
from rlark_tunnel_agent.runtime.kubernetes.config import KubernetesDriverConfig

pytestmark = pytest.mark.unit

FIXTURES = Path(__file__).parent / "usage_fixtures"
MIB = 1024 * 1024


def test_nvidia_smi_rows_become_gpus_by_index_in_bytes() -> None:
    gpus = usage.parse_nvidia_smi((FIXTURES / "nvidia-smi-4gpu.csv").read_text())
    assert sorted(gpus) == [0, 1, 2, 3]
    assert gpus[0].util_pct == 97
    assert gpus[0].memory_used_bytes == 61234 * MIB
    assert gpus[0].memory_total_bytes == 81920 * MIB
    assert gpus[2].util_pct == 0  # "[N/A]": unknown reads 0, the row is kept for its memory
    assert gpus[2].memory_used_bytes == 512 * MIB


def test_a_worker_gets_only_its_own_gpu_rows() -> None:
    machine = usage.parse_nvidia_smi((FIXTURES / "nvidia-smi-4gpu.csv").read_text())
    assert [g.index for g in usage.gpus_of(machine, (3, 1, 7))] == [3, 1]


def test_garbage_and_empty_nvidia_smi_output_give_no_gpus() -> None:
    assert usage.parse_nvidia_smi("") == {}
    assert usage.parse_nvidia_smi("NVIDIA-SMI has failed because it couldn't communicate\n") == {}


def test_dcgm_metrics_are_attributed_to_pods_and_unheld_gpus_are_left_out() -> None:
    pods = usage.parse_dcgm((FIXTURES / "dcgm-exporter.prom").read_text())
    assert list(pods) == [("rlark-workers", "rlark-job-7f3c-actor-0")]
    (gpu,) = pods[("rlark-workers", "rlark-job-7f3c-actor-0")]
    assert gpu.index == 0
    assert gpu.util_pct == 88
    assert gpu.memory_used_bytes == 60570 * MIB
    assert gpu.memory_total_bytes == (60570 + 20480) * MIB


def test_a_cgroup_directory_gives_cpu_time_and_memory(tmp_path: Path) -> None:
    (tmp_path / "cpu.stat").write_text(
        "usage_usec 8123456\nuser_usec 7000000\nsystem_usec 1123456\nnr_periods 0\nnr_throttled 0\n"
    )
    (tmp_path / "memory.current").write_text("734003200\n")
    assert usage.cgroup_reading(tmp_path) == usage.Reading(8123456, 734003200)
    assert usage.cgroup_reading(tmp_path / "gone") is None


def test_a_live_process_has_real_cpu_time_and_resident_memory() -> None:
    hold_and_spin = "x = b'r' * (64 << 20)\nprint('ready', flush=True)\nn = 0\nwhile True: n += 1"
    busy = subprocess.Popen([sys.executable, "-c", hold_and_spin], stdout=subprocess.PIPE)
    try:
        assert busy.stdout is not None
        assert busy.stdout.readline() == b"ready\n"  # its 64 MiB are written; now it spins
        first = usage.proc_reading([busy.pid])
        rates = usage.CpuRates()
        rates.cores("w", first.cpu_usec, 0.0)
        while (later := usage.proc_reading([busy.pid])).cpu_usec <= first.cpu_usec:
            pass  # wait for the kernel's next tick of its CPU time (no sleep on a clock)
        assert later.memory_bytes >= 64 * MIB
        assert rates.cores("w", later.cpu_usec, 1.0) > 0
    finally:
        busy.kill()
        busy.wait()
    assert usage.proc_reading([busy.pid]) == usage.Reading(0, 0)  # gone: counts nothing


def test_cpu_rate_is_cores_between_readings_and_zero_when_a_counter_restarts() -> None:
    rates = usage.CpuRates()
    assert rates.cores("w", 1_000_000, 10.0) == 0.0  # first reading
    assert rates.cores("w", 4_000_000, 12.0) == 1.5  # 3 CPU-seconds in 2 s
    assert rates.cores("w", 500_000, 14.0) == 0.0  # a new cgroup: counter went back
    rates.keep_only([])
    assert rates.cores("w", 900_000, 15.0) == 0.0  # forgotten: a first reading again


async def test_a_machine_without_nvidia_smi_answers_nothing(tmp_path: Path) -> None:
    assert await usage.query_nvidia_smi((str(tmp_path / "nvidia-smi"),)) == ""


def test_kubernetes_workers_get_the_gpus_the_exporter_attributes_to_their_pods() -> None:
    pods = usage.parse_dcgm((FIXTURES / "dcgm-exporter.prom").read_text())
    at = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)
    workers = [
        usage.PodWorker("job-7f3c-actor-0", "job-7f3c", "rlark-workers", "rlark-job-7f3c-actor-0"),
        usage.PodWorker("job-7f3c-env-0", "job-7f3c", "rlark-workers", "rlark-job-7f3c-env-0"),
    ]
    (sample,) = usage.pod_samples(workers, at, usage={}, gpus=pods)
    assert (sample.worker_id, sample.job_id, sample.at) == ("job-7f3c-actor-0", "job-7f3c", at)
    assert [g.util_pct for g in sample.gpus] == [88]
    assert (sample.cpu_cores_used, sample.memory_bytes) == (0.0, 0)  # no metrics API: not measured


def test_pod_metrics_give_each_pod_its_containers_summed_cpu_and_memory() -> None:
    items = json.loads((FIXTURES / "pod-metrics.json").read_text())["items"]
    pods = pod_metrics.parse_pod_metrics(items)
    assert set(pods) == {
        ("rlark-workers", "rlark-job-7f3c-actor-0"),
        ("rlark-workers-privileged", "rlark-job-7f3c-env-0"),
    }  # the item without a name is left out
    actor = pods[("rlark-workers", "rlark-job-7f3c-actor-0")]
    assert actor.cpu_cores == pytest.approx(3.512734891 + 0.001208431)  # nanocores, worker + files sidecar
    assert actor.memory_bytes == (8418304 + 23460) * 1024
    env = pods[("rlark-workers-privileged", "rlark-job-7f3c-env-0")]
    assert env.cpu_cores == pytest.approx(0.25)
    assert env.memory_bytes == 1 << 30  # the sidecar's unparseable memory counts 0


def test_kubernetes_samples_join_pod_metrics_and_dcgm_gpus_per_pod() -> None:
    measured = pod_metrics.parse_pod_metrics(json.loads((FIXTURES / "pod-metrics.json").read_text())["items"])
    gpus = usage.parse_dcgm((FIXTURES / "dcgm-exporter.prom").read_text())
    at = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)
    workers = [
        usage.PodWorker("job-7f3c-actor-0", "job-7f3c", "rlark-workers", "rlark-job-7f3c-actor-0"),
        usage.PodWorker("job-7f3c-env-0", "job-7f3c", "rlark-workers-privileged", "rlark-job-7f3c-env-0"),
        usage.PodWorker("job-7f3c-env-1", "job-7f3c", "rlark-workers", "rlark-job-7f3c-env-1"),  # neither
    ]
    actor, env = usage.pod_samples(workers, at, usage=measured, gpus=gpus)
    assert (actor.worker_id, actor.cpu_cores_used, actor.memory_bytes) == (
        "job-7f3c-actor-0",
        3.514,
        (8418304 + 23460) * 1024,
    )
    assert [g.util_pct for g in actor.gpus] == [88]
    assert (env.worker_id, env.cpu_cores_used, env.memory_bytes, env.gpus) == (
        "job-7f3c-env-0",
        0.25,
        1 << 30,
        [],
    )


def test_the_dcgm_url_setting_takes_http_urls_only() -> None:
    assert KubernetesDriverConfig(dcgm_url="http://dcgm-exporter.gpu-operator:9400/metrics").dcgm_url
    assert KubernetesDriverConfig().dcgm_url == ""
    with pytest.raises(ValidationError, match="dcgm_url"):
        KubernetesDriverConfig(dcgm_url="file:///etc/passwd")


async def test_an_unreachable_exporter_reads_as_nothing() -> None:
    assert await usage.fetch_text("http://127.0.0.1:9/metrics", timeout_s=2.0) == ""
