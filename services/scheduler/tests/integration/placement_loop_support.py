"""Placement loops on a migrated database of their own, without the service (the ``pool`` fixture):
a cluster of one node, and Pending jobs stored as a submission stores them."""

from __future__ import annotations

from datetime import UTC, datetime

import asyncpg
from rlark_scheduler.domain.document.parsing import parse_job_document
from rlark_scheduler.domain.render import normalized_document, render_yaml
from rlark_scheduler.repository import changes as changes_repo
from rlark_scheduler.repository import jobs as jobs_repo
from rlark_scheduler.repository import read_models
from scheduler_it_support import job_doc, role


async def one_node_cluster(pool: asyncpg.Pool, gpus: int) -> None:
    async with pool.acquire() as conn, conn.transaction():
        await read_models.upsert_cluster(
            conn, "c1", runtime="local", online=True, pod_cidrs=[], service_cidrs=[], deleted=False
        )
        await read_models.upsert_node(
            conn, cluster="c1", name="n1", ready=True, schedulable=True, gone=False, gpu_count=gpus,
            gpu_model="A100", gpu_allocatable=gpus, gpu_allocated=0, labels={}, addresses=["10.0.0.1"],
        )  # fmt: skip


async def pending_job(pool: asyncpg.Pool, job_id: str, gpus: int, priority: int) -> None:
    """A Pending job as a submission stores it, its capacity change queued (the loop's wake-up)."""
    doc = parse_job_document(job_doc(role("train", "c1", gpusPerWorker=gpus), priority=priority))
    async with pool.acquire() as conn, conn.transaction():
        await jobs_repo.insert_job(
            conn, job_id=job_id, owner="alice", name=job_id, spec=normalized_document(doc),
            spec_yaml=render_yaml(doc), warnings=[], priority=priority, network_domain=None,
            ssh_key_ids=[], ssh_key_names=[], ssh_public_keys=[], now=datetime.now(UTC),
        )  # fmt: skip
        await changes_repo.add_change(conn, "job", job_id)
