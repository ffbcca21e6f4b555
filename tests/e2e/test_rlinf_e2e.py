"""Real RLinf jobs run unchanged (issue 13): the shipped example, `examples/rlinf-cpu.yaml`, written the way
RLinf's docs write a job, through the whole platform with the real `rlinf` 0.3.0 package.

Only what a user edits changes between the runs: the clusters the roles name and the two hostPath sources
(the example's code from this checkout, a fresh outputs directory). Its env and scripts stay as shipped — no
RLark-specific variable or workaround — so what must hold is on the platform's side: the code at `/code` and
the outputs at `/outputs` (container paths) inside every worker, workers resolving each other's names, Gloo
picking the interface that carries Ray, and the Header waiting for every node.

Here the example's code runs across two clusters of one network domain (Gloo and RLinf's point-to-point traffic
over the tunnel) with its outputs in a bucket (ADR 0024) — checkpoints and TensorBoard events written through
the workers' rclone mounts — a token from a named secret and a data file read from the bucket, its config given
inline as `spec.rlinfConfig` (the config the server checked is the file every worker runs: `$RLARK_RLINF_CONFIG`,
Hydra's `--config-path`), `spec.resume` and a restart policy: a worker of the second cluster SIGKILLed mid-run,
attempt 2 resumes through `runner.resume_dir` from the newest complete checkpoint, which its agent found over the
S3 API (ADR 0015), and neither secret's value shows anywhere but in the workers (ADR 0025).

The shipped document as shipped (its outputs on a hostPath) runs in `test_placement_by_need_e2e.py`, naming no
cluster: on the one cluster that holds it, then across two clusters of a domain. Each RLinf start costs ~45 s of
the two cores, so a resume from a local directory is shown by the plain-Ray restart tests
(`test_jobs_restart_e2e.py`), which also show that a kill with no restart left fails the job naming the worker.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import re
import signal
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml
from agents import local_agent, nodes, write_cluster_file
from jobs import job, submit, wait_placeable, wait_status
from leaks import every_record, every_row
from rlark_devinfra.pytest_plugin import S3Bucket
from rlark_tunnel_agent.agent.tunnels import TunnelOptions
from stack import Stack, eventually
from test_jobs_failures_e2e import driver_of
from test_jobs_restart_e2e import attempt_logs, events, resume_rows

pytestmark = [pytest.mark.e2e, pytest.mark.heavy, pytest.mark.timeout(900)]

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "rlinf-cpu.yaml"
STEPS, SAVE_EVERY, RANKS = 12, 4, 3
EXPERIMENT = "rlinf-cpu-smoke"


def host_paths(tmp_path: Path) -> list[str]:
    """The clusters' hostPath policy: the example's two sources (the code and ``tmp_path/outputs``)."""
    return [str(REPO / "examples" / "rlinf_cpu"), str(tmp_path / "outputs")]


def example(outputs: Path, clusters: dict[str, str], **spec: Any) -> dict[str, Any]:
    """The shipped document with this checkout's code, ``outputs`` and the given role → cluster."""
    doc: dict[str, Any] = yaml.safe_load(EXAMPLE.read_text())
    doc = copy.deepcopy(doc)
    for task in doc["spec"]["tasks"]:
        task["cluster"] = clusters[task["name"]]
        for mount in task["mounts"]:
            if mount["path"] == "/code":
                mount["source"] = str(REPO / "examples" / "rlinf_cpu")
            elif mount["path"] == "/outputs":
                mount["source"] = str(outputs)
        assert "env" not in task, "the example must not need platform-specific variables"
    doc["spec"].update(spec)
    return doc


async def manifest(stack: Stack, job_id: str, needle: str = "global_step_") -> set[str]:
    """The job's listed output files once one of them holds ``needle`` (a restarted job's first attempt lists
    its own checkpoints before the last attempt's list arrives)."""

    async def listed() -> set[str] | None:
        files = {f["path"] for o in (await job(stack, job_id))["outputs"] for f in o["files"]}
        return files if any(needle in f for f in files) else None

    found: set[str] = await eventually(listed, timeout_s=60, what="checkpoints in the output manifest")
    return found


def check_training(
    text: str, files: set[str], outputs: Path, experiment: str = EXPERIMENT, steps: int = STEPS
) -> None:
    assert "done: loss" in text, text[-4000:]
    assert "on 3 ranks" in text
    for step in range(SAVE_EVERY, steps + 1, SAVE_EVERY):
        dcp = f"rlinf/{experiment}/checkpoints/global_step_{step}/actor/dcp_checkpoint"
        assert (outputs / dcp / ".metadata").is_file(), dcp  # on the host, through the mount; written last
        shards = [f for f in files if f.startswith(f"/outputs/{dcp}/__") and f.endswith(".distcp")]
        assert shards, sorted(files)[:20]
    events = [f for f in files if f.startswith("/outputs/rlinf/logs/tensorboard/") and ".tfevents." in f]
    assert events, sorted(files)[:40]


RESUME_STEPS, STEP_DELAY_S = 32, 0.5
"""Attempt 1 is killed once it saved step 8: the 24 steps left, paced at half a second, leave it 12 s to be
killed before it could finish."""
CHECKPOINTS = "/outputs/rlinf/resumed/checkpoints"
BUCKET_RUN = """\
echo "data: $(wc -l < /data/prompts.txt) prompts"
python -c 'import hashlib, os; print("token sha", hashlib.sha256(os.environ["HF_TOKEN"].encode()).hexdigest()[:16])'
cd /code
python train_cpu_smoke.py --config-path "$(dirname "$RLARK_RLINF_CONFIG")" --config-name rlinf
"""


def in_bucket(doc: dict[str, Any], bucket: str) -> dict[str, Any]:
    """``doc`` with its outputs in ``bucket`` (prefix ``run/``) and the data set mounted read-only from it
    (``data/``), both with the credentials of the secret ``outputs-s3``; the Header's ``HF_TOKEN`` from the
    secret ``hf-token``."""
    for task in doc["spec"]["tasks"]:
        task["mounts"] = [m for m in task["mounts"] if m["path"] != "/outputs"] + [
            {"name": "outputs", "type": "objectStorage", "source": f"s3://{bucket}/run", "path": "/outputs",
             "secretRef": "outputs-s3"},
            {"name": "data", "type": "objectStorage", "source": f"s3://{bucket}/data", "path": "/data",
             "readOnly": True, "secretRef": "outputs-s3"},
        ]  # fmt: skip
    doc["spec"]["tasks"][0]["env"] = [{"name": "HF_TOKEN", "secret": "hf-token"}]
    return doc


def keys_below(bucket: S3Bucket, prefix: str) -> set[str]:
    pages = bucket.client().get_paginator("list_objects_v2").paginate(Bucket=bucket.name, Prefix=prefix)
    return {item["Key"] for page in pages for item in page.get("Contents", ())}


async def test_an_rlinf_job_across_two_clusters_checkpoints_in_a_bucket_and_resumes_from_there(
    stack: Stack, tmp_path: Path, s3_bucket: S3Bucket, capfd: pytest.CaptureFixture[str]
) -> None:
    """Issue 33's whole path: a real RLinf job across two clusters of a domain reads a token from a secret and
    a data file from a bucket, writes its checkpoints and TensorBoard events to the bucket; a worker in the
    second cluster is SIGKILLed once step 8 is saved; attempt 2's Header resumes from the newest complete
    checkpoint, which its agent found over the S3 API. Neither secret's value shows anywhere but the workers."""
    code = [str(REPO / "examples" / "rlinf_cpu")]
    alpha = await stack.register_cluster("alpha", hostpath_allow=code)
    beta = await stack.register_cluster("beta", hostpath_allow=code)
    domain = f"net-{uuid.uuid4().hex[:6]}"
    token = f"hf_{uuid.uuid4().hex}{uuid.uuid4().hex}"
    keys = s3_bucket.credential_document()
    for name, value in (("hf-token", token), ("outputs-s3", keys)):
        stored = await stack.cli("secrets", "set", name, "--from-stdin", stdin=value)
        assert stored.returncode == 0, stored.stderr
    s3_bucket.client().put_object(Bucket=s3_bucket.name, Key="data/prompts.txt", Body=b"one\ntwo\nthree\n")
    async with stack.client() as client:
        created = await client.post("/api/v1/domains", json={"name": domain, "cidr": "10.202.0.0/16"})
        assert created.status_code == 201, created.text
    config: dict[str, Any] = yaml.safe_load((REPO / "examples/rlinf_cpu/config/cpu_smoke.yaml").read_text())
    config["runner"].update(experiment_name="resumed", max_steps=RESUME_STEPS, step_delay_s=STEP_DELAY_S)
    loopback = TunnelOptions(listen_host="127.0.0.1", advertise_host="127.0.0.1")
    answers: list[str] = []
    async with (
        local_agent(stack.url, alpha, write_cluster_file(tmp_path / "a.yaml", "alpha", nodes("alpha", 1)),
                    tmp_path / "agent-alpha", tunnels=loopback),
        local_agent(stack.url, beta, write_cluster_file(tmp_path / "b.yaml", "beta", nodes("beta", 2)),
                    tmp_path / "agent-beta", tunnels=loopback) as beta_agent,
    ):  # fmt: skip
        doc = in_bucket(
            example(
                tmp_path,
                {"header": "alpha", "worker": "beta"},
                networkDomain=domain,
                rlinfConfig=config,
                runScript=BUCKET_RUN,
                restartPolicy={"maxRestarts": 1, "on": ["WorkerLost"]},
                resume={"from": "latestCheckpoint", "dir": "resumed/checkpoints"},
            ),
            s3_bucket.name,
        )
        await wait_placeable(stack, doc)
        job_id = (await submit(stack, doc))["id"]

        async def saved_step_8() -> bool:
            return any(
                f"{CHECKPOINTS}/global_step_8/actor" in line for line in await attempt_logs(stack, job_id)
            )

        await eventually(saved_step_8, timeout_s=500, what="attempt 1 saving step 8")
        victim = f"{job_id}-worker-1"
        record = driver_of(beta_agent).record(victim)
        assert record is not None
        assert record.pid is not None
        os.killpg(record.pid, signal.SIGKILL)
        final = await wait_status(stack, job_id, {"Succeeded"}, timeout_s=700)
        answers += [str(final), str(await job(stack, job_id)), str(await events(stack, job_id))]

    assert (final["attempt"], final["restarts"]) == (2, 1)
    assert sorted(w["cluster"] for w in final["workers"]) == ["alpha", "beta", "beta"]
    [said] = resume_rows(await events(stack, job_id), f"{job_id}-header-0-a2")
    chosen = re.fullmatch(
        rf"resuming from {CHECKPOINTS}/global_step_(\d+) \(step \1\)(; skipped half-written: .*)?", said
    )
    assert chosen is not None, said  # found over the S3 API: no mount existed yet
    step = int(chosen.group(1))
    assert step >= 8
    second = "\n".join(await attempt_logs(stack, job_id))
    answers.append(second)
    assert f"resumed from step {step} ({CHECKPOINTS}/global_step_{step})" in second
    assert "data: 3 prompts" in second
    assert f"token sha {hashlib.sha256(token.encode()).hexdigest()[:16]}" in second
    trained = [int(m) for m in re.findall(r"^step (\d+) loss", second, re.MULTILINE)]
    assert trained == list(range(step + 1, RESUME_STEPS + 1))
    stored = keys_below(s3_bucket, "run/rlinf/")
    for saved in range(SAVE_EVERY, RESUME_STEPS + 1, SAVE_EVERY):
        assert f"run/rlinf/resumed/checkpoints/global_step_{saved}/actor/dcp_checkpoint/.metadata" in stored
    assert any(k.startswith("run/rlinf/logs/tensorboard/") and ".tfevents." in k for k in stored), sorted(
        stored
    )[:20]

    rows, records, printed = await every_row(stack.databases), await every_record(stack), capfd.readouterr()
    secret_key = json.loads(keys)["secretAccessKey"]
    for value in (token, secret_key):
        assert value not in "\n".join(answers)
        assert value not in rows
        assert value not in records
        assert value not in printed.out + printed.err
