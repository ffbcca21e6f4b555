"""The GPU check's judgments and readers on recorded figures: what makes each check PASS, FAIL or SKIP, and
that what the device call carries fits the device tool's limits (issue 36)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from gpu_check import nvidia, verdicts
from gpu_check.main import WHEELS
from gpu_check.report import CARRY_LIMIT_BYTES, sizes
from rlark_contracts.events.agent import GpuUsage
from rlark_tunnel_agent.runtime.local.gpus import Gpu

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
MIB = 1024 * 1024
UUID = "GPU-2b3c4d5e-0000-4000-8000-00000000000a"
# `nvidia-smi --query-gpu=index,name,uuid,utilization.gpu,memory.used,memory.total --format=csv` as it prints
# on an H100 node (a second board answering [N/A] for utilization, as MIG instances do).
REFERENCE = (
    "index, name, uuid, utilization.gpu [%], memory.used [MiB], memory.total [MiB]\n"
    f"0, NVIDIA H100 80GB HBM3, {UUID}, 97 %, 61234 MiB, 81559 MiB\n"
    "1, NVIDIA H100 80GB HBM3, GPU-ffff, [N/A], 1 MiB, 81559 MiB\n"
)
DASH_Q = (
    "==============NVSMI LOG==============\n\nAttached GPUs                             : 2\n"
    "GPU 00000000:18:00.0\n    Product Name                          : NVIDIA H100 80GB HBM3\n"
    "    Minor Number                          : 3\n"
    "GPU 00000000:2A:00.0\n    Minor Number                          : N/A\n"
)


def reference_gpu(index: int = 0, util: float | None = 97.0, used_mib: int = 61234) -> nvidia.ReferenceGpu:
    return nvidia.ReferenceGpu(index, "NVIDIA H200", UUID, util, used_mib * MIB, 143771 * MIB, index)


def test_nvidia_smis_own_reading_is_read_with_its_header_and_units_and_na_reads_as_none() -> None:
    first, second = nvidia.parse_reference(REFERENCE)
    assert first == nvidia.ReferenceGpu(0, "NVIDIA H100 80GB HBM3", UUID, 97.0, 61234 * MIB, 81559 * MIB)
    assert (second.index, second.util_pct, second.memory_used_bytes) == (1, None, 1 * MIB)
    assert nvidia.parse_reference("0, 97, 1, 2\n") == []  # the agent's own format is not the reference's
    assert nvidia.parse_minors(DASH_Q) == [3, None]


def test_discovery_passes_when_the_agent_lists_what_nvidia_smi_lists_and_names_each_difference() -> None:
    ref = [reference_gpu()]
    assert verdicts.discovery_gpus([Gpu(0, "H200", UUID)], ref).verdict == "PASS"
    wrong = verdicts.discovery_gpus([Gpu(0, "H200 NVL", UUID), Gpu(1, "H200", "GPU-x")], ref)
    assert wrong.verdict == "FAIL"
    assert "found 2 GPU(s), nvidia-smi lists 1" in wrong.summary
    assert "'H200 NVL'" in wrong.summary
    assert verdicts.discovery_gpus([], []).summary == "nvidia-smi lists no GPU on this machine"
    agent = {0: GpuUsage(index=0, util_pct=0, memory_used_bytes=0, memory_total_bytes=143771 * MIB)}
    assert verdicts.discovery_memory(agent, ref).verdict == "PASS"
    agent[0] = agent[0].model_copy(update={"memory_total_bytes": 143770 * MIB})
    assert verdicts.discovery_memory(agent, ref).verdict == "FAIL"


@pytest.mark.parametrize(
    ("model", "verdict"), [("H200", "PASS"), ("A100-SXM4-80GB", "PASS"), ("H100 80GB HBM3", "FAIL")]
)
def test_the_model_the_agent_reports_must_be_a_label_value_users_can_select_on(
    model: str, verdict: str
) -> None:
    # `nvidia-smi -L` names an H100 SXM board "NVIDIA H100 80GB HBM3": the agent reports "H100 80GB HBM3", which
    # no selector `rlark.io/gpu-model=...` can name. The check says so instead of passing it.
    documents = [{"name": "gpu-a", "labels": {verdicts.GPU_MODEL_LABEL: model}}]
    check = verdicts.discovery_label(model, documents)
    assert check.verdict == verdict, check.summary
    if verdict == "FAIL":
        assert "the inventory refuses the selector rlark.io/gpu-model=H100 80GB HBM3" in check.summary


def facts(dev: list[str], visible: str | None, count: int, **more: Any) -> dict[str, Any]:
    torch = {"version": "2.9.0", "count": count, "matmul_exact": True if count else None}
    torch["devices"] = [{"name": "NVIDIA H200", "uuid": UUID.removeprefix("GPU-")}] * count
    return {"dev_nvidia": dev, "cuda_visible_devices": visible, "torch": torch, **more}


def test_a_gpu_worker_passes_with_its_own_node_and_gpu_only_and_fails_seeing_another() -> None:
    control = ["nvidia-uvm", "nvidiactl"]
    own = facts([*control, "nvidia0"], "0", 1, opens={"/dev/nvidia0": "opened"})
    assert verdicts.gpu_worker_devices(own, "nvidia0", control, "").verdict == "PASS"
    assert verdicts.gpu_worker_cuda(own, 0, reference_gpu()).verdict == "PASS"
    both = facts([*control, "nvidia0", "nvidia1"], "0", 1, opens={"/dev/nvidia0": "opened"})
    assert (
        "expected ['nvidia-uvm', 'nvidia0', 'nvidiactl']"
        in verdicts.gpu_worker_devices(both, "nvidia0", control, "").summary
    )
    other = facts([*control, "nvidia0"], "0", 1)
    other["torch"]["devices"] = [{"name": "NVIDIA H200", "uuid": "ffff"}]
    assert "its assigned GPU is" in verdicts.gpu_worker_cuda(other, 0, reference_gpu()).summary
    broken = {
        "dev_nvidia": [],
        "cuda_visible_devices": "0",
        "torch": {"import_error": "No module named 'torch'"},
    }
    assert "torch does not import" in verdicts.gpu_worker_cuda(broken, 0, reference_gpu()).summary
    # Plain processes show no device isolation: SKIP, never a PASS by default.
    assert verdicts.gpu_worker_devices(own, "nvidia0", control, "not root").verdict == "SKIP"


def test_a_worker_given_no_gpu_passes_only_seeing_none_and_unable_to_open_or_make_one() -> None:
    none = facts([], "", 0, opens={"/dev/nvidia0": "ENOENT"}, mknod="EPERM")
    assert verdicts.none_worker_devices(none, "").verdict == "PASS"
    assert verdicts.none_worker_cuda(none).verdict == "PASS"
    assert verdicts.none_worker_cannot_open(none, "/dev/nvidia0", "").verdict == "PASS"
    leaky = facts(["nvidia0"], None, 1, opens={"/dev/nvidia0": "opened"}, mknod="created")
    assert verdicts.none_worker_devices(leaky, "").verdict == "FAIL"
    assert "CUDA_VISIBLE_DEVICES=None, expected ''" in verdicts.none_worker_cuda(leaky).summary
    opened = verdicts.none_worker_cannot_open(leaky, "/dev/nvidia0", "")
    assert opened.summary == "opening /dev/nvidia0: opened; mknod of /dev/nvidia0's device number: created"


def test_two_gpu_workers_need_two_gpus_and_each_must_not_open_the_others_node() -> None:
    skip = verdicts.pair_cannot_open(1, "")
    assert (skip.verdict, skip.summary) == ("SKIP", "needs a second GPU: this machine has 1")
    a = facts(["nvidia0"], "0", 1, opens={"/dev/nvidia0": "opened", "/dev/nvidia1": "ENOENT"})
    c = facts(["nvidia1"], "1", 1, opens={"/dev/nvidia0": "ENOENT", "/dev/nvidia1": "opened"})
    assert verdicts.pair_cannot_open(2, "", a, c, ("nvidia0", "nvidia1")).verdict == "PASS"
    c["opens"]["/dev/nvidia0"] = "opened"
    assert "opens nvidia0" in verdicts.pair_cannot_open(2, "", a, c, ("nvidia0", "nvidia1")).summary


def sample(
    util: float, used_mib: int, ref_util: float | None, ref_mib: int, b: list[Any] | None = None
) -> dict[str, Any]:
    gpu = GpuUsage(index=0, util_pct=util, memory_used_bytes=used_mib * MIB, memory_total_bytes=143771 * MIB)
    return {
        "agent": {"a": [gpu.model_dump()], "b": [] if b is None else b},
        "reference": {0: _ref(ref_util, ref_mib)},
    }


def _ref(util: float | None, used_mib: int) -> dict[str, Any]:
    gpu = reference_gpu(0, util, used_mib)
    return {"index": 0, "util_pct": gpu.util_pct, "memory_used_bytes": gpu.memory_used_bytes}


def test_usage_passes_within_a_few_percent_of_nvidia_smi_and_fails_beyond_or_on_an_idle_gpu() -> None:
    close = [sample(98, 4856, 100, 4856), sample(100, 4856, 99, 4860), sample(97, 4856, 100, 4856)]
    assert verdicts.usage_vs_reference(close, "a", 0).verdict == "PASS"
    assert verdicts.usage_attribution(close, {"a": [0]}, ["b"], "a", 4 << 30).verdict == "PASS"
    far = [sample(60, 4856, 100, 4856)] * 3
    assert "gap 40.0 points" in verdicts.usage_vs_reference(far, "a", 0).summary
    leaked = [sample(60, 9000, 100, 4856)] * 3
    assert (
        "memory 9000.0 MiB vs nvidia-smi 4856.0 MiB (gap 85.3%)"
        in verdicts.usage_vs_reference(leaked, "a", 0).summary
    )
    idle = [sample(0, 4856, 0, 4856)] * 3
    assert "the burst did not load the GPU" in verdicts.usage_vs_reference(idle, "a", 0).summary
    stolen = [sample(100, 4856, 100, 4856, b=close[0]["agent"]["a"])]
    assert (
        "given no GPU, reported with [0]"
        in verdicts.usage_attribution(stolen, {"a": [0]}, ["b"], "a", 0).summary
    )
    short = verdicts.usage_attribution(close, {"a": [0]}, ["b"], "a", 8 << 30)
    assert "reported 4856.0 MiB used, it holds 8192.0 MiB" in short.summary


def node(name: str, allocated: int, foreign: int, free: int, count: int = 2) -> dict[str, Any]:
    return {
        "name": name,
        "gpu_count": count,
        "gpu_allocatable": count,
        "gpu_allocated": allocated,
        "gpu_allocated_foreign": foreign,
        "gpu_free": free,
    }


def test_accounting_expects_every_node_to_count_the_shared_pool_and_nothing_after_the_stop() -> None:
    during = [node("gpu-a", 1, 0, 1), node("gpu-b", 1, 1, 1)]
    after = [node("gpu-a", 0, 0, 2), node("gpu-b", 0, 0, 2)]
    assert verdicts.inventory_accounting(during, after, 2, {"gpu-a": 1}).verdict == "PASS"
    blind = [node("gpu-a", 1, 0, 1), node("gpu-b", 0, 0, 2)]  # a node that does not see the pool shrink
    check = verdicts.inventory_accounting(blind, after, 2, {"gpu-a": 1})
    assert check.summary == (
        "while held: node gpu-b publishes count/allocatable/allocated/foreign/free (2, 2, 0, 0, 2), "
        "expected (2, 2, 1, 1, 1)"
    )


BLOCK_ALL_BUT_THE_WHEELS = """
import importlib.abc, importlib.metadata, sys
allowed = {name.lower().replace("_", "-") for name in sys.argv[1].split(",")}
owners = importlib.metadata.packages_distributions()

class OnlyTheWheels(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        top = name.partition(".")[0]
        if top in sys.stdlib_module_names or top.startswith(("_", "rlark_", "gpu_check")):
            return None
        if {d.lower().replace("_", "-") for d in owners.get(top, [])} & allowed:
            return None
        raise ModuleNotFoundError(f"not carried: {top}", name=top)

sys.meta_path.insert(0, OnlyTheWheels())
sys.path[:0] = sys.argv[2].split(":")
import gpu_check.scenario, gpu_check.verdicts
print("imported")
"""


def test_the_check_imports_nothing_beyond_the_wheels_it_carries() -> None:
    # Optional imports of those packages (structlog's rich, say) must find nothing and still work, as on the device.
    sources = ":".join(
        str(ROOT / p)
        for p in ("scripts", "libs/contracts/src", "services/tunnel_agent/src", "services/inventory/src")
    )
    done = subprocess.run(
        [sys.executable, "-c", BLOCK_ALL_BUT_THE_WHEELS, ",".join(WHEELS), sources],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.stdout.strip() == "imported", done.stderr


def test_the_script_and_what_the_device_call_carries_fit_the_device_tools_limits() -> None:
    found = sizes()
    assert found["carried_bytes"] <= CARRY_LIMIT_BYTES, json.dumps(found)
    assert found["script_bytes"] < 256 * 1024, "the check should stay small enough to read"
    pins = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "gpu-check"), "--requirements"],
        capture_output=True, text=True, timeout=60, check=True,
    ).stdout.split()  # fmt: skip
    assert [pin.split("==")[0] for pin in pins] == list(WHEELS)
