"""Whether each role's workers can be placed, asked of the :class:`CapacityModel` the placement loop
decides on.

One worker of a job per node, so a role needs ``replicas`` distinct nodes of its cluster matching its
selector, each with ``gpusPerWorker`` GPUs; roles of one job in one cluster whose selectors overlap compete
for the same nodes, so feasibility is a bipartite matching (``placement.match_workers``, exact). Every count
comes from the model (``CapacityModel.survey``), so validation and placement cannot disagree about what fits.
Two tiers are checked:
- *ever* (a hypothetical survey): nodes that exist, match and have enough GPUs in total,
  regardless of readiness, cordons and current usage. Failing this tier is an **error**
  (``selector_matches_too_few``, or ``gpus_exceed_node`` when no matching node is big enough):
  waiting would never help.
- *now*: additionally ready, schedulable, with enough free GPUs, in an online cluster. Failing
  only this tier is a **warning** with the exact counts: the job stays Pending until it fits.

A role whose cluster the scheduler chooses is judged with the job as a whole (``reasons.can_ever_fit``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rlark_contracts.messages import text

from rlark_scheduler.domain import selectors
from rlark_scheduler.domain.capacity import Survey
from rlark_scheduler.domain.document.check import Check
from rlark_scheduler.domain.document.fields import child_path
from rlark_scheduler.domain.document.model import MAX_REPLICAS, RoleSpec
from rlark_scheduler.domain.document.roles import MAX_GPUS_PER_WORKER
from rlark_scheduler.domain.placement import Demand, match_workers


@dataclass(frozen=True, slots=True)
class _RoleFit:
    """One role as the capacity model sees it: ``ever`` (hypothetical) and ``now`` surveys."""

    index: int
    role: RoleSpec
    cluster: str
    ever: Survey
    now: Survey


def check_capacity(check: Check) -> None:
    """The two-tier node checks, asked of the capacity model; roles whose own fields are
    already wrong are skipped."""
    model = check.ctx.capacity
    eligible: list[_RoleFit] = []
    for index, role in enumerate(check.spec.tasks):
        if (
            role.cluster is None  # the job as a whole: reasons.can_ever_fit, asked of the same placer
            or not check.ctx.knows(role.cluster)
            or not 1 <= role.replicas <= MAX_REPLICAS
            or not 0 <= role.gpus_per_worker <= MAX_GPUS_PER_WORKER
            or _selector_is_invalid(role)
        ):
            continue
        selector, gpus = role.node_selector, role.gpus_per_worker
        fit = _RoleFit(
            index=index,
            role=role,
            cluster=role.cluster,
            ever=model.survey(role.cluster, selector, gpus, hypothetical=True),
            now=model.survey(role.cluster, selector, gpus),
        )
        if _role_capacity(check, fit):
            eligible.append(fit)
    by_cluster: dict[str, list[_RoleFit]] = {}
    for fit in eligible:
        by_cluster.setdefault(fit.cluster, []).append(fit)
    for cluster_name, members in sorted(by_cluster.items()):
        if len(members) > 1 and _shared_nodes(check, cluster_name, members, ever=True):
            continue
        now_members = [m for m in members if len(m.now.candidates) >= m.role.replicas]
        if len(now_members) > 1:
            _shared_nodes(check, cluster_name, now_members, ever=False)


def _selector_is_invalid(role: RoleSpec) -> bool:
    return any(
        selectors.label_key_problem(key) or selectors.label_value_problem(value)
        for key, value in role.node_selector.items()
    )


def _role_capacity(check: Check, fit: _RoleFit) -> bool:
    """Report this role alone; True when it can be placed at least some day."""
    role, ever, now = fit.role, fit.ever, fit.now
    path = child_path("spec.tasks", fit.index)
    cluster = fit.cluster
    free_now = len(now.candidates)  # none while the cluster is offline
    if ever.matching == 0:
        check.add(
            "selector_matches_too_few",
            text(
                "selector_matches_too_few.none",
                field=f"{path}.nodeSelector",
                nodes=ever.in_cluster,
                cluster=cluster,
            ),
            f"{path}.nodeSelector",
        )
        return False
    if ever.largest_gpus < role.gpus_per_worker:
        check.add(
            "gpus_exceed_node",
            text(
                "gpus_exceed_node",
                field=f"{path}.gpusPerWorker",
                gpus=role.gpus_per_worker,
                cluster=cluster,
                largest=ever.largest_gpus,
            ),
            f"{path}.gpusPerWorker",
        )
        return False
    if ever.enough < role.replicas:
        check.add(
            "selector_matches_too_few",
            text(
                "selector_matches_too_few.capable",
                role=role.name,
                replicas=role.replicas,
                capable=ever.enough,
                cluster=cluster,
                gpus=role.gpus_per_worker,
            ),
            f"{path}.replicas",
        )
        return False
    if free_now < role.replicas:
        check.add(
            "selector_matches_too_few",
            text(
                "selector_matches_too_few.now" if now.online else "selector_matches_too_few.now_offline",
                role=role.name,
                replicas=role.replicas,
                free=free_now,
                cluster=cluster,
                in_cluster=now.in_cluster,
                matching=now.matching,
                ready=now.ready,
                schedulable=now.schedulable,
                enough=free_now,
                gpus=role.gpus_per_worker,
            ),
            f"{path}.nodeSelector",
            warning=True,
        )
    return True


def _shared_nodes(
    check: Check,
    cluster_name: str,
    members: Sequence[_RoleFit],
    *,
    ever: bool,
) -> bool:
    """Report roles of one cluster that cannot all get distinct nodes; True when reported."""
    demands = [
        Demand(m.role.replicas, tuple(sorted((m.ever if ever else m.now).candidates))) for m in members
    ]
    matching = match_workers(demands, exhaustive=True)
    if not matching.short:
        return False
    tight = matching.tight or matching.short
    names = [members[i].role.name for i in tight]
    needed = sum(members[i].role.replicas for i in tight)
    union = {name for i in tight for name in demands[i].candidates}
    roles_text = ", ".join(f'"{name}"' for name in names)
    if ever:
        check.add(
            "selector_matches_too_few",
            text(
                "selector_matches_too_few.shared",
                roles=roles_text,
                cluster=cluster_name,
                needed=needed,
                nodes=len(union),
            ),
            "spec.tasks",
        )
    else:
        check.add(
            "selector_matches_too_few",
            text(
                "selector_matches_too_few.shared_now",
                roles=roles_text,
                cluster=cluster_name,
                needed=needed,
                nodes=len(union),
            ),
            "spec.tasks",
            warning=True,
        )
    return True
