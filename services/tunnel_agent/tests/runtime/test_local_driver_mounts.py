"""The local runtime refuses storage and paths it cannot provide, before it creates anything."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from local_runtime_helpers import CLUSTER, make_options, plain_spec, spec
from rlark_tunnel_agent.runtime.driver import Mount, MountType
from rlark_tunnel_agent.runtime.local.driver import LocalDriver

pytestmark = pytest.mark.integration


@pytest.mark.parametrize(
    ("kind", "source"), [(MountType.PVC, "checkpoints"), (MountType.OBJECT_STORAGE, "s3://models/rl")]
)
async def test_pvc_and_object_storage_mounts_are_refused_naming_the_mount_and_nothing_is_created(
    driver: LocalDriver, kind: MountType, source: str
) -> None:
    # The sentence the scheduler refuses such a job with (rlark_contracts.runtimes), naming the mount.
    worker = spec(
        "job-mounts",
        "header",
        0,
        rank=0,
        num_nodes=1,
        mounts=(Mount(type=kind, source=source, target="/models", secret_ref="s3-ro"),),
    )
    refused = f'mount /models: cluster "{CLUSTER.cluster}" runs workers as local processes: it mounts '
    with pytest.raises(ValueError, match=re.escape(f"{refused}hostPath, emptyDir only, not {kind}.")):
        await driver.ensure_worker(worker)
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
