"""Network domains on Kubernetes: the agent side of the workers' network sidecars.

Role: the Kubernetes driver's ``NetworkSidecarHooks`` (``runtime/kubernetes/network.py``). On
Kubernetes the agent cannot open a TUN device inside a worker's pod; the pod's network sidecar
does (``tunnel/sidecar.py``) and streams its packets to this agent over TCP. ``PodSidecars``:

- runs ONE ``SidecarServer`` for the whole agent, on a fixed port behind the agent's Service (a
  port per domain could not be declared in a Service); each admitted worker's expectation names
  its domain's forwarder, so a sidecar's HELLO lands in the right domain;
- owns the agent's ``DomainTunnels`` (the same events, topology and keys as on the local
  runtime), built with a supervisor whose forwarders are ``PodForwarder``s: for them "attaching" a
  worker means admitting its sidecar (a token), not creating a TUN. A worker is a member of its
  domain from admission until ``released`` — whether or not its sidecar is connected at the
  moment — so the domain's tunnels come up with the first domain worker placed here (before its
  pod exists) and go down when the last one is released, never because a sidecar reconnects;
- ``sidecar_for(spec)`` admits the worker (idempotent: the same token again) and answers where
  its sidecar dials (``SidecarOptions.advertise_*``, the agent's Service), its address with the
  domain's prefix, the MTU and the token. The token is a secret: it goes to the driver (which puts
  it in a Secret) and to the server's expectation, never into a log or an event.

Tokens are derived, not drawn: ``sidecar_token(key, worker_id)`` = HMAC-SHA256 of the worker id
under a key that is itself HMAC-SHA256 of the agent's credential and a fixed label
(``token_key_from_credential``). The agent always has its credential and may create and delete
Secrets but never read them, so this is how a restarted agent knows the tokens of the running
sidecars: the Kubernetes driver's adoption calls ``sidecar_for`` with the recorded spec (which
carries the worker's domain and CIDR) and the same token is expected again; the sidecars, which
reconnect with backoff, are accepted and their workers get the domain network back. The label keeps
the key apart from the credential's other use (the gateway session); a token reveals neither.
The files sidecars' secrets (ADR 0013) are derived the same way under ``FILES_KEY_LABEL``
(``files_secrets``, handed to the Kubernetes driver by ``main.py``).

Rotation: a new agent credential derives other tokens. Pods created before the rotation hold the
old token in their Secret (read once into the sidecar's environment), so after the restart that
takes up the new credential their sidecars are refused until those workers end; pods created after
it get the new tokens. Rotate between jobs, or accept that running domain jobs lose their network.

Concurrency: everything runs on the agent's event loop; the driver serialises calls per worker.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import hmac
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from ipaddress import IPv4Address, IPv4Interface
from pathlib import Path

import asyncssh
import structlog
from rlark_contracts.events.agent import TunnelEndpointAnnounced

from rlark_tunnel_agent.agent.durable import DurableStore
from rlark_tunnel_agent.agent.tunnels import DomainTunnels, TunnelOptions
from rlark_tunnel_agent.runtime.driver import WorkerSpec
from rlark_tunnel_agent.runtime.kubernetes.network import SidecarAccess
from rlark_tunnel_agent.tunnel import ForwarderConfig, TunnelForwarder, TunnelSupervisor
from rlark_tunnel_agent.tunnel.forwarder import ForwarderError
from rlark_tunnel_agent.tunnel.sidecar import SidecarServer

log = structlog.get_logger(__name__)

TOKEN_KEY_LABEL = b"rlark tunnel-agent network sidecar token v1"
"""Fixed label of the token key's derivation; changing it changes every token (a new version)."""


FILES_KEY_LABEL = b"rlark tunnel-agent files sidecar secret v1"
"""The label of the files sidecars' secrets (ADR 0013): the same derivation as the tokens under another label,
so neither kind reveals the other."""


def token_key_from_credential(credential: str, label: bytes = TOKEN_KEY_LABEL) -> bytes:
    """The key sidecar tokens are derived with: HMAC-SHA256(credential, ``label``)."""
    if not credential:
        raise ValueError("a sidecar token key needs the agent's credential")
    return hmac.new(credential.encode(), label, hashlib.sha256).digest()


def sidecar_token(key: bytes, worker_id: str) -> str:
    """The worker's sidecar token: HMAC-SHA256(key, worker id), URL-safe base64 without padding."""
    digest = hmac.new(key, worker_id.encode(), hashlib.sha256).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def files_secrets(credential: str) -> Callable[[str], str]:
    """Worker id → its files sidecar's secret (the Kubernetes driver's ``files_secret``), derived like the
    network sidecars' tokens: a restarted agent knows the secrets of the pods it adopts."""
    return functools.partial(sidecar_token, token_key_from_credential(credential, FILES_KEY_LABEL))


POD_NETNS = "pod"
"""What ``DomainTunnels.attach`` is told as the worker's namespace: the pod's, which this agent
never enters (the sidecar is in it)."""


@dataclass(frozen=True, slots=True)
class SidecarOptions:
    """Where this agent accepts its pods' network sidecars, and the address they dial."""

    listen_host: str = "0.0.0.0"  # noqa: S104 - pods reach the agent through its Service
    listen_port: int = 8106
    """0: an ephemeral port (tests); a real agent needs a fixed one behind its Service."""
    advertise_host: str = "rlark-tunnel-agent.rlark-agent.svc"
    """What the sidecars dial: the agent's Service (deploy/agent/service.yaml)."""
    advertise_port: int | None = None
    """The Service's port; None: the port listened on."""


class PodForwarder(TunnelForwarder):
    """A domain's forwarder whose local workers are pods reached through their sidecars.

    ``attach_worker`` admits the worker's sidecar (``admit``) instead of creating a TUN;
    ``detach_worker`` revokes it and drops its link. ``worker_count`` counts admitted workers, so
    the supervisor keeps the tunnels up while a pod lives, connected or between reconnections.
    """

    def __init__(
        self,
        config: ForwarderConfig,
        private_key: asyncssh.SSHKey,
        admit: Callable[[PodForwarder, str, IPv4Address], None],
        revoke: Callable[[str], None],
    ) -> None:
        super().__init__(config, private_key)
        self._admit = admit
        self._revoke = revoke
        self._members: set[str] = set()

    @property
    def worker_count(self) -> int:
        return len(self._members)

    async def attach_worker(self, worker: str, netns: str, address: IPv4Address) -> None:
        if address not in self.config.network:
            raise ForwarderError(f"{address} is outside {self.config.network}")
        self._admit(self, worker, address)
        self._members.add(worker)

    async def detach_worker(self, worker: str) -> None:
        if worker in self._members:
            self._members.discard(worker)
            self._revoke(worker)
        await super().detach_worker(worker)

    async def stop(self) -> None:
        for worker in sorted(self._members):
            self._revoke(worker)
        self._members.clear()
        await super().stop()


class PodSidecars:
    """Implements the Kubernetes driver's ``NetworkSidecarHooks`` (see the module doc)."""

    def __init__(
        self,
        cluster: str,
        state_dir: Path,
        announce: Callable[[TunnelEndpointAnnounced], Awaitable[None]],
        tunnel_options: TunnelOptions | None = None,
        options: SidecarOptions | None = None,
        *,
        token_key: bytes,
        keys: DurableStore | None = None,
    ) -> None:
        """``token_key``: from ``token_key_from_credential`` (the module doc says why); ``keys``: where the
        domains' tunnel keys are kept (``DomainTunnels``)."""
        self.options = options or SidecarOptions()
        self._token_key = token_key
        self.server = SidecarServer()
        self.tunnels = DomainTunnels(
            cluster,
            state_dir,
            announce,
            tunnel_options,
            supervisor=TunnelSupervisor(self._new_forwarder),
            keys=keys,
        )
        self._port: int | None = None
        self._specs: dict[str, WorkerSpec] = {}
        self._access: dict[str, SidecarAccess] = {}
        self._issuing: dict[str, str] = {}
        """worker → the token being issued while ``DomainTunnels.attach`` runs."""

    def _new_forwarder(self, config: ForwarderConfig, key: asyncssh.SSHKey) -> PodForwarder:
        return PodForwarder(config, key, self._admit, self.server.revoke)

    async def start(self) -> int:
        """Listen for sidecars; returns the port."""
        self._port = await self.server.start(self.options.listen_host, self.options.listen_port)
        log.info("network sidecar server listening", port=self._port)
        return self._port

    async def stop(self) -> None:
        """Stop accepting sidecars (the domains' tunnels go down with ``tunnels.close``)."""
        await self.server.stop()

    @property
    def port(self) -> int:
        if self._port is None:
            raise RuntimeError("the sidecar server is not started")
        return self._port

    # --- NetworkSidecarHooks ---------------------------------------------------------------------

    async def sidecar_for(self, spec: WorkerSpec) -> SidecarAccess:
        """Admit ``spec``'s sidecar into its domain here (tunnels up with the domain's first
        worker); the same access again for a worker already admitted, and the same token for the
        same worker after an agent restart (an adopted pod's sidecar is accepted again)."""
        known = self._access.get(spec.worker_id)
        if known is not None:
            return known
        self._issuing[spec.worker_id] = sidecar_token(self._token_key, spec.worker_id)
        self._specs[spec.worker_id] = spec
        try:
            await self.tunnels.attach(spec, POD_NETNS)  # raises ValueError without a domain placement
        except BaseException:
            if spec.worker_id not in self._access:  # not admitted: nothing to release later
                self._specs.pop(spec.worker_id, None)
            raise
        finally:
            self._issuing.pop(spec.worker_id, None)
        return self._access[spec.worker_id]

    def _admit(self, forwarder: PodForwarder, worker: str, address: IPv4Address) -> None:
        """Called by the worker's domain forwarder while ``sidecar_for`` attaches it."""
        token = self._issuing.get(worker)
        if token is None:
            raise ForwarderError(f"worker {worker} is attached without a sidecar being issued")
        self.server.expect(worker, address, token, forwarder=forwarder)
        config = forwarder.config
        self._access[worker] = SidecarAccess(
            agent_host=self.options.advertise_host,
            agent_port=self.options.advertise_port or self.port,
            address=IPv4Interface(f"{address}/{config.network.prefixlen}"),
            mtu=config.mtu,
            token=token,
        )

    async def released(self, worker_id: str) -> None:
        """Refuse the worker's sidecar from now on and drop its link; the domain's last worker here
        takes its tunnels down. Idempotent."""
        self._access.pop(worker_id, None)
        spec = self._specs.pop(worker_id, None)
        if spec is not None:
            await self.tunnels.detach(spec)
        self.server.revoke(worker_id)
