"""The local runtime refuses storage it cannot provide, before it creates anything."""

from __future__ import annotations

import pytest
from local_runtime_helpers import spec
from rlark_tunnel_agent.runtime.driver import Mount, MountType
from rlark_tunnel_agent.runtime.local.driver import LocalDriver

pytestmark = pytest.mark.integration


@pytest.mark.parametrize(
    ("kind", "source"), [(MountType.PVC, "checkpoints"), (MountType.OBJECT_STORAGE, "s3://models/rl")]
)
async def test_pvc_and_object_storage_mounts_are_refused_naming_the_mount_and_nothing_is_created(
    driver: LocalDriver, kind: MountType, source: str
) -> None:
    worker = spec(
        "job-mounts",
        "header",
        0,
        rank=0,
        num_nodes=1,
        mounts=(Mount(type=kind, source=source, target="/models", secret_ref="s3-ro"),),
    )
    with pytest.raises(ValueError, match=f"mount /models: {kind} mounts need a Kubernetes cluster"):
        await driver.ensure_worker(worker)
    assert await driver.list_workers() == []
    assert not (driver.state_dir / "workers" / worker.worker_id).exists()
