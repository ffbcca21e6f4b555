"""Issue 33 items 1-2 (ADR 0025): a job names its owner's secret and its workers get the value — as the variable
the job maps to it and as a file only they read — while the value appears nowhere else: not in any API answer,
database row, Kafka record, job log or service log. Another user can neither read, name nor use it; a rotated
value reaches the next job.

Through the real gateway, keys service, scheduler and a root local agent, with the real ``rlark`` CLI.
"""

from __future__ import annotations

import hashlib
import json
import secrets
import uuid
from pathlib import Path

import pytest
from agents import local_agent, nodes, write_cluster_file
from jobs import document, job, logs, role, submit, wait_placeable, wait_status
from leaks import every_record, every_row
from stack import Stack

pytestmark = [pytest.mark.e2e, pytest.mark.netns]

CLUSTER = "lab"
RUN = """\
echo "env sha $(printf %s "$HF_TOKEN" | sha256sum | cut -c1-16)"
echo "file sha $(sha256sum < "$RLARK_SECRETS_DIR/hf-token" | cut -c1-16)"
echo "file mode $(stat -c %a "$RLARK_SECRETS_DIR/hf-token") secrets $RLARK_SECRETS"
"""


def sha16(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()[:16]


async def test_a_jobs_secret_reaches_only_its_workers_and_appears_nowhere_else(
    stack: Stack, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    credential = await stack.register_cluster(CLUSTER)
    cluster_file = write_cluster_file(tmp_path / "lab.yaml", CLUSTER, nodes(CLUSTER, 2))
    _, alice = await stack.new_user()
    _, mallory = await stack.new_user()
    first, second = f"hf_{secrets.token_urlsafe(30)}", f"hf_{secrets.token_urlsafe(30)}"
    answers: list[str] = []

    stored = await stack.cli("secrets", "set", "hf-token", "--from-stdin", token=alice, stdin=first + "\n")
    assert stored.returncode == 0, stored.stderr
    listed = await stack.cli("secrets", "list", "-o", "json", token=alice)
    assert [s["name"] for s in json.loads(listed.stdout)["items"]] == ["hf-token"]
    answers += [stored.stdout, stored.stderr, listed.stdout]

    # Mallory: not theirs to see, nor to name in a job.
    theirs = await stack.cli("secrets", "show", "hf-token", token=mallory)
    assert theirs.returncode == 1
    assert "no secret named hf-token" in theirs.stderr
    env = [{"name": "HF_TOKEN", "secret": "hf-token"}]
    stolen = document("steal", [role("header", 1, CLUSTER, env=env)], RUN)
    async with stack.client(mallory) as client:
        refused = await client.post("/api/v1/jobs", json=stolen)
    assert refused.status_code == 422, refused.text
    assert refused.json()["error"]["code"] == "secret_unknown"
    assert refused.json()["error"]["field"] == "spec.tasks[0].env.HF_TOKEN.secret"

    async with local_agent(stack.url, credential, cluster_file, tmp_path / "agent"):
        doc = document(f"uses-secret-{uuid.uuid4().hex[:4]}", [role("header", 1, CLUSTER, env=env)], RUN)
        await wait_placeable(stack, doc, token=alice)
        async with stack.client(alice) as client:
            preview = await client.post("/api/v1/jobs:preview", json=doc)
        assert "secret: hf-token" in preview.json()["yaml"]  # the reference, shown; never a value
        answers.append(preview.text)
        first_job = (await submit(stack, doc, token=alice))["id"]
        answers.append(json.dumps(await wait_status(stack, first_job, {"Succeeded"}, timeout_s=240)))
        lines = [entry["line"] for entry in await logs(stack, first_job)]
        assert f"env sha {sha16(first)}" in lines, lines[-20:]
        assert f"file sha {sha16(first)}" in lines, lines[-20:]
        assert "file mode 440 secrets hf-token" in lines, lines[-20:]

        rotated = await stack.cli("secrets", "rotate", "hf-token", "--from-stdin", token=alice, stdin=second)
        assert rotated.returncode == 0, rotated.stderr
        assert "version 2" in rotated.stdout
        second_job = (await submit(stack, doc, token=alice))["id"]
        answers.append(json.dumps(await wait_status(stack, second_job, {"Succeeded"}, timeout_s=240)))
        again = [entry["line"] for entry in await logs(stack, second_job)]
        assert f"env sha {sha16(second)}" in again, again[-20:]

        for job_id in (first_job, second_job):
            answers.append(json.dumps(await job(stack, job_id, token=alice)))
            async with stack.client(alice) as client:
                answers.append((await client.get(f"/api/v1/jobs/{job_id}/events")).text)
                answers.append((await client.get(f"/api/v1/jobs/{job_id}/logs")).text)
        used = await stack.cli("secrets", "show", "hf-token", "-o", "json", token=alice)
        assert json.loads(used.stdout)["last_used_at"] is not None
        answers.append(used.stdout)

    rows, records = await every_row(stack.databases), await every_record(stack)
    printed = capfd.readouterr()
    assert "secret used" in printed.out + printed.err  # the keys service's log was captured here
    for value in (first, second):
        assert value not in "\n".join(answers)
        assert value not in rows
        assert value not in records
        assert value not in printed.out + printed.err
