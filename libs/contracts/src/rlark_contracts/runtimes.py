"""What each cluster runtime can mount: the table both ends of a placement read.

Role: the one statement of which mount types (``hostPath``, ``emptyDir``, ``pvc``, ``objectStorage``:
``events.scheduler.Mount.type``) a cluster's runtime (``ClusterState.runtime``: ``local`` or
``kubernetes``) can give a worker. The scheduler refuses a job whose role mounts a type its cluster's
runtime cannot (validation at preview and submit, again before placing); the tunnel-agent's local driver
refuses such a worker placed anyway. Both say it with :func:`mount_refusal`, so the check and its
sentence cannot drift between them.

A cluster's agent may also report mount types its runtime offers but it is not set up for
(``HeartbeatSent.unmountable``, carried on as ``ClusterState.unmountable``: a Kubernetes agent that names no
object-storage CSI driver); :func:`mount_refusal` refuses those too, with a sentence that says so.

Contract: a runtime this table does not name (a newer producer's) is not judged here (None): the agent
that runs it says what it cannot do. Pure, standard library and the message catalogue only.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from types import MappingProxyType

from rlark_contracts.messages import Text, text

LOCAL = "local"
KUBERNETES = "kubernetes"

HOST_PATH = "hostPath"
EMPTY_DIR = "emptyDir"
PVC = "pvc"
OBJECT_STORAGE = "objectStorage"

MOUNT_TYPES: Mapping[str, tuple[str, ...]] = MappingProxyType(
    {
        # Workers are process groups on the agent's machine: a host directory, one of the worker's own, or a
        # bucket the agent mounts with rclone (ADR 0024). No claims: there is no volume provisioner.
        LOCAL: (HOST_PATH, EMPTY_DIR, OBJECT_STORAGE),
        # Pods: every volume kind (objectStorage through the agent's CSI driver setting).
        KUBERNETES: (HOST_PATH, EMPTY_DIR, PVC, OBJECT_STORAGE),
    }
)
"""Runtime → the mount types it gives a worker, in the order sentences list them."""

SETTINGS: Mapping[tuple[str, str], str] = MappingProxyType(
    {
        (KUBERNETES, OBJECT_STORAGE): "RLARK_K8S_OBJECT_STORAGE_CSI_DRIVER",
        (LOCAL, OBJECT_STORAGE): "rclone on the agent's machine",
    }
)
"""(runtime, mount type) → what the cluster's agent needs to mount it, for the refusal's sentence."""


def mounts(runtime: str, mount_type: str) -> bool:
    """Can a cluster of ``runtime`` mount ``mount_type``? True for a runtime this table does not name."""
    supported = MOUNT_TYPES.get(runtime)
    return supported is None or mount_type in supported


def mount_refusal(
    field: str, cluster: str, runtime: str, mount_type: str, unmountable: Collection[str] = ()
) -> Text | None:
    """Why cluster ``cluster`` (of ``runtime``) cannot mount ``mount_type`` at ``field`` — the job's
    ``spec.tasks[i].mounts[j].type``, or the agent's ``mount <target>`` — or None when it can.

    The sentence is the runtime's own (``mount_type_unsupported.<runtime>``): what it runs workers as
    says why, and it lists what it does mount. A type in ``unmountable`` (what the cluster's agent reports
    it is not set up for) is refused with ``mount_type_unconfigured``, naming the setting where one is known."""
    if mount_type in unmountable and mounts(runtime, mount_type):
        supported = [t for t in MOUNT_TYPES.get(runtime, ()) if t not in unmountable]
        return text(
            "mount_type_unconfigured",
            field=field,
            cluster=cluster,
            type=str(mount_type),
            supported=", ".join(supported),
            setting=SETTINGS.get((runtime, mount_type), "-"),
        )
    if mounts(runtime, mount_type):
        return None
    return text(
        f"mount_type_unsupported.{runtime}",
        field=field,
        cluster=cluster,
        type=str(mount_type),
        supported=", ".join(MOUNT_TYPES[runtime]),
    )
