"""RLark's CSI node plugin mounting a real bucket (ADR 0024): rclone against the suite's S3 server (versitygw),
at a target path as the kubelet would give, read and written by a non-root uid as a pod's user would; an
unpublish uploads what was written before it unmounts, and is idempotent; keys the server refuses fail the
publish naming the S3 error, leaving nothing mounted."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from rlark_contracts.storage import BucketLocation, parse_s3_credentials
from rlark_devinfra.pytest_plugin import S3Bucket
from rlark_devinfra.versitygw import S3Keys
from rlark_tunnel_agent.csi.node import CsiError, RcloneVolumes, Volume, mounted

pytestmark = [pytest.mark.netns, pytest.mark.integration]

POD_UID = 1000


@pytest.fixture
def work() -> Iterator[Path]:
    """A short directory a non-root uid may traverse (as the kubelet's pod directories are to the pod)."""
    if os.geteuid() != 0:
        pytest.fail("the CSI node plugin mounts as root (FUSE with allow_other): run as root")
    path = Path(tempfile.mkdtemp(prefix="csi-", dir="/tmp"))
    path.chmod(0o755)
    try:
        yield path
    finally:
        for line in Path("/proc/self/mountinfo").read_text().splitlines():
            point = line.split(" ")[4]
            if point.startswith(str(path)):
                subprocess.run(["umount", "-l", point], check=False, capture_output=True)
        shutil.rmtree(path, ignore_errors=True)


def volume(bucket: S3Bucket, keys: S3Keys, target: Path, *, read_only: bool = False) -> Volume:
    credentials = parse_s3_credentials(bucket.server.credential_document(keys))
    return Volume("csi-test", target, BucketLocation(bucket.name, "exp"), credentials, read_only)


def as_pod_user(script: str) -> subprocess.CompletedProcess[str]:
    argv = ["setpriv", f"--reuid={POD_UID}", f"--regid={POD_UID}", "--clear-groups", "sh", "-c", script]
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)


def rclone_running(state: Path) -> bool:
    for proc in Path("/proc").iterdir():
        try:
            cmdline = (proc / "cmdline").read_bytes()
        except OSError:
            continue
        if cmdline.startswith(b"rclone\0") and str(state).encode() in cmdline:
            return True
    return False


def test_a_published_bucket_is_read_and_written_by_the_pod_s_user_and_uploaded_before_the_unpublish_ends(
    s3_bucket: S3Bucket, work: Path
) -> None:
    s3 = s3_bucket.client()
    s3.put_object(Bucket=s3_bucket.name, Key="exp/input/hello.txt", Body=b"from the bucket\n")
    volumes = RcloneVolumes(work / "state", drain_s=60)
    target = work / "pods" / "p-1" / "volumes" / "mount"
    plan = volume(s3_bucket, s3_bucket.keys, target)

    volumes.publish(plan)
    assert mounted(target)
    volumes.publish(plan)  # again, as a kubelet retrying: nothing changes
    read = as_pod_user(f"cat {target}/input/hello.txt && echo written-by-$(id -u) > {target}/out.txt")
    assert read.returncode == 0, read.stderr
    assert read.stdout == "from the bucket\n"
    # rclone's environment holds the keys: the pod's uid cannot read it.
    peek = as_pod_user(f"cat /proc/$(pgrep -f 'rclone mount.*{work}' | head -1)/environ")
    assert peek.returncode != 0
    assert "Permission denied" in peek.stderr

    began = time.monotonic()
    volumes.unpublish("csi-test", target)
    assert not mounted(target)
    assert not target.exists()
    got = s3.get_object(Bucket=s3_bucket.name, Key="exp/out.txt")["Body"].read()
    assert got == f"written-by-{POD_UID}\n".encode()
    assert time.monotonic() - began < 30
    assert not rclone_running(work / "state")
    assert not any((work / "state" / "volumes").iterdir())  # nothing left: no cache, no remote-control file
    volumes.unpublish("csi-test", target)  # idempotent


def test_a_read_only_volume_refuses_writes(s3_bucket: S3Bucket, work: Path) -> None:
    volumes = RcloneVolumes(work / "state")
    target = work / "ro" / "mount"
    volumes.publish(volume(s3_bucket, s3_bucket.keys, target, read_only=True))
    try:
        wrote = as_pod_user(f"echo x > {target}/planted.txt")
        assert wrote.returncode != 0
        assert "Read-only file system" in wrote.stderr
    finally:
        volumes.unpublish("csi-test", target)


def test_keys_the_server_refuses_fail_the_publish_naming_the_s3_error_and_leave_nothing(
    s3_bucket: S3Bucket, work: Path
) -> None:
    wrong = S3Keys(s3_bucket.keys.access_key_id, "not-the-secret-key-0123456789")
    volumes = RcloneVolumes(work / "state", mount_wait_s=30)
    target = work / "denied" / "mount"
    with pytest.raises(CsiError) as refused:
        volumes.publish(volume(s3_bucket, wrong, target))
    assert refused.value.code == grpc.StatusCode.PERMISSION_DENIED
    assert "SignatureDoesNotMatch (HTTP 403)" in refused.value.message
    assert f"s3://{s3_bucket.name}/exp" in refused.value.message
    assert "not-the-secret-key" not in refused.value.message
    assert not mounted(target)
    assert not target.exists()
    assert not (work / "state" / "volumes").exists() or not any((work / "state" / "volumes").iterdir())
    deadline = time.monotonic() + 10
    while rclone_running(work / "state") and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not rclone_running(work / "state")
