"""What each worker's agent is sent: one ``WorkerPlaced`` per placed worker, built from the job's document. Pure.

Role: the one place where the scheduler's shapes of a worker (its role in the document, ``spec.RoleSpec``; its
placement as stored, ``jobs.WorkerFacts``) become the event its cluster's agent reads
(``rlark_contracts.events.scheduler.WorkerPlaced``). ``handlers/placement.py`` ``placed_events`` gathers what
only the database knows (the Header's address, the job's keys and owner, netdomain's answer) for the outbox.

Every field of ``WorkerPlaced`` is set here explicitly, none left to its default: the defaults exist so that
agents read older events, and a field a producer forgets would reach the worker as that default (the job's
GPU count once did). ``tests/unit/test_worker_placed_fields.py`` walks the fields of the document's models
and of the event to keep it so.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from rlark_contracts.events.scheduler import Mount, WorkerPlaced

from rlark_scheduler.domain.document.model import JobDocument
from rlark_scheduler.domain.jobs import WorkerFacts
from rlark_scheduler.domain.render import rlinf_config_yaml


@dataclass(frozen=True, slots=True)
class DomainAddresses:
    """netdomain's answer for a job in a network domain: the domain, its network, each worker's virtual IP."""

    domain: str
    cidr: str
    virtual_ips: Mapping[str, str]


@dataclass(frozen=True, slots=True)
class PlacedJob:
    """What a job's placements carry beyond its document and its workers: what the database knows of it."""

    job_id: str
    owner: str
    ssh_public_keys: Sequence[str]
    header_address: str
    """The Header's Ray address: its virtual IP in a domain, else its node's ("" on the local runtime, whose
    agent knows it)."""
    addresses: DomainAddresses | None
    ray_port: int
    join_deadline_s: int


def worker_placements(job: PlacedJob, doc: JobDocument, workers: Sequence[WorkerFacts]) -> list[WorkerPlaced]:
    """One ``WorkerPlaced`` per worker, in rank order (the Header first, rank 0)."""
    spec = doc.spec
    roles = {role.name: role for role in spec.tasks}
    # The Header waits until Ray reports the job's GPUs (RLARK_EXPECTED_GPUS), so every placement carries them.
    total_gpus = sum(w.gpus for w in workers)
    rlinf_config = rlinf_config_yaml(doc)
    resume_dir = spec.resume.checkpoints_dir(spec.outputs) if spec.resume else ""
    domain = job.addresses
    placed = []
    for w in sorted(workers, key=lambda w: w.rank):
        role = roles[w.role]
        placed.append(
            WorkerPlaced(
                job_id=job.job_id,
                worker_id=w.worker_id,
                cluster=w.cluster,
                node=w.node,
                role=w.role,
                index=w.index,
                rank=w.rank,
                num_nodes=len(workers),
                is_header=w.is_header,
                gpus=w.gpus,
                image=role.image,
                prepare_script=role.prepare_script or "",
                run_script=(spec.run_script or "") if w.is_header else "",
                env=role.plain_env(),
                secret_env=role.secret_env(),
                secrets=role.secret_names(),
                # The document's mount and the event's have the same fields (a test keeps them so).
                mounts=[Mount.model_validate(m.model_dump(mode="json", by_alias=False)) for m in role.mounts],
                ssh_public_keys=list(job.ssh_public_keys),
                virtual_ip=domain.virtual_ips[w.worker_id] if domain else None,
                domain=domain.domain if domain else None,
                domain_cidr=domain.cidr if domain else None,
                header_address=job.header_address,
                ray_port=job.ray_port,
                outputs=list(spec.outputs),
                tensorboard_dir=spec.tensorboard_dir or "",
                join_deadline_s=job.join_deadline_s,
                total_gpus=total_gpus,
                rlinf_config=rlinf_config,
                owner=job.owner,
                resume_checkpoints_dir=resume_dir if w.is_header else "",
                progress_deadline_s=(spec.progress_deadline_seconds or 0) if w.is_header else 0,
                termination_grace_s=(spec.termination_grace_period_seconds or 0) if w.is_header else 0,
            )
        )
    return placed
