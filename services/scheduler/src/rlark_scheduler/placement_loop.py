"""The placement loop: the worker part that owns the capacity model and places queued jobs.

Concurrency model
-----------------
- **One leader, fenced.** Every worker process runs a loop, but only the one holding the lease
  ``scheduler.placement`` (``rlark_platform.db.leader``: an epoch per lease, renewed well inside
  ``leader_lease_ttl_s``) acts; the others stand by and retry. Every write the leader makes —
  each placement's commit, pending reasons, tunnel judgements, deleting the change rows it read —
  checks its epoch in the same transaction (``Lease.fence``). A leader that stalled between its
  decision and its commit (a pause, SIGSTOP, a partition) while a standby took over has its commit
  refused (``LeaseLost``) and steps down, so two processes never hand out the same GPUs.
- **The database is the truth; the model is a cache the leader keeps in step.** At start (and
  after any doubt: lost connection, failed commit) the leader rebuilds the whole
  :class:`CapacityModel` and :class:`JobQueue` from the tables: nodes with the GPUs of RLark
  workers present on them, offline clusters, the allocations of every job that holds capacity
  (Scheduled, Starting, Running), and the Pending jobs.
- **Changes reach the model through ``capacity_changes``.** Consumer handlers and API requests
  change tables and, in the same transaction, insert a row naming what changed (a node, a cluster,
  a job) and NOTIFY ``scheduler_changes``. The leader LISTENs, reads the rows present, re-reads the
  *current* state of what they name, applies it to the model, and deletes exactly the rows it read.
  A change committed meanwhile keeps its row for the next pass, and re-reading current state makes
  applying a change twice harmless — the same shape as the outbox relay. A full rebuild deletes
  every row *before* loading, so nothing committed after the load is lost.
- **Placements commit in batches** (up to ``PLACEMENT_BATCH`` jobs per transaction, a few statements per
  batch), guarded by the lease's epoch and by each job still being Pending (``SELECT ... FOR UPDATE``): a
  job cancelled meanwhile is not placed and its capacity goes back to the model at once. A commit that
  fails for any other reason triggers a rebuild, so the model never keeps an allocation the database does
  not have.
- Releases need no special path: a job that ends or goes back to Pending queues a job change, and
  applying it releases the job's allocation in the model (and re-queues a Pending job) and re-reads
  the nodes its workers were on (their pods count as others' usage until the cluster drops them).
- Pending reasons are written only when they change (``JobQueue.take_reason_changes``), so a round
  that changes nothing writes nothing.

Each cycle also applies the tunnel rules (``handlers.tunnels.judge_tunnels``) and the offline-cluster rule
(``handlers.state.judge_offline_clusters``), so a job whose domain link stays down, or whose cluster stays
offline, fails when its grace ends, within about ``placement_poll_s``.

Projects and quotas (ADR 0020): the leader keeps every project's quota in memory, read at rebuild and
again whenever a quota write queues a ``quotas`` change, and the facts of every job it holds or queues
(project, priority, when its attempt was placed). While no project has a quota a round is
``queue.schedule_round``; otherwise ``queue.fair_round``, after which each job it left waiting for capacity
may preempt borrowers (``domain.preemption``): the plan is committed like a placement, fenced, and the job
is not planned for again until its victims had their grace and teardown (``_preempting``).

Placement by need (ADR 0026): the model also holds what the placer chooses clusters by — every cluster's
facts (re-read with its ``cluster`` change), the network domains and the clusters each joins (a ``domains``
change re-reads them all) and the round trips measured between clusters (a ``links`` change, queued when one
moves by a fifth or more, re-reads them all; they change preferences, never whether a job fits, so they
re-try no job).

Wake-ups: a NOTIFY (new job, node change, job ended ...), the earliest ``JobRow.not_before`` of a
held job (waiting for network addresses, or a restart's backoff and teardown, ADR 0014), or a fallback
poll (``placement_poll_s``).
"""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import structlog
from rlark_platform.db import LeaseLost, transaction
from rlark_platform.db.leader import LeaderLoop
from rlark_platform.db.pool import Connection

from rlark_scheduler.domain.capacity import NO_FACTS as NO_CLUSTER_FACTS
from rlark_scheduler.domain.capacity import CapacityModel
from rlark_scheduler.domain.document.model import JobDocument
from rlark_scheduler.domain.fairness import ProjectJob, project_usage
from rlark_scheduler.domain.jobs import JobStatus, job_request
from rlark_scheduler.domain.placement import JobRequest, Placement
from rlark_scheduler.domain.preemption import Preemption, RunningJob, plan_preemption
from rlark_scheduler.domain.queue import JobQueue, fair_round, schedule_round
from rlark_scheduler.domain.quotas import ProjectId, ProjectQuota
from rlark_scheduler.envelopes import Meta
from rlark_scheduler.handlers.placement import commit_placements, store_pending_reasons
from rlark_scheduler.handlers.preemption import preempt
from rlark_scheduler.handlers.state import judge_offline_clusters
from rlark_scheduler.handlers.tunnels import judge_tunnels
from rlark_scheduler.repository import changes as changes_repo
from rlark_scheduler.repository import jobs as jobs_repo
from rlark_scheduler.repository import projects as projects_repo
from rlark_scheduler.repository import read_models
from rlark_scheduler.repository import tunnels as tunnels_repo
from rlark_scheduler.repository import workers as workers_repo
from rlark_scheduler.repository.capacity import capacity_model, capacity_node
from rlark_scheduler.repository.jobs import JobFacts, JobRow
from rlark_scheduler.settings import SchedulerSettings

log = structlog.get_logger(__name__)

LEASE_NAME = "scheduler.placement"
CHANGE_BATCH = 5000
PLACEMENT_BATCH = 64
"""Placements stored per fenced transaction: a burst's round trips shared, a transaction kept short."""
MAX_PREEMPTIONS_PER_ROUND = 8
"""Waiting jobs a round plans preemptions for (in queue order); the others are looked at in later rounds."""
NO_FACTS = JobFacts("", 0, 0, None)


class PlacementLoop(LeaderLoop):
    """Runs rounds of gang placement whenever capacity or the queue changes (see the module doc)."""

    def __init__(self, pool: asyncpg.Pool, settings: SchedulerSettings) -> None:
        super().__init__(
            pool, lease_name=LEASE_NAME, channel=changes_repo.CHANGES_CHANNEL, name="placement loop",
            poll_interval_s=settings.placement_poll_s, lease_ttl_s=settings.leader_lease_ttl_s,
        )  # fmt: skip
        self._settings = settings
        self.model = CapacityModel()
        self.queue = JobQueue()
        self._held: dict[str, tuple[datetime, JobRequest]] = {}
        self.quotas: dict[str, ProjectQuota] = {}
        self.quota_epoch = 0
        self._facts: dict[str, JobFacts] = {}
        """Every job held in the model or queued: its project, priority, order, when it was placed."""
        self.preemptions: list[Preemption] = []
        """The last round's plans, committed by ``commit``."""
        self._preempting: dict[str, datetime] = {}
        """Waiting jobs whose victims are stopping, until when they are not planned for again."""
        self._stale = True
        self.rounds = 0

    async def _lead(self, conn: Connection) -> None:
        self._stale = True
        while not self._stopping.is_set():
            self._wake.clear()
            # The LISTEN lives on this session: a dead one ends leading (and the loop starts again).
            await conn.fetchval("SELECT 1")
            await self.cycle()
            await self._sleep(self._next_timeout())

    async def _stepped_down(self) -> None:
        # Whatever this process believed may be stale now: the next time it leads it starts afresh.
        self._stale = True

    def _next_timeout(self) -> float:
        timeout = self._settings.placement_poll_s
        if self._held:
            earliest = min(until for until, _ in self._held.values())
            timeout = min(timeout, max((earliest - datetime.now(UTC)).total_seconds(), 0.01))
        return timeout

    # -- one cycle -------------------------------------------------------------------------------

    async def cycle(self) -> list[Placement]:
        """Bring the model up to date, run one round, commit its placements and changed reasons."""
        return await self.commit(await self.decide())

    async def decide(self) -> list[Placement]:
        """Bring the model up to date and run one round: the placements it decided (not yet stored)."""
        async with self._pool.acquire() as conn:
            if self._stale:
                await self._rebuild(conn)
            else:
                while await self._apply_changes(conn) == CHANGE_BATCH:
                    pass
        now = datetime.now(UTC)
        self._release_expired_holds(now)
        self.preemptions = []
        if not self.quotas:
            return schedule_round(self.model, self.queue)
        running = {
            job_id: self._facts.get(job_id, NO_FACTS).project for job_id in self.model.allocated_jobs()
        }
        placements = fair_round(self.model, self.queue, running, self.quotas, self.quota_epoch)
        self.preemptions = self._plan_preemptions(now)
        return placements

    def _plan_preemptions(self, now: datetime) -> list[Preemption]:
        """Plans for the jobs the round left waiting for capacity (not for quota), queue order first."""
        self._preempting = {
            j: until for j, until in self._preempting.items() if until > now and j in self.queue
        }
        waiting = [
            request
            for job_id in self.queue.retried
            if job_id not in self._preempting
            and (reason := self.queue.reason(job_id)) is not None
            and reason.quota is None
            and (request := self.queue.request(job_id)) is not None
        ]
        if not waiting:
            return []
        running = []
        for job_id in self.model.allocated_jobs():
            facts = self._facts.get(job_id, NO_FACTS)
            lost = (now - facts.placed_at).total_seconds() if facts.placed_at else 0.0
            running.append(
                RunningJob(job_id, ProjectId(facts.project), facts.priority, facts.submitted_seq, lost)
            )
        usage = project_usage(self.model, {r.job_id: r.project for r in running})
        plans: list[Preemption] = []
        protected: set[str] = set()
        for request in waiting[:MAX_PREEMPTIONS_PER_ROUND]:
            job = ProjectJob(request, ProjectId(request.project))
            plan = plan_preemption(self.model, job, running, self.quotas, usage, protected=protected)
            if plan is not None:
                plans.append(plan)
                protected.update(plan.victims)
        return plans

    async def commit(self, placements: list[Placement]) -> list[Placement]:
        """Store ``placements`` up to ``PLACEMENT_BATCH`` jobs per fenced transaction, then the changed
        pending reasons and the tunnel rules; ``LeaseLost`` when another process leads now (nothing more
        is written)."""
        committed: list[Placement] = []
        for start in range(0, len(placements), PLACEMENT_BATCH):
            batch = placements[start : start + PLACEMENT_BATCH]
            try:
                async with transaction(self._pool) as conn:
                    await self.lease.fence(conn)
                    placed = await commit_placements(conn, batch, self._settings, datetime.now(UTC))
            except LeaseLost:
                log.error("placements refused: no longer the leader", jobs=len(batch))
                self._stale = True
                raise
            except Exception as exc:
                # The model may now hold what the database does not: rebuild before anything else.
                log.error(
                    "placement commit failed; rebuilding", job_ids=[p.job_id for p in batch], error=repr(exc)
                )
                self._stale = True
                self._wake.set()
                return committed
            placed_at = datetime.now(UTC)
            for placement in batch:
                if placement.job_id not in placed:
                    self.model.release(placement.job_id)
                    continue
                committed.append(placement)
                facts = self._facts.get(placement.job_id, NO_FACTS)
                self._facts[placement.job_id] = dataclasses.replace(facts, placed_at=placed_at)
                log.info("job placed", job_id=placement.job_id, workers=len(placement.workers))
        changes = self.queue.take_reason_changes()
        if changes:
            async with transaction(self._pool) as conn:
                await self.lease.fence(conn)
                reasons = [(job_id, reason, self.queue.rounds_waited(job_id)) for job_id, reason in changes]
                await store_pending_reasons(conn, reasons, datetime.now(UTC))
        for plan in self.preemptions:
            now = datetime.now(UTC)
            try:
                async with transaction(self._pool) as conn:
                    await self.lease.fence(conn)
                    grace = await preempt(conn, plan, now, self._settings.restart_teardown_s)
            except LeaseLost:
                self._stale = True
                raise
            except Exception as exc:
                # Nothing of this plan was stored: the next round plans again from what the tables say.
                log.error("preemption failed; rebuilding", job_id=plan.job_id, error=repr(exc))
                self._stale = True
                self._wake.set()
                break
            if grace is not None:
                wait = grace + self._settings.restart_teardown_s * 2
                self._preempting[plan.job_id] = now + timedelta(seconds=wait)
        self.preemptions = []
        async with transaction(self._pool) as conn:
            await self.lease.fence(conn)
            # A tunnel down or a cluster offline past its grace fails its jobs without a new event.
            await judge_tunnels(conn, None, self._settings, datetime.now(UTC), Meta())
            await judge_offline_clusters(conn, self._settings, datetime.now(UTC), Meta())
        self.rounds += 1
        return committed

    # -- keeping the model in step ---------------------------------------------------------------

    async def _rebuild(self, conn: Any) -> None:
        async with conn.transaction():
            await self.lease.fence(conn)
            await changes_repo.clear_changes(conn)
        model = await capacity_model(conn)
        self.model, self.queue, self._held = model, JobQueue(), {}
        self._facts = await jobs_repo.holding_facts(conn)
        await self._load_quotas(conn)
        for job in await jobs_repo.jobs_with_status(conn, [JobStatus.PENDING]):
            self._enqueue(job)
        self._stale = False
        log.info(
            "capacity model rebuilt",
            nodes=sum(1 for _ in model.nodes()),
            allocated_jobs=len(model.allocated_jobs()),
            queued=len(self.queue),
            held=len(self._held),
            quotas=len(self.quotas),
        )

    async def _load_quotas(self, conn: Any) -> None:
        self.quotas = {row.name: row.quota for row in await projects_repo.list_projects(conn)}
        self.quota_epoch += 1

    async def _apply_changes(self, conn: Any) -> int:
        changes = await changes_repo.pending_changes(conn, CHANGE_BATCH)
        if not changes:
            return 0
        nodes = {tuple(c.key.split("/", 1)) for c in changes if c.kind == "node" and "/" in c.key}
        clusters = {c.key for c in changes if c.kind == "cluster"}
        jobs = {c.key for c in changes if c.kind == "job"}
        if any(c.kind == "all" for c in changes):
            self._stale = True
            await self._rebuild(conn)
            return 0
        if any(c.kind == changes_repo.QUOTAS for c in changes):
            await self._load_quotas(conn)
        if any(c.kind == changes_repo.DOMAINS for c in changes):
            self.model.set_domains(await read_models.domain_clusters(conn))
        if any(c.kind == changes_repo.LINKS for c in changes):
            for (a, b), rtt in (await tunnels_repo.round_trips(conn)).items():
                self.model.set_round_trip(a, b, rtt)
        if clusters:
            offline = set(await read_models.offline_clusters(conn))
            for cluster in clusters:
                self.model.set_cluster_online(cluster, cluster not in offline)
            facts = await read_models.cluster_facts(conn, sorted(clusters))
            for cluster in clusters:
                self.model.set_cluster_facts(cluster, facts.get(cluster, NO_CLUSTER_FACTS))
            for node in await read_models.nodes_of_clusters(conn, sorted(clusters)):
                self.model.upsert_node(capacity_node(node))
        if nodes:
            keys = sorted((k[0], k[1]) for k in nodes)
            for node in await read_models.nodes_by_key(conn, keys):
                self.model.upsert_node(capacity_node(node))
        if jobs:
            rows = {job.id: job for job in await jobs_repo.get_jobs(conn, sorted(jobs))}
            held = (
                await workers_repo.allocations(conn)
                if any(r.status.holds_capacity and not self.model.held(r.id) for r in rows.values())
                else {}
            )
            for job_id in sorted(jobs):
                self._apply_job(job_id, rows.get(job_id), held)
            # A job that ended no longer discounts its workers from the cluster's own figure: until
            # the cluster reports their pods gone, their GPUs count as used by others.
            for node in await read_models.nodes_of_jobs(conn, sorted(jobs)):
                self.model.upsert_node(capacity_node(node))
        async with conn.transaction():
            await self.lease.fence(conn)
            await changes_repo.delete_changes(conn, [c.id for c in changes])
        return len(changes)

    def _apply_job(
        self, job_id: str, job: JobRow | None, held: dict[str, list[tuple[tuple[str, str], int]]]
    ) -> None:
        if job is None or job.status is not JobStatus.PENDING:
            self.queue.remove(job_id)
            self._held.pop(job_id, None)
        if job is None or job.status.terminal:
            self.model.release(job_id)
            self._facts.pop(job_id, None)
            return
        self._facts[job_id] = job.facts
        if job.status.holds_capacity:
            if not self.model.held(job_id) and job_id in held:
                self.model.allocate(job_id, held[job_id])
            return
        # Pending: it holds nothing (back from Scheduled, or new) and waits in the queue.
        self.model.release(job_id)
        if job_id not in self.queue and job_id not in self._held:
            self._enqueue(job)
        elif job_id in self._held and self._held[job_id][0] != job.not_before:
            self._held.pop(job_id)  # its hold was lifted or moved: judged again
            self._enqueue(job)

    def _enqueue(self, job: JobRow) -> None:
        self._facts[job.id] = job.facts
        try:
            request = job_request(job.id, JobDocument.model_validate(job.spec).spec, job.submitted_seq)
        except (ValueError, AssertionError) as exc:
            log.error("stored job cannot be queued", job_id=job.id, error=str(exc))
            return
        not_before = job.not_before
        if not_before is not None and not_before > datetime.now(UTC):
            self._held[job.id] = (not_before, request)
        elif job.id not in self.queue:
            self.queue.push(request)

    def _release_expired_holds(self, now: datetime) -> None:
        for job_id, (until, request) in list(self._held.items()):
            if until <= now:
                del self._held[job_id]
                if job_id not in self.queue:
                    self.queue.push(request)
