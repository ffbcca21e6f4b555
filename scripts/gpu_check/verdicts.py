"""What each check concludes from what was seen: pure functions from figures to a `Check`.

Expectations are stated here from the machine and the scenario (so many GPUs held by whom), never computed
by the code under test. A check that cannot be shown on this machine is SKIP with the reason (one GPU cannot
show two GPU workers apart; plain processes show no device isolation); a check whose figures are missing or
wrong is FAIL. Tolerances: utilisation within `UTIL_TOLERANCE_PCT` points and memory within
`MEMORY_TOLERANCE` of `nvidia-smi`'s own reading taken right after the agent's (medians over the rounds).
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from typing import Any

from rlark_contracts.events.agent import GpuUsage, NodeObservation
from rlark_inventory.domain.errors import InvalidInput
from rlark_inventory.domain.labels import parse_selector
from rlark_tunnel_agent.runtime.local.gpus import Gpu

from gpu_check.nvidia import ReferenceGpu
from gpu_check.probe import MATMUL_N
from gpu_check.report import Check, mib

GPU_MODEL_LABEL = "rlark.io/gpu-model"
UTIL_TOLERANCE_PCT = 5.0
MEMORY_TOLERANCE = 0.03
BUSY_PCT = 50.0
"""A matmul burst keeps a GPU at least this busy by `nvidia-smi`'s count, or there is nothing to compare."""

Facts = Mapping[str, Any]
"""A probe's `facts` stage (see `probe.py`)."""
Round = Mapping[str, Any]
"""One sampling round: `agent` (worker id → its GPUs as `sample_usage` reported them, None when it gave no
sample of the worker) and `reference` (GPU index → `nvidia-smi`'s row)."""


def _verdict(name: str, problems: list[str], passed: str, data: dict[str, Any]) -> Check:
    if problems:
        return Check(name, "FAIL", "; ".join(problems), data)
    return Check(name, "PASS", passed, data)


def vendorless(name: str) -> str:
    """`nvidia-smi`'s name as the agent documents its model (`gpus.py`): without the `NVIDIA ` prefix."""
    return name.removeprefix("NVIDIA ").strip()


def same_uuid(a: str, b: str) -> bool:
    """`GPU-8b1c...` (nvidia-smi) and `8b1c...` (torch) name the same GPU (dashes aside)."""

    def bare(uuid: str) -> str:
        return uuid.strip().lower().removeprefix("gpu-").replace("-", "")

    return bool(a.strip()) and bare(a) == bare(b)


def discovery_gpus(detected: Sequence[Gpu], reference: Sequence[ReferenceGpu]) -> Check:
    data = {"agent": [asdict(g) for g in detected], "nvidia_smi": [asdict(g) for g in reference]}
    if not reference:
        return Check("discovery.gpus", "FAIL", "nvidia-smi lists no GPU on this machine", data)
    problems = []
    if len(detected) != len(reference):
        problems.append(f"the agent found {len(detected)} GPU(s), nvidia-smi lists {len(reference)}")
    found = {g.index: g for g in detected}
    for ref in reference:
        gpu = found.get(ref.index)
        if gpu is None:
            problems.append(f"GPU {ref.index} ({ref.name}) is not among the agent's")
            continue
        if gpu.model != vendorless(ref.name):
            problems.append(f"GPU {ref.index}: the agent says {gpu.model!r}, nvidia-smi {ref.name!r}")
        if not same_uuid(gpu.uuid, ref.uuid):
            problems.append(
                f"GPU {ref.index}: the agent's UUID {gpu.uuid!r} is not nvidia-smi's {ref.uuid!r}"
            )
    models = ", ".join(sorted({g.model for g in detected}))
    return _verdict(
        "discovery.gpus",
        problems,
        f"{len(detected)} GPU(s), model {models!r}, UUIDs as nvidia-smi lists them",
        data,
    )


def discovery_memory(agent: Mapping[int, GpuUsage], reference: Sequence[ReferenceGpu]) -> Check:
    data = {
        "agent_total_bytes": {i: g.memory_total_bytes for i, g in sorted(agent.items())},
        "nvidia_smi_total_bytes": {r.index: r.memory_total_bytes for r in reference},
    }
    problems = []
    if not reference:
        problems.append("nvidia-smi lists no GPU")
    for ref in reference:
        gpu = agent.get(ref.index)
        if gpu is None:
            problems.append(f"the agent's usage query has no row for GPU {ref.index}")
        elif ref.memory_total_bytes is None:
            problems.append(f"nvidia-smi gives GPU {ref.index} no memory.total")
        elif gpu.memory_total_bytes != ref.memory_total_bytes:
            problems.append(
                f"GPU {ref.index}: the agent reads {mib(gpu.memory_total_bytes)}, "
                f"nvidia-smi {mib(ref.memory_total_bytes)}"
            )
    totals = sorted({mib(g.memory_total_bytes) for g in agent.values()})
    return _verdict(
        "discovery.memory", problems, f"{', '.join(totals)} per GPU, as nvidia-smi's memory.total", data
    )


def discovery_node(observations: Sequence[NodeObservation], count: int, model: str) -> Check:
    data = {"nodes": [o.model_dump(mode="json") for o in observations]}
    problems = []
    for obs in observations:
        seen = (obs.gpu_count, obs.gpu_model, obs.gpu_allocatable, obs.gpu_allocated)
        if seen != (count, model, count, 0):
            problems.append(
                f"node {obs.name}: gpu_count {obs.gpu_count}, model {obs.gpu_model!r}, allocatable "
                f"{obs.gpu_allocatable}, allocated {obs.gpu_allocated}; expected {count}, {model!r}, {count}, 0"
            )
    if not observations:
        problems.append("the driver observed no node")
    return _verdict(
        "discovery.node",
        problems,
        f"each of {len(observations)} virtual nodes offers the machine's {count} {model} GPU(s), none allocated",
        data,
    )


def discovery_label(model: str, documents: Sequence[Mapping[str, Any]]) -> Check:
    """The model the agent reports is what users select on: `rlark.io/gpu-model=<model>` is a selector the
    inventory accepts, and the nodes the cluster file labels so carry it through to the inventory's state."""
    data: dict[str, Any] = {"model": model, "labels": {d["name"]: d["labels"] for d in documents}}
    try:
        selector = parse_selector(f"{GPU_MODEL_LABEL}={model}")
    except InvalidInput as exc:
        return Check(
            "discovery.label",
            "FAIL",
            f"the inventory refuses the selector {GPU_MODEL_LABEL}={model}: {exc.message}",
            data,
        )
    unmatched = [d["name"] for d in documents if not selector.items() <= dict(d["labels"]).items()]
    problems = [f"nodes {', '.join(unmatched)} do not match it"] if unmatched else []
    return _verdict(
        "discovery.label",
        problems,
        f"nodes carry {GPU_MODEL_LABEL}={model}, a selector the inventory accepts and matches on them",
        data,
    )


def _torch_problems(facts: Facts, count: int) -> list[str]:
    torch = facts.get("torch") or {}
    if "import_error" in torch:
        return [f"torch does not import in the worker: {torch['import_error']}"]
    problems = [f"torch failed: {torch['error']}"] if torch.get("error") else []
    if torch.get("count") != count:
        problems.append(f"torch counts {torch.get('count')} GPU(s), expected {count}")
    return problems


def gpu_worker_devices(facts: Facts, own_node: str, control: Sequence[str], processes: str) -> Check:
    """A worker given one GPU has that GPU's node and the control nodes in its `/dev`, and no other GPU's."""
    data = {"dev_nvidia": facts.get("dev_nvidia"), "opens": facts.get("opens"), "own_node": own_node}
    if processes:
        return Check("worker.gpu.devices", "SKIP", f"no device isolation to show: {processes}", data)
    expected = sorted([*control, own_node])
    got = list(facts.get("dev_nvidia") or [])
    problems = []
    if sorted(got) != expected:
        problems.append(f"its /dev holds {got}, expected {expected}")
    opened = (facts.get("opens") or {}).get(f"/dev/{own_node}")
    if opened != "opened":
        problems.append(f"it cannot open its own /dev/{own_node}: {opened}")
    return _verdict("worker.gpu.devices", problems, f"its /dev holds {', '.join(got)} and no other GPU", data)


def gpu_worker_cuda(facts: Facts, index: int, gpu: ReferenceGpu) -> Check:
    """CUDA_VISIBLE_DEVICES names its GPU; torch counts exactly one, that one (by UUID), and computes on it."""
    torch = facts.get("torch") or {}
    data = {
        "cuda_visible_devices": facts.get("cuda_visible_devices"),
        "torch": torch,
        "expected_uuid": gpu.uuid,
    }
    problems = []
    if facts.get("cuda_visible_devices") != str(index):
        problems.append(f"CUDA_VISIBLE_DEVICES={facts.get('cuda_visible_devices')!r}, expected {index!r}")
    problems += _torch_problems(facts, 1)
    devices = torch.get("devices") or []
    if len(devices) == 1 and not same_uuid(devices[0].get("uuid", ""), gpu.uuid):
        problems.append(f"torch's GPU has UUID {devices[0].get('uuid')!r}, its assigned GPU is {gpu.uuid}")
    if torch.get("count") == 1 and torch.get("matmul_exact") is not True:
        problems.append(f"a {MATMUL_N}x{MATMUL_N} matmul on it is not exact: {torch.get('matmul_exact')}")
    name = devices[0].get("name") if devices else "?"
    return _verdict(
        "worker.gpu.cuda",
        problems,
        f"CUDA_VISIBLE_DEVICES={index}; torch {torch.get('version')} counts 1 GPU, {name} ({gpu.uuid}); "
        f"a {MATMUL_N}x{MATMUL_N} matmul on it is exact",
        data,
    )


def none_worker_devices(facts: Facts, processes: str) -> Check:
    data = {"dev_nvidia": facts.get("dev_nvidia")}
    if processes:
        return Check("worker.none.devices", "SKIP", f"no device isolation to show: {processes}", data)
    got = list(facts.get("dev_nvidia") or [])
    problems = [f"its /dev holds {got}"] if got else []
    return _verdict("worker.none.devices", problems, "its /dev holds no NVIDIA node", data)


def none_worker_cuda(facts: Facts) -> Check:
    torch = facts.get("torch") or {}
    data = {"cuda_visible_devices": facts.get("cuda_visible_devices"), "torch": torch}
    problems = []
    if facts.get("cuda_visible_devices") != "":
        problems.append(f"CUDA_VISIBLE_DEVICES={facts.get('cuda_visible_devices')!r}, expected ''")
    problems += _torch_problems(facts, 0)
    return _verdict(
        "worker.none.cuda",
        problems,
        f"CUDA_VISIBLE_DEVICES=''; torch {torch.get('version')} counts 0 GPUs",
        data,
    )


def none_worker_cannot_open(facts: Facts, other: str, processes: str) -> Check:
    """A worker given no GPU can neither open the GPU worker's node nor make one with its device number."""
    opens = facts.get("opens") or {}
    data = {"opens": opens, "mknod": facts.get("mknod"), "target": other}
    if processes:
        return Check("worker.none.cannot_open", "SKIP", f"no device isolation to show: {processes}", data)
    problems = []
    if opens.get(other) in (None, "opened"):
        problems.append(f"opening {other}: {opens.get(other) or 'not tried'}")
    if facts.get("mknod") in (None, "created", "not tried"):
        problems.append(f"mknod of {other}'s device number: {facts.get('mknod')}")
    return _verdict(
        "worker.none.cannot_open",
        problems,
        f"opening {other} answers {opens.get(other)}; making the node (mknod) answers {facts.get('mknod')}",
        data,
    )


def pair_cannot_open(
    count: int,
    processes: str,
    first: Facts | None = None,
    second: Facts | None = None,
    nodes: tuple[str, str] = ("", ""),
) -> Check:
    """Two workers given one GPU each open their own node and not the other's (needs two GPUs)."""
    if count < 2:
        return Check("worker.pair.cannot_open", "SKIP", f"needs a second GPU: this machine has {count}")
    if processes:
        return Check("worker.pair.cannot_open", "SKIP", f"no device isolation to show: {processes}")
    if first is None or second is None:
        return Check("worker.pair.cannot_open", "FAIL", "a GPU worker's probe did not answer")
    problems = []
    data = {"first": first.get("opens"), "second": second.get("opens"), "nodes": list(nodes)}
    for facts, own, other in ((first, nodes[0], nodes[1]), (second, nodes[1], nodes[0])):
        opens = facts.get("opens") or {}
        if opens.get(f"/dev/{own}") != "opened":
            problems.append(f"the worker given {own} cannot open it: {opens.get(f'/dev/{own}')}")
        if opens.get(f"/dev/{other}") in (None, "opened"):
            problems.append(f"the worker given {own} opens {other}: {opens.get(f'/dev/{other}')}")
    problems += [f"second worker: {p}" for p in _torch_problems(second, 1)]
    return _verdict(
        "worker.pair.cannot_open",
        problems,
        f"the workers given {nodes[0]} and {nodes[1]} each open their own node and not the other's",
        data,
    )


def usage_attribution(
    rounds: Sequence[Round],
    gpu_workers: Mapping[str, Sequence[int]],
    none_workers: Sequence[str],
    burst: str,
    held: int,
) -> Check:
    """Every round samples each GPU worker with its own GPUs only, each worker without GPUs with none, and the
    bursting worker with at least the memory it holds."""
    problems: list[str] = []
    data = {"rounds": list(rounds), "held_bytes": held}
    if not rounds:
        problems.append("no sampling round ran")
    for n, sample in enumerate(rounds, 1):
        agent = sample["agent"]
        for wid, indices in gpu_workers.items():
            gpus = agent.get(wid)
            if gpus is None:
                problems.append(f"round {n}: no sample of {wid}")
            elif [g["index"] for g in gpus] != list(indices):
                problems.append(
                    f"round {n}: {wid} reported with GPUs {[g['index'] for g in gpus]}, holds {indices}"
                )
        for wid in none_workers:
            if agent.get(wid) is None:
                problems.append(f"round {n}: no sample of {wid}")
            elif agent[wid]:
                problems.append(
                    f"round {n}: {wid}, given no GPU, reported with {[g['index'] for g in agent[wid]]}"
                )
        used = sum(g["memory_used_bytes"] for g in agent.get(burst) or [])
        if used < held:
            problems.append(f"round {n}: {burst} reported {mib(used)} used, it holds {mib(held)}")
    own = [f"{wid} with GPU {', '.join(map(str, indices))} only" for wid, indices in gpu_workers.items()]
    return _verdict(
        "usage.attribution",
        problems[:6],
        f"{len(rounds)} rounds: {'; '.join(own)}, {burst} using at least the {mib(held)} it holds; "
        f"{', '.join(none_workers) or 'no worker'} with none",
        data,
    )


def usage_vs_reference(rounds: Sequence[Round], burst: str, index: int) -> Check:
    """The agent's reading of the bursting worker's GPU against `nvidia-smi`'s own, round by round."""
    pairs = []
    for sample in rounds:
        ours = next((g for g in sample["agent"].get(burst) or [] if g["index"] == index), None)
        theirs = sample["reference"].get(index)
        if ours is not None and theirs is not None:
            pairs.append((ours, theirs))
    data: dict[str, Any] = {"pairs": pairs}
    if not pairs:
        return Check("usage.vs_nvidia_smi", "FAIL", "no round has both readings of the GPU", data)
    util_ours = statistics.median(p[0]["util_pct"] for p in pairs)
    util_ref = statistics.median(p[1]["util_pct"] or 0.0 for p in pairs)
    util_gap = statistics.median(abs(p[0]["util_pct"] - (p[1]["util_pct"] or 0.0)) for p in pairs)
    mem_ours = int(statistics.median(p[0]["memory_used_bytes"] for p in pairs))
    mem_ref = int(statistics.median(p[1]["memory_used_bytes"] or 0 for p in pairs))
    mem_gap = statistics.median(
        abs(p[0]["memory_used_bytes"] - (p[1]["memory_used_bytes"] or 0))
        / max(p[1]["memory_used_bytes"] or 1, 1)
        for p in pairs
    )
    data.update(util_gap_pct=util_gap, memory_gap=mem_gap)
    problems = []
    if util_ref < BUSY_PCT:
        problems.append(f"the burst did not load the GPU (nvidia-smi: {util_ref:.0f} %): nothing to compare")
    if util_gap > UTIL_TOLERANCE_PCT:
        problems.append(
            f"utilisation {util_ours:.0f} % vs nvidia-smi {util_ref:.0f} % (gap {util_gap:.1f} points)"
        )
    if mem_gap > MEMORY_TOLERANCE:
        problems.append(f"memory {mib(mem_ours)} vs nvidia-smi {mib(mem_ref)} (gap {mem_gap:.1%})")
    return _verdict(
        "usage.vs_nvidia_smi",
        problems,
        f"utilisation {util_ours:.0f} % vs nvidia-smi {util_ref:.0f} % (median gap {util_gap:.1f} points), "
        f"memory {mib(mem_ours)} vs {mib(mem_ref)} (median gap {mem_gap:.1%}), {len(pairs)} rounds",
        data,
    )


def inventory_accounting(
    during: Sequence[Mapping[str, Any]],
    after: Sequence[Mapping[str, Any]],
    count: int,
    held_by_node: Mapping[str, int],
) -> Check:
    """What the inventory publishes per node (`NodeState` and `gpu_free`) while the workers hold their GPUs and
    after they stopped. The machine's GPUs are one pool shared by every virtual node (`local/usage.py`): each
    node offers them all, counts every held GPU as allocated and those held by other nodes' workers as foreign."""
    held = sum(held_by_node.values())
    data = {"during": list(during), "after": list(after), "held_by_node": dict(held_by_node)}
    problems = []
    for phase, docs, held_now in (("while held", during, held), ("after the stop", after, 0)):
        if not docs:
            problems.append(f"{phase}: no node")
        for doc in docs:
            mine = held_by_node.get(doc["name"], 0) if held_now else 0
            expected = (count, count, held_now, held_now - mine, count - held_now)
            seen = tuple(
                doc[k]
                for k in (
                    "gpu_count",
                    "gpu_allocatable",
                    "gpu_allocated",
                    "gpu_allocated_foreign",
                    "gpu_free",
                )
            )
            if seen != expected:
                problems.append(
                    f"{phase}: node {doc['name']} publishes count/allocatable/allocated/foreign/free {seen}, "
                    f"expected {expected}"
                )
    return _verdict(
        "inventory.accounting",
        problems,
        f"{held} of {count} GPU(s) held: each node publishes allocated {held}, free {count - held} "
        f"(foreign: held by other nodes' workers); after the stop allocated 0, free {count}",
        data,
    )
