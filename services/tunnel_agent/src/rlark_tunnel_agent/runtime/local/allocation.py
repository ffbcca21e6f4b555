"""What the local driver hands out to its workers: slots (and from them addresses and port blocks), GPUs and
uids. In memory only: a restarted driver takes back what its live workers' records hold (`reserve`).

A slot numbers a worker among the live ones: as root it picks the worker's address in the bridge's subnet
(every worker binds the same Ray ports on its own address); without namespaces every worker is on 127.0.0.1
and the slot picks its block of `PORT_BLOCK` ports instead. A job's Header keeps its slot (``header:<job>``)
while any worker of the job may still join it. Not thread-safe: the driver calls it under its lock.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from ipaddress import IPv4Address, IPv4Network
from pathlib import Path

from rlark_tunnel_agent.runtime.driver import RayPorts, WorkerSpec
from rlark_tunnel_agent.runtime.local.gpus import Gpu
from rlark_tunnel_agent.runtime.local.isolation import uid_identity, worker_uid
from rlark_tunnel_agent.runtime.local.record import WorkerRecord

PORT_BLOCK = 400
"""Ports per worker without namespaces: 8 fixed ports at the start, Ray workers in +100..+399."""
EPHEMERAL_START = 32768
"""The kernel's first ephemeral port: port blocks stay below it."""
RAY_TEMP_ROOT = Path("/tmp")  # noqa: S108
"""Ray's unix socket paths (<temp>/session_<stamp>/sockets/raylet) must stay under 107 bytes, so Ray's temp
dirs live directly in /tmp, named with the driver's tag and the worker's hash."""


def short_hash(*parts: str, length: int = 10) -> str:
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:length]


class Allocator:
    """Slots, addresses, ports, GPUs and uids of one local driver's workers (see the module docstring)."""

    def __init__(
        self,
        *,
        tag: str,
        use_netns: bool,
        port_base: int,
        subnet: IPv4Network | None = None,
        gateway: IPv4Address | None = None,
    ) -> None:
        self.tag = tag
        self.use_netns = use_netns
        self.port_base = port_base
        self.subnet = subnet
        """The bridge's subnet (root mode); set by the driver once the bridge exists."""
        self.gateway = gateway
        self.gpus: list[Gpu] = []
        """The machine's GPUs (none: workers get no device indices)."""
        self._slots: dict[str, int] = {}
        self._gpu_owner: dict[int, str] = {}

    def allocate(self, spec: WorkerSpec, live: Sequence[WorkerRecord]) -> WorkerRecord:
        """A new worker's record: its GPUs, slot, the Header's slot, addresses, ports, names and uid (``live``:
        the records of the driver's workers not stopped, whose owners' uids are taken)."""
        gpu_indices = self._take_gpus(spec)
        try:
            slot = self._take_slot(_slot_key(spec))
            header_slot = self._take_slot(f"header:{spec.job_id}")
        except BaseException:
            for index in gpu_indices:
                del self._gpu_owner[index]
            raise
        gcs_port, ports = self._ports(slot, spec, header_slot)
        digest = short_hash(self.tag, spec.worker_id)
        return WorkerRecord(
            spec=spec,
            slot=slot,
            header_slot=header_slot,
            address=self.address(slot),
            header_address=self.address(header_slot),
            gcs_port=gcs_port,
            ports=ports,
            netns=f"rlark-{self.tag}-{digest}" if self.use_netns else None,
            veth_host=f"rlk{digest}" if self.use_netns else None,
            ray_temp_dir=str(RAY_TEMP_ROOT / f"rlark-{self.tag}-{digest}"),
            gpu_indices=gpu_indices,
            uid=_owner_uid(spec, live) if self.use_netns else None,
        )

    def reserve(self, record: WorkerRecord) -> None:
        """Re-take a live record's slot, header slot and GPUs (after a driver restart)."""
        self._slots[_slot_key(record.spec)] = record.slot
        self._slots.setdefault(f"header:{record.spec.job_id}", record.header_slot)
        for index in record.gpu_indices:
            self._gpu_owner[index] = record.spec.worker_id

    def release(self, record: WorkerRecord, *, others_of_the_job_live: bool) -> None:
        """Give back a worker's slot and GPUs; its job's Header slot too once no other worker of the job lives
        (the head's address stays reserved while any worker of the job may still join it)."""
        spec = record.spec
        if not spec.is_header:
            self._slots.pop(spec.worker_id, None)
        if not others_of_the_job_live:
            self._slots.pop(f"header:{spec.job_id}", None)
        for index in record.gpu_indices:
            if self._gpu_owner.get(index) == spec.worker_id:
                del self._gpu_owner[index]

    def address(self, slot: int) -> str:
        if not self.use_netns:
            return "127.0.0.1"
        if self.subnet is None:
            raise RuntimeError("the cluster's bridge has no subnet yet")
        # Skip the gateway and, as the user guide asks of virtual IPs, any .0 / .255 address.
        found = -1
        for host in self.subnet.hosts():
            if host == self.gateway or host.packed[-1] in (0, 255):
                continue
            found += 1
            if found == slot:
                return str(host)
        raise RuntimeError(f"subnet {self.subnet} has no free address")

    def _take_slot(self, key: str) -> int:
        if key in self._slots:
            return self._slots[key]
        used = set(self._slots.values())
        slot = next(n for n in range(len(used) + 1) if n not in used)
        if not self.use_netns:
            max_slots = (EPHEMERAL_START - self.port_base) // PORT_BLOCK
            if slot >= max_slots:
                raise RuntimeError(f"no free port block (at most {max_slots} workers)")
        self._slots[key] = slot
        return slot

    def _ports(self, slot: int, spec: WorkerSpec, header_slot: int) -> tuple[int, RayPorts]:
        """(GCS port of the job's head, this worker's other Ray ports).

        The dashboard port is the head's, like the GCS port: only the Header's head serves it, and every
        worker names it (`RLARK_RAY_DASHBOARD_PORT`)."""
        if self.use_netns:
            return spec.ray_port, RayPorts()
        base = self.port_base + slot * PORT_BLOCK
        header_base = self.port_base + header_slot * PORT_BLOCK
        ports = RayPorts(
            dashboard_port=header_base + 1,
            node_manager_port=base + 2,
            object_manager_port=base + 3,
            dashboard_agent_grpc_port=base + 4,
            dashboard_agent_listen_port=base + 5,
            metrics_export_port=base + 6,
            runtime_env_agent_port=base + 7,
            min_worker_port=base + 100,
            max_worker_port=base + PORT_BLOCK - 1,
        )
        return header_base, ports

    def _take_gpus(self, spec: WorkerSpec) -> tuple[int, ...]:
        if not self.gpus or spec.gpus == 0:
            return ()
        free = [gpu.index for gpu in self.gpus if gpu.index not in self._gpu_owner]
        if len(free) < spec.gpus:
            raise RuntimeError(f"{spec.gpus} GPUs asked, {len(free)} free on this machine")
        taken = tuple(free[: spec.gpus])
        for index in taken:
            self._gpu_owner[index] = spec.worker_id
        return taken


def _slot_key(spec: WorkerSpec) -> str:
    return f"header:{spec.job_id}" if spec.is_header else spec.worker_id


def _owner_uid(spec: WorkerSpec, live: Sequence[WorkerRecord]) -> int:
    """The uid of the job's owner (of the job without one): the one its live workers here have, else a fresh one
    no other owner's live worker holds."""
    identity = uid_identity(spec.owner, spec.job_id)
    for record in live:
        if record.uid is not None and uid_identity(record.spec.owner, record.spec.job_id) == identity:
            return record.uid
    return worker_uid(identity, {record.uid for record in live if record.uid is not None})
