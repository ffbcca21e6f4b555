"""Issue 14, item 2: a hostile user cannot reach the host through hostPath mounts.

Through the real gateway, with a real local cluster and its agent: every hostPath source outside the
cluster's allow-list — the root, the host's configuration (also behind ``..``), the platform's state
directories, container-engine sockets — is refused at submission with 422 naming the mount's field,
and nothing is stored; a source under an allowed prefix is accepted; only admins change the policy
(REST and CLI). Before the policy existed every one of these jobs was accepted.

Issue 31: what a cluster's runtime can mount is checked the same way — a PVC mount on a local cluster is
refused by preview (REST and ``rlark jobs preview``, in English and Chinese) and submit, naming
``spec.tasks[i].mounts[j].type``; the preview used to say the job could be submitted. (A bucket,
objectStorage, is mounted on a local cluster too since ADR 0024.)
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from agents import local_agent, nodes, write_cluster_file
from jobs import document, logs, role, submit, wait_placeable, wait_status
from rlark_devinfra.paths import state_dir
from stack import Stack, eventually

pytestmark = pytest.mark.e2e

CLUSTER = "lab"
POLICY = f"/api/v1/clusters/{CLUSTER}/hostpath-policy"
FIELD = "spec.tasks[0].mounts[1].source"


def job(shared: Path, source: str) -> dict[str, Any]:
    """A job whose first mount is allowed and whose second names ``source``."""
    mounts = [
        {"name": "shared", "type": "hostPath", "source": str(shared), "path": "/shared"},
        {"name": "target", "type": "hostPath", "source": source, "path": "/target"},
    ]
    return document("hostile", [role("header", 1, CLUSTER, mounts=mounts)], "ls /target\n")


async def lab(stack: Stack, tmp_path: Path) -> Any:
    """Register the cluster (no hostPath policy yet) and return its agent (one node), not started."""
    credential = await stack.register_cluster(CLUSTER)
    cluster_file = write_cluster_file(tmp_path / "lab.yaml", CLUSTER, nodes(CLUSTER, 1))
    return local_agent(stack.url, credential, cluster_file, tmp_path / "agent")


def refusal(response: Any, code: str) -> None:
    """``response`` is the 422 of a refused job whose only problem is the second mount's source."""
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert (error["code"], error["field"]) == (code, FIELD), error
    assert error["message"].startswith(FIELD)
    assert [(e["code"], e["field"]) for e in error["details"]["errors"]] == [(code, FIELD)]


HOSTILE_SOURCES = [
    ("/", "hostpath_not_allowed"),
    ("/etc", "hostpath_not_allowed"),
    ("/etc/../", "path_not_absolute"),
    ("STATE_DIR", "hostpath_not_allowed"),
    ("AGENT_STATE_DIR", "hostpath_not_allowed"),
    ("/var/run/docker.sock", "hostpath_not_allowed"),
    ("/run/containerd/containerd.sock", "hostpath_not_allowed"),
]
"""Sources a hostile user tries and the code of their refusal (``*STATE_DIR``: the platform's directories)."""


async def test_host_paths_outside_the_policy_are_refused_naming_the_field_and_nothing_is_stored(
    stack: Stack, tmp_path: Path
) -> None:
    # Every source on one platform and agent: one of each per source took ~8 s, most of it starting them.
    shared = tmp_path / "shared"
    shared.mkdir()
    named = {"STATE_DIR": str(state_dir()), "AGENT_STATE_DIR": str(tmp_path / "agent")}
    cases = [(named.get(source, source), code) for source, code in HOSTILE_SOURCES]
    agent = await lab(stack, tmp_path)
    _, hostile = await stack.new_user()
    allowed = job(shared, str(shared / "datasets"))
    refused: dict[str, Any] = {}
    previews: dict[str, Any] = {}
    async with agent:
        # The cluster and its node are known (a job without mounts could run), no policy is set yet.
        await wait_placeable(stack, document("plain", [role("header", 1, CLUSTER)], "true\n"), token=hostile)
        async with stack.client(hostile) as client:
            for source, code in cases:
                before = await client.post("/api/v1/jobs", json=job(shared, source))
                assert before.status_code == 422, (source, before.text)  # default deny: both mounts refused
                errors = [(e["code"], e["field"]) for e in before.json()["error"]["details"]["errors"]]
                assert (code, FIELD) in errors, (source, errors)

        async with stack.client() as admin:
            changed = await admin.put(POLICY, json={"allow": [str(shared)]})
            assert changed.status_code == 200, changed.text
        await wait_placeable(stack, allowed, token=hostile)
        async with stack.client(hostile) as client:
            for source, _ in cases:
                refused[source] = await client.post("/api/v1/jobs", json=job(shared, source))
                previews[source] = await client.post("/api/v1/jobs:preview", json=job(shared, source))
            listed = await client.get("/api/v1/jobs")
            accepted = await client.post("/api/v1/jobs", json=allowed)

    for source, code in cases:
        refusal(refused[source], code)
        assert [(e["code"], e["field"]) for e in previews[source].json()["errors"]] == [(code, FIELD)], source
    assert listed.json()["total"] == 0
    assert accepted.status_code == 201, accepted.text


async def test_a_cluster_allows_no_host_path_until_an_admin_says_so_and_users_cannot(
    stack: Stack, tmp_path: Path
) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    await stack.register_cluster(CLUSTER)
    user, hostile = await stack.new_user()

    async with stack.client(hostile) as client:
        put = await client.put(POLICY, json={"allow": ["/"]})
        patched = await client.patch(f"/api/v1/clusters/{CLUSTER}", json={"hostpath_allow": ["/etc"]})
        registered = await client.post("/api/v1/clusters", json={"name": "mine", "hostpath_allow": ["/"]})
        read = await client.get(POLICY)
    assert (put.status_code, patched.status_code, registered.status_code) == (403, 403, 403)
    assert read.status_code == 200
    assert read.json()["allow"] == []
    by_cli = await stack.cli("clusters", "hostpaths", "set", CLUSTER, str(shared), token=hostile)
    assert by_cli.returncode != 0
    assert "admin" in by_cli.stderr + by_cli.stdout

    async def preview_refusal() -> list[dict[str, Any]] | None:
        async with stack.client(hostile) as client:
            checked = await client.post("/api/v1/jobs:preview", json=job(shared, str(shared / "x")))
        return [e for e in checked.json()["errors"] if e["code"] == "hostpath_not_allowed"] or None

    refusals = await eventually(preview_refusal, what="the scheduler knows the cluster")
    assert {e["field"] for e in refusals} == {"spec.tasks[0].mounts[0].source", FIELD}
    assert all("default deny" in e["message"] for e in refusals)

    by_admin = await stack.cli("clusters", "hostpaths", "set", CLUSTER, f"{shared}/", "--output", "json")
    assert by_admin.returncode == 0, by_admin.stderr
    async with stack.client(hostile) as client:
        read = await client.get(POLICY)
        shown = await client.get(f"/api/v1/clusters/{CLUSTER}")
    assert read.json()["allow"] == [str(shared)]
    assert shown.json()["hostpath_allow"] == [str(shared)]
    refused_policy = await stack.cli("clusters", "hostpaths", "set", CLUSTER, "/var/run")
    assert refused_policy.returncode != 0
    assert "hostpath_allow[0]" in refused_policy.stderr + refused_policy.stdout

    async def allowed() -> bool:
        async with stack.client(hostile) as client:
            checked = await client.post("/api/v1/jobs:preview", json=job(shared, str(shared / "x")))
        return not any(e["code"] == "hostpath_not_allowed" for e in checked.json()["errors"])

    await eventually(allowed, what="the scheduler applies the new policy")
    assert user


READ_ONLY_RUN = """
if echo pwned > /data/pwned 2> "$HOME/err"; then echo "READONLY: WROTE"; else echo "READONLY: REFUSED $(cat "$HOME/err")"; fi
echo ok > /scratch/ok && echo "SCRATCH: WROTE"
"""


async def test_a_read_only_host_path_refuses_writes_and_nothing_reaches_the_host(
    stack: Stack, tmp_path: Path
) -> None:
    shared = tmp_path / "shared"
    (shared / "ro").mkdir(parents=True)
    (shared / "rw").mkdir()
    (shared / "rw").chmod(0o1777)  # writable by the job's workers, whichever user they run as
    agent = await lab(stack, tmp_path)
    async with stack.client() as admin:
        assert (await admin.put(POLICY, json={"allow": [str(shared)]})).status_code == 200
    _, hostile = await stack.new_user()
    mounts = [
        {"name": "data", "type": "hostPath", "source": str(shared / "ro"), "path": "/data", "readOnly": True},
        {"name": "scratch", "type": "hostPath", "source": str(shared / "rw"), "path": "/scratch"},
    ]
    doc = document("read-only", [role("header", 1, CLUSTER, mounts=mounts)], READ_ONLY_RUN)
    async with agent:
        await wait_placeable(stack, doc, token=hostile)
        submitted = await submit(stack, doc, token=hostile)
        await wait_status(stack, submitted["id"], {"Succeeded"})
        text = "\n".join(entry["line"] for entry in await logs(stack, submitted["id"]))

    assert "READONLY: REFUSED" in text, text[-2000:]
    assert "Read-only file system" in text
    assert "SCRATCH: WROTE" in text
    assert not (shared / "ro" / "pwned").exists()
    assert (shared / "rw" / "ok").read_text() == "ok\n"


TYPE_FIELD = "spec.tasks[0].mounts[0].type"
BUCKET = {
    "name": "models",
    "type": "objectStorage",
    "source": "s3://models/rl",
    "path": "/models",
    "secretRef": "s3-ro",
}


CLAIM = {"name": "ckpt", "type": "pvc", "source": "checkpoints", "path": "/ckpt"}


def bucket_job(cluster: str) -> dict[str, Any]:
    return document("buckets", [role("header", 1, cluster, mounts=[BUCKET])], "ls /models\n")


def claim_job(cluster: str) -> dict[str, Any]:
    return document("claims", [role("header", 1, cluster, mounts=[CLAIM])], "ls /ckpt\n")


async def test_a_mount_type_the_cluster_s_runtime_cannot_mount_is_refused_by_preview_submit_and_the_cli(
    stack: Stack, tmp_path: Path
) -> None:
    await stack.register_cluster(CLUSTER)  # the local runtime
    await stack.register_cluster("gpu-k8s", runtime="kubernetes")
    _, user = await stack.new_user()

    async def known() -> dict[str, list[dict[str, Any]]] | None:
        async with stack.client(user) as client:
            local = await client.post("/api/v1/jobs:preview", json=claim_job(CLUSTER))
            kubernetes = await client.post("/api/v1/jobs:preview", json=claim_job("gpu-k8s"))
            bucket = await client.post("/api/v1/jobs:preview", json=bucket_job(CLUSTER))
        found = {
            "local": local.json()["errors"],
            "kubernetes": kubernetes.json()["errors"],
            "bucket": bucket.json()["errors"],
        }
        unknown = any(e["code"] == "cluster_unknown" for errors in found.values() for e in errors)
        return None if unknown else found

    previews = await eventually(known, what="the scheduler knows both clusters")
    [refused] = [e for e in previews["local"] if e["code"] == "mount_type_unsupported"]
    assert refused["field"] == TYPE_FIELD
    assert refused["message"] == (
        f'{TYPE_FIELD}: cluster "{CLUSTER}" runs workers as local processes: it mounts hostPath, emptyDir, '
        "objectStorage only, not pvc. Run this role on a Kubernetes cluster to mount pvc"
    )
    assert not [e for e in previews["kubernetes"] if e["code"] == "mount_type_unsupported"]
    assert not [e for e in previews["bucket"] if e["code"] == "mount_type_unsupported"]
    async with stack.client(user) as client:
        submitted = await client.post("/api/v1/jobs", json=claim_job(CLUSTER))
        listed = await client.get("/api/v1/jobs")
    assert submitted.status_code == 422, submitted.text
    errors = [(e["code"], e["field"]) for e in submitted.json()["error"]["details"]["errors"]]
    assert ("mount_type_unsupported", TYPE_FIELD) in errors
    assert listed.json()["total"] == 0

    job_file = tmp_path / "claims.yaml"
    job_file.write_text(yaml.safe_dump(claim_job(CLUSTER), sort_keys=False))
    for language, said in (
        (
            "en",
            f'cluster "{CLUSTER}" runs workers as local processes: it mounts hostPath, emptyDir, objectStorage '
            "only",
        ),
        (
            "zh-CN",
            f'集群 "{CLUSTER}" 以本地进程运行工作节点：只能挂载 hostPath, emptyDir, objectStorage，不能挂载 pvc',
        ),
    ):
        previewed = await stack.cli("--lang", language, "jobs", "preview", str(job_file), token=user)
        printed = " ".join(previewed.stdout.split())
        assert previewed.returncode == 1, printed + previewed.stderr
        assert re.search(rf"error {re.escape(TYPE_FIELD)} \(line \d+\): {re.escape(said)}", printed), printed
        assert "can be submitted" not in printed
