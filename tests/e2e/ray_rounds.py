"""A run script that keeps one Ray cluster busy until told to stop, and how tests read it.

The network-domain tests disturb a running job (cut a link, kill an agent) and must show that the SAME
Ray cluster carried on. ``run_script(control_env)`` is the Header's run script: it records the alive
Ray nodes, then runs rounds of one task pinned to every node until a ``stop`` file appears in the
directory named by the environment variable ``control_env``, writing ``rounds`` (``count wall-time``)
there after each round; a round that fails is counted, not fatal. It ends by printing the nodes again
and a summary, which ``summary`` reads from the job's log.

Workers see only what their job mounts (ADR 0007), so the control directory reaches the Header as a
hostPath mount at ``CONTROL_PATH`` (``control_role_fields``), writable by the worker's own uid, and the
cluster's hostPath policy must allow it.
"""

from __future__ import annotations

import contextlib
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stack import eventually


def run_script(control_env: str, deadline_s: int = 300) -> str:
    return (
        (
            r"""
python - <<'PY'
import json, os, pathlib, time, ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
ray.init(address=os.environ["RAY_ADDRESS"])
control = pathlib.Path(os.environ["CONTROL_ENV"])

def alive():
    return sorted([n["NodeID"], n["NodeManagerAddress"]] for n in ray.nodes() if n["Alive"])

before = alive()
print("RAY_NODES_BEFORE=" + json.dumps(before), flush=True)

@ray.remote(num_cpus=0)
def where():
    return ray.get_runtime_context().get_node_id()

rounds, errors, slowest = 0, 0, 0.0
deadline = time.monotonic() + DEADLINE_S
while not (control / "stop").exists():
    assert time.monotonic() < deadline, "never told to stop"
    started = time.monotonic()
    try:
        ran = ray.get([
            where.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False)).remote()
            for node, _ in before
        ])
        assert ran == [node for node, _ in before], ran
    except Exception as exc:  # counted, not fatal: the tests decide what a failed round means
        errors += 1
        print(f"ROUND_ERROR {type(exc).__name__}: {exc}"[:300], flush=True)
        time.sleep(1)
        continue
    slowest = max(slowest, time.monotonic() - started)
    rounds += 1
    (control / "rounds").write_text(f"{rounds} {time.time()}")
    time.sleep(0.2)
print("RAY_NODES_AFTER=" + json.dumps(alive()), flush=True)
print(f"ROUNDS rounds={rounds} errors={errors} slowest={slowest:.2f}", flush=True)
PY
"""
        )
        .replace("CONTROL_ENV", control_env)
        .replace("DEADLINE_S", str(deadline_s))
    )


CONTROL_PATH = "/control"


def control_role_fields(control: Path, control_env: str) -> dict[str, Any]:
    """A role's ``env`` and ``mounts`` that hand ``control`` (created here, world-writable) to the run script."""
    control.mkdir(parents=True, exist_ok=True)
    control.chmod(0o1777)  # the Header runs as its job's own unprivileged uid
    return {
        "env": {control_env: CONTROL_PATH},
        "mounts": [{"name": "control", "type": "hostPath", "source": str(control), "path": CONTROL_PATH}],
    }


def rounds(control: Path) -> tuple[int, float]:
    """(rounds completed, wall time of the last) as the run script recorded them; (0, 0.0) before any."""
    with contextlib.suppress(FileNotFoundError, ValueError):
        count, at = (control / "rounds").read_text().split()
        return int(count), float(at)
    return 0, 0.0


async def wait_rounds(control: Path, count: int, timeout_s: float) -> None:
    async def enough() -> bool:
        return rounds(control)[0] >= count

    await eventually(enough, timeout_s=timeout_s, interval_s=0.1, what=f"{count} rounds of Ray tasks")


@dataclass(frozen=True, slots=True)
class Summary:
    nodes_before: list[list[str]]
    """[node id, address] of every alive Ray node when the script started, and when it ended."""
    nodes_after: list[list[str]]
    rounds: int
    errors: int
    slowest_s: float


def summary(log_text: str) -> Summary:
    """What the run script printed at its end; fails the test, showing the log's tail, when missing."""
    before = re.search(r"RAY_NODES_BEFORE=(\[.*\])", log_text)
    after = re.search(r"RAY_NODES_AFTER=(\[.*\])", log_text)
    ended = re.search(r"ROUNDS rounds=(\d+) errors=(\d+) slowest=(\S+)", log_text)
    assert before, log_text[-3000:]
    assert after, log_text[-3000:]
    assert ended, log_text[-3000:]
    return Summary(
        json.loads(before.group(1)),
        json.loads(after.group(1)),
        int(ended.group(1)),
        int(ended.group(2)),
        float(ended.group(3)),
    )
