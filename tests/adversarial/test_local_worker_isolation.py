"""Issue 14, item 1: a user's job on the local runtime gets no further than its own worker.

Through the real gateway, broker, scheduler and a root local agent laid out as ``make run`` lays out its
state (``<state>/internal-secret`` beside ``<state>/agent``): user B runs a job that stays up; user A's job then
tries what a hostile run script would — its uid, the platform's internal secret, B's worker directory, a write
to ``/etc`` — and its owner ssh-es into the worker with their key. Before workers ran unprivileged in a root of
their own, the script ran as uid 0, printed the secret, listed B's files and wrote ``/etc``; and no unprivileged
user existed to ssh in as. What the machine cannot enforce (cgroup limits without cgroup v2 controllers) is
printed by ``rlark clusters show``.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import uuid
from pathlib import Path
from typing import Any

import pytest
from agents import local_agent, nodes, write_cluster_file
from jobs import add_key, document, job, logs, make_public_key, role, submit, wait_placeable, wait_status
from rlark_devinfra.testing import TEST_SECRET
from stack import Stack, eventually

pytestmark = [pytest.mark.e2e, pytest.mark.netns]

CLUSTER = "lab"
HOLD = 'while [ ! -e "$HOME/go" ]; do sleep 0.2; done\n'


def hostile_script(secret: Path, peer_dir: Path, etc_file: str) -> str:
    return (
        'echo "UID=$(id -u)"\n'
        f'cat {secret} 2>&1 || echo "REFUSED secret"\n'
        f'ls {peer_dir} 2>&1 || echo "REFUSED peer"\n'
        f'touch {etc_file} 2>&1 || echo "REFUSED etc"\n'
        'echo "PROBES DONE"\n'
        f"{HOLD}"
        'echo "RELEASED over ssh"\n'
    )


def on_host(path: str) -> bool:
    return os.path.lexists(path)


def ssh(key: Path, address: str, command: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["ssh", "-i", str(key), "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=no",
         "-o", "UserKnownHostsFile=/dev/null", "-o", "ConnectTimeout=10", f"rlark@{address}", command],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip


async def running_worker(stack: Stack, job_id: str, line: str) -> dict[str, str]:
    """The job's Header once its logs show ``line`` (the job is then Running)."""

    async def seen() -> bool:
        return any(line in entry["line"] for entry in await logs(stack, job_id))

    await eventually(seen, timeout_s=180, interval_s=0.5, what=f"{line!r} in the logs of {job_id}")
    workers = (await job(stack, job_id))["workers"]
    assert len(workers) == 1, workers
    return workers[0]  # type: ignore[no-any-return]


async def test_a_users_job_runs_unprivileged_sees_no_platform_state_nor_other_workers_and_its_owner_can_ssh_in(
    stack: Stack, tmp_path: Path
) -> None:
    assert os.geteuid() == 0, "the local runtime isolates workers only under a root agent"
    state = tmp_path / "state"
    state.mkdir()
    secret = state / "internal-secret"
    secret.write_text(TEST_SECRET)
    secret.chmod(0o644)  # readable by anyone on the host: what hides it is the worker's own root
    etc_file = f"/etc/rlark-hostile-{uuid.uuid4().hex[:8]}"
    credential = await stack.register_cluster(CLUSTER)
    cluster_file = write_cluster_file(tmp_path / "lab.yaml", CLUSTER, nodes(CLUSTER, 2))
    _, victim = await stack.new_user()
    _, attacker = await stack.new_user()
    await add_key(stack, "laptop", make_public_key(tmp_path, "attacker"), token=attacker)

    try:
        async with local_agent(stack.url, credential, cluster_file, state / "agent") as agent:
            held = document("victim", [role("header", 1, CLUSTER)], f'echo "VICTIM UP"\n{HOLD}')
            await wait_placeable(stack, held, token=victim)
            peer = await running_worker(stack, (await submit(stack, held, token=victim))["id"], "VICTIM UP")
            peer_dir = state / "agent" / CLUSTER / "workers" / peer["id"]
            assert (peer_dir / "scripts").is_dir()  # it exists on the host

            hostile = document(
                "hostile",
                [role("header", 1, CLUSTER)],
                hostile_script(secret, peer_dir, etc_file),
                sshKeys=["laptop"],
            )
            submitted = await submit(stack, hostile, token=attacker)
            own = await running_worker(stack, submitted["id"], "PROBES DONE")
            probed = "\n".join(entry["line"] for entry in await logs(stack, submitted["id"]))
            uid = re.search(r"^UID=(\d+)$", probed, re.MULTILINE)
            assert uid is not None, probed
            assert int(uid.group(1)) != 0
            assert TEST_SECRET not in probed
            assert f"cat: {secret}: No such file or directory" in probed
            assert f"ls: cannot access '{peer_dir}': No such file or directory" in probed
            assert re.search(
                rf"touch: cannot touch '{etc_file}': (Read-only file system|Permission denied)", probed
            )
            assert "REFUSED secret" in probed
            assert "REFUSED peer" in probed
            assert not on_host(etc_file)

            hint = (await job(stack, submitted["id"], token=attacker))["ssh_command"]
            assert hint == f"ssh rlark@{own['address']}"  # the job page shows the command that works
            answer = ssh(tmp_path / "attacker", own["address"], f'id -u; cat {secret}; touch "$HOME/go"')
            assert answer.stdout.splitlines()[:1] == [uid.group(1)], (answer.stdout, answer.stderr[-2000:])
            assert TEST_SECRET not in answer.stdout
            final = await wait_status(stack, submitted["id"], {"Succeeded"}, timeout_s=120)

            # What this machine cannot enforce (no cgroup v2 CPU and memory controllers, say) is not silent:
            # the agent reports it and `rlark clusters show` prints it.
            gaps = list(agent.driver.not_enforced)

            async def shown() -> dict[str, Any] | None:
                done = await stack.cli("clusters", "show", CLUSTER, "-o", "json")
                assert done.returncode == 0, done.stderr
                found: dict[str, Any] = json.loads(done.stdout)
                return found if found["not_enforced"] == gaps else None

            await eventually(shown, timeout_s=30, what="the agent's report in `rlark clusters show`")
    finally:
        if on_host(etc_file):  # the old, privileged worker wrote it: leave the host as it was
            os.remove(etc_file)

    text = "\n".join(entry["line"] for entry in await logs(stack, submitted["id"]))
    assert "RELEASED over ssh" in text
    assert final["status"] == "Succeeded"
