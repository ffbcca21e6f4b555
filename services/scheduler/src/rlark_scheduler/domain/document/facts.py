"""Facts derived from a job document that every other module needs: the rank order of its workers
(:func:`rank_ranges`), the workers themselves before any node is chosen (:func:`worker_slots`), and the
defaults the service fills before validation (network domain, project)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from rlark_scheduler.domain.document.model import MAX_REPLICAS, JobDocument, JobSpec


@dataclass(frozen=True, slots=True)
class RankRange:
    """The contiguous ranks of one role's workers."""

    task_index: int
    role: str
    first_rank: int
    count: int
    gpus_per_worker: int


def rank_ranges(spec: JobSpec) -> list[RankRange]:
    """Rank ranges of every role: the Header's worker is rank 0, then roles in spec order.

    Roles with ``replicas < 1`` contribute no ranks. The same numbering becomes each worker's
    ``RLINF_NODE_RANK``, so it is what RLinf's ``node_ranks`` refer to.
    """
    ranges: list[RankRange] = []
    next_rank = 0
    for index, role in spec.rank_order():
        count = max(role.replicas, 0)
        ranges.append(RankRange(index, role.name, next_rank, count, role.gpus_per_worker))
        next_rank += count
    return ranges


@dataclass(frozen=True, slots=True)
class WorkerSlot:
    """One worker a job will have, before any node is chosen."""

    role: str
    index: int
    rank: int
    cluster: str
    """The role's cluster; "" when the scheduler chooses it."""
    gpus: int
    image: str
    is_header: bool


def worker_slots(spec: JobSpec) -> tuple[WorkerSlot, ...]:
    """Every worker of the job in rank order. Requires 1 <= replicas <= MAX_REPLICAS per role."""
    slots: list[WorkerSlot] = []
    for rank_range in rank_ranges(spec):
        role = spec.tasks[rank_range.task_index]
        if not 1 <= role.replicas <= MAX_REPLICAS:
            raise ValueError(f'role "{role.name}": replicas {role.replicas} is out of range')
        for index in range(role.replicas):
            slots.append(
                WorkerSlot(
                    role=role.name,
                    index=index,
                    rank=rank_range.first_rank + index,
                    cluster=role.cluster or "",
                    gpus=role.gpus_per_worker,
                    image=role.image,
                    is_header=role.name == spec.header,
                )
            )
    return tuple(slots)


def fill_network_domain_default(doc: JobDocument, domain_names: Iterable[str]) -> JobDocument:
    """Set ``spec.networkDomain`` to the first domain by name when the user left it out.

    With no domain configured the field stays absent (the user guide's rule). ``networkDomain: none``
    (:data:`NO_NETWORK_DOMAIN`, a name no domain may take) stays as written, so the normalised document
    keeps it; :attr:`JobSpec.joined_domain` is then ``None``. A job whose roles leave a cluster to the
    scheduler keeps the field absent: it may then span through any domain that joins the clusters chosen,
    and joins one only when it spans (ADR 0026).
    """
    if doc.spec.network_domain is not None or doc.spec.chooses_clusters:
        return doc
    names = sorted(domain_names)
    if not names:
        return doc
    spec = doc.spec.model_copy(update={"network_domain": names[0]})
    return doc.model_copy(update={"spec": spec}).with_source(doc.source)


def fill_project_default(doc: JobDocument, member_of: Sequence[str]) -> JobDocument:
    """Set ``spec.project`` to the owner's one project when the user left it out (ADR 0020): a member of a
    project cannot step outside its quota by naming none. With several projects the user must choose
    (``submission.check`` refuses with ``project_required``); with none the field stays absent."""
    if doc.spec.project is not None or len(member_of) != 1:
        return doc
    spec = doc.spec.model_copy(update={"project": member_of[0]})
    return doc.model_copy(update={"spec": spec}).with_source(doc.source)
