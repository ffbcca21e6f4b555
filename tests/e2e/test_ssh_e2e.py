"""SSH through the platform with real OpenSSH (issue 15, items 1 and 2; ADR 0010): `rlark ssh-config` gives
`ssh` and `scp` a ProxyCommand to the gateway, whose relay the local cluster's agent connects to the
worker's own sshd (unprivileged, ADR 0007) — a command runs, a file goes up and comes back, the key
rotation path keeps working; another user's token and a wrong key are refused; the audit log has the
session with its bytes."""

from __future__ import annotations

import asyncio
import hashlib
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
from agents import local_agent, nodes, write_cluster_file
from jobs import add_key, document, make_public_key, role, submit, wait_placeable, wait_status
from stack import Stack, eventually

pytestmark = pytest.mark.e2e

RUN = "sleep 600\n"


async def openssh(
    stack: Stack, tmp: Path, token: str, *argv: str, program: str = "ssh"
) -> subprocess.CompletedProcess[str]:
    """``ssh``/``scp`` with the config `rlark ssh-config` wrote, as the holder of ``token``."""
    env = {
        **os.environ,
        "RLARK_URL": stack.url,
        "RLARK_TOKEN": token,
        "RLARK_CONFIG_DIR": str(tmp / "cli-config"),
    }
    options = ["-F", str(tmp / "ssh_config"), "-o", f"UserKnownHostsFile={tmp / 'known_hosts'}"]
    options += ["-o", "BatchMode=yes", "-o", "ConnectTimeout=30"]
    return await asyncio.to_thread(
        subprocess.run, [program, *options, *argv], env=env, capture_output=True, text=True, timeout=120
    )


async def audit_of(stack: Stack, user: str) -> list[dict[str, Any]]:
    async with stack.client() as admin:
        response = await admin.get("/api/v1/audit", params={"action": "jobs.ssh", "actor": user})
        assert response.status_code == 200, response.text
        return list(response.json()["items"])


async def test_ssh_and_scp_reach_a_local_worker_through_the_platform_with_the_owners_key_only(
    stack: Stack, tmp_path: Path
) -> None:
    owner, owner_token = await stack.new_user()
    _, stranger_token = await stack.new_user()
    credential = await stack.register_cluster("lab")
    cluster_file = write_cluster_file(tmp_path / "lab.yaml", "lab", nodes("lab", 1))
    await add_key(stack, "laptop", make_public_key(tmp_path, "laptop"), token=owner_token)
    make_public_key(tmp_path, "wrong")  # a key pair the job never selected

    async with local_agent(stack.url, credential, cluster_file, tmp_path / "agent") as agent:
        await asyncio.wait_for(agent.ssh_link.connected.wait(), 30)
        doc = document("ssh", [role("actor", 1)], RUN, sshKeys=["laptop"])
        await wait_placeable(stack, doc, token=owner_token)
        job_id = (await submit(stack, doc, token=owner_token))["id"]
        running = await wait_status(stack, job_id, {"Running"})
        worker = running["workers"][0]
        assert worker["login_user"] == "rlark"

        made = await stack.cli("ssh-config", job_id, "-i", str(tmp_path / "laptop"), token=owner_token)
        assert made.returncode == 0, made.stderr
        assert f"Host {worker['id']}" in made.stdout
        assert "User rlark" in made.stdout
        (tmp_path / "ssh_config").write_text(made.stdout)
        shown = await stack.cli("jobs", "show", job_id, token=owner_token)
        assert f"rlark ssh {job_id}" in shown.stdout, shown.stdout
        unknown = await stack.cli("ssh", f"{job_id}/rollout-3", token=owner_token)
        assert unknown.returncode == 1
        assert f"job {job_id} has no worker 'rollout-3' (workers: actor-0)" in " ".join(
            unknown.stderr.split()
        )
        hidden = await stack.cli("ssh-config", job_id, token=stranger_token)
        assert hidden.returncode == 1
        assert "no such job" in hidden.stderr  # as for a job that does not exist

        async def logged_in() -> subprocess.CompletedProcess[str] | None:
            done = await openssh(stack, tmp_path, owner_token, worker["id"], "echo in-$(id -un)")
            return done if done.returncode == 0 else None

        done = await eventually(logged_in, timeout_s=90, interval_s=2, what="ssh into the worker")
        assert done.stdout.strip() == "in-rlark"  # the job's unprivileged user (ADR 0007)

        upload = tmp_path / "up.bin"
        upload.write_bytes(os.urandom(3 * 1024 * 1024 + 7))
        up = await openssh(stack, tmp_path, owner_token, str(upload), f"{worker['id']}:up.bin", program="scp")
        assert up.returncode == 0, up.stderr
        made_there = await openssh(
            stack, tmp_path, owner_token, worker["id"], "sha256sum up.bin > up.sum && cat up.sum"
        )
        assert made_there.returncode == 0, made_there.stderr
        down = tmp_path / "down.sum"
        back = await openssh(stack, tmp_path, owner_token, f"{worker['id']}:up.sum", str(down), program="scp")
        assert back.returncode == 0, back.stderr
        assert down.read_text().split()[0] == hashlib.sha256(upload.read_bytes()).hexdigest()

        stranger = await openssh(stack, tmp_path, stranger_token, worker["id"], "true")
        assert stranger.returncode != 0
        assert "no such job" in stranger.stderr

        # The same worker with a key the job never selected (a config naming only that key).
        other = await stack.cli("ssh-config", job_id, "-i", str(tmp_path / "wrong"), token=owner_token)
        assert other.returncode == 0, other.stderr
        (tmp_path / "ssh_config").write_text(other.stdout)
        wrong = await openssh(stack, tmp_path, owner_token, worker["id"], "true")
        assert wrong.returncode != 0
        assert "Permission denied" in wrong.stderr

        # Key rotation (the running worker's keys are replaced): that key is let in from then on.
        await add_key(stack, "desktop", (tmp_path / "wrong.pub").read_text().strip(), token=owner_token)

        async def rotated() -> bool:
            # The scheduler learns of the new key through the keys topic, a moment after the keys service
            # answered: until then it names the key unknown (422), and the user tries again.
            async with stack.client(owner_token) as client:
                answer = await client.put(f"/api/v1/jobs/{job_id}/ssh-keys", json={"ssh_keys": ["desktop"]})
            assert answer.status_code in (200, 422), answer.text
            return answer.status_code == 200

        await eventually(rotated, timeout_s=60, interval_s=0.5, what="the job's keys replaced by the new key")
        done = await eventually(logged_in, timeout_s=60, interval_s=1, what="ssh with the rotated key")
        assert done.stdout.strip() == "in-rlark"

    entries = await eventually(
        lambda: audit_of(stack, owner), timeout_s=30, what="the owner's SSH sessions in the audit log"
    )
    assert {e["target"] for e in entries} == {f"jobs/{job_id}/workers/{worker['id']}"}
    assert all(e["details"]["worker"] == worker["id"] for e in entries)
    assert max(e["details"]["bytes_to_worker"] for e in entries) > 3 * 1024 * 1024
    assert all(e["details"]["bytes_from_worker"] > 0 for e in entries)
