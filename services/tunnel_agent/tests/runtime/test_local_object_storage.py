"""Buckets on the local runtime (ADR 0024): a real worker mounts a real S3 server's bucket through rclone.

The job reads what the test put through the S3 API and writes files the test then reads back through the S3 API
(uploaded before the worker counts as exited); a read-only mount refuses writes. rclone runs as root outside the
worker's namespaces: the job sees no rclone, and the job's uid can neither read rclone's environment (where the
keys are) nor signal it. Keys the server refuses fail the worker before it starts, naming the mount, the endpoint
and the S3 error, and leave nothing behind.
"""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
from pathlib import Path

import pytest
from botocore.exceptions import ClientError
from local_runtime_helpers import Recorder, spec
from pydantic import SecretStr
from rlark_devinfra.pytest_plugin import S3Bucket
from rlark_devinfra.versitygw import S3Keys, S3Server
from rlark_tunnel_agent.runtime.driver import Mount, MountType, WorkerPhase
from rlark_tunnel_agent.runtime.local.driver import LocalDriver

pytestmark = [pytest.mark.netns, pytest.mark.integration]

SECRET = "s3-ckpt"

RUN = r"""
set -u
echo "READ $(cat /data/input/hello.txt)"
mkdir -p /data/ckpt/step-1
python3 - <<'PY'
import hashlib
data = bytes(range(256)) * 40960  # 10 MiB, written in pieces and rewritten in place (a checkpoint writer seeks)
with open("/data/ckpt/step-1/actor.pt", "wb") as fh:
    for offset in range(0, len(data), 1 << 20):
        fh.write(data[offset : offset + (1 << 20)])
    fh.seek(0)
    fh.write(b"CKPT")
print("WROTE", hashlib.sha256(b"CKPT" + data[4:]).hexdigest())
PY
echo "by $(id -u)" > /data/ckpt/note.txt
stat -c 'OWNER %u %a' /data/ckpt/note.txt
echo "MODEL $(cat /models/model.txt)"
if echo x > /models/planted.txt 2>/dev/null; then echo "READONLY: WROTE"; else echo "READONLY: REFUSED"; fi
echo "RCLONE_SEEN $(grep -l rclone /proc/[0-9]*/comm 2>/dev/null | wc -l)"
while [ ! -e "$HOME/go" ]; do sleep 0.2; done
"""


def _bucket_mounts(bucket: str) -> tuple[Mount, ...]:
    return (
        Mount(type=MountType.OBJECT_STORAGE, source=f"s3://{bucket}/exp", target="/data", secret_ref=SECRET),
        Mount(
            type=MountType.OBJECT_STORAGE,
            source=f"s3://{bucket}/models",
            target="/models",
            read_only=True,
            secret_ref=SECRET,
        ),
    )


def _bucket_spec(job: str, bucket: str, document: str, **fields: object) -> object:
    return spec(
        job,
        "header",
        0,
        rank=0,
        num_nodes=1,
        mounts=_bucket_mounts(bucket),
        secrets=(SECRET,),
        secret_values={SECRET: SecretStr(document)},
        **fields,
    )


def _rclone_pids(driver: LocalDriver, worker_id: str) -> list[int]:
    found = []
    for pid in driver.our_processes(worker_id):
        try:
            if Path(f"/proc/{pid}/comm").read_text().strip() == "rclone":
                found.append(pid)
        except OSError:
            continue
    return sorted(found)


def _as_user(uid: int, code: str, *args: str) -> str:
    """Run Python code as `uid` (the job's user) on the host, without groups; its stdout."""
    # The system's interpreter: the checkout's venv is not the job user's to run.
    done = subprocess.run(
        ["/usr/bin/python3", "-I", "-c", code, *args],
        user=uid,
        group=uid,
        extra_groups=[],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


PROBE = """
import os, signal, sys
pid, storage = int(sys.argv[1]), sys.argv[2]
for what, attempt in (
    ("environ", lambda: open(f"/proc/{pid}/environ", "rb").read()),
    ("kill", lambda: os.kill(pid, signal.SIGKILL)),
    ("storage", lambda: os.listdir(storage)),
):
    try:
        attempt()
        print(what, "ALLOWED")
    except PermissionError:
        print(what, "refused")
"""


async def test_a_worker_reads_and_writes_its_bucket_and_cannot_reach_rclone(
    driver: LocalDriver, recorder: Recorder, s3_bucket: S3Bucket
) -> None:
    assert driver.use_netns
    s3 = s3_bucket.client()
    s3.put_object(Bucket=s3_bucket.name, Key="exp/input/hello.txt", Body=b"hello from the S3 API\n")
    s3.put_object(Bucket=s3_bucket.name, Key="models/model.txt", Body=b"weights v1\n")
    worker = _bucket_spec("job-s3", s3_bucket.name, s3_bucket.credential_document(), run_script=RUN)
    await driver.ensure_worker(worker)  # type: ignore[arg-type]
    worker_id = worker.worker_id  # type: ignore[attr-defined]
    record = driver.record(worker_id)
    assert record is not None
    assert record.uid is not None

    def said(prefix: str) -> list[str]:
        return [e.text for e in recorder.events if getattr(e, "text", "").startswith(prefix)]

    await recorder.wait_for(lambda: bool(said("RCLONE_SEEN")), 240, "the job's probes")
    rclone = _rclone_pids(driver, worker_id)
    assert len(rclone) == 2, rclone  # one per mount, found among the worker's processes by its token
    storage = driver.storage_dir(worker_id)
    for pid in rclone:
        environ = _proc(pid, "environ")
        assert s3_bucket.keys.secret_access_key.encode() in environ  # the keys are there, and only there:
        assert s3_bucket.keys.secret_access_key.encode() not in _proc(pid, "cmdline")
        probe = _as_user(record.uid, PROBE, str(pid), str(storage))
        assert probe.split("\n")[:3] == ["environ refused", "kill refused", "storage refused"], probe
    assert not list(storage.rglob("*.conf"))  # no configuration file holds a key
    (driver.worker_dir(worker_id) / "home" / "go").touch()

    final = await driver.wait_exited(worker_id)
    lines = [line.text for line in await driver.tail_logs(worker_id, 200)]
    assert (final.phase, final.exit_code) == (WorkerPhase.SUCCEEDED, 0), lines[-40:]
    assert "READ hello from the S3 API" in lines
    assert "MODEL weights v1" in lines
    assert "READONLY: REFUSED" in lines
    assert f"OWNER {record.uid} 600" in lines
    assert "RCLONE_SEEN 0" in lines  # outside the worker's pid namespace

    # Uploaded before the worker counted as exited: the S3 API has both files at once.
    [wrote] = [line.removeprefix("WROTE ") for line in lines if line.startswith("WROTE ")]
    import hashlib

    actor = s3.get_object(Bucket=s3_bucket.name, Key="exp/ckpt/step-1/actor.pt")["Body"].read()
    assert hashlib.sha256(actor).hexdigest() == wrote
    assert len(actor) == 10 * 2**20
    assert (
        s3.get_object(Bucket=s3_bucket.name, Key="exp/ckpt/note.txt")["Body"].read()
        == f"by {record.uid}\n".encode()
    )
    with pytest.raises(ClientError):
        s3.head_object(Bucket=s3_bucket.name, Key="models/planted.txt")
    # Torn down right after (the teardown follows the exit): no rclone, no staging mount, no cache.
    for _ in range(300):
        if not storage.exists():
            break
        await asyncio.sleep(0.1)
    assert not storage.exists(), sorted(str(p) for p in storage.rglob("*"))[:20]
    assert _rclone_pids(driver, worker_id) == []
    assert str(storage).encode() not in _proc("self", "mountinfo")


@pytest.mark.parametrize(
    ("keys", "error"),
    [
        ("unknown", "InvalidAccessKeyId (HTTP 403)"),
        ("wrong-secret", "SignatureDoesNotMatch (HTTP 403)"),
        ("another-bucket", "AccessDenied (HTTP 403)"),
    ],
)
async def test_keys_the_server_refuses_fail_the_worker_naming_the_mount_and_leave_nothing(
    driver: LocalDriver, s3_server: S3Server, s3_bucket: S3Bucket, keys: str, error: str
) -> None:
    other = None
    if keys == "unknown":
        used = S3Keys("AKIANOBODYHASTHISKEY", s3_bucket.keys.secret_access_key)
    elif keys == "wrong-secret":
        used = S3Keys(s3_bucket.keys.access_key_id, "not-the-secret-key-of-these-keys")
    else:
        other = s3_server.create_bucket("other")
        used = s3_server.bucket_keys(other)
    try:
        worker = _bucket_spec("job-s3-refused", s3_bucket.name, s3_server.credential_document(used))
        with pytest.raises(ValueError, match=re.escape(error)) as refused:
            await driver.ensure_worker(worker)  # type: ignore[arg-type]
    finally:
        if other is not None:
            s3_server.delete_bucket(other)
    said = str(refused.value)
    assert said.startswith(
        f"mount /data: {s3_server.endpoint} refused access to s3://{s3_bucket.name}/exp "
    ), said
    assert f'the credentials of secret "{SECRET}"' in said
    assert used.secret_access_key not in said
    assert await driver.list_workers() == []
    storage = driver.storage_dir(worker.worker_id)  # type: ignore[attr-defined]
    assert not storage.exists()
    assert str(storage).encode() not in _proc("self", "mountinfo")
    assert not [
        pid for pid in os.listdir("/proc") if pid.isdigit() and _is_rclone_for(int(pid), str(storage))
    ]


def _proc(pid: int | str, name: str) -> bytes:
    return Path(f"/proc/{pid}/{name}").read_bytes()


def _is_rclone_for(pid: int, storage: str) -> bool:
    try:
        return storage in Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    except OSError:
        return False
