"""A placement's mounts reach the runtime whole: every spec mount type, and the secret's NAME."""

from __future__ import annotations

import pytest
from rlark_contracts.events.scheduler import Mount as PlacedMount
from rlark_contracts.events.scheduler import WorkerPlaced
from rlark_contracts.samples import worker_placed
from rlark_tunnel_agent.agent.placements import UnsupportedPlacement, to_worker_spec
from rlark_tunnel_agent.runtime.driver import Mount, MountType

pytestmark = pytest.mark.unit


def placed(*mounts: PlacedMount) -> WorkerPlaced:
    return worker_placed(cluster="gpu-a", mounts=list(mounts))


def test_every_mount_type_of_the_spec_is_translated_with_its_secret_name() -> None:
    spec = to_worker_spec(
        placed(
            PlacedMount(name="data", type="hostPath", source="/data", path="/data", read_only=True),
            PlacedMount(name="scratch", type="emptyDir", source="", path="/scratch"),
            PlacedMount(name="ckpt", type="pvc", source="checkpoints", path="/ckpt"),
            PlacedMount(
                name="models", type="objectStorage", source="s3://m/p", path="/m", secret_ref="s3-ro"
            ),
        ),
        header_address="",
    )
    assert spec.mounts == (
        Mount(type=MountType.HOST_PATH, source="/data", target="/data", read_only=True),
        Mount(type=MountType.EMPTY_DIR, source="", target="/scratch"),
        Mount(type=MountType.PVC, source="checkpoints", target="/ckpt"),
        Mount(type=MountType.OBJECT_STORAGE, source="s3://m/p", target="/m", secret_ref="s3-ro"),
    )


def test_an_unknown_mount_type_is_refused_naming_the_mount() -> None:
    with pytest.raises(UnsupportedPlacement, match=r"'odd'.*'nfs'"):
        to_worker_spec(placed(PlacedMount(name="odd", type="nfs", source="x", path="/x")), header_address="")
