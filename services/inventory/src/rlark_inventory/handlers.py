"""Use cases of the inventory: load, decide (domain), write state and outbox events in one transaction.

HTTP-facing use cases take the pool and open their own transaction; consumer-facing ones take the
connection the consumer opened (the inbox claim shares it). None of them does network I/O inside a
transaction: events leave through the outbox relay.

Events are published only when state changed: a heartbeat that only moves ``last_seen`` and an
observation that repeats what is known write the database but add nothing to the outbox.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import structlog
from pydantic import BaseModel
from rlark_contracts import Envelope, new_envelope
from rlark_contracts.events.agent import HeartbeatSent, NodesObserved, WorkerStatusChanged
from rlark_contracts.events.inventory import (
    ClusterDeleted,
    ClusterRegistered,
    ClusterUpdated,
    ClusterWentOffline,
    ClusterWentOnline,
    NodeCordonRequested,
    NodeGone,
    NodeState,
    NodeUpdated,
)
from rlark_contracts.messages import text
from rlark_contracts.registry import type_of
from rlark_platform.db import transaction
from rlark_platform.db.pool import Connection
from rlark_platform.errors import ApiError, conflict, invalid, not_found
from rlark_platform.identity import Caller, IdentityError, agent_token_claims, issue_agent_token
from rlark_platform.messaging import PoisonMessage, add_events

from rlark_inventory import repository as repo
from rlark_inventory.domain import credentials, health
from rlark_inventory.domain.clusters import ClusterSpec, validate_spec
from rlark_inventory.domain.errors import InvalidInput
from rlark_inventory.domain.nodes import (
    MatchedNode,
    MatchSummary,
    NodeDocument,
    changed,
    match_summary,
    node_document,
)
from rlark_inventory.domain.workers import is_active

log = structlog.get_logger(__name__)

SOURCE = "inventory"


def _envelope(data: BaseModel, subject: str, causation: Envelope | None = None) -> Envelope:
    return new_envelope(
        data,
        source=SOURCE,
        subject=subject,
        correlation_id=causation.correlation_id if causation else None,
        causation_id=causation.id if causation else None,
    )


def _cluster_event(
    kind: type[BaseModel], row: repo.ClusterRow, causation: Envelope | None = None
) -> Envelope:
    state = row.state(deleted=kind is ClusterDeleted)
    return _envelope(kind.model_validate(state.model_dump()), row.name, causation)


def _node_event(kind: type[NodeState], doc: NodeDocument, causation: Envelope | None = None) -> Envelope:
    """A node event built straight from a node document: ingest makes one per changed node, so it
    skips the document → model → dict round trip ``new_envelope`` would take (the document has exactly
    the fields of ``NodeState``, which every node event carries)."""
    data = {**doc, "observed_at": doc["observed_at"].isoformat() if doc["observed_at"] else None}
    if kind is NodeGone:
        data["gone"] = True
    return Envelope(
        id=str(uuid.uuid4()),
        type=type_of(kind),
        source=SOURCE,
        subject=f"{doc['cluster']}/{doc['name']}",
        time=datetime.now(UTC),
        correlation_id=causation.correlation_id if causation else None,
        causation_id=causation.id if causation else None,
        data=data,
    )


def _validated(spec: ClusterSpec) -> ClusterSpec:
    try:
        return validate_spec(spec)
    except InvalidInput as exc:
        raise invalid(exc.code, exc.message, exc.field) from None


# ------------------------------------------------------------------------------------ clusters (admin)


@dataclass(frozen=True)
class WithCredential:
    """A cluster and its agent credential in clear text: returned once, never stored or logged."""

    cluster: repo.ClusterRow
    credential: str


async def register_cluster(pool: asyncpg.Pool, spec: ClusterSpec, caller: Caller) -> WithCredential:
    spec = _validated(spec)
    credential = credentials.new_credential()
    digest = credentials.hash_credential(credential)
    async with transaction(pool) as conn:
        row = await repo.insert_cluster(conn, spec, digest, caller.user)
        if row is None:
            raise conflict("cluster_exists", text("cluster_exists", name=repr(spec.name)), "name")
        await add_events(conn, [_cluster_event(ClusterRegistered, row)])
    log.info("cluster registered", cluster=spec.name, credential=credentials.fingerprint(digest))
    return WithCredential(row, credential)


async def update_cluster(pool: asyncpg.Pool, name: str, changes: dict[str, Any]) -> repo.ClusterRow:
    """Apply the given fields (others unchanged); publish ``cluster.updated`` only when something changed."""
    async with transaction(pool) as conn:
        current = await repo.get_cluster(conn, name, for_update=True)
        if current is None:
            raise not_found("cluster", name)
        fields = dict(changes)
        for key in ("pod_cidrs", "service_cidrs", "hostpath_allow"):
            if key in fields:
                fields[key] = tuple(fields[key])
        spec = _validated(replace(current.spec, **fields))
        if spec == current.spec:
            return current
        row = await repo.update_cluster_spec(conn, spec)
        await add_events(conn, [_cluster_event(ClusterUpdated, row)])
    log.info("cluster updated", cluster=name, fields=sorted(changes))
    return row


async def delete_cluster(
    pool: asyncpg.Pool, name: str, revoke: Callable[[str], Awaitable[None]] | None = None
) -> None:
    """Delete a cluster with nothing running on it; its nodes are published as gone first. ``revoke``
    removes its agent's Kafka login and ACLs (ADR 0004) once the checks pass and before the row goes:
    if the broker refuses, nothing is deleted and the admin can try again."""
    async with transaction(pool) as conn:
        current = await repo.get_cluster(conn, name, for_update=True)
        if current is None:
            raise not_found("cluster", name)
        # The row lock above also holds back reports for this cluster (they lock it FOR KEY SHARE),
        # so no worker or node can appear between this check and the delete.
        running = await repo.active_worker_count(conn, name)
        if running:
            raise conflict(
                "cluster_in_use",
                text("cluster_in_use", workers=running, name=repr(name)),
            )
        nodes = await repo.live_node_documents(conn, name)
        events = [_node_event(NodeGone, doc) for doc in nodes]
        events.append(_cluster_event(ClusterDeleted, current))
        await add_events(conn, events)
        if revoke is not None:
            await revoke(name)
        await repo.delete_cluster(conn, name)
    log.info("cluster deleted", cluster=name, nodes=len(nodes))


AgentProvisioner = Callable[[str, str], Awaitable[str]]
"""``(cluster, epoch) -> Kafka password``: provisions the cluster's agent principal on the broker with
the password of that credential epoch (``rlark_platform.messaging.provision.provision_agent``)."""


async def rotate_credential(pool: asyncpg.Pool, name: str, provision: AgentProvisioner) -> WithCredential:
    """Replace the agent credential: the old one opens no new session (tokens already issued expire),
    and the agent principal's Kafka password becomes the new epoch's, so the old host's Kafka login is
    refused from now on (and its open connections end at the broker's reauthentication interval).

    The broker changes first, under the cluster's agent lock and outside any transaction: if it cannot be
    reached nothing changed and the rotation can be retried. Should the database then fail, the old
    credential is still the stored one and its next session provisions its own password back.
    """
    credential = credentials.new_credential()
    digest = credentials.hash_credential(credential)
    async with pool.acquire() as conn, repo.agent_kafka_lock(conn, name):
        if not await repo.cluster_exists(conn, name):
            raise not_found("cluster", name)
        await provision(name, credentials.kafka_epoch(digest))
        async with conn.transaction():
            row = await repo.set_credential(conn, name, digest)
    if row is None:  # deleted between the check and the update
        raise not_found("cluster", name)
    log.info("agent credential rotated", cluster=name, credential=credentials.fingerprint(digest))
    return WithCredential(row, credential)


# -------------------------------------------------------------------------------------- agent sessions


@dataclass(frozen=True)
class AgentSession:
    cluster: str
    token: str
    expires_at: datetime
    kafka_password: str = field(repr=False)


def _refused() -> ApiError:
    return ApiError(401, "invalid_credential", text("invalid_credential"))


async def open_agent_session(
    pool: asyncpg.Pool, credential: str, *, internal_secret: str, ttl_s: int, provision: AgentProvisioner
) -> AgentSession:
    """Trade a cluster's agent credential for a short-lived agent token and the Kafka password of the
    credential's epoch, provisioned before it is handed out (ADR 0004). Never logs either secret.

    Under the cluster's agent lock the credential is looked up again: a rotation that finished while this
    session waited made it stale, and provisioning its epoch then would give the old host its Kafka
    password back."""
    if not credentials.plausible(credential):
        log.warning("agent session refused", reason="malformed credential")
        raise _refused()
    digest = credentials.hash_credential(credential)
    async with pool.acquire() as conn:
        found = await repo.credential_hash_of(conn, digest)
        # The lookup is by hash, so its timing says nothing about the secret; the constant-time
        # comparison keeps the final check independent of where two hashes differ.
        if found is None or not credentials.matches(credential, found.credential_hash):
            log.warning("agent session refused", reason="unknown credential")
            raise _refused()
        cluster = found.cluster
        async with repo.agent_kafka_lock(conn, cluster):
            current = await repo.credential_hash_of(conn, digest)
            if current is None:
                log.warning("agent session refused", cluster=cluster, reason="credential rotated meanwhile")
                raise _refused()
            kafka_password = await provision(cluster, credentials.kafka_epoch(digest))
            await repo.record_session(conn, cluster)
    now = datetime.now(UTC)
    # Bound to this credential: the gateway refuses the token once the credential is rotated (or deleted).
    token = issue_agent_token(
        internal_secret, cluster, current.credential_rotated_at, ttl_s, now=now.timestamp()
    )
    log.info("agent session opened", cluster=cluster, credential=credentials.fingerprint(digest))
    return AgentSession(cluster, token, now + timedelta(seconds=ttl_s), kafka_password)


async def agent_lease(
    pool: asyncpg.Pool, token: str, holder: str, *, internal_secret: str, ttl_s: float, release: bool = False
) -> repo.LeaseGrant:
    """Take, renew or (``release``) end the lease of the cluster the agent token names, for the agent
    process ``holder`` (ADR 0018). The token must be genuine, unexpired and issued under the cluster's
    current credential, so a host whose credential was rotated away cannot take its cluster back."""
    try:
        claims = agent_token_claims(internal_secret, token)
    except IdentityError as exc:
        log.warning("agent lease refused", reason=str(exc))
        raise _refused() from None
    async with pool.acquire() as conn:
        cluster = await repo.get_cluster(conn, claims.cluster)
        if cluster is None or not claims.issued_under(cluster.credential_rotated_at):
            log.warning(
                "agent lease refused", cluster=claims.cluster, reason="credential rotated or cluster gone"
            )
            raise _refused()
        if not release:
            return await repo.take_agent_lease(conn, claims.cluster, holder, ttl_s)
        released = await repo.release_agent_lease(conn, claims.cluster, holder)
        log.info("agent lease released", cluster=claims.cluster, holder=holder, released=released)
        found = await repo.agent_lease_of(conn, claims.cluster, holder)
    return found if found is not None else repo.LeaseGrant(claims.cluster, False, "", 0, 0.0)


# ------------------------------------------------------------------------------------- cordon (admin)


async def request_cordon(
    pool: asyncpg.Pool, cluster: str, node: str, cordoned: bool, caller: Caller
) -> repo.NodeRow:
    """Ask the cluster's agent to (un)cordon a node. The node's ``schedulable`` changes only when the
    agent reports it; until then ``cordon_requested`` holds the wish (cleared if it is already true)."""
    async with transaction(pool) as conn:
        row = await repo.get_node(conn, cluster, node, for_update=True)
        if row is None:
            if not await repo.cluster_exists(conn, cluster):
                raise not_found("cluster", cluster)
            raise not_found("node", f"{cluster}/{node}")
        if row.state.gone:
            raise conflict("node_gone", text("node_gone", node=repr(node), cluster=repr(cluster)))
        pending = cordoned if cordoned == row.state.schedulable else None
        await repo.set_cordon_requested(conn, cluster, node, pending)
        command = NodeCordonRequested(cluster=cluster, node=node, cordoned=cordoned, requested_by=caller.user)
        await add_events(conn, [_envelope(command, cluster)])
        updated = await repo.get_node(conn, cluster, node)
        assert updated is not None
    log.info("cordon requested", cluster=cluster, node=node, cordoned=cordoned)
    return updated


# ------------------------------------------------------------------------------------ agent reports


@dataclass(frozen=True)
class ObservationResult:
    nodes: int
    changed: int
    gone: int


async def _require_cluster(conn: Connection, cluster: str) -> None:
    if not await repo.lock_cluster_for_ingest(conn, cluster):
        raise PoisonMessage(f"cluster {cluster!r} is not registered")


async def apply_observation(
    conn: Connection, envelope: Envelope, report: NodesObserved, now: datetime
) -> ObservationResult:
    """Fold a node snapshot into the nodes table; events only for nodes that changed or went gone."""
    cluster = report.cluster
    await _require_cluster(conn, cluster)
    observed_at = min(report.observed_at, now)
    latest = {obs.name: obs for obs in report.nodes}  # a name listed twice: the last entry wins
    names = list(latest)
    known = await repo.node_documents(conn, cluster, None if report.complete else names)
    docs = [node_document(cluster, obs, observed_at) for obs in latest.values()]
    fresh = [d for d in docs if changed(known.get(d["name"]), d)]
    fresh_names = {d["name"] for d in fresh}
    await repo.upsert_nodes(conn, cluster, fresh, observed_at)
    await repo.touch_nodes(conn, cluster, [n for n in names if n not in fresh_names], observed_at)
    gone = await repo.mark_gone(conn, cluster, names, observed_at) if report.complete else []
    events = [_node_event(NodeUpdated, d, envelope) for d in fresh]
    events += [_node_event(NodeGone, d, envelope) for d in gone]
    await add_events(conn, events)
    return ObservationResult(nodes=len(names), changed=len(fresh), gone=len(gone))


async def apply_heartbeat(
    conn: Connection, envelope: Envelope, beat: HeartbeatSent, now: datetime, timeout_s: float
) -> bool:
    """Advance the cluster's ``last_seen``; return True when this heartbeat brought it online."""
    fresh = health.is_fresh(beat.sent_at, now, timeout_s)
    result = await repo.record_heartbeat(
        conn,
        beat.cluster,
        health.seen_at(beat.sent_at, now),
        beat.agent_version,
        bring_online=fresh,
        not_enforced=beat.not_enforced,
        unmountable=beat.unmountable,
    )
    if result is None:
        raise PoisonMessage(f"cluster {beat.cluster!r} is not registered")
    before, after = result
    if after.online and not before.online:
        await add_events(conn, [_cluster_event(ClusterWentOnline, after, envelope)])
        log.info("cluster went online", cluster=beat.cluster)
        return True
    if after.unmountable != before.unmountable:
        # What the cluster can mount changed (its agent's settings): the scheduler judges mounts by it.
        await add_events(conn, [_cluster_event(ClusterUpdated, after, envelope)])
    return False


async def apply_worker_status(conn: Connection, report: WorkerStatusChanged) -> None:
    await _require_cluster(conn, report.cluster)
    await repo.upsert_worker(
        conn,
        cluster=report.cluster,
        worker_id=report.worker_id,
        job_id=report.job_id,
        node=report.node,
        phase=report.phase,
        active=is_active(report.phase),
        reported_at=report.at,
    )


async def sweep(pool: asyncpg.Pool, *, timeout_s: float, worker_retention_s: float) -> list[str]:
    """Mark clusters whose heartbeats stopped offline (one event each); purge old finished workers."""
    now = datetime.now(UTC)
    async with transaction(pool) as conn:
        offline = await repo.mark_offline(conn, health.offline_before(now, timeout_s))
        await add_events(conn, [_cluster_event(ClusterWentOffline, row) for row in offline])
        await repo.purge_inactive_workers(conn, now - timedelta(seconds=worker_retention_s))
    for row in offline:
        log.warning("cluster went offline", cluster=row.name, last_seen=row.last_seen)
    return [row.name for row in offline]


# ------------------------------------------------------------------------------------------- queries


@dataclass(frozen=True)
class Match:
    cluster_online: bool
    selector: dict[str, str]
    gpus: int
    summary: MatchSummary
    nodes: list[MatchedNode]


async def match(pool: asyncpg.Pool, cluster: str, selector: dict[str, str], gpus: int) -> Match:
    async with pool.acquire() as conn:
        row = await repo.get_cluster(conn, cluster)
        if row is None:
            raise not_found("cluster", cluster)
        total = await repo.cluster_node_count(conn, cluster)
        matched = await repo.matching_nodes(conn, cluster, selector)
    return Match(row.online, selector, gpus, match_summary(total, matched, gpus), matched)
