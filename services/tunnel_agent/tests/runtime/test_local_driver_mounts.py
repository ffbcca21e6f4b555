"""The local runtime refuses storage and paths it cannot provide, before it creates anything."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from local_runtime_helpers import CLUSTER, make_options, plain_spec, spec
from rlark_tunnel_agent.runtime.driver import Mount, MountType
from rlark_tunnel_agent.runtime.local.driver import LocalDriver

pytestmark = pytest.mark.integration


async def test_a_pvc_mount_is_refused_naming_the_mount_and_nothing_is_created(driver: LocalDriver) -> None:
    # The sentence the scheduler refuses such a job with (rlark_contracts.runtimes), naming the mount.
    worker = spec(
        "job-mounts",
        "header",
        0,
        rank=0,
        num_nodes=1,
        mounts=(Mount(type=MountType.PVC, source="checkpoints", target="/models"),),
    )
    refused = f'mount /models: cluster "{CLUSTER.cluster}" runs workers as local processes: it mounts '
    with pytest.raises(
        ValueError, match=re.escape(f"{refused}hostPath, emptyDir, objectStorage only, not pvc.")
    ):
        await driver.ensure_worker(worker)
    assert await driver.list_workers() == []
    assert not (driver.state_dir / "workers" / worker.worker_id).exists()


@pytest.mark.parametrize(
    ("source", "problem"),
    [("gs://models/rl", "must start with s3://"), ("s3://Models/rl", "the bucket must be")],
)
async def test_a_bucket_mount_whose_source_is_no_s3_bucket_url_is_refused_before_anything_is_created(
    driver: LocalDriver, source: str, problem: str
) -> None:
    worker = spec(
        "job-buckets",
        "header",
        0,
        rank=0,
        num_nodes=1,
        mounts=(Mount(type=MountType.OBJECT_STORAGE, source=source, target="/models", secret_ref="s3-ro"),),
    )
    with pytest.raises(
        ValueError, match=re.escape(f"mount /models: source {source} is not a bucket URL")
    ) as refused:
        await driver.ensure_worker(worker)
    assert problem in str(refused.value)
    assert await driver.list_workers() == []
    assert not (driver.state_dir / "workers" / worker.worker_id).exists()


@pytest.mark.parametrize(
    ("fields", "reason"),
    [
        (
            {"mounts": (Mount(source="/srv/models", target="/srv/models", read_only=True),)},
            "mount /srv/models: readOnly cannot be enforced",
        ),
        (
            {"mounts": (Mount(source="/srv/code", target="/code"),)},
            "mount /code: the hostPath /srv/code cannot appear at /code",
        ),
        (
            {
                "mounts": (
                    Mount(type=MountType.OBJECT_STORAGE, source="s3://models", target="/m", secret_ref="s"),
                )
            },
            "mount /m: a bucket (objectStorage) needs a mount namespace",
        ),
        ({"outputs": ("/proc/rlark/out",)}, "outputs /proc/rlark/out: cannot be created on this machine"),
        ({"tensorboard_dir": "/proc/rlark/tb"}, "tensorboardDir /proc/rlark/tb: cannot be created"),
    ],
)
async def test_plain_processes_refuse_what_they_cannot_honour_before_creating_anything(
    tmp_path: Path, fields: dict[str, object], reason: str
) -> None:
    driver = LocalDriver(CLUSTER, make_options(tmp_path / "state", use_netns=False))
    await driver.start()
    try:
        worker = plain_spec("job-plain", "header", 0, rank=0, num_nodes=1, **fields)
        with pytest.raises(ValueError, match=re.escape(reason)) as refused:
            await driver.ensure_worker(worker)
        assert "plain processes" in str(refused.value)
        assert await driver.list_workers() == []
        assert not (driver.state_dir / "workers" / worker.worker_id).exists()
    finally:
        await driver.close()


async def test_plain_processes_write_absolute_outputs_at_the_hosts_own_path(tmp_path: Path) -> None:
    driver = LocalDriver(CLUSTER, make_options(tmp_path / "state", use_netns=False))
    await driver.start()
    out = tmp_path / "host" / "outputs"
    hold = 'while [ ! -e "$HOME/go" ]; do sleep 0.2; done\n'
    worker = plain_spec(
        "job-plain",
        "header",
        0,
        rank=0,
        num_nodes=1,
        outputs=(str(out),),
        prepare_script=hold,
        run_script="true",
    )
    try:
        await driver.ensure_worker(worker)
        assert out.is_dir()
        # The translated path under fs/ (today's $RLARK_OUTPUTS) leads to the same directory.
        assert (driver.worker_dir(worker.worker_id) / "fs" / str(out).lstrip("/")).resolve() == out
    finally:
        await driver.stop_worker(worker.worker_id)
        await driver.close()
