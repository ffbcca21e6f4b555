"""The agent: one per cluster. Turns desired state (placements, stops, key updates, cordons) into runtime
actions and runtime facts (nodes, worker status, logs, outputs) into reports.

Concurrency model: one asyncio task per loop — heartbeats, session renewal, node observation, the desired
state consumer, the runtime event pump and the log flusher. Creating a worker runs in its own task so a
worker waiting for its Header's address never blocks the consumer. Every action is idempotent (the driver's
contract), so at-least-once delivery of placements is harmless; stopped workers are remembered in a small
file so a replayed placement never resurrects them. A loop that fails (a broker gone longer than a Kafka client
waits, say) ends the session, not the process: a new session starts after a pause (1 s, doubling to 30 s), as
one does when the Kafka password changed; the driver's restart adopts the workers and reports them again.

Network domains (with ``tunnels`` options and a driver that takes ``virtual_ip_hooks``, the local
one, or — with ``sidecars`` options too — ``sidecar_hooks``, the Kubernetes one, whose workers get
their TUN from a network sidecar in the pod: ``sidecars.py``): a second consumer reads
``netdomain.allocations`` and ``netdomain.tunnels`` — from their beginning on every start, without a
consumer group, so a restarted agent rebuilds that state — into ``DomainTunnels`` (see ``tunnels.py``, ADR 0003).
An allocation's virtual IPs also go to the driver (``learn_addresses``: the local one writes them into its
workers' /etc/hosts), so a domain job's workers resolve each other's names on every cluster. Peers' endpoints and keys come only from the
topology events, which carry the announcements the netdomain service verified; the agent announces
its own endpoint on ``agent.reports.<cluster>`` but never reads its peers' announcements there.
A watcher polls the links about once a second and reports each state change
(``agent.tunnel.state_changed.v1``); heartbeats re-report links last reported over 30 s ago.

Kafka logins (ADR 0004): the session hands out the agent's Kafka password, which changes when the
cluster's credential is rotated. A heartbeat the broker does not take (its login refused, or the broker
down) makes the agent open a new session: a different password restarts the Kafka clients with it; a
refused credential (rotated, cluster deleted) is said in the log as an error and retried slowly
(``REFUSED_RETRY_MAX_S``) until the agent is stopped, without ending the process. The session task does
this apart from the heartbeats, which go on every interval meanwhile: a control plane unreachable for a
while (a rolling restart) must not silence a cluster whose broker takes its reports.

One active agent per cluster (``lease.py``, ADR 0018): after opening its session and before it touches the
runtime or reads placements, the agent takes its cluster's lease from the control plane; while another
process holds it, this one stands by (``standing_by`` set, logged once per holder) and polls. The active
agent renews the lease in a task of its own and stamps its epoch on every report; once the lease is lost
(another holder, or not renewed before it may have expired) every loop stops and the agent stands by
again. A clean stop releases the lease, so a standby takes over at its next poll rather than after the TTL.

SSH through the platform (``ssh_link.py``, ADR 0010): one more task keeps a WebSocket control link to the
gateway and connects the relays it is asked for to workers' sshd, resolved by the driver (``RuntimeDriver.ssh_endpoint``).
Outputs and TensorBoard are read on this machine where the runtime keeps them here (local: ``FilesAt.AGENT_HOST``,
``output_roots``, ``tensorboard_command``), and asked of the worker's files server where it keeps them beside the worker
(Kubernetes: the pod's files sidecar, ``FilesAt.WORKER_POD``, ``pod_files.py``, ADR 0013).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import structlog
from aiokafka import AIOKafkaConsumer
from aiokafka.errors import KafkaError
from rlark_contracts import Envelope, TopicNames, decode
from rlark_contracts.events.agent import NodeObservation, WorkerUsageSampled
from rlark_contracts.events.inventory import NodeCordonRequested
from rlark_contracts.events.netdomain import (
    AddressesAllocated,
    AddressesReleased,
    TunnelTopologyChanged,
)
from rlark_contracts.events.scheduler import JobKeysUpdated, WorkerPlaced, WorkerStopRequested
from rlark_contracts.relay import SERVICE_RAY_DASHBOARD, SERVICE_TENSORBOARD
from rlark_contracts.runtimes import KUBERNETES
from rlark_platform.messaging import create_producer

from rlark_tunnel_agent.agent import buckets, checkpoints
from rlark_tunnel_agent.agent.credentials import CredentialsRefused, FetchCredentials, credentials_fetcher
from rlark_tunnel_agent.agent.durable import DurableStore
from rlark_tunnel_agent.agent.endpoints import WorkerEndpoints
from rlark_tunnel_agent.agent.files import DEFAULT_MAX_DOWNLOAD_BYTES
from rlark_tunnel_agent.agent.lease import LeaseAnswer, LeaseTerm, holder_id, poll_interval, request_lease
from rlark_tunnel_agent.agent.metrics import AGENT_METRICS, CONSUMED, AgentView
from rlark_tunnel_agent.agent.placements import UnsupportedPlacement, to_worker_spec
from rlark_tunnel_agent.agent.progress import ProgressWatch
from rlark_tunnel_agent.agent.reports import ReportPublisher, with_cordons
from rlark_tunnel_agent.agent.session import Session, SessionRefused, open_session
from rlark_tunnel_agent.agent.sidecars import PodSidecars, SidecarOptions, token_key_from_credential
from rlark_tunnel_agent.agent.ssh_link import SshLink
from rlark_tunnel_agent.agent.tensorboards import TensorBoards
from rlark_tunnel_agent.agent.tunnels import DomainTunnels, TunnelOptions
from rlark_tunnel_agent.runtime import driver as rt
from rlark_tunnel_agent.runtime.markers import Marker, OutputManifest, RunStarted, TensorBoardStep

log = structlog.get_logger(__name__)

REFUSED_RETRY_MAX_S = 300.0
"""Longest wait between sessions while the control plane refuses the credential (it was rotated)."""


class _KafkaLoginChanged(Exception):
    """A new session's Kafka credential differs from the one the agent's Kafka clients use."""


class _LeaseLost(Exception):
    """Another agent process holds the cluster's lease now, or this one could not renew it in time."""


class _LoopFailed(Exception):
    """One of the session's loops ended with an error (a broker gone for longer than a client waits, say)."""


LOOP_RETRY_MAX_S = 30.0
"""Longest wait before a new session after a loop failed (1 s at first, doubling)."""


TakeLease = Callable[[str, str, bool], Awaitable[LeaseAnswer]]
"""``take_lease(agent token, holder, release)``: the control plane's answer about the cluster's lease."""


AGENT_VERSION = "0.1.0"
LINK_POLL_S = 1.0
LINK_REFRESH_S = 30.0
NODE_POLL_S = 1.0
"""How often the nodes are looked at for a change worth reporting at once (allocations, readiness)."""


class AgentState:
    """What must survive an agent restart: stopped workers and cordoned nodes (a small JSON file)."""

    def __init__(self, path: Path) -> None:
        self._path = path
        data: dict[str, Any] = json.loads(path.read_text()) if path.exists() else {}
        self.stopped: set[str] = set(data.get("stopped", []))
        self.cordoned: set[str] = set(data.get("cordoned", []))

    def save(self) -> None:
        self._path.parent.mkdir(parents=True, exist_ok=True)
        temporary = self._path.with_suffix(".tmp")
        temporary.write_text(
            json.dumps({"stopped": sorted(self.stopped)[-10000:], "cordoned": sorted(self.cordoned)})
        )
        temporary.replace(self._path)


class Agent:
    def __init__(
        self,
        *,
        gateway_url: str,
        credential: str,
        make_driver: Callable[[str, DomainTunnels | None, PodSidecars | None], rt.RuntimeDriver],
        runtime: str,
        state_dir: Path,
        heartbeat_interval_s: float = 5.0,
        observe_interval_s: float = 10.0,
        open_session_fn: Callable[[str, str], Awaitable[Session]] = open_session,
        tunnels: TunnelOptions | None = None,
        sidecars: SidecarOptions | None = None,
        tensorboard_idle_s: float = 600.0,
        usage_interval_s: float = 15.0,
        max_download_bytes: int = DEFAULT_MAX_DOWNLOAD_BYTES,
        take_lease: TakeLease | None = None,
        durable: Callable[[str], DurableStore] | None = None,
        fetch_credentials: FetchCredentials | None = None,
    ) -> None:
        self._gateway_url = gateway_url
        self._fetch_credentials = fetch_credentials or credentials_fetcher(
            gateway_url, lambda: self.reports.session.token
        )
        """A new worker's credentials (its attempt's Ray token) from the control plane: ``credentials.py``."""
        self._credential = credential
        self._make_driver = make_driver
        self._runtime = runtime
        self._state_dir = state_dir
        self._heartbeat_interval_s = heartbeat_interval_s
        self._observe_interval_s = observe_interval_s
        self._usage_interval_s = usage_interval_s
        self._open_session = open_session_fn
        self._take_lease: TakeLease = take_lease or (
            lambda token, holder, release: request_lease(gateway_url, token, holder, release=release)
        )
        self._durable = durable
        """The cluster's durable store (tunnel host keys: ``durable.py``); None: its state directory."""
        self.holder = holder_id()
        """This process's identity for the cluster lease (ADR 0018)."""
        self.lease: LeaseTerm | None = None
        """The cluster lease while this agent is active; None while it stands by."""
        self.standing_by = asyncio.Event()
        """Set while another agent holds the cluster's lease and this one waits for it."""
        self._tunnel_options = tunnels
        self._sidecar_options = sidecars
        self.tensorboards = TensorBoards(tensorboard_idle_s)
        """TensorBoard servers started on demand for the gateway's proxy (issue 15.4)."""
        self._max_download_bytes = max_download_bytes
        """The largest output download the agent sends (``RLARK_FILES_MAX_DOWNLOAD_BYTES``, ``files.py``)."""
        self.tunnels: DomainTunnels | None = None
        self.sidecars: PodSidecars | None = None
        self.names = TopicNames()
        """The session's topic names (its prefix), known once the session is open."""
        self._stopping = asyncio.Event()
        self._renewal_wanted = asyncio.Event()
        """Set by a heartbeat the broker did not take: the session task opens a new session."""
        self._workers: dict[str, tuple[str, str]] = {}  # worker id → (job id, node)
        self._phases: dict[str, str] = {}  # worker id → latest phase, while not ended (for metrics)
        self._outputs: dict[str, tuple[str, ...]] = {}  # worker id → declared output paths
        self._headers: dict[str, str] = {}  # job id → header worker id (when the Header is here)
        self._creating: dict[str, asyncio.Task[None]] = {}
        self.progress = ProgressWatch()
        """The Headers with a progress deadline here, and when each last showed progress (stall detection)."""
        self._nodes_changed = asyncio.Event()
        """Set when a worker came or went: its node's allocation changed, report without waiting."""
        self._reported_nodes: list[NodeObservation] | None = None
        self._reported_services: tuple[str, ...] = ()
        self.ready = asyncio.Event()

    def stop(self) -> None:
        self._stopping.set()

    async def run(self) -> None:
        """Run until stopped; a new Kafka password (credential or internal secret rotated) restarts the
        agent's Kafka clients and loops with a fresh session, and so does a loop that failed (after a pause)."""
        delay = 1.0
        with AGENT_METRICS.watching(self):
            while True:
                started = time.monotonic()
                try:
                    await self._run_session()
                    return
                except _LoopFailed as exc:
                    # The process stays: ending it would leave the cluster silent while the pod restarts (with
                    # Kubernetes' growing back-off), and its jobs Lost (CI, 2026-12-07: a broker killed mid-burst).
                    self.ready.clear()
                    if self._stopping.is_set():
                        return
                    delay = 1.0 if time.monotonic() - started > 60 else delay
                    log.warning(
                        "an agent loop failed; starting a new session", loop=str(exc), retry_in_s=delay
                    )
                    await self._sleep(delay)
                    delay = min(delay * 2, LOOP_RETRY_MAX_S)
                except _KafkaLoginChanged:
                    log.warning("the agent's Kafka credential changed; restarting its Kafka clients")
                    self.ready.clear()
                except _LeaseLost as exc:
                    log.warning("cluster lease lost; this agent stops acting and stands by", reason=str(exc))
                    self.ready.clear()
                    self.lease = None
                    for known in (self._workers, self._phases, self._outputs, self._headers):
                        known.clear()

    def observed(self) -> AgentView | None:
        """What ``/metrics`` shows of this agent (``agent.metrics``); None before its session is open."""
        if not self.ready.is_set():
            return None
        counts: dict[str, int] = {}
        for phase in self._phases.values():
            counts[phase] = counts.get(phase, 0) + 1
        states = self.tunnels.supervisor.states() if self.tunnels is not None else []
        return AgentView(cluster=self.reports.cluster, tunnels=states, workers=counts)

    def _seen(self, status: rt.WorkerStatus) -> None:
        if status.phase.terminal:
            self._phases.pop(status.worker_id, None)
        else:
            self._phases[status.worker_id] = status.phase.value

    async def _run_session(self) -> None:
        opened = await self._open_with_retry()
        if opened is None:  # stopped before the control plane answered
            return
        structlog.contextvars.bind_contextvars(cluster=opened.cluster)
        leased = await self._await_lease(opened)
        if leased is None:  # stopped while standing by
            return
        session, self.lease = leased
        cluster = session.cluster
        self._state = AgentState(self._state_dir / f"{cluster}.json")
        producer = await create_producer(session.kafka_access(), f"agent-{cluster}")
        self.reports = ReportPublisher(producer, session, lease_epoch=self.lease.epoch)
        names = self.names = TopicNames(session.topic_prefix)
        consumer = AIOKafkaConsumer(
            names.for_cluster("scheduler.placements", cluster),
            names.for_cluster("inventory.commands", cluster),
            **session.kafka_access().client_options(),
            group_id=f"{session.topic_prefix}agent-{cluster}",
            enable_auto_commit=False,
            auto_offset_reset="earliest",
        )
        await consumer.start()
        consumers = [consumer]
        tasks: list[asyncio.Task[None]] = []
        await self._domain_network(cluster)
        # Its network-domain hooks given at construction: adopting a recorded worker may create its pod (and sidecar).
        self.driver = self._make_driver(
            cluster, self.tunnels if self.sidecars is None else None, self.sidecars
        )
        await self.driver.start()
        if self.tunnels is not None:
            # No consumer group, no committed offsets: every start reads both topics from their
            # beginning, so a restarted agent rebuilds the allocations and topologies its adopted
            # workers' domains need (netdomain.tunnels is compacted: the latest topology per domain;
            # netdomain.allocations is kept by time — the broker's retention, 7 days by default: a
            # job older than that whose allocation expired would lose its peers' routes here).
            tunnel_consumer = AIOKafkaConsumer(
                names.physical("netdomain.allocations"),
                names.physical("netdomain.tunnels"),
                **session.kafka_access().client_options(),
                group_id=None,
                enable_auto_commit=False,
                auto_offset_reset="earliest",
            )
            await tunnel_consumer.start()
            consumers.append(tunnel_consumer)
            tasks.append(asyncio.create_task(self._consume_tunnels(tunnel_consumer), name="tunnels"))
            tasks.append(asyncio.create_task(self._watch_links(), name="tunnel-links"))
        for worker_id in await self.driver.list_workers():
            status = await self.driver.get_status(worker_id)
            if status is not None:
                self._workers.setdefault(worker_id, (status.job_id, ""))
                self._seen(status)
        tasks += [
            asyncio.create_task(self._keep_lease(self.lease), name="lease"),
            asyncio.create_task(self._heartbeats(), name="heartbeat"),
            asyncio.create_task(self._keep_session(), name="session"),
            asyncio.create_task(self._observe(), name="observe"),
            asyncio.create_task(self._consume(consumer), name="desired-state"),
            asyncio.create_task(self._pump(), name="runtime-events"),
            asyncio.create_task(self._watch_progress(), name="progress"),
            asyncio.create_task(self.reports.run_log_flusher(), name="log-flusher"),
            asyncio.create_task(self._sample_usage(), name="usage"),
        ]
        endpoints = self.endpoints
        self.ssh_link = SshLink(
            self._gateway_url,
            lambda: self.reports.session.token,
            endpoints.ssh,
            endpoints.output_roots,
            {SERVICE_TENSORBOARD: endpoints.tensorboard, SERVICE_RAY_DASHBOARD: endpoints.ray_dashboard},
            files=endpoints.pod_files if self.driver.files_at is rt.FilesAt.WORKER_POD else None,
            max_download_bytes=self._max_download_bytes,
        )
        tasks.append(asyncio.create_task(self.ssh_link.run(self._stopping), name="ssh-link"))
        tasks.append(asyncio.create_task(self.tensorboards.reap(self._stopping), name="tensorboards"))
        log.info(
            "agent started", runtime=self._runtime, workers=len(self._workers), lease_epoch=self.lease.epoch
        )
        self.ready.set()
        try:
            waiter = asyncio.create_task(self._stopping.wait())
            done, _ = await asyncio.wait([waiter, *tasks], return_when=asyncio.FIRST_COMPLETED)
            waiter.cancel()
            for task in done:
                if task is not waiter and isinstance(task.exception(), _KafkaLoginChanged | _LeaseLost):
                    raise task.exception()  # type: ignore[misc]
                if task is not waiter and task.exception() is not None:
                    log.error("agent loop failed", loop=task.get_name(), error=repr(task.exception()))
                    raise _LoopFailed(task.get_name()) from task.exception()
        finally:
            self.reports.stop()
            for task in [*tasks, *self._creating.values()]:
                task.cancel()
            await asyncio.gather(*tasks, *self._creating.values(), return_exceptions=True)
            with contextlib.suppress(Exception):
                await self.reports.flush_logs()
            for started in consumers:
                await started.stop()
            if self.sidecars is not None:
                await self.sidecars.stop()
            if self.tunnels is not None:
                await self.tunnels.close()
            await producer.stop()
            await self.driver.close()
            if self._stopping.is_set():
                # A clean stop hands the cluster over at once; a Kafka restart keeps it (same holder, epoch).
                await self._release_lease()
            log.info("agent stopped")

    async def _await_lease(self, session: Session) -> tuple[Session, LeaseTerm] | None:
        """The cluster's lease for this process (with the session current when it was granted), standing by
        while another holds it; None once the agent is stopped."""
        said: tuple[str, int] | None = None
        delay = 1.0
        while not self._stopping.is_set():
            if session.needs_renewal():
                renewed = await self._open_with_retry(running=True)
                if renewed is None:
                    return None
                session = renewed
            asked_at = time.monotonic()
            try:
                answer = await self._take_lease(session.token, self.holder, False)
            except SessionRefused:  # the token predates a rotation: a new session, then ask again
                renewed = await self._open_with_retry(running=True)
                if renewed is None:
                    return None
                session = renewed
                continue
            except Exception as exc:  # the control plane is unreachable: no lease, so do nothing yet
                log.warning("cluster lease not asked; retrying", error=repr(exc), retry_in_s=delay)
                await self._sleep(delay)
                delay = min(delay * 2, 10.0)
                continue
            delay = 1.0
            if answer.held:
                self.standing_by.clear()
                log.info("cluster lease taken: this agent is active", holder=self.holder, epoch=answer.epoch)
                return session, LeaseTerm.granted(answer, asked_at)
            if said != (answer.holder, answer.epoch):
                said = (answer.holder, answer.epoch)
                log.info(
                    "standby: another agent holds the cluster's lease",
                    holder=self.holder,
                    active=answer.holder,
                    epoch=answer.epoch,
                    expires_in_s=round(answer.expires_in_s, 1),
                )
            self.standing_by.set()
            await self._sleep(poll_interval(answer))
        return None

    async def _keep_lease(self, term: LeaseTerm) -> None:
        """Renew the cluster's lease every third of its TTL; ``_LeaseLost`` once another holds it or it may
        have expired at the control plane before a renewal got through."""
        while not self._stopping.is_set():
            await self._sleep(max(0.1, term.renew_in(time.monotonic())))
            if self._stopping.is_set():
                return
            asked_at = time.monotonic()
            try:
                answer = await self._take_lease(self.reports.session.token, self.holder, False)
            except Exception as exc:
                if term.lapsed(time.monotonic()):
                    raise _LeaseLost(f"not renewed before it could expire ({exc!r})") from None
                log.warning("cluster lease not renewed yet; retrying", error=repr(exc))
                continue
            if not term.renewed(answer, asked_at):
                raise _LeaseLost(f"now held by {answer.holder} (epoch {answer.epoch})")

    async def _release_lease(self) -> None:
        """Give the cluster's lease up (a clean stop), so a standby takes over at its next poll."""
        if self.lease is None:
            return
        try:
            await self._take_lease(self.reports.session.token, self.holder, True)
            log.info("cluster lease released", holder=self.holder, epoch=self.lease.epoch)
        except Exception as exc:  # the standby takes over when the lease expires instead
            log.warning("cluster lease not released; it expires by itself", error=repr(exc))
        self.lease = None

    async def _open_with_retry(self, *, running: bool = False) -> Session | None:
        """A new session, retried while the control plane is unreachable; None once the agent is stopped.
        A refused credential ends the agent at its start (a wrong configuration); ``running``, it is said
        in the log and retried slowly, so an agent whose credential was rotated neither crashes in a loop
        nor hammers the gateway."""
        delay = 1.0
        while not self._stopping.is_set():
            try:
                return await self._open_session(self._gateway_url, self._credential)
            except SessionRefused as exc:
                if not running:
                    raise  # a wrong credential never becomes right by retrying
                delay = max(delay, 30.0)
                log.error(
                    "agent credential refused: it was rotated or the cluster deleted; install the "
                    "cluster's current credential (RLARK_AGENT_CREDENTIAL) and restart the agent",
                    error=str(exc),
                    retry_in_s=delay,
                )
                await self._sleep(delay)
                delay = min(delay * 2, REFUSED_RETRY_MAX_S)
            except Exception as exc:  # the gateway is down or starting: retry
                log.warning("control plane unreachable; retrying", error=str(exc), retry_in_s=delay)
                await self._sleep(delay)
                delay = min(delay * 2, 30)
        return None

    async def _renew_session(self) -> None:
        """Open a new session; if its Kafka credential is not the one in use, the clients restart."""
        session = await self._open_with_retry(running=True)
        if session is None:  # stopping
            return
        if session.kafka_access() != self.reports.session.kafka_access():
            raise _KafkaLoginChanged
        self.reports.session = session

    @property
    def endpoints(self) -> WorkerEndpoints:
        """Where the gateway's relays to this agent's workers go (``endpoints.py``), by the current driver."""
        return WorkerEndpoints(self.driver, self._workers, self.tensorboards, self._runtime)

    async def _domain_network(self, cluster: str) -> None:
        """What carries network domains' traffic on this runtime, when the agent runs tunnels: the agent's own
        tunnels, which give each local worker's namespace a TUN device; or, on Kubernetes, the pods' network
        sidecars the agent admits (``PodSidecars``, whose tunnels they are)."""
        if self._tunnel_options is None:
            return
        keys = self._durable(cluster) if self._durable is not None else None
        if self._runtime != KUBERNETES:
            self.tunnels = DomainTunnels(
                cluster, self._state_dir / cluster, self.reports.publish, self._tunnel_options, keys=keys
            )
        elif self._sidecar_options is not None:
            self.sidecars = PodSidecars(
                cluster,
                self._state_dir / cluster,
                self.reports.publish,
                self._tunnel_options,
                self._sidecar_options,
                token_key=token_key_from_credential(self._credential),
                keys=keys,
            )
            self.tunnels = self.sidecars.tunnels
            await self.sidecars.start()

    async def _sleep(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stopping.wait(), seconds)

    async def _heartbeats(self) -> None:
        """A heartbeat every interval, whatever the session task is doing: while the control plane is
        unreachable (a rolling restart) a renewal can take minutes, and a cluster silent for
        ``agent_timeout_s`` is called offline."""
        while not self._stopping.is_set():
            try:
                await self.reports.heartbeat(
                    self._runtime, AGENT_VERSION, self.driver.not_enforced, self.driver.unmountable
                )
            except KafkaError as exc:  # the broker refused our login (rotated?) or is down: ask the session
                log.warning("heartbeat not sent; asking for a new session", error=repr(exc))
                self._renewal_wanted.set()
            else:
                if self.tunnels is not None:
                    await self.tunnels.announce_all()
                    for report in self.tunnels.link_reports(refresh_after_s=LINK_REFRESH_S):
                        await self.reports.publish(report)
            await self._sleep(self._heartbeat_interval_s)

    async def _keep_session(self) -> None:
        """Open a new session before the token expires, and whenever a heartbeat was not taken (a new Kafka
        password restarts the clients: ``_KafkaLoginChanged``)."""
        while not self._stopping.is_set():
            if not self.reports.session.needs_renewal():
                waits = [asyncio.ensure_future(e.wait()) for e in (self._renewal_wanted, self._stopping)]
                await asyncio.wait(
                    waits, timeout=self._heartbeat_interval_s, return_when=asyncio.FIRST_COMPLETED
                )
                for waiting in waits:
                    waiting.cancel()
                if self._stopping.is_set() or not self._renewal_wanted.is_set():
                    continue
            self._renewal_wanted.clear()
            await self._renew_session()

    async def _watch_links(self) -> None:
        """Report each tunnel link's state change within about ``LINK_POLL_S``."""
        tunnels = self.tunnels
        assert tunnels is not None
        while not self._stopping.is_set():
            for report in tunnels.link_reports():
                await self.reports.publish(report)
            await self._sleep(LINK_POLL_S)

    async def report_nodes(self, *, only_changed: bool = False) -> bool:
        """Publish a complete node snapshot (with ``only_changed``, only when it differs from the last
        one published); True when one was published."""
        nodes = with_cordons(await self.driver.observe_nodes(), self._state.cordoned)
        services = await self.driver.observe_service_cidrs()
        if only_changed and (nodes, services) == (self._reported_nodes, self._reported_services):
            return False
        await self.reports.nodes(nodes, services)
        self._reported_nodes, self._reported_services = nodes, services
        return True

    async def _observe(self) -> None:
        """A snapshot every ``observe_interval_s``, and at once when the nodes changed: a worker came or
        went (its GPUs, allocated or freed, are news for every page that counts free GPUs), a pod
        RLark did not create started or ended, a node changed. Changes are looked for every
        ``NODE_POLL_S`` and right after a worker's status changed."""
        due = 0.0
        while not self._stopping.is_set():
            self._nodes_changed.clear()
            if time.monotonic() >= due:
                await self.report_nodes()
                due = time.monotonic() + self._observe_interval_s
            elif await self.report_nodes(only_changed=True):
                due = time.monotonic() + self._observe_interval_s
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._nodes_changed.wait(), NODE_POLL_S)

    async def _sample_usage(self) -> None:
        """Every ``usage_interval_s``, one ``WorkerUsageSampled`` for the live workers the runtime can measure
        (issue 19 item 1); nothing when the runtime measures no worker."""
        driver = self.driver
        while not self._stopping.is_set():
            try:
                samples = await driver.sample_usage()
            except Exception as exc:  # a runtime that cannot measure this round: jobs run on regardless
                log.warning("usage not sampled", error=repr(exc))
                samples = []
            if samples:
                try:
                    await self.reports.publish(
                        WorkerUsageSampled(cluster=self.reports.cluster, samples=samples)
                    )
                except KafkaError as exc:  # a sample is not worth a retry: the next round replaces it
                    log.warning("usage samples not sent", error=repr(exc))
            await self._sleep(self._usage_interval_s)

    async def _consume(self, consumer: AIOKafkaConsumer) -> None:
        cluster = self.reports.cluster
        while not self._stopping.is_set():
            batches = await consumer.getmany(timeout_ms=500, max_records=200)
            for records in batches.values():
                for record in records:
                    await self._desired(record.value, cluster, record.topic)
            if batches:
                await consumer.commit()

    async def _consume_tunnels(self, consumer: AIOKafkaConsumer) -> None:
        """Allocations and topologies (with the peers' verified endpoints), in order, into
        ``self.tunnels``. The netdomain service publishes these topics (agents may not: ADR 0001's
        ACLs) and took each endpoint only from the announcing cluster's own report topic (ADR 0003, 0004)."""
        tunnels = self.tunnels
        assert tunnels is not None
        while not self._stopping.is_set():
            batches = await consumer.getmany(timeout_ms=500, max_records=500)
            for records in batches.values():
                for record in records:
                    try:
                        envelope = decode(record.value)
                        if not envelope.known or self._foreign(record.topic, envelope):
                            continue
                        payload = envelope.payload()
                    except Exception as exc:
                        log.warning("undecodable tunnel record skipped", error=type(exc).__name__)
                        continue
                    await self.on_tunnel_event(tunnels, payload)

    async def on_tunnel_event(self, tunnels: DomainTunnels, payload: object) -> None:
        """One decoded record of ``netdomain.allocations`` or ``netdomain.tunnels`` (others are ignored)."""
        if isinstance(payload, AddressesAllocated):
            await tunnels.on_allocated(payload)
            addresses = {a.worker_id: a.address for a in payload.addresses}
            await self.driver.learn_addresses(payload.job_id, addresses)
        elif isinstance(payload, AddressesReleased):
            await tunnels.on_released(payload)
            self.driver.forget_addresses(payload.job_id)
        elif isinstance(payload, TunnelTopologyChanged):
            await tunnels.on_topology(payload)

    def _foreign(self, topic: str, envelope: Envelope) -> bool:
        """True (and logged) for an event whose source is not its topic's producer (ADR 0004): the
        broker lets only the producer write there, so it was forged or misrouted; it is not acted on."""
        foreign = self.names.foreign_source(topic, envelope.source)
        if foreign:
            log.warning("event from a foreign source skipped", event_id=envelope.id, error=foreign)
        return foreign is not None

    async def _desired(self, raw: bytes, cluster: str, topic: str) -> None:
        try:
            envelope = decode(raw)
            if not envelope.known or self._foreign(topic, envelope):
                CONSUMED.labels(cluster, "skipped").inc()
                return
            payload = envelope.payload()
        except Exception as exc:  # someone else's garbage on a shared topic: skip it, loudly
            log.warning("undecodable desired-state record skipped", error=type(exc).__name__)
            CONSUMED.labels(cluster, "undecodable").inc()
            return
        CONSUMED.labels(cluster, "handled").inc()
        if isinstance(payload, WorkerPlaced) and payload.cluster == cluster:
            self._on_placed(payload)
        elif isinstance(payload, WorkerStopRequested) and payload.cluster == cluster:
            await self._on_stop(payload)
        elif isinstance(payload, JobKeysUpdated) and cluster in payload.clusters:
            for worker_id in payload.worker_ids:
                if worker_id in self._workers:
                    await self.driver.update_authorized_keys(worker_id, payload.ssh_public_keys)
                    log.info(
                        "authorized keys updated", worker_id=worker_id, keys=len(payload.ssh_public_keys)
                    )
        elif isinstance(payload, NodeCordonRequested) and payload.cluster == cluster:
            (self._state.cordoned.add if payload.cordoned else self._state.cordoned.discard)(payload.node)
            self._state.save()
            await self.report_nodes()

    def _on_placed(self, placed: WorkerPlaced) -> None:
        if placed.is_header:
            self._headers[placed.job_id] = placed.worker_id
        if placed.worker_id in self._state.stopped or placed.worker_id in self._creating:
            return
        if self.tunnels is not None:
            self.tunnels.placed(placed)
        self._workers[placed.worker_id] = (placed.job_id, placed.node)
        self._outputs[placed.worker_id] = tuple(placed.outputs)
        if placed.is_header:
            self.progress.watch(placed.worker_id, placed.job_id, placed.node, placed.progress_deadline_s)
        task = asyncio.create_task(self._create(placed), name=f"create {placed.worker_id}")
        self._creating[placed.worker_id] = task
        task.add_done_callback(lambda _: self._creating.pop(placed.worker_id, None))

    async def _create(self, placed: WorkerPlaced) -> None:
        """Create the worker. What the runtime refuses for now (an API error, a missing namespace) is
        retried with backoff and shown as the worker's reason, until the join deadline fails it: the
        placement's offset is already committed, so dropping the error here would lose the worker."""
        deadline = time.monotonic() + placed.join_deadline_s
        delay = 1.0
        try:
            header_address = placed.header_address
            if not placed.is_header and not header_address:
                header_address = await self._header_address(placed)
            spec = to_worker_spec(placed, header_address)
            # A redelivered placement of a Header that exists already is not looked at again: its report would
            # say a choice that is not the one it runs with.
            resuming = placed.is_header and bool(placed.resume_checkpoints_dir)
            while True:
                try:
                    if not spec.ray_authenticated and await self.driver.get_status(placed.worker_id) is None:
                        # Credentials first: a resume directory in a bucket is read with the mount's secret.
                        spec = await self._with_credentials(spec)
                        if resuming:
                            spec = await self._resume(placed, spec)
                    await self.driver.ensure_worker(spec)
                    break
                except CredentialsRefused as exc:
                    if exc.status == 409:  # its attempt is over: there is nothing to create
                        log.info("worker not created: its attempt is over", worker_id=placed.worker_id)
                        return
                    raise
                except (UnsupportedPlacement, ValueError):
                    raise
                except Exception as exc:
                    error = (str(exc).splitlines() or [type(exc).__name__])[0][:500]
                    if self._stopping.is_set():
                        return  # stopping the agent is not the worker's failure
                    if time.monotonic() + delay > deadline:
                        raise WorkerNotCreated(f"the runtime could not create the worker: {error}") from exc
                    log.warning(
                        "worker not created yet", worker_id=placed.worker_id, error=error, retry_in_s=delay
                    )
                    await self._report_waiting(placed, f"not created yet ({error}); retrying")
                    await self._sleep(delay)
                    delay = min(delay * 2, 30.0)
            log.info("worker ensured", worker_id=placed.worker_id, job_id=placed.job_id, node=placed.node)
        except (UnsupportedPlacement, HeaderUnavailable, WorkerNotCreated, ValueError) as exc:
            await self._report_failure(placed, str(exc))

    async def _with_credentials(self, spec: rt.WorkerSpec) -> rt.WorkerSpec:
        """The spec with the worker's Ray token and its named secrets' values, fetched now (ADR 0022, 0025);
        never logged."""
        fetched = await self._fetch_credentials(spec.worker_id)
        missing = set(spec.secrets) - set(fetched.secrets)
        if missing:
            raise CredentialsRefused(
                404, f"the control plane sent no value for the secrets {sorted(missing)}"
            )
        values = {name: fetched.secrets[name] for name in spec.secrets}
        return spec.model_copy(
            update={"ray_token": fetched.ray_token, "ray_authenticated": True, "secret_values": values}
        )

    async def _resume(self, placed: WorkerPlaced, spec: rt.WorkerSpec) -> rt.WorkerSpec:
        """The Header's spec with the checkpoint its attempt resumes from (ADR 0015): the newest complete one
        where the Header will find `spec.resume.dir`, said on the timeline as the worker's reason (chosen step,
        half-written ones skipped, or a fresh start) before the worker is created."""
        where = placed.resume_checkpoints_dir
        spec = spec.model_copy(update={"resume_checkpoints_dir": where})
        search = None
        place = buckets.bucket_location(spec, where)
        if place is not None:
            # In a bucket: read over the S3 API with the mount's own credentials (the mount does not exist yet).
            try:
                listed = await asyncio.to_thread(lambda: list(buckets.list_below(place)))
                search = checkpoints.find_in_listing(listed)
            except buckets.BucketUnreadable as exc:
                log.warning("resume bucket unreadable", worker_id=placed.worker_id, error=str(exc))
        elif (location := self.driver.output_location(spec, where)) is not None:
            search = await asyncio.to_thread(checkpoints.find_in, location)
        reason = checkpoints.said(search, where)
        log.info("resume checkpoint looked up", worker_id=placed.worker_id, reason=str(reason))
        await self._report_waiting(placed, reason)
        if search is None or search.chosen is None:
            return spec
        return spec.model_copy(update={"resume_dir": f"{where.rstrip('/')}/{search.chosen}"})

    async def _header_address(self, placed: WorkerPlaced) -> str:
        """The Header's address when the scheduler could not know it (no network domain: its pod's IP, a local
        worker's address)."""
        deadline = time.monotonic() + placed.join_deadline_s
        while time.monotonic() < deadline and not self._stopping.is_set():
            header = self._headers.get(placed.job_id)
            if header is not None:
                status = await self.driver.get_status(header)
                if status is not None and status.address:
                    return status.address
                if status is not None and status.phase.terminal:
                    raise HeaderUnavailable(f"the Header {header} ended before this worker could join")
            await self._sleep(0.2)
        raise HeaderUnavailable(
            "the Header's address is unknown here: it runs in another cluster and the job has no network "
            "domain"
            if placed.job_id not in self._headers
            else "the Header did not get an address in time"
        )

    async def _report_failure(self, placed: WorkerPlaced, reason: str) -> None:
        log.warning("worker refused", worker_id=placed.worker_id, reason=reason)
        status = rt.WorkerStatus(
            worker_id=placed.worker_id,
            job_id=placed.job_id,
            phase=rt.WorkerPhase.FAILED,
            exit_code=None,
            reason=reason,
        )
        await self.reports.status(status, placed.job_id, placed.node)

    async def _report_waiting(self, placed: WorkerPlaced, reason: str) -> None:
        status = rt.WorkerStatus(
            worker_id=placed.worker_id, job_id=placed.job_id, phase=rt.WorkerPhase.CREATED
        )
        # model_copy keeps a catalogue Text (validation would make it a plain str), so it travels keyed.
        await self.reports.status(status.model_copy(update={"reason": reason}), placed.job_id, placed.node)

    async def _on_stop(self, stop: WorkerStopRequested) -> None:
        self.progress.forget(stop.worker_id)
        self._state.stopped.add(stop.worker_id)
        self._state.save()
        task = self._creating.pop(stop.worker_id, None)
        if task is not None:
            task.cancel()
        await self.driver.stop_worker(stop.worker_id)
        log.info("worker stopped", worker_id=stop.worker_id, reason=stop.reason)

    async def _pump(self) -> None:
        async for event in self.driver.events():
            if isinstance(event, rt.WorkerStatusChanged):
                job_id, node = self._workers.get(event.status.worker_id, (event.status.job_id, ""))
                await self.reports.status(event.status, job_id, node)
                self._seen(event.status)
                if event.status.phase.terminal:
                    self.progress.forget(event.status.worker_id)
                self._nodes_changed.set()
            elif isinstance(event, rt.WorkerLogLine):
                job_id, _ = self._workers.get(event.worker_id, ("", ""))
                self.reports.add_log(job_id, event)
                self.progress.output(event.worker_id, event.text, time.monotonic())
            elif isinstance(event, rt.WorkerMarkerSeen):
                if isinstance(event.marker, RunStarted):
                    self.progress.run_started(event.worker_id, time.monotonic())
                elif isinstance(event.marker, TensorBoardStep):
                    self.progress.step(event.worker_id, event.marker.step, time.monotonic())
                await self._marker(event.worker_id, event.marker)
            if self._stopping.is_set():
                return

    async def _watch_progress(self) -> None:
        """Report a Header silent past its job's progress deadline as Failed (``Stalled``), then stop it: the
        scheduler restarts or ends the job (ADR 0014); the worker must not keep its GPUs meanwhile."""
        while not self._stopping.is_set():
            await self._sleep(self.progress.poll_s())
            for stall in self.progress.overdue(time.monotonic()):
                log.warning("worker stalled", worker_id=stall.worker_id, reason=str(stall.reason))
                status = rt.WorkerStatus(
                    worker_id=stall.worker_id, job_id=stall.job_id, phase=rt.WorkerPhase.FAILED
                )
                # model_copy keeps the catalogue Text (validation would make it a plain str).
                await self.reports.status(
                    status.model_copy(update={"reason": stall.reason}), stall.job_id, stall.node
                )
                await self.driver.stop_worker(stall.worker_id)

    async def _marker(self, worker_id: str, marker: Marker) -> None:
        if not isinstance(marker, OutputManifest):
            return
        job_id, _ = self._workers.get(worker_id, ("", ""))
        # The runtime lists files under its own paths (the local runtime keeps a worker's "/outputs" in its
        # directory); report them under the paths the job declared, in the same order.
        declared = dict(zip(marker.outputs, self._outputs.get(worker_id, ()), strict=False))
        files = [
            {"path": f"{declared.get(f.output, f.output).rstrip('/')}/{f.path}", "size": f.size}
            for f in marker.files
        ]
        await self.reports.outputs(job_id, worker_id, files, marker.truncated)


class HeaderUnavailable(RuntimeError):
    pass


class WorkerNotCreated(RuntimeError):
    """The runtime kept refusing to create a worker until its join deadline."""
