"""Pending reasons: why a job cannot be placed, in exact counts and one English sentence.

Role: the product rule "a job is never silently stuck" (ARCHITECTURE §5). For every role the
reason carries the funnel of the role's cluster — nodes in it, matching the selector, ready,
schedulable, with enough free GPUs — against what the role needs, whether the cluster is offline
or unknown, a machine-readable code and a sentence such as::

    role "rollout" needs 4 nodes with ≥ 8 free GPUs matching rlark.io/gpu-model=A100 in cluster
    gpu-b: 6 match, 5 ready, 5 schedulable, 2 with enough free GPUs; GPUs in use on those 5
    schedulable nodes: 24 of 40 (8 by workloads RLark did not place, 16 by RLark jobs)

When the GPUs fall short, the sentence names who uses them: workloads RLark did not place (pods
RLark did not create, as the agent reports them) and RLark's own jobs.

When a role cannot fit where it asked but would fit right now on another online cluster (that
role alone, same selector and GPUs), the reason says so — the user decides whether to move it.
When every role fits alone but roles of one cluster compete for the same nodes (one worker of a
job per node), the reason names the competing roles and the exact shortfall, found as the Hall
violator of a maximum matching: "cannot place" is always a proof, never a greedy artefact.

``can_ever_fit`` asks the same question of an idealised cluster — every node ready, uncordoned
and empty, offline clusters included — and is used to refuse a job at submit time that no amount
of waiting would place.

Counts are exact for the job's own clusters at the model version they were computed at;
suggestions about other clusters are advisory and refreshed whenever the job is re-tried.

A job whose clusters the placer chooses (ADR 0026) gets the funnels of the *closest* cluster — the one
that could take the most of its workers now — with ``no_cluster_fits`` as its code, and a note on what
spanning would change (:class:`SpanNote`): with ``spanClusters: never``, the clusters and domain that would
place it now; when spanning is allowed but no network domain it may use joins the clusters that would
hold it, those clusters.

Languages (ADR 0011): ``message`` is the English sentence above; :func:`pending_texts` says the same
as catalogue sentences (``pending.*`` keys with their counts as parameters), one per clause, which
clients render in the user's language and join with that language's separator; :func:`pending_view`
is a reason as JSON (a Pending job's ``pending`` column, and the details of a refusal).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any

from rlark_contracts.messages import Text, text

from rlark_scheduler.domain.capacity import CapacityModel, Survey
from rlark_scheduler.domain.document.model import SpanClusters
from rlark_scheduler.domain.placement import (
    Demand,
    JobRequest,
    Layout,
    Placement,
    RoleRequest,
    match_workers,
    place,
    role_clusters,
    span_choice,
)
from rlark_scheduler.domain.quotas import Breach
from rlark_scheduler.domain.selectors import LabelSelector, format_selector

MAX_SUGGESTIONS_IN_TEXT = 3


class PendingCode(StrEnum):
    """Why a role (or a job) cannot be placed; the first stage of the funnel that falls short."""

    FITS = "fits"
    CLUSTER_UNKNOWN = "cluster_unknown"
    CLUSTER_OFFLINE = "cluster_offline"
    TOO_FEW_MATCHING_NODES = "too_few_matching_nodes"
    TOO_FEW_READY_NODES = "too_few_ready_nodes"
    TOO_FEW_SCHEDULABLE_NODES = "too_few_schedulable_nodes"
    TOO_FEW_NODES_WITH_GPUS = "too_few_nodes_with_enough_gpus"
    ROLES_COMPETE_FOR_NODES = "roles_compete_for_nodes"
    QUOTA = "quota"
    """Its project would go beyond its GPU quota, and may not borrow (ADR 0020)."""
    BORROWING_LIMIT = "borrowing_limit"
    """Its project would go beyond its GPU quota plus borrowing limit (ADR 0020)."""
    NO_CLUSTER_FITS = "no_cluster_fits"
    """The placer chooses its clusters (ADR 0026) and no cluster, nor clusters it may span, hold it now."""
    NO_CLUSTER_ALLOWED = "no_cluster_allowed"
    """A role whose cluster the placer chooses may use no cluster with nodes (ADR 0026)."""


class SpanCode(StrEnum):
    """What spanning clusters would change for a job that does not fit (ADR 0026)."""

    REFUSED = "span_refused"
    """It would be placed now across ``clusters`` through ``domain``, but it says ``spanClusters: never``."""
    NO_DOMAIN = "span_no_domain"
    """It would fit across ``clusters``, but no network domain it may use joins them."""


@dataclass(frozen=True, slots=True)
class SpanNote:
    """What spanning would change: ``code`` with the clusters that would hold the job and the domain."""

    code: SpanCode
    clusters: tuple[str, ...]
    domain: str | None = None


@dataclass(frozen=True, slots=True)
class Alternative:
    """Another online cluster on which the role alone would fit now, with its qualifying nodes."""

    cluster: str
    nodes: int


@dataclass(frozen=True, slots=True)
class RoleReason:
    """The funnel of one role's cluster against the role's needs (see :class:`Survey`)."""

    role: str
    cluster: str
    selector: LabelSelector
    needed: int
    gpus_per_worker: int
    cluster_known: bool
    cluster_online: bool
    hypothetical: bool
    in_cluster: int
    matching: int
    ready: int
    schedulable: int
    enough: int
    code: PendingCode
    alternatives: tuple[Alternative, ...]
    message: str
    gpus_allocatable: int = 0
    """Over the schedulable matching nodes (see :class:`Survey`): allocatable GPUs, ..."""
    gpus_used_external: int = 0
    """... those used by workloads RLark did not place, ..."""
    gpus_held: int = 0
    """... and those RLark's jobs hold."""

    @property
    def fits_alone(self) -> bool:
        return self.code is PendingCode.FITS


@dataclass(frozen=True, slots=True)
class GangConflict:
    """Roles of one cluster that each fit alone but together want more distinct nodes than exist
    for them: ``needed`` workers, only ``nodes`` nodes suit any of these roles."""

    cluster: str
    roles: tuple[str, ...]
    needed: int
    nodes: int
    message: str


@dataclass(frozen=True, slots=True)
class QuotaShortfall:
    """A job kept back by its project's bound (``fairness.Waiting``): in ``breach.scope`` the project
    holds ``breach.used`` GPUs, the job asks ``breach.requested`` more, the bound is ``breach.limit``."""

    project: str
    breach: Breach

    @property
    def total(self) -> int:
        return self.breach.used + self.breach.requested


@dataclass(frozen=True, slots=True)
class PendingReason:
    """Why a job is not placed: one :class:`RoleReason` per role (request order), the gang
    conflicts, the job-level code (first failing role's, else the conflict's) and a message.
    A job kept back by its project's quota has no role funnels, its ``quota`` says why instead."""

    job_id: str
    code: PendingCode
    roles: tuple[RoleReason, ...]
    conflicts: tuple[GangConflict, ...]
    message: str
    quota: QuotaShortfall | None = None
    closest: str = ""
    """For a job whose clusters the placer chooses: the cluster that could take the most of its workers."""
    placed: int = 0
    """... how many of them it could take, of ``workers``."""
    workers: int = 0
    span: SpanNote | None = None
    """What spanning would change (ADR 0026)."""
    layout: Layout | None = None
    """When it fits (``code`` FITS): the layout the placer would choose now."""

    @property
    def fits(self) -> bool:
        return self.code is PendingCode.FITS


def explain_pending(model: CapacityModel, job: JobRequest) -> PendingReason:
    """The exact reason ``job`` cannot be placed on ``model`` now (``code`` FITS when it can)."""
    return _explain(model, job, hypothetical=False)


def quota_pending(job: JobRequest, code: PendingCode, shortfall: QuotaShortfall) -> PendingReason:
    """A job kept back by its project's quota (``code`` QUOTA) or quota + borrowing limit (BORROWING_LIMIT),
    e.g. 'project "vision" would hold 24 GPU(s) in cluster gpu-a, beyond its quota of 16 (it holds 8, this
    job asks 16); the project may not borrow' (the English of :func:`quota_text`)."""
    if code not in (PendingCode.QUOTA, PendingCode.BORROWING_LIMIT):
        raise ValueError(f"not a quota code: {code}")
    message = quota_text(code, shortfall).english
    return PendingReason(job.job_id, code, (), (), message, quota=shortfall)


def can_ever_fit(model: CapacityModel, job: JobRequest) -> tuple[bool, PendingReason | None]:
    """Could ``job`` ever be placed, if every node were ready, uncordoned and empty?

    Only non-gone nodes, their labels and their allocatable GPUs count; offline clusters count as
    they would be once back. Returns ``(True, None)`` or ``(False, reason)``.
    """
    reason = _explain(model, job, hypothetical=True)
    return (True, None) if reason.fits else (False, reason)


def _explain(model: CapacityModel, job: JobRequest, *, hypothetical: bool) -> PendingReason:
    if not job.named:
        # Memoised by shape and names (many queued jobs come from one template), until the model changes.
        key = ("explain", job.shape, tuple(r.name for r in job.roles), job.header_role, hypothetical)
        said = model.remember(key, lambda: _explain_chosen(model, job, hypothetical=hypothetical))
        return said if said.job_id == job.job_id else replace(said, job_id=job.job_id)
    surveys = [
        model.survey(role.cluster, role.selector, role.gpus_per_worker, hypothetical=hypothetical)
        for role in job.roles
    ]
    roles = tuple(_role_reason(model, role, survey) for role, survey in zip(job.roles, surveys, strict=True))

    conflicts: list[GangConflict] = []
    by_cluster: dict[str, list[int]] = {}
    for i, reason in enumerate(roles):
        if reason.fits_alone:
            by_cluster.setdefault(reason.cluster, []).append(i)
    for cluster in sorted(by_cluster):
        members = by_cluster[cluster]
        if len(members) < 2:
            continue
        demands = [Demand(job.roles[i].replicas, surveys[i].candidates) for i in members]
        matching = match_workers(demands, exhaustive=True)
        if not matching.short:
            continue
        tight = [members[k] for k in matching.tight]
        names = tuple(job.roles[i].name for i in tight)
        quoted = _and_list([f'"{name}"' for name in names])
        needed = sum(job.roles[i].replicas for i in tight)
        nodes = len({name for i in tight for name in surveys[i].candidates})
        conflicts.append(
            GangConflict(
                cluster=cluster,
                roles=names,
                needed=needed,
                nodes=nodes,
                message=(
                    f"roles {quoted} "
                    f"compete for the same nodes in cluster {cluster}: together they need "
                    f"{_nodes(needed)}, only {nodes} suit any of them "
                    f"(one worker of a job per node)"
                ),
            )
        )

    failing = [reason for reason in roles if not reason.fits_alone]
    if failing:
        code = failing[0].code
    elif conflicts:
        code = PendingCode.ROLES_COMPETE_FOR_NODES
    else:
        code = PendingCode.FITS
    parts = [reason.message for reason in failing]
    if conflicts and not failing:
        parts.append("every role fits alone, but " + conflicts[0].message)
        parts.extend(conflict.message for conflict in conflicts[1:])
    else:
        parts.extend(conflict.message for conflict in conflicts)
    message = "every worker of the job fits" if code is PendingCode.FITS else "; ".join(parts)
    return PendingReason(job.job_id, code, roles, tuple(conflicts), message)


def _explain_chosen(model: CapacityModel, job: JobRequest, *, hypothetical: bool) -> PendingReason:
    """The reason of a job whose clusters the placer chooses (see the module docstring)."""
    placed = place(model, job, hypothetical=hypothetical)
    if isinstance(placed, Placement):
        return PendingReason(
            job.job_id, PendingCode.FITS, (), (), "every worker of the job fits", layout=placed.layout
        )
    options = [role_clusters(model, role) for role in job.roles]
    nowhere = [role.name for role, found in zip(job.roles, options, strict=True) if not found]
    if nowhere:
        names = _and_list([f'"{name}"' for name in nowhere])
        message = (
            f"no cluster with nodes is one role {names} may use (its clusters, cluster selector and mounts)"
        )
        return PendingReason(
            job.job_id, PendingCode.NO_CLUSTER_ALLOWED, (), (), message, workers=job.worker_count
        )
    common = set(options[0]).intersection(*options[1:])
    closest, took = _closest(model, job, common or set().union(*options), hypothetical)
    # Each role is explained on the closest cluster, or, when it may not go there, on its own best one.
    where = tuple(
        replace(
            role,
            cluster=closest if closest in found else _roomiest(model, role, found, hypothetical),
            clusters=(),
            cluster_selector={},
            mounts=(),
        )
        for role, found in zip(job.roles, options, strict=True)
    )
    pinned = _explain(model, replace(job, roles=where), hypothetical=hypothetical)
    roles = tuple(
        replace(reason, alternatives=(), message=_no_alternatives(reason)) for reason in pinned.roles
    )
    note = _span_note(model, job, hypothetical)
    workers = job.worker_count
    head = (
        "no cluster could ever hold the whole job" if hypothetical else "no cluster fits the whole job now"
    ) + f"; closest: {closest} ({took} of {workers} workers)"
    failing = [r.message for r in roles if not r.fits_alone]
    conflicts = [c.message for c in pinned.conflicts]
    if conflicts and not failing:
        conflicts[0] = "every role fits alone, but " + conflicts[0]
    parts = [head, *failing, *conflicts]
    if note is not None:
        parts.append(span_sentence(note))
    return PendingReason(
        job.job_id,
        PendingCode.NO_CLUSTER_FITS,
        roles,
        pinned.conflicts,
        "; ".join(parts),
        closest=closest,
        placed=took,
        workers=workers,
        span=note,
    )


def _closest(
    model: CapacityModel, job: JobRequest, clusters: set[str], hypothetical: bool
) -> tuple[str, int]:
    """The cluster of ``clusters`` that could take the most of the job's workers (exact), and how many. Clusters
    are matched in the order of what they could take at most (each role's candidates, all of them; then by
    name), and no further once none left could take more than the best: on a tie, the first in that order."""
    asks: dict[str, list[Demand]] = {}
    bounds: list[tuple[int, str]] = []
    for cluster in sorted(clusters):
        demands = [
            Demand(
                role.replicas,
                model.survey(
                    cluster, role.selector, role.gpus_per_worker, hypothetical=hypothetical
                ).candidates,
            )
            for role in job.roles
        ]
        asks[cluster] = demands
        every = len({name for demand in demands for name in demand.candidates})
        most = min(sum(min(d.replicas, len(d.candidates)) for d in demands), every)
        bounds.append((-most, cluster))
    best = ("", -1)
    for negative, cluster in sorted(bounds):
        if -negative <= best[1]:
            break
        took = match_workers(asks[cluster], exhaustive=True).matched
        if took > best[1]:
            best = (cluster, took)
    return best[0], max(best[1], 0)


def _roomiest(model: CapacityModel, role: RoleRequest, clusters: Sequence[str], hypothetical: bool) -> str:
    """The cluster of ``clusters`` with the most candidate nodes for ``role`` (the first by name on a tie)."""
    return max(
        sorted(clusters),
        key=lambda c: len(
            model.survey(c, role.selector, role.gpus_per_worker, hypothetical=hypothetical).candidates
        ),
    )


def _no_alternatives(reason: RoleReason) -> str:
    """A role's sentence without the clusters it would fit on: the placer tries them all itself."""
    return reason.message.split("; would fit now on cluster", 1)[0]


def _span_note(model: CapacityModel, job: JobRequest, hypothetical: bool) -> SpanNote | None:
    """What spanning would change for a job the placer places nowhere (ADR 0026)."""
    if job.span is SpanClusters.NEVER:
        layout = span_choice(model, job, hypothetical=hypothetical)
        if layout is not None:
            return SpanNote(SpanCode.REFUSED, tuple(sorted(layout.clusters)), layout.domain)
        return None
    layout = span_choice(model, job, any_domain=True, hypothetical=hypothetical)
    if layout is not None:
        return SpanNote(SpanCode.NO_DOMAIN, tuple(sorted(layout.clusters)))
    return None


def span_sentence(note: SpanNote) -> str:
    """What spanning would change, in English (:func:`span_text` in every language)."""
    clusters = ", ".join(note.clusters)
    if note.code is SpanCode.REFUSED:
        return (
            f"spanning {clusters} through network domain {note.domain} would place it now "
            "(spec.placement.spanClusters is never)"
        )
    return f"across {clusters} it would fit now, but no network domain the job may use joins them"


def _role_reason(model: CapacityModel, role: RoleRequest, survey: Survey) -> RoleReason:
    needed = role.replicas
    if not survey.known:
        code = PendingCode.CLUSTER_UNKNOWN
    elif not survey.online and not survey.hypothetical:
        code = PendingCode.CLUSTER_OFFLINE
    elif survey.matching < needed:
        code = PendingCode.TOO_FEW_MATCHING_NODES
    elif survey.ready < needed:
        code = PendingCode.TOO_FEW_READY_NODES
    elif survey.schedulable < needed:
        code = PendingCode.TOO_FEW_SCHEDULABLE_NODES
    elif survey.enough < needed:
        code = PendingCode.TOO_FEW_NODES_WITH_GPUS
    else:
        code = PendingCode.FITS

    alternatives: tuple[Alternative, ...] = ()
    if code is not PendingCode.FITS and not survey.hypothetical:
        alternatives = _alternatives(model, role)
    return RoleReason(
        role=role.name,
        cluster=role.cluster,
        selector=role.selector,
        needed=needed,
        gpus_per_worker=role.gpus_per_worker,
        cluster_known=survey.known,
        cluster_online=survey.online,
        hypothetical=survey.hypothetical,
        in_cluster=survey.in_cluster,
        matching=survey.matching,
        ready=survey.ready,
        schedulable=survey.schedulable,
        enough=survey.enough,
        code=code,
        alternatives=alternatives,
        message=_role_sentence(role, survey, code, alternatives),
        gpus_allocatable=survey.gpus_allocatable,
        gpus_used_external=survey.gpus_used_external,
        gpus_held=survey.gpus_held,
    )


def _alternatives(model: CapacityModel, role: RoleRequest) -> tuple[Alternative, ...]:
    found = []
    for cluster in model.clusters():
        if cluster == role.cluster or not model.is_online(cluster):
            continue
        enough = len(model.survey(cluster, role.selector, role.gpus_per_worker).candidates)
        if enough >= role.replicas:
            found.append(Alternative(cluster, enough))
    found.sort(key=lambda alt: (-alt.nodes, alt.cluster))
    return tuple(found)


def _role_sentence(
    role: RoleRequest, survey: Survey, code: PendingCode, alternatives: Sequence[Alternative]
) -> str:
    gpus = role.gpus_per_worker
    free = "" if survey.hypothetical else "free "
    ask = _nodes(role.replicas)
    if gpus:
        ask += f" with ≥ {gpus} {free}GPU{'s' if gpus != 1 else ''}"
    if role.selector:
        ask += f" matching {format_selector(role.selector)}"
    ask += f" in cluster {role.cluster}"
    head = f'role "{role.name}" ' + ("can never get " if survey.hypothetical else "needs ") + ask

    if code is PendingCode.CLUSTER_UNKNOWN:
        detail = "no nodes of this cluster are known"
    elif code is PendingCode.CLUSTER_OFFLINE:
        detail = "the cluster is offline"
    elif survey.hypothetical:
        detail = f"{survey.matching} match, {survey.enough} with enough allocatable GPUs"
    else:
        detail = (
            f"{survey.matching} match, {survey.ready} ready, {survey.schedulable} schedulable, "
            f"{survey.enough} with enough free GPUs"
        )
    sentence = f"{head}: {detail}"
    if code is PendingCode.TOO_FEW_NODES_WITH_GPUS and not survey.hypothetical:
        sentence += "; " + gpus_in_use(survey)
    if alternatives:
        shown = ", ".join(
            f"{alt.cluster} ({_nodes(alt.nodes)})" for alt in alternatives[:MAX_SUGGESTIONS_IN_TEXT]
        )
        more = len(alternatives) - MAX_SUGGESTIONS_IN_TEXT
        plural = "s" if len(alternatives) > 1 else ""
        sentence += f"; would fit now on cluster{plural} {shown}"
        if more > 0:
            sentence += f" and {more} more"
    return sentence


def gpus_in_use(survey: Survey) -> str:
    """Who uses the GPUs of the survey's schedulable nodes, e.g. "GPUs in use on those 2 schedulable
    nodes: 16 of 16 (8 by workloads RLark did not place, 8 by RLark jobs)"."""
    used = survey.gpus_used_external + survey.gpus_held
    parts = []
    if survey.gpus_used_external:
        parts.append(f"{survey.gpus_used_external} by workloads RLark did not place")
    if survey.gpus_held:
        parts.append(f"{survey.gpus_held} by RLark jobs")
    nodes = (
        "that schedulable node"
        if survey.schedulable == 1
        else f"those {survey.schedulable} schedulable nodes"
    )
    text = f"GPUs in use on {nodes}: {used} of {survey.gpus_allocatable}"
    return f"{text} ({', '.join(parts)})" if parts else text


def _nodes(count: int) -> str:
    return f"{count} node" if count == 1 else f"{count} nodes"


def _and_list(items: Sequence[str]) -> str:
    if len(items) <= 1:
        return "".join(items)
    return ", ".join(items[:-1]) + " and " + items[-1]


# ------------------------------------------------------------------------------- catalogue sentences

#: The catalogue key of a role's main clause per code (a role that fits alone says its counts too).
PENDING_KEYS: dict[PendingCode, str] = {
    PendingCode.FITS: "pending.needs",
    PendingCode.CLUSTER_UNKNOWN: "pending.cluster_unknown",
    PendingCode.CLUSTER_OFFLINE: "pending.cluster_offline",
    PendingCode.TOO_FEW_MATCHING_NODES: "pending.needs",
    PendingCode.TOO_FEW_READY_NODES: "pending.needs",
    PendingCode.TOO_FEW_SCHEDULABLE_NODES: "pending.needs",
    PendingCode.TOO_FEW_NODES_WITH_GPUS: "pending.needs",
    PendingCode.ROLES_COMPETE_FOR_NODES: "pending.roles_compete_for_nodes",
    PendingCode.NO_CLUSTER_FITS: "pending.no_cluster_fits",
    PendingCode.NO_CLUSTER_ALLOWED: "pending.no_cluster_allowed",
}


def role_texts(reason: RoleReason) -> tuple[Text, ...]:
    """The clauses of one role's reason (``message``) as catalogue sentences."""
    where: dict[str, str | int] = {"role": reason.role, "needed": reason.needed, "cluster": reason.cluster}
    counts: dict[str, str | int] = {
        **where,
        "gpus": reason.gpus_per_worker,
        "matching": reason.matching,
        "enough": reason.enough,
        **({"selector": format_selector(reason.selector)} if reason.selector else {}),
    }
    suffix = "" if reason.selector else ".any"
    if reason.hypothetical:
        if reason.code is PendingCode.CLUSTER_UNKNOWN:
            return (Text("pending.never.cluster_unknown", where),)
        return (Text("pending.never" + suffix, counts),)
    if reason.code in (PendingCode.CLUSTER_UNKNOWN, PendingCode.CLUSTER_OFFLINE):
        clauses = [Text(PENDING_KEYS[reason.code], where)]
    else:
        detail: dict[str, str | int] = {**counts, "ready": reason.ready, "schedulable": reason.schedulable}
        clauses = [Text(PENDING_KEYS[reason.code] + suffix, detail)]
    if reason.code is PendingCode.TOO_FEW_NODES_WITH_GPUS:
        clauses.append(_gpus_in_use_text(reason))
    if reason.alternatives:
        shown = ", ".join(
            f"{alt.cluster} ({alt.nodes})" for alt in reason.alternatives[:MAX_SUGGESTIONS_IN_TEXT]
        )
        more = len(reason.alternatives) - MAX_SUGGESTIONS_IN_TEXT
        if more > 0:
            clauses.append(text("pending.would_fit_elsewhere.more", clusters=shown, more=more))
        else:
            clauses.append(text("pending.would_fit_elsewhere", clusters=shown))
    return tuple(clauses)


def _gpus_in_use_text(reason: RoleReason) -> Text:
    params: dict[str, str | int] = {
        "schedulable": reason.schedulable,
        "used": reason.gpus_used_external + reason.gpus_held,
        "allocatable": reason.gpus_allocatable,
        "external": reason.gpus_used_external,
        "held": reason.gpus_held,
    }
    if reason.gpus_used_external and reason.gpus_held:
        return Text("pending.gpus_in_use", params)
    if reason.gpus_used_external:
        return Text("pending.gpus_in_use.external", params)
    if reason.gpus_held:
        return Text("pending.gpus_in_use.held", params)
    return Text("pending.gpus_in_use.none", params)


def conflict_text(conflict: GangConflict, *, alone: bool = False) -> Text:
    """A gang conflict as a catalogue sentence; ``alone`` when every role of the job fits by itself."""
    key = "pending.roles_compete_for_nodes.alone" if alone else "pending.roles_compete_for_nodes"
    roles = ", ".join(f'"{name}"' for name in conflict.roles)
    return text(key, roles=roles, cluster=conflict.cluster, needed=conflict.needed, nodes=conflict.nodes)


def quota_text(code: PendingCode, shortfall: QuotaShortfall) -> Text:
    """A quota shortfall as a catalogue sentence: ``pending.<code>.<scope kind>``."""
    breach = shortfall.breach
    return text(
        f"pending.{code.value}.{breach.scope.kind.value}",
        project=shortfall.project,
        name=breach.scope.name,
        total=shortfall.total,
        limit=breach.limit,
        used=breach.used,
        requested=breach.requested,
    )


def span_text(note: SpanNote) -> Text:
    """What spanning would change as a catalogue sentence (``pending.span_refused``/``pending.span_no_domain``)."""
    return text(f"pending.{note.code.value}", clusters=", ".join(note.clusters), domain=note.domain or "")


def pending_texts(reason: PendingReason) -> tuple[Text, ...]:
    """The whole reason as catalogue sentences, clause by clause, in the order of ``message``."""
    if reason.fits:
        return (text("pending.fits"),)
    if reason.quota is not None:
        return (quota_text(reason.code, reason.quota),)
    if reason.code is PendingCode.NO_CLUSTER_ALLOWED:
        return (text("pending.no_cluster_allowed"),)
    clauses: list[Text] = []
    if reason.code is PendingCode.NO_CLUSTER_FITS:
        hypothetical = any(role.hypothetical for role in reason.roles)
        key = "pending.never.no_cluster_fits" if hypothetical else "pending.no_cluster_fits"
        clauses.append(text(key, cluster=reason.closest, placed=reason.placed, workers=reason.workers))
    clauses.extend(clause for role in reason.roles if not role.fits_alone for clause in role_texts(role))
    alone = len(clauses) == (1 if reason.code is PendingCode.NO_CLUSTER_FITS else 0)
    for index, conflict in enumerate(reason.conflicts):
        clauses.append(conflict_text(conflict, alone=alone and index == 0))
    if reason.span is not None:
        clauses.append(span_text(reason.span))
    return tuple(clauses)


def pending_view(reason: PendingReason) -> dict[str, Any]:
    """A pending explanation as JSON: per-role funnel counts, gang conflicts, the sentence; each
    sentence also as ``parts``, catalogue clauses a client says in its user's language (ADR 0011)."""
    return {
        "code": reason.code.value,
        "message": reason.message,
        "parts": [said.wire() for said in pending_texts(reason)],
        "roles": [
            {
                "role": r.role,
                "cluster": r.cluster,
                "selector": dict(r.selector),
                "needed": r.needed,
                "gpus_per_worker": r.gpus_per_worker,
                "cluster_known": r.cluster_known,
                "cluster_online": r.cluster_online,
                "in_cluster": r.in_cluster,
                "matching": r.matching,
                "ready": r.ready,
                "schedulable": r.schedulable,
                "enough": r.enough,
                "gpus_allocatable": r.gpus_allocatable,
                "gpus_used_external": r.gpus_used_external,
                "gpus_held": r.gpus_held,
                "code": r.code.value,
                "message": r.message,
                "parts": [said.wire() for said in role_texts(r)],
                "alternatives": [{"cluster": a.cluster, "nodes": a.nodes} for a in r.alternatives],
            }
            for r in reason.roles
        ],
        "conflicts": [
            {
                "cluster": c.cluster,
                "roles": list(c.roles),
                "needed": c.needed,
                "nodes": c.nodes,
                "message": c.message,
                "parts": [conflict_text(c).wire()],
            }
            for c in reason.conflicts
        ],
        "quota": None if reason.quota is None else _quota_view(reason.quota),
        "closest": reason.closest or None,
        "span": None
        if reason.span is None
        else {
            "code": reason.span.code.value,
            "clusters": list(reason.span.clusters),
            "domain": reason.span.domain,
            "parts": [span_text(reason.span).wire()],
        },
    }


def _quota_view(shortfall: QuotaShortfall) -> dict[str, Any]:
    breach = shortfall.breach
    return {
        "project": shortfall.project,
        "scope": {"kind": breach.scope.kind.value, "name": breach.scope.name},
        "used": breach.used,
        "requested": breach.requested,
        "limit": breach.limit,
    }
