"""The check's scenario on the real code paths, below Ray: what the agent does with a GPU machine.

Role: discover the machine's GPUs as the agent does (`gpus.detect_gpus`, `worker_usage.query_nvidia_smi` and
`parse_nvidia_smi`), run a local cluster of two virtual nodes with the agent's own driver (`LocalDriver`, as
root pod-like workers in their own namespaces; plain processes where this machine cannot make namespaces, said
in each isolation check), give one worker the GPU (`a`) and one none (`b`) — and, on a machine with two GPUs,
a third worker the second GPU (`c`) — read what each sees through `probe.py` in their logs, sample their use
during `a`'s matmul burst with the driver's `sample_usage` beside `nvidia-smi`'s own reading, and fold the
node observations through the wire (`NodesObserved` envelope) into the inventory's node state
(`node_document`, `NodeState`, `free_gpus`). Nothing of Kafka, PostgreSQL or Ray runs: the workers' prepare
scripts are the probe, and the check stops them before `ray start`.

Why this reaches into the services' packages (which dev tooling otherwise never does): the check must exercise
the very functions the agent and the inventory run, on a machine that carries only a checkout and a few wheels.

Concurrency: one asyncio loop; the driver's events are read by one task (`Watcher`); `nvidia-smi` runs in
threads. Everything it makes (state directory, namespaces, bridge, workers) is removed at the end.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import json
import os
import shutil
import stat
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml
from rlark_contracts import decode, encode, new_envelope
from rlark_contracts.events.agent import NodeObservation, NodesObserved
from rlark_contracts.events.inventory import NodeState
from rlark_inventory.domain.nodes import free_gpus, node_document
from rlark_tunnel_agent.runtime.driver import (
    Mount,
    MountType,
    WorkerLogLine,
    WorkerSpec,
    WorkerStatus,
    WorkerStatusChanged,
)
from rlark_tunnel_agent.runtime.local.cluster import load_cluster
from rlark_tunnel_agent.runtime.local.driver import LocalDriver, LocalDriverOptions
from rlark_tunnel_agent.runtime.local.gpus import detect_gpus
from rlark_tunnel_agent.runtime.local.isolation import NVIDIA_CONTROL_DEVICES, SYSTEM_DIRS
from rlark_tunnel_agent.runtime.worker_usage import parse_nvidia_smi, query_nvidia_smi

from gpu_check import nvidia, verdicts
from gpu_check.probe import PREFIX
from gpu_check.report import Check, Report

CLUSTER = "gpu-check"
NVIDIA_MAJOR = 195
"""The character-device major of NVIDIA's GPU nodes (for the forged node when the host's is not a device)."""
FACTS_TIMEOUT_S = 240.0
"""A worker's first `import torch` and CUDA start on a cold machine can take a minute."""
LOG_TAIL = 300


class WorkerEnded(RuntimeError):
    """A worker ended (or said nothing in time) before its probe reached a stage."""


class Watcher:
    """Reads the driver's events: each worker's probe stages, its latest status, its log lines."""

    def __init__(self, driver: LocalDriver) -> None:
        self.stages: dict[str, dict[str, dict[str, Any]]] = defaultdict(dict)
        self.status: dict[str, WorkerStatus] = {}
        self.lines: dict[str, list[str]] = defaultdict(list)
        self._changed = asyncio.Event()
        self._task = asyncio.create_task(self._consume(driver), name="gpu-check-events")

    async def _consume(self, driver: LocalDriver) -> None:
        async for event in driver.events():
            if isinstance(event, WorkerLogLine):
                lines = self.lines[event.worker_id]
                lines.append(event.text)
                del lines[:-LOG_TAIL]
                if event.text.startswith(PREFIX):
                    with contextlib.suppress(ValueError):
                        fields = json.loads(event.text.removeprefix(PREFIX))
                        self.stages[event.worker_id][str(fields.pop("stage"))] = fields
            elif isinstance(event, WorkerStatusChanged):
                self.status[event.status.worker_id] = event.status
            self._changed.set()

    async def stage(self, worker_id: str, stage: str, timeout_s: float) -> dict[str, Any]:
        """The probe's ``stage`` of the worker; `WorkerEnded` when it ended or said nothing in time."""
        end = time.monotonic() + timeout_s
        while True:
            self._changed.clear()
            if stage in self.stages[worker_id]:
                return self.stages[worker_id][stage]
            status = self.status.get(worker_id)
            if status is not None and status.phase.terminal:
                raise WorkerEnded(
                    f"{worker_id} ended ({status.phase.value}, exit {status.exit_code}: {status.reason[:200]}) "
                    f"before its probe's {stage!r}; its last line: {self.last_line(worker_id)!r}"
                )
            left = end - time.monotonic()
            if left <= 0:
                raise WorkerEnded(
                    f"{worker_id} said no {stage!r} within {timeout_s:.0f} s; its last line: "
                    f"{self.last_line(worker_id)!r}"
                )
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), left)

    def last_line(self, worker_id: str) -> str:
        lines = [line for line in self.lines[worker_id] if line.strip()]
        return lines[-1][:300] if lines else ""

    async def close(self) -> None:
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task


def torch_location() -> tuple[str | None, bool]:
    """(the directory holding the `torch` package this interpreter finds, whether a worker's root shows it).

    A worker's root holds the system trees and this interpreter's prefixes (`isolation.system_paths`); torch
    installed elsewhere (a user site, a `PYTHONPATH` directory) is given to the workers as a hostPath mount."""
    spec = importlib.util.find_spec("torch")
    if spec is None or spec.origin is None:
        return None, False
    root = str(Path(spec.origin).resolve().parent.parent)
    prefixes = [*SYSTEM_DIRS, sys.prefix, sys.base_prefix, os.path.realpath(sys.prefix)]
    visible = any(root == p or root.startswith(p.rstrip("/") + "/") for p in prefixes)
    return root, visible


def device_number(node: str) -> str:
    """The host's ``/dev/<node>`` as `major:minor` (NVIDIA's major and the node's number if it is no device)."""
    with contextlib.suppress(OSError):
        info = os.stat(f"/dev/{node}")
        if stat.S_ISCHR(info.st_mode):
            return f"{os.major(info.st_rdev)}:{os.minor(info.st_rdev)}"
    return f"{NVIDIA_MAJOR}:{node.removeprefix('nvidia')}"


def host_nvidia_nodes() -> list[str]:
    with contextlib.suppress(OSError):
        return sorted(name for name in os.listdir("/dev") if name.startswith("nvidia"))
    return []


def prepare_script(probe: str, hold_s: int) -> str:
    """The probe as a prepare script: run it, then hold the worker until the check stops it (no Ray)."""
    return f"python3 - <<'RLARK_GPU_CHECK_PROBE'\n{probe}\nRLARK_GPU_CHECK_PROBE\nsleep {hold_s}\n"


def cluster_file(path: Path, model: str) -> Path:
    """Two virtual nodes labelled with the model the agent reports, as an operator copies it into the file.
    They declare no GPU count: each offers all of the machine's (`local/usage.py`)."""
    labels = {"rlark.io/node-category": "local", verdicts.GPU_MODEL_LABEL: model}
    cpu = float(os.cpu_count() or 1)
    nodes = [{"name": name, "labels": labels, "cpu": cpu} for name in ("gpu-a", "gpu-b")]
    path.write_text(yaml.safe_dump({"cluster": CLUSTER, "nodes": nodes}, sort_keys=False))
    return path


def published(observations: Sequence[NodeObservation]) -> list[dict[str, Any]]:
    """What the inventory publishes for these observations: the agent's report through the wire, folded by
    `node_document` into `NodeState` (the data of `inventory.node.updated`), with the `gpu_free` it serves."""
    sent = NodesObserved(cluster=CLUSTER, nodes=list(observations), observed_at=datetime.now(UTC))
    envelope = decode(encode(new_envelope(sent, source=f"agent/{CLUSTER}", subject=CLUSTER)))
    received = NodesObserved.model_validate(envelope.data)
    states = [
        NodeState.model_validate(node_document(CLUSTER, o, received.observed_at)) for o in received.nodes
    ]
    return [
        {
            **s.model_dump(mode="json", exclude={"observed_at"}),
            "gpu_free": free_gpus(s.gpu_allocatable, s.gpu_allocated),
        }
        for s in states
    ]


async def start_driver(state: Path) -> tuple[LocalDriver, str]:
    """The agent's driver on the check's cluster, and "" — or why its workers are plain processes here."""
    cluster = load_cluster(state / "cluster.yaml")
    why = "the check does not run as root" if os.geteuid() != 0 else ""
    if not why:
        driver = LocalDriver(cluster, LocalDriverOptions(state_dir=state / "pods"))
        try:
            await driver.start()
            return driver, ""
        except Exception as exc:
            why = f"pod-like workers do not start on this machine: {exc!r}"[:400]
            with contextlib.suppress(Exception):
                await driver.remove_network()
    driver = LocalDriver(cluster, LocalDriverOptions(state_dir=state / "processes", use_netns=False))
    await driver.start()
    return driver, why


@dataclass(frozen=True)
class Machine:
    """The machine's GPUs as the check found them: the agent's count and model, each index's device node."""

    reference: list[nvidia.ReferenceGpu]
    count: int
    model: str
    nodes: dict[int, str]
    """GPU index → its node's name in /dev: `nvidia<minor>` (the minor `nvidia-smi -q` gives, else the index)."""

    def gpu(self, index: int) -> nvidia.ReferenceGpu:
        return next(g for g in self.reference if g.index == index)


class Scenario:
    """One run of the check (see the module docstring); `run` adds every check it decides to the report, in
    phases: discover the GPUs, start the cluster, start the workers, judge what they see, sample the burst,
    stop them and account."""

    def __init__(
        self, report: Report, *, burst_s: float, burst_gib: float, rounds: int, settle_s: float
    ) -> None:
        self.report = report
        self.burst_s = burst_s
        self.burst_gib = burst_gib
        self.rounds = rounds
        self.settle_s = settle_s
        self.state = Path(tempfile.mkdtemp(prefix="rlark-gpu-check-"))
        self.driver: LocalDriver | None = None
        self.watcher: Watcher | None = None
        self.workers: list[str] = []
        self.held: dict[str, tuple[int, ...]] = {}
        """Worker id → the GPU indices the driver gave it."""
        self.processes = ""
        """Why the workers are plain processes here ("" when pod-like)."""

    async def run(self, deadline: float) -> None:
        """Decide the checks in order; `main` fails what this does not reach before ``deadline`` (monotonic)."""
        machine = await self.discover()
        if machine is None:
            self.report.not_reached("no GPU to check")
            return
        driver = await self.start_cluster(machine)
        await self.start_workers(driver, machine, deadline)
        facts: dict[str, dict[str, Any] | str] = {}
        for wid in self.workers:
            try:
                left = min(FACTS_TIMEOUT_S, deadline - time.monotonic())
                facts[wid] = await self._watcher().stage(wid, "facts", left)
            except WorkerEnded as exc:
                facts[wid] = str(exc)
        during = await driver.observe_nodes()
        self.judge_isolation(machine, facts)
        await self.sample_burst(driver, deadline)
        await self.stop_workers()
        after = await driver.observe_nodes()
        by_node: dict[str, int] = defaultdict(int)
        for wid, indices in self.held.items():
            record = driver.record(wid)
            if record is not None:
                by_node[record.spec.node_name] += len(indices)
        self.report.add(
            verdicts.inventory_accounting(published(during), published(after), machine.count, by_node)
        )

    async def discover(self) -> Machine | None:
        """The GPUs as the agent finds them beside `nvidia-smi`'s own list (None: no GPU here)."""
        report = self.report
        reference = await asyncio.to_thread(nvidia.reference)
        detected = await asyncio.to_thread(detect_gpus)
        agent_view = parse_nvidia_smi(await query_nvidia_smi())
        report.facts.update(nvidia_smi=[asdict(g) for g in reference], host_dev_nvidia=host_nvidia_nodes())
        report.add(verdicts.discovery_gpus(detected, reference))
        report.add(verdicts.discovery_memory(agent_view, reference))
        if not reference or not detected:
            return None
        nodes = {g.index: f"nvidia{g.minor if g.minor is not None else g.index}" for g in reference}
        return Machine(reference, len(detected), detected[0].model, nodes)

    async def start_cluster(self, machine: Machine) -> LocalDriver:
        """The agent's driver on two virtual nodes labelled with the model; what its nodes offer and publish."""
        cluster_file(self.state / "cluster.yaml", machine.model)
        driver, self.processes = await start_driver(self.state)
        self.driver = driver
        self.watcher = Watcher(driver)
        self.report.facts.update(
            isolation=self.processes or "pod-like workers (namespaces, own root and /dev)",
            tag=driver.tag,
            state_dir=str(self.state),
            not_enforced=list(driver.not_enforced),
        )
        before = await driver.observe_nodes()
        self.report.add(verdicts.discovery_node(before, machine.count, machine.model))
        self.report.add(verdicts.discovery_label(machine.model, published(before)))
        return driver

    async def start_workers(self, driver: LocalDriver, machine: Machine, deadline: float) -> None:
        """`a` given one GPU (it bursts), `b` none, and `c` the second GPU where there is one."""
        env = {"GPU_CHECK_DEVICES": ",".join(f"/dev/{machine.nodes[i]}" for i in sorted(machine.nodes))}
        env["GPU_CHECK_RDEV"] = device_number(machine.nodes[min(machine.nodes)])
        env["GPU_CHECK_BURST_GIB"] = str(self.burst_gib)
        mounts: tuple[Mount, ...] = ()
        torch_root, torch_visible = torch_location()
        self.report.facts["torch"] = {"root": torch_root, "in_worker_root": torch_visible}
        if torch_root is not None and not torch_visible:
            env["PYTHONPATH"] = torch_root
            given = Mount(
                type=MountType.HOST_PATH, source=torch_root, target=torch_root, read_only=not self.processes
            )
            mounts = (given,)
        probe = prepare_script(
            Path(__file__).with_name("probe.py").read_text(), max(int(deadline - time.monotonic()), 60)
        )
        plan = [("a", "gpu-a", 1, self.burst_s), ("b", "gpu-b", 0, 0.0)]
        if machine.count >= 2:
            plan.append(("c", "gpu-b", 1, 0.0))
        for name, node, gpus, burst in plan:
            spec = WorkerSpec(
                job_id=f"{CLUSTER}-{name}",
                worker_id=worker_id(name),
                cluster=CLUSTER,
                role="probe",
                index=0,
                rank=0,
                num_nodes=1,
                is_header=True,
                node_name=node,
                gpus=gpus,
                total_gpus=gpus,
                prepare_script=probe,
                env={**env, "GPU_CHECK_BURST_S": str(burst), "GPU_CHECK_GO": str(self._go(driver, name))},
                mounts=mounts,
            )
            await driver.ensure_worker(spec)
            self.workers.append(spec.worker_id)
            record = driver.record(spec.worker_id)
            self.held[spec.worker_id] = record.gpu_indices if record is not None else ()
        self.report.facts["gpu_indices"] = {wid: list(indices) for wid, indices in self.held.items()}

    def judge_isolation(self, machine: Machine, facts: dict[str, dict[str, Any] | str]) -> None:
        """What the workers saw of the GPUs, judged (see `verdicts.py`)."""
        add, processes = self.report.add, self.processes
        a, b, *rest = self.workers
        a_index = self.held[a][0] if self.held[a] else min(machine.nodes)
        a_node = machine.nodes[a_index]
        control = [n for n in NVIDIA_CONTROL_DEVICES if n in host_nvidia_nodes()]
        add(judge(facts[a], "worker.gpu.devices", verdicts.gpu_worker_devices, a_node, control, processes))
        add(judge(facts[a], "worker.gpu.cuda", verdicts.gpu_worker_cuda, a_index, machine.gpu(a_index)))
        add(judge(facts[b], "worker.none.devices", verdicts.none_worker_devices, processes))
        add(judge(facts[b], "worker.none.cuda", verdicts.none_worker_cuda))
        add(
            judge(
                facts[b],
                "worker.none.cannot_open",
                verdicts.none_worker_cannot_open,
                f"/dev/{a_node}",
                processes,
            )
        )
        if not rest:
            add(verdicts.pair_cannot_open(machine.count, processes))
            return
        c = rest[0]
        c_node = machine.nodes[self.held[c][0]] if self.held[c] else a_node
        first, second = facts[a], facts[c]
        add(
            verdicts.pair_cannot_open(
                machine.count,
                processes,
                first if isinstance(first, dict) else None,
                second if isinstance(second, dict) else None,
                (a_node, c_node),
            )
        )

    @staticmethod
    def _go(driver: LocalDriver, name: str) -> Path:
        """The file that starts the worker's burst: in its `scripts/`, which only root writes and it reads."""
        return driver.worker_dir(worker_id(name)) / "scripts" / "gpu-check-go"

    async def sample_burst(self, driver: LocalDriver, deadline: float) -> None:
        """While `a` runs its matmuls: the driver's samples of every worker beside `nvidia-smi`'s reading."""
        a = self.workers[0]
        watcher = self._watcher()
        rounds: list[dict[str, Any]] = []
        started: dict[str, Any] = {}
        self._go(driver, "a").touch()
        try:
            started = await watcher.stage(a, "burst_started", min(120.0, deadline - time.monotonic()))
            await asyncio.sleep(self.settle_s)
            # The rounds fit in the burst; one that would start after it ended is not taken.
            interval = max(0.2, min(1.0, (self.burst_s - self.settle_s) / (self.rounds + 1)))
            for _ in range(self.rounds):
                if "burst_done" in watcher.stages[a]:
                    break
                samples = await driver.sample_usage()
                reference = await asyncio.to_thread(nvidia.usage_now)
                rounds.append(
                    {
                        "agent": {s.worker_id: [g.model_dump() for g in s.gpus] for s in samples},
                        "reference": {i: asdict(g) for i, g in reference.items()},
                        "compute_apps": await asyncio.to_thread(nvidia.compute_apps),
                        "burst_processes": sorted(driver.our_processes(a)),
                    }
                )
                await asyncio.sleep(interval)
            done = await watcher.stage(a, "burst_done", min(self.burst_s + 60, deadline - time.monotonic()))
            self.report.facts["burst"] = {"started": started, "done": done}
        except WorkerEnded as exc:
            self.report.facts["burst"] = {"started": started, "error": str(exc)}
            if not rounds:
                self.report.add(Check("usage.attribution", "FAIL", f"no burst to sample: {exc}"))
                self.report.add(Check("usage.vs_nvidia_smi", "FAIL", f"no burst to sample: {exc}"))
                return
        gpu_workers = {wid: list(held) for wid, held in self.held.items() if held}
        none_workers = [wid for wid, held in self.held.items() if not held]
        held_bytes = int(started.get("held_bytes", 0))
        self.report.add(verdicts.usage_attribution(rounds, gpu_workers, none_workers, a, held_bytes))
        a_index = self.held[a][0] if self.held[a] else -1
        self.report.add(verdicts.usage_vs_reference(rounds, a, a_index))

    def _watcher(self) -> Watcher:
        if self.watcher is None:
            raise RuntimeError("the cluster is not started")
        return self.watcher

    async def stop_workers(self) -> None:
        """Stop every worker (each bounded) and keep what it said in the report."""
        if self.driver is None:
            return
        for wid in self.workers:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.driver.stop_worker(wid), 60)
        if self.watcher is not None:
            for wid in self.workers:
                status = self.watcher.status.get(wid)
                self.report.workers[wid] = {
                    "stages": self.watcher.stages.get(wid, {}),
                    "status": status.model_dump(mode="json") if status is not None else None,
                    "log_tail": self.watcher.lines.get(wid, [])[-LOG_TAIL:],
                }

    async def close(self) -> None:
        """Stop every worker, remove the cluster's network and the state directory (bounded)."""
        try:
            await self.stop_workers()
            if self.driver is not None:
                await self.driver.close()
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(self.driver.remove_network(), 30)
            if self.watcher is not None:
                await self.watcher.close()
        finally:
            shutil.rmtree(self.state, ignore_errors=True)


def worker_id(name: str) -> str:
    return f"{CLUSTER}-{name}-0"


def judge(facts: dict[str, Any] | str, name: str, verdict: Callable[..., Check], *args: Any) -> Check:
    """``verdict(facts, *args)``, or FAIL naming why the worker's probe gave no facts."""
    if isinstance(facts, str):
        return Check(name, "FAIL", facts)
    return verdict(facts, *args)
