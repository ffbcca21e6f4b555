"""Workers that report their own GPUs (Kubernetes without a DCGM exporter, ADR 0017): the bootstrap's
`rlark_node.py gpu-usage` runs `nvidia-smi` in the worker and prints its answer as a `gpus_sampled` marker; the
agent parses it with the local runtime's parser, bounds it to what the worker holds, keeps the latest while fresh,
and lets the exporter win where both measure a pod. `nvidia-smi` here is a stand-in printing the recorded answer
(`usage_fixtures/nvidia-smi-4gpu.csv`: this machine has no GPU), so is `python3` where the bootstrap runs."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest
from rlark_contracts.events.agent import GpuUsage
from rlark_tunnel_agent.runtime import worker_usage as usage
from rlark_tunnel_agent.runtime.bootstrap import BOOTSTRAP_DIR, rlark_node
from rlark_tunnel_agent.runtime.contract import (
    KUBERNETES,
    LOCAL,
    RuntimeFacts,
    compose_env,
    worker_contract,
)
from rlark_tunnel_agent.runtime.driver import RayPorts, WorkerSpec
from rlark_tunnel_agent.runtime.markers import (
    GPU_ANSWER_MAX_CHARS,
    GpusSampled,
    format_marker,
    parse_marker_line,
)

pytestmark = pytest.mark.unit

RECORDED = (Path(__file__).parent / "usage_fixtures" / "nvidia-smi-4gpu.csv").read_text()
QUERY = " ".join(usage.NVIDIA_SMI_QUERY[1:])
MIB = 1024 * 1024


def _fake_nvidia_smi(bin_dir: Path, answer: str, code: int = 0) -> None:
    """A `nvidia-smi` that answers the local runtime's query only (anything else: exit 9), and notes each call."""
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "answer.csv").write_text(answer)
    script = bin_dir / "nvidia-smi"
    script.write_text(
        "#!/bin/bash\n"
        f'echo called >>"{bin_dir}/nvidia-smi.calls"\n'
        f'[[ "$*" == "{QUERY}" ]] || exit 9\n'
        f'cat "{bin_dir}/answer.csv"\n'
        f"exit {code}\n"
    )
    script.chmod(0o755)


def _path_without_nvidia_smi(*first: Path) -> str:
    """PATH with ``first`` in front and no directory holding a real `nvidia-smi` (should this machine have one)."""
    dirs = [d for d in os.environ["PATH"].split(os.pathsep) if d and not (Path(d) / "nvidia-smi").exists()]
    return os.pathsep.join([*map(str, first), *dirs])


def _sampler(bin_dir: Path, rounds: int = 2) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            str(BOOTSTRAP_DIR / "rlark_node.py"),
            "gpu-usage",
            "--interval",
            "0",
            "--rounds",
            str(rounds),
        ],
        env={**os.environ, "PATH": _path_without_nvidia_smi(bin_dir)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_the_sampler_prints_each_answer_of_nvidia_smi_as_a_marker_the_agent_reads_with_its_parser(
    tmp_path: Path,
) -> None:
    _fake_nvidia_smi(tmp_path, RECORDED)
    done = _sampler(tmp_path, rounds=2)
    assert done.returncode == 0, done.stderr
    markers = [parse_marker_line(line) for line in done.stdout.splitlines()]
    assert len(markers) == 2  # one per round
    for marker in markers:
        assert isinstance(marker, GpusSampled)
        gpus = usage.own_gpus(marker.nvidia_smi, held=4)
        assert gpus == [usage.parse_nvidia_smi(RECORDED)[i] for i in range(4)]
    assert gpus is not None
    assert (gpus[0].util_pct, gpus[0].memory_used_bytes, gpus[0].memory_total_bytes) == (
        97,
        61234 * MIB,
        81920 * MIB,
    )


def test_a_failing_or_missing_nvidia_smi_prints_nothing(tmp_path: Path) -> None:
    _fake_nvidia_smi(tmp_path / "failing", RECORDED, code=6)
    failing = _sampler(tmp_path / "failing")
    assert (failing.returncode, failing.stdout) == (0, "")
    assert (tmp_path / "failing" / "nvidia-smi.calls").read_text().count("called") == 2

    (tmp_path / "empty").mkdir()
    missing = _sampler(tmp_path / "empty")
    assert (missing.returncode, missing.stdout) == (0, "")


def test_the_worker_side_asks_what_the_agent_parses_and_sends_no_more_than_its_marker_takes() -> None:
    # rlark_node.py runs with the worker's Python and imports no RLark package: its copies must agree.
    assert rlark_node.NVIDIA_SMI_QUERY == usage.NVIDIA_SMI_QUERY
    assert rlark_node.GPU_ANSWER_MAX_CHARS == GPU_ANSWER_MAX_CHARS
    too_long = format_marker("gpus_sampled", nvidia_smi="0, 1, 2, 3\n" * 500)
    assert parse_marker_line(too_long) is None


@pytest.mark.parametrize(
    ("answer", "held"),
    [
        pytest.param(RECORDED, 2, id="more GPUs than the worker holds (a container seeing its node's)"),
        pytest.param("0, 50, 1024, 81920\n5, 50, 1024, 81920", 2, id="an index beyond the held GPUs"),
        pytest.param("0, 180, 1024, 81920", 1, id="utilization above 100 %"),
        pytest.param("0, -5, 1024, 81920", 1, id="negative utilization"),
        pytest.param("0, 50, 90000, 81920", 1, id="more memory used than the total"),
        pytest.param("0, 50, -1, 81920", 1, id="negative memory"),
        pytest.param("0, 50, 1024, 99999999999", 1, id="a total no GPU has"),
        pytest.param("NVIDIA-SMI has failed because it couldn't communicate", 1, id="an error text"),
        pytest.param("", 1, id="empty"),
        pytest.param(RECORDED, 0, id="a worker holding no GPU"),
    ],
)
def test_a_report_that_cannot_be_the_workers_own_gpus_is_ignored(answer: str, held: int) -> None:
    assert usage.own_gpus(answer, held) is None


def test_figures_that_are_no_numbers_read_zero_instead_of_breaking_the_parser() -> None:
    # int() of an infinite byte count would raise inside the agent's log handling.
    assert usage.own_gpus("0, nan, inf, 1e308", held=1) == [
        GpuUsage(index=0, util_pct=0, memory_used_bytes=0, memory_total_bytes=0)
    ]


def test_a_report_counts_while_fresh_and_only_for_live_workers() -> None:
    reports = usage.ReportedGpus(max_age_s=45.0)
    gpus = usage.own_gpus(RECORDED, held=4)
    assert gpus is not None
    reports.report("w-0", gpus, now=100.0)
    reports.report("w-1", gpus[:1], now=130.0)
    assert reports.fresh(now=145.0) == {"w-0": gpus, "w-1": gpus[:1]}
    assert reports.fresh(now=146.0) == {"w-1": gpus[:1]}  # w-0's sampler went silent
    reports.keep_only(["w-0"])
    assert reports.fresh(now=130.0) == {"w-0": gpus}


def test_the_exporter_wins_over_a_workers_report_and_a_report_alone_makes_a_sample() -> None:
    dcgm = usage.parse_dcgm((Path(__file__).parent / "usage_fixtures" / "dcgm-exporter.prom").read_text())
    reported = usage.own_gpus(RECORDED, held=4)
    assert reported is not None
    at = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)
    workers = [
        usage.PodWorker("job-7f3c-actor-0", "job-7f3c", "rlark-workers", "rlark-job-7f3c-actor-0"),  # both
        usage.PodWorker("job-7f3c-actor-1", "job-7f3c", "rlark-workers", "rlark-job-7f3c-actor-1"),  # report
        usage.PodWorker("job-7f3c-env-0", "job-7f3c", "rlark-workers", "rlark-job-7f3c-env-0"),  # neither
    ]
    both, own = usage.pod_samples(
        workers,
        at,
        usage={},
        gpus=dcgm,
        reported={"job-7f3c-actor-0": reported, "job-7f3c-actor-1": reported},
    )
    assert (both.worker_id, [g.util_pct for g in both.gpus]) == ("job-7f3c-actor-0", [88])  # DCGM's
    assert (own.worker_id, own.gpus) == ("job-7f3c-actor-1", reported)
    assert (own.cpu_cores_used, own.memory_bytes) == (0.0, 0)  # no metrics API here


# --- the bootstrap starts the sampler only where the runtime asks and the container has nvidia-smi ---------

FAKE_RAY = "#!/bin/bash\n[[ $1 == start ]]\n"  # the head starts
FAKE_PYTHON = '#!/bin/bash\necho "$*" >>"$FAKE_LOG/python.calls"\n'  # every helper call succeeds


def _header(tmp_path: Path, *, runtime: str, nvidia_smi: bool) -> list[str]:
    """Run the bootstrap of a 1-node Header holding 2 GPUs with `runtime`'s environment; the helper calls it made."""
    bin_dir, logs, files = tmp_path / "bin", tmp_path / "logs", tmp_path / "files"
    for directory in (bin_dir, logs, files):
        directory.mkdir()
    for name, text in (("ray", FAKE_RAY), ("python3", FAKE_PYTHON)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    if nvidia_smi:
        _fake_nvidia_smi(bin_dir, RECORDED)
    spec = WorkerSpec(
        job_id="job-g",
        worker_id="job-g-w-0",
        role="w",
        index=0,
        rank=0,
        num_nodes=1,
        is_header=True,
        node_name="node-a",
        gpus=2,
        total_gpus=2,
        run_script="true\n",
        join_deadline_s=5,
    )
    facts = RuntimeFacts(
        node_ip="10.9.0.1",
        header_address="",
        comm_device="eth0",
        gcs_port=26000,
        ports=RayPorts(dashboard_port=26001),
        home_dir=str(tmp_path / "home"),
        workdir=str(tmp_path / "work"),
        ray_temp_dir=str(tmp_path / "ray"),
        files_dir=str(files),
        secrets_dir=str(files),
        start_sshd=False,
    )
    contract = worker_contract(spec, facts)
    for name, text in contract.files.items():
        (files / name).write_text(text)
    own = {"RLARK_GPU_SAMPLE_S": "15"} if runtime == KUBERNETES else {}
    env = compose_env(contract, runtime, own=own)
    env.update(
        PATH=_path_without_nvidia_smi(bin_dir),
        RLARK_RAY=str(bin_dir / "ray"),
        RLARK_PYTHON=str(bin_dir / "python3"),
        FAKE_LOG=str(logs),
    )
    done = subprocess.run(
        ["bash", str(BOOTSTRAP_DIR / "bootstrap.sh")],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    # The run finished: the helper calls, the background one too (it held the output open until it exited).
    return [line.split(" ", 1)[1] for line in (logs / "python.calls").read_text().splitlines()]


def test_a_kubernetes_worker_whose_container_has_nvidia_smi_starts_the_sampler(tmp_path: Path) -> None:
    calls = _header(tmp_path, runtime=KUBERNETES, nvidia_smi=True)
    assert "gpu-usage --interval 15" in calls
    assert any(c.startswith("wait-nodes ") for c in calls)  # and the bootstrap went on as before


@pytest.mark.parametrize(
    ("runtime", "nvidia_smi"),
    [
        pytest.param(KUBERNETES, False, id="no nvidia-smi in the container (this machine, the e2e tests)"),
        pytest.param(LOCAL, True, id="the local runtime (its agent reads the host's GPUs itself)"),
    ],
)
def test_nothing_starts_without_nvidia_smi_or_without_the_runtime_asking(
    tmp_path: Path, runtime: str, nvidia_smi: bool
) -> None:
    calls = _header(tmp_path, runtime=runtime, nvidia_smi=nvidia_smi)
    assert not [c for c in calls if c.startswith("gpu-usage")]
    assert any(c.startswith("wait-nodes ") for c in calls)
