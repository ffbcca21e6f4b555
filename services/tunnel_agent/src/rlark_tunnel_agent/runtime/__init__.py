"""Worker runtimes of the tunnel-agent: the driver seam, the bootstrap and the local driver."""

from rlark_tunnel_agent.runtime.driver import (
    Mount,
    MountType,
    NodeObservation,
    RayPorts,
    RuntimeDriver,
    RuntimeEvent,
    WorkerLogLine,
    WorkerMarkerSeen,
    WorkerPhase,
    WorkerSpec,
    WorkerStatus,
    WorkerStatusChanged,
    worker_id_for,
)

__all__ = [
    "Mount",
    "MountType",
    "NodeObservation",
    "RayPorts",
    "RuntimeDriver",
    "RuntimeEvent",
    "WorkerLogLine",
    "WorkerMarkerSeen",
    "WorkerPhase",
    "WorkerSpec",
    "WorkerStatus",
    "WorkerStatusChanged",
    "worker_id_for",
]
