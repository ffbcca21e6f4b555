"""The seam between the Kubernetes driver and the agent's network domains: the network sidecar.

A worker with a virtual IP gets a sidecar container (``manifests._sidecar``) that creates its TUN
device inside the pod and streams its packets to the tunnel-agent (``tunnel/sidecar.py``). Before
such a pod is created the driver asks ``NetworkSidecarHooks.sidecar_for`` — the agent admits the
worker into its domain's forwarder (bringing the domain's tunnels up with its first worker) and
answers where the sidecar dials and with which token. The driver puts the token in a per-worker
Secret, never in the pod spec; ``released`` is called when the worker is stopped.

Pure: types only.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from ipaddress import IPv4Interface
from typing import Protocol

from rlark_tunnel_agent.runtime.driver import WorkerSpec


@dataclass(frozen=True, slots=True)
class SidecarAccess:
    """How one worker's network sidecar reaches its agent. ``token`` is a secret (not in repr)."""

    agent_host: str
    agent_port: int
    address: IPv4Interface
    """The worker's virtual IP with the domain's prefix length (the TUN's address and route)."""
    mtu: int
    token: str = field(repr=False)


class NetworkSidecarHooks(Protocol):
    """What the driver needs from the agent for workers in a network domain."""

    async def sidecar_for(self, spec: WorkerSpec) -> SidecarAccess:
        """Admit ``spec``'s sidecar; idempotent by worker id (the same token again). Raises
        ValueError when the worker has no network domain placement in this agent."""
        ...

    async def released(self, worker_id: str) -> None:
        """The worker is gone: refuse its sidecar from now on (the last one takes the tunnels down).
        Idempotent; unknown workers are ignored."""
        ...
