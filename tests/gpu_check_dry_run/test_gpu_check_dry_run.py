"""Issue 36 item 2: `scripts/gpu-check` end to end on CPU, so it cannot rot between lent GPU machines.

The same script a GPU machine runs, on a fake GPU machine (`fake_gpu_machine.py`): in a private mount
namespace `/dev` holds fake NVIDIA nodes, a fake `nvidia-smi` is first on PATH and a fake torch is the only
torch the script finds — always the fake, even where the real CPU-only torch is installed (it would count no
GPU). The agent's driver runs real pod-like workers in their own namespaces (root), which import the fake torch
through the hostPath mount the check gives them, exactly as it would give a real torch living outside the
interpreter's prefix. Every check must PASS (with one GPU, the two-GPU one SKIP, as on the lent machines),
the report must have its shape, and nothing the check made may be left on the machine.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from gpu_check.main import CHECKS
from gpu_check.report import CARRY_LIMIT_BYTES, OUT_FILE_LIMIT_BYTES
from rlark_tunnel_agent.runtime.local.netns import default_bridge

pytestmark = pytest.mark.netns

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
MODEL, TOTAL_MIB = "NVIDIA H200", 143771


def run_on_fake_machine(tmp_path: Path, gpus: int) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    tool = bin_dir / "nvidia-smi"
    tool.write_text(f"#!{sys.executable}\n" + (HERE / "fake_nvidia_smi.py").read_text())
    tool.chmod(0o755)
    torch_dir = tmp_path / "faketorch"
    shutil.copytree(HERE / "fake_torch", torch_dir, ignore=shutil.ignore_patterns("__pycache__"))
    out = tmp_path / "out"
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "PYTHONPATH": str(torch_dir)}
    env.pop("OUT", None)
    done = subprocess.run(
        ["unshare", "--mount", "--propagation", "private",
         sys.executable, str(HERE / "fake_gpu_machine.py"), str(gpus), MODEL, str(TOTAL_MIB), "--",
         sys.executable, str(ROOT / "scripts" / "gpu-check"), "--out", str(out),
         "--burst-s", "4", "--rounds", "3", "--settle-s", "1", "--deadline-s", "200"],
        env=env, capture_output=True, text=True, timeout=280, check=False,
    )  # fmt: skip
    assert (out / "gpu-check.json").exists(), done.stdout + done.stderr
    return done, json.loads((out / "gpu-check.json").read_text())


@pytest.mark.parametrize("gpus", [1, 2])
def test_the_gpu_check_passes_every_check_on_a_fake_gpu_machine_and_leaves_nothing_behind(
    tmp_path: Path, gpus: int
) -> None:
    assert os.geteuid() == 0, "pod-like workers (device isolation) need a root agent"
    done, report = run_on_fake_machine(tmp_path, gpus)
    assert done.returncode == 0, done.stdout + done.stderr

    skipped = {"worker.pair.cannot_open"} if gpus == 1 else set()
    lines = [line for line in done.stdout.splitlines() if line[:4] in ("PASS", "FAIL", "SKIP")]
    assert [line.split()[1] for line in lines] == list(CHECKS), done.stdout
    for line in lines:
        verdict, name = line.split()[:2]
        assert verdict == ("SKIP" if name in skipped else "PASS"), line
    if gpus == 1:
        assert "needs a second GPU: this machine has 1" in lines[CHECKS.index("worker.pair.cannot_open")]
    assert done.stdout.splitlines()[-1] == f"gpu-check: {13 - len(skipped)} PASS, 0 FAIL, {len(skipped)} SKIP"

    # The report: the same verdicts, the figures behind them, the machine's facts and each worker's log.
    assert (report["tool"], report["format"]) == ("scripts/gpu-check", 1)
    assert [(c["verdict"], c["name"]) for c in report["checks"]] == [
        tuple(line.split()[:2]) for line in lines
    ]
    assert all(set(c) == {"name", "verdict", "summary", "data"} for c in report["checks"])
    assert report["summary"] == {"PASS": 13 - len(skipped), "FAIL": 0, "SKIP": len(skipped)}
    facts = report["facts"]
    assert facts["isolation"].startswith("pod-like")
    assert [g["name"] for g in facts["nvidia_smi"]] == [MODEL] * gpus
    assert facts["torch"]["in_worker_root"] is False  # the fake reached the workers through the mount
    expected_indices = {"gpu-check-a-0": [0], "gpu-check-b-0": []} | (
        {"gpu-check-c-0": [1]} if gpus == 2 else {}
    )
    assert facts["gpu_indices"] == expected_indices
    assert facts["burst"]["done"]["exact"] is True
    assert set(report["workers"]) == set(expected_indices)
    for worker in report["workers"].values():
        assert "facts" in worker["stages"]
        assert worker["status"]["phase"] == "Stopped"
    usage = report["checks"][CHECKS.index("usage.attribution")]["data"]
    # As many rounds as fit in the burst: up to --rounds on a quiet machine, fewer under load (never a timing test).
    assert 1 <= len(usage["rounds"]) <= 3
    sizes = facts["sizes"]
    assert sizes["carried_bytes"] <= CARRY_LIMIT_BYTES
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["gpu-check.json", "gpu-check.txt"]
    assert all(p.stat().st_size <= OUT_FILE_LIMIT_BYTES for p in (tmp_path / "out").iterdir())

    # Nothing left: the workers' namespaces, the cluster's bridge, Ray temp dirs, the state directory.
    tag = facts["tag"]
    namespaces = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True).stdout
    assert f"rlark-{tag}-" not in namespaces
    link = subprocess.run(["ip", "link", "show", default_bridge(tag)], capture_output=True, check=False)
    assert link.returncode != 0, f"bridge {default_bridge(tag)} left behind"
    assert not list(Path("/tmp").glob(f"rlark-{tag}-*"))  # where the driver puts Ray's temp dirs
    assert not Path(facts["state_dir"]).exists()
