"""What the local driver persists per worker (``worker.json``): the spec with everything the driver settled for
it — slot, addresses, ports, namespace, uid, cgroup, GPUs — read back by a restarted driver to adopt it."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict
from rlark_tunnel_agent.runtime.driver import RayPorts, WorkerSpec


class WorkerRecord(BaseModel):
    """What the driver persists per worker (`worker.json`)."""

    model_config = ConfigDict(extra="ignore")

    spec: WorkerSpec
    slot: int
    header_slot: int
    address: str
    header_address: str
    gcs_port: int
    ports: RayPorts
    netns: str | None = None
    veth_host: str | None = None
    ray_temp_dir: str
    gpu_indices: tuple[int, ...] = ()
    uid: int | None = None
    """The unprivileged user (and group) the worker runs as in root mode (`isolation.worker_uid`)."""
    cgroup: str = ""
    """Its cgroup v2 directory where limits are enforced ("" otherwise)."""
    tun_device: str | None = None
    """The TUN device holding the spec's virtual IP, when the hooks created one."""
    pid: int | None = None
    stopped: bool = False
