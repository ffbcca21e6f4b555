"""Tunnel health: agents' reports on a network domain's links, and the rules that judge the jobs of
a domain with a link down (``domain.tunnels``): the outage named in the job's reason, the job failed
after ``tunnel_grace_s``, the reason cleared when the link is back up."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import structlog
from rlark_contracts.events.agent import LINK_CLOSED, TunnelStateChanged
from rlark_platform.db.pool import Connection
from rlark_platform.messaging import PoisonMessage

from rlark_scheduler.domain.document.model import RestartOn
from rlark_scheduler.domain.restarts import Failure
from rlark_scheduler.domain.tunnels import Action, LinkObservation, decide, job_outage
from rlark_scheduler.envelopes import Meta
from rlark_scheduler.handlers.lifecycle import fail_job
from rlark_scheduler.repository import changes as changes_repo
from rlark_scheduler.repository import jobs as jobs_repo
from rlark_scheduler.repository import timeline as timeline_repo
from rlark_scheduler.repository import tunnels as tunnels_repo
from rlark_scheduler.repository import workers as workers_repo
from rlark_scheduler.repository.jobs import JobRow
from rlark_scheduler.settings import SchedulerSettings

log = structlog.get_logger(__name__)


async def apply_tunnel_state(
    conn: Connection, payload: TunnelStateChanged, meta: Meta, settings: SchedulerSettings, now: datetime
) -> None:
    """Store an agent's report on one link of a domain, then judge the domain's jobs (see
    ``domain.tunnels``). The report's time is the agent's, capped at ours. Its round trip is also kept for
    the pair of clusters, after the link closes too: the placer prefers the best measured links (ADR 0026)."""
    if not payload.domain or not payload.peer or payload.peer == payload.cluster:
        raise PoisonMessage("a tunnel state report names a domain and a peer other than its cluster")
    if payload.state == LINK_CLOSED:  # no workers of the domain on that side any more: forget the link
        stored = await tunnels_repo.delete_tunnel_link(
            conn, payload.domain, payload.cluster, payload.peer, min(payload.at, now)
        )
    else:
        stored = await tunnels_repo.upsert_tunnel_link(
            conn,
            domain=payload.domain,
            cluster=payload.cluster,
            peer=payload.peer,
            up=payload.state == "up",
            last_error=payload.last_error[:500],
            rtt_ms=payload.rtt_ms,
            bytes_sent=max(payload.bytes_sent, 0),
            bytes_received=max(payload.bytes_received, 0),
            at=min(payload.at, now),
        )
    if payload.rtt_ms is not None and payload.rtt_ms >= 0 and payload.state != LINK_CLOSED:
        measured = await tunnels_repo.record_round_trip(
            conn, payload.cluster, payload.peer, payload.rtt_ms, min(payload.at, now)
        )
        if measured:  # the placer prefers the best measured links (ADR 0026)
            await changes_repo.add_change(conn, changes_repo.LINKS, f"{payload.cluster}/{payload.peer}")
    if stored:
        await judge_tunnels(conn, payload.domain, settings, now, meta)


async def judge_tunnels(
    conn: Connection, domain: str | None, settings: SchedulerSettings, now: datetime, meta: Meta
) -> int:
    """Apply the tunnel rules to the Starting/Running jobs concerned (of ``domain``, or of every
    domain: the placement loop calls this each cycle so a grace ends on time without a new report).
    Returns how many jobs changed."""
    changed = 0
    links: dict[str, list[LinkObservation]] = {}
    for job_id in await tunnels_repo.tunnel_judged_jobs(conn, domain):
        job = await jobs_repo.get_job(conn, job_id, for_update=True)
        if job is None or not job.network_domain:
            continue
        if job.network_domain not in links:
            links[job.network_domain] = await tunnels_repo.tunnel_links(conn, job.network_domain)
        clusters = {w.facts.cluster for w in await workers_repo.workers_of(conn, job.id)}
        outage = job_outage(job.network_domain, clusters, links[job.network_domain], job.scheduled_at)
        stored = await tunnels_repo.tunnel_reason(conn, job.id)
        shown = stored if stored is not None and stored == job.reason else None
        decision = decide(job.status, shown, outage, now, settings.tunnel_grace_s)
        details: dict[str, Any] = {}
        if outage is not None:
            details = {
                "domain": outage.domain,
                "clusters": [outage.a, outage.b],
                "down_since": outage.since.isoformat(),
                "last_error": outage.last_error,
                "grace_s": settings.tunnel_grace_s,
            }
        if decision.action is Action.FAIL:
            failure = Failure(RestartOn.TUNNEL_DOWN, decision.reason)
            await fail_job(
                conn, job, failure, now, meta, teardown_s=settings.restart_teardown_s, details=details
            )
        elif decision.action is Action.MARK:
            await tunnels_repo.mark_tunnel_reason(conn, job.id, decision.reason, now)
            await _tunnel_event(conn, job, decision.reason, now, details)
        elif outage is None and stored is not None:
            shown_now = await tunnels_repo.clear_tunnel_reason(conn, job.id, now)
            details = {"tunnel_up": True, "cleared": stored}
            await _tunnel_event(conn, job, shown_now, now, details)
        else:
            continue
        changed += 1
        log.info("tunnel health applied", job_id=job.id, action=decision.action.value)
    return changed


async def _tunnel_event(
    conn: Connection, job: JobRow, reason: str, now: datetime, details: dict[str, Any]
) -> None:
    """A timeline row of kind 'tunnel' that keeps the status (like the 'pending' reason updates)."""
    await timeline_repo.insert_event(
        conn,
        job.id,
        "tunnel",
        at=now,
        from_status=job.status.value,
        to_status=job.status.value,
        reason=reason,
        details=details,
    )
    await changes_repo.notify_activity(conn, job.id)
