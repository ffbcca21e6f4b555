"""The YAML preview and the per-cluster plan a user checks before submitting.

Role: show exactly what will be submitted and what each cluster's agent will be asked to create,
so the user guide's pre-submission checklist (one ``spec.tasks[]`` entry per role, Header with one
replica, explicit image tags, selectors per cluster) can be checked by eye and by tests.

- :func:`render_yaml` is the normalised document: defaults written out, keys in the schema's order
  (node-selector keys sorted; env keys and the RLinf config in the user's order, since env order
  can matter for ``$(VAR)`` expansion), absent optional fields left out, multi-line scripts in
  literal block style. ``parse_job_document(render_yaml(doc))`` gives back ``doc``.
- :func:`plan_preview` lists, per cluster, the workers its agent will create — role, index, rank
  (the Header's worker is rank 0, then roles in spec order, contiguous), GPUs and image — on the
  clusters of the placement the placer would make now when given (the placement loop decides again
  once the job is queued). It expects a document whose replicas are valid (1..MAX_REPLICAS).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any

import yaml

from rlark_scheduler.domain.document.facts import worker_slots
from rlark_scheduler.domain.document.model import JobDocument
from rlark_scheduler.domain.document.redaction import redact
from rlark_scheduler.domain.document.validation import ValidationContext
from rlark_scheduler.domain.placement import Placement


class _PreviewDumper(yaml.SafeDumper):
    """SafeDumper that writes multi-line strings as ``|`` blocks and never emits aliases."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def _represent_str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    if "\n" in value:
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style="|")
    return dumper.represent_scalar("tag:yaml.org,2002:str", value)


_PreviewDumper.add_representer(str, _represent_str)


def _without_none(mapping: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in mapping.items() if value is not None}


def normalized_document(doc: JobDocument) -> dict[str, Any]:
    """The document as plain data in canonical form (what :func:`render_yaml` writes)."""
    data = _without_none(doc.model_dump(mode="json"))
    spec = _without_none(data["spec"])
    tasks = []
    for task in spec["tasks"]:
        role = _without_none(task)
        # Restrictions on a cluster the scheduler chooses (ADR 0026) are written only when given.
        for choice in ("clusters", "clusterSelector"):
            if not role[choice]:
                del role[choice]
        if "clusterSelector" in role:
            role["clusterSelector"] = dict(sorted(role["clusterSelector"].items()))
        role["nodeSelector"] = dict(sorted(role["nodeSelector"].items()))
        role["mounts"] = [_without_none(mount) for mount in role["mounts"]]
        tasks.append(role)
    spec["tasks"] = tasks
    data["spec"] = spec
    return data


def rlinf_config_yaml(doc: JobDocument) -> str:
    """The job's inline RLinf config as the Hydra YAML file its workers get ("" without one): the mapping
    validation checked (its key order is the stored document's, which need not be the submitted one)."""
    config = doc.spec.rlinf_config
    if not config:
        return ""
    return yaml.dump(config, Dumper=_PreviewDumper, sort_keys=False, allow_unicode=True, width=100)


def render_yaml(doc: JobDocument) -> str:
    """The normalised YAML of ``doc`` (see the module docstring)."""
    return yaml.dump(
        normalized_document(doc),
        Dumper=_PreviewDumper,
        sort_keys=False,
        allow_unicode=True,
        default_flow_style=False,
        width=100,
    )


@dataclass(frozen=True, slots=True)
class WorkerPlan:
    """One worker an agent will create."""

    role: str
    index: int
    rank: int
    gpus: int
    image: str
    is_header: bool


@dataclass(frozen=True, slots=True)
class AgentPlan:
    """What one cluster's agent will be asked to create for the job."""

    cluster: str
    known: bool
    online: bool
    workers: tuple[WorkerPlan, ...]

    @property
    def gpus(self) -> int:
        return sum(worker.gpus for worker in self.workers)

    @property
    def roles(self) -> tuple[str, ...]:
        """Roles with workers in this cluster, in rank order, without repeats."""
        return tuple(dict.fromkeys(worker.role for worker in self.workers))


def plan_preview(
    doc: JobDocument, ctx: ValidationContext, placement: Placement | None = None
) -> list[AgentPlan]:
    """Per cluster, in order of the lowest rank it hosts, the workers its agent will create. With the
    ``placement`` the placer would make now, each worker is on its cluster and rank there (ADR 0026: the
    clusters it chooses); without, a role whose cluster the scheduler chooses is listed under cluster ""."""
    per_cluster: dict[str, list[WorkerPlan]] = {}
    if placement is not None:
        images = {role.name: role.image for role in doc.spec.tasks}
        for w in placement.workers:
            per_cluster.setdefault(w.cluster, []).append(
                WorkerPlan(w.role, w.index, w.rank, w.gpus, images[w.role], w.is_header)
            )
    for slot in worker_slots(doc.spec) if placement is None else ():
        per_cluster.setdefault(slot.cluster, []).append(
            WorkerPlan(slot.role, slot.index, slot.rank, slot.gpus, slot.image, slot.is_header)
        )
    plans: list[AgentPlan] = []
    for cluster_name, workers in per_cluster.items():
        plans.append(
            AgentPlan(
                cluster=cluster_name,
                known=ctx.knows(cluster_name),
                online=ctx.is_online(cluster_name),
                workers=tuple(workers),
            )
        )
    return plans


def redact_plan(plan: AgentPlan, secrets: Iterable[str]) -> AgentPlan:
    """``plan`` showing none of ``secrets`` (a token pasted into an image tag): see
    ``document.redaction.redact``."""
    workers = tuple(
        replace(w, role=redact(w.role, secrets), image=redact(w.image, secrets)) for w in plan.workers
    )
    return replace(plan, cluster=redact(plan.cluster, secrets), workers=workers)
