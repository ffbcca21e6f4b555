"""Buckets on the local runtime, the pure parts (ADR 0024): where a bucket mount is bound from, what rclone is
given (the keys in its environment only), which S3 error a refusal names, and the credentials read from the
worker's secret."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from local_runtime_helpers import spec
from rlark_contracts.storage import BucketLocation, parse_s3_credentials
from rlark_tunnel_agent.runtime.driver import Mount, MountType
from rlark_tunnel_agent.runtime.local import object_storage
from rlark_tunnel_agent.runtime.local.object_storage import (
    ObjectStorageRefused,
    StorageMount,
    dirty_files,
    rclone_argv,
    rclone_env,
    read_credentials,
    s3_error,
    staging_dir,
)
from rlark_tunnel_agent.runtime.local.pod import container_binds

pytestmark = pytest.mark.unit

WDIR = Path("/state/workers/job-a-header-0")
STORAGE = Path("/state/object-storage/job-a-header-0")
SECRET_KEY = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"
DOCUMENT = json.dumps(
    {"accessKeyId": "AKIAEXAMPLE", "secretAccessKey": SECRET_KEY, "endpoint": "http://10.0.0.5:8333"}
)


def bucket(target: str, source: str = "s3://ckpt/exp", **fields: object) -> Mount:
    return Mount(type=MountType.OBJECT_STORAGE, source=source, target=target, secret_ref="s3-ckpt", **fields)


def test_a_bucket_is_bound_from_its_staging_mount_numbered_in_order_reached_without_links() -> None:
    worker = spec(
        "job-a",
        "header",
        0,
        rank=0,
        num_nodes=1,
        mounts=(bucket("/data"), Mount(source="/srv/x", target="/x"), bucket("/models", read_only=True)),
        outputs=("/data/out",),
    )
    binds = {b.target: b for b in container_binds(worker, WDIR, storage_dir=STORAGE)}
    assert (
        binds["/data"].source == str(staging_dir(STORAGE, 0)) == "/state/object-storage/job-a-header-0/mnt/0"
    )
    assert binds["/models"].source == str(staging_dir(STORAGE, 1))
    assert binds["/models"].read_only
    assert not binds["/data"].read_only
    assert binds["/data"].within == binds["/models"].within == str(STORAGE / "mnt")
    assert "/data/out" not in binds  # an output inside the bucket lands in the bucket
    with pytest.raises(ValueError, match="need a Kubernetes cluster"):
        container_binds(worker, WDIR)  # no storage directory: no bucket mounts (plain processes refuse them)


def test_rclone_gets_the_keys_in_its_environment_only_and_the_job_s_uid_owns_the_files() -> None:
    plan = StorageMount(0, bucket("/data"), BucketLocation("ckpt", "exp"), parse_s3_credentials(DOCUMENT))
    env = rclone_env(plan.credentials, home=STORAGE, token="tag/job-a-header-0", rc_user="u", rc_pass="p")
    assert env["RCLONE_CONFIG_BUCKET_SECRET_ACCESS_KEY"] == SECRET_KEY
    assert env["RCLONE_CONFIG_BUCKET_ACCESS_KEY_ID"] == "AKIAEXAMPLE"
    assert env["RCLONE_CONFIG_BUCKET_ENDPOINT"] == "http://10.0.0.5:8333"
    assert env["RCLONE_CONFIG_BUCKET_REGION"] == "us-east-1"
    assert env["RLARK_BOOTSTRAP_TOKEN"] == "tag/job-a-header-0"
    assert "AWS_SECRET_ACCESS_KEY" not in env  # nothing of the agent's own environment

    argv = rclone_argv("/usr/bin/rclone", plan, STORAGE, uid=2_000_000_123)
    line = " ".join(argv)
    assert SECRET_KEY not in line
    assert "AKIAEXAMPLE" not in line
    assert argv[1:4] == ["mount", "BUCKET:ckpt/exp", str(STORAGE / "mnt" / "0")]
    assert "--uid 2000000123 --gid 2000000123 --umask 077 --dir-perms 0700 --file-perms 0600" in line
    assert "--allow-other --default-permissions" in line
    assert "--vfs-cache-mode writes" in line
    assert "--read-only" not in argv
    read_only = StorageMount(1, bucket("/m", read_only=True), BucketLocation("ckpt"), plan.credentials)
    assert rclone_argv("rclone", read_only, STORAGE, uid=1)[2:4] == [
        "BUCKET:ckpt",
        str(STORAGE / "mnt" / "1"),
    ]
    assert "--read-only" in rclone_argv("rclone", read_only, STORAGE, uid=1)


def test_the_s3_error_rclone_logged_last_is_what_a_refusal_names() -> None:
    log = (
        "2026/12/06 22:15:55 NOTICE: Serving remote control on http://127.0.0.1:42569/\n"
        "2026/12/06 22:15:56 ERROR : /: Dir.Stat error: SignatureDoesNotMatch: The request signature we "
        "calculated does not match\n\tstatus code: 403, request id: 1, host id: \n"
        "2026/12/06 22:15:57 ERROR : IO error: InvalidAccessKeyId: The access key Id you provided does not exist "
        "in our records.\n\tstatus code: 403, request id: 2, host id: \n"
    )
    assert s3_error(log) == ("InvalidAccessKeyId", 403)
    assert s3_error("2026/12/06 NOTICE: nothing wrong\n") is None


def test_the_credentials_come_from_the_secret_the_mount_names_and_a_bad_one_is_said_without_its_value(
    tmp_path: Path,
) -> None:
    (tmp_path / "s3-ckpt").write_text(DOCUMENT)
    assert read_credentials(tmp_path, bucket("/data")).secret_access_key.get_secret_value() == SECRET_KEY

    with pytest.raises(ObjectStorageRefused) as missing:
        read_credentials(tmp_path, bucket("/data").model_copy(update={"secret_ref": "other"}))
    assert (
        str(missing.value)
        == 'mount /data: the secret "other" holding its credentials was not delivered to this worker'
    )

    (tmp_path / "s3-ckpt").write_text(
        json.dumps({"accessKeyId": "AKIAEXAMPLE", "secretAccessKey": SECRET_KEY})
    )
    with pytest.raises(ObjectStorageRefused) as broken:
        read_credentials(tmp_path, bucket("/data"))
    assert str(broken.value) == (
        'mount /data: the secret "s3-ckpt" is not an S3 credential document (endpoint: missing)'
    )
    assert SECRET_KEY not in str(broken.value)
    assert broken.value.args[0].key == "object_storage.secret_invalid"

    (tmp_path / "link").symlink_to(tmp_path / "s3-ckpt")
    with pytest.raises(ObjectStorageRefused, match="was not delivered"):
        read_credentials(tmp_path, bucket("/data").model_copy(update={"secret_ref": "link"}))


def test_a_source_that_is_no_s3_bucket_url_is_refused_naming_the_rule() -> None:
    with pytest.raises(ObjectStorageRefused) as refused:
        object_storage.location_of(bucket("/data", source="s3://ckpt//exp"))
    assert str(refused.value) == (
        "mount /data: source s3://ckpt//exp is not a bucket URL s3://bucket[/prefix]: the prefix must not have "
        "empty, '.' or '..' components"
    )


def test_files_a_cache_never_uploaded_are_counted_from_rclone_s_own_metadata(tmp_path: Path) -> None:
    meta = tmp_path / "0" / "vfsMeta" / "BUCKET" / "ckpt" / "exp"
    meta.mkdir(parents=True)
    (meta / "uploaded.pt").write_text(json.dumps({"Size": 3, "Dirty": False}))
    (meta / "pending.pt").write_text(json.dumps({"Size": 3, "Dirty": True}))
    (tmp_path / "0" / "vfs").mkdir()
    (tmp_path / "0" / "vfs" / "pending.pt").write_text("abc")
    assert dirty_files(tmp_path) == 1
    assert dirty_files(tmp_path / "absent") == 0
