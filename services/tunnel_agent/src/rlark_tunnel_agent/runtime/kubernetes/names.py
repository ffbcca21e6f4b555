"""Deterministic names, labels and annotations of every Kubernetes object the driver creates.

Names are derived from ids only, so a placement delivered twice, or a restarted agent, computes the
same names and "already exists" means "already done". Ids may be longer than a DNS label or contain
dots; such ids are shortened and suffixed with a hash of the full id, and the full id always travels
in an annotation. Pure: no I/O.
"""

from __future__ import annotations

import re

from rlark_tunnel_agent.runtime.hostnames import (
    MAX_LABEL,
    dns_label,
    job_service_name,
    short_digest,
    worker_hostname,
)

MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
MANAGED_BY = "rlark-tunnel-agent"
PART_OF_LABEL = "app.kubernetes.io/part-of"
JOB_LABEL = "rlark.io/job-id"
WORKER_LABEL = "rlark.io/worker-id"
ROLE_LABEL = "rlark.io/role"
RANK_LABEL = "rlark.io/rank"
OBJECT_LABEL = "rlark.io/object"
"""``job`` (the per-job ConfigMap and Service) or ``worker`` (pod and per-worker ConfigMap)."""

JOB_ANNOTATION = "rlark.io/job-id"
WORKER_ANNOTATION = "rlark.io/worker-id"
POD_CREATED_ANNOTATION = "rlark.io/pod-created"
"""Set on the worker ConfigMap once its pod was created: a missing pod is then a deletion."""

_LABEL_VALUE = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")


def label_value(value: str) -> str:
    """``value`` as a valid label value: itself when it is one, else a shortened, hashed form."""
    if len(value) <= MAX_LABEL and _LABEL_VALUE.match(value):
        return value
    head = re.sub(r"[^-A-Za-z0-9_.]", "-", value)[: MAX_LABEL - 11].strip("-_.")
    return f"{head}-{short_digest(value)}" if head else short_digest(value)


def pod_name(worker_id: str) -> str:
    """The worker's pod, also its hostname under the job's headless Service (`hostnames.py`)."""
    return worker_hostname(worker_id)


def worker_config_name(worker_id: str) -> str:
    """The per-worker ConfigMap: scripts, authorized keys and the recorded worker spec."""
    return dns_label(worker_id, "-cfg")


def worker_secret_name(worker_id: str) -> str:
    """The per-worker Secret holding its sidecars' secrets: the network sidecar's token (workers with a
    virtual IP), the files sidecar's secret (workers with outputs or a TensorBoard dir; ADR 0013)."""
    return dns_label(worker_id, "-net")


def bucket_secret_name(worker_id: str, index: int) -> str:
    """The per-worker Secret an ``objectStorage`` mount's CSI volume reads its credentials from
    (``nodePublishSecretRef``): one per distinct credential secret the worker's mounts name, in name order."""
    return dns_label(worker_id, f"-s3-{index}")


def job_config_name(job_id: str) -> str:
    """The per-job ConfigMap: the bootstrap files; owner of every other object of the job."""
    return dns_label(job_id, "-job")


def service_name(job_id: str) -> str:
    """The per-job headless Service: ``<pod>.<service>.<namespace>.svc`` resolves each worker."""
    return job_service_name(job_id)


def worker_dns_name(worker_id: str, job_id: str, namespace: str) -> str:
    """The DNS name other workers use to reach a worker (e.g. the Header's address)."""
    return f"{pod_name(worker_id)}.{service_name(job_id)}.{namespace}.svc"


def managed_selector() -> str:
    return f"{MANAGED_BY_LABEL}={MANAGED_BY}"


def job_selector(job_id: str) -> str:
    return f"{managed_selector()},{JOB_LABEL}={label_value(job_id)}"


def worker_selector(worker_id: str) -> str:
    return f"{managed_selector()},{WORKER_LABEL}={label_value(worker_id)}"


def job_labels(job_id: str) -> dict[str, str]:
    return {
        MANAGED_BY_LABEL: MANAGED_BY,
        PART_OF_LABEL: "rlark",
        JOB_LABEL: label_value(job_id),
        OBJECT_LABEL: "job",
    }


def worker_labels(job_id: str, worker_id: str, role: str, rank: int) -> dict[str, str]:
    return {
        MANAGED_BY_LABEL: MANAGED_BY,
        PART_OF_LABEL: "rlark",
        JOB_LABEL: label_value(job_id),
        WORKER_LABEL: label_value(worker_id),
        ROLE_LABEL: label_value(role),
        RANK_LABEL: str(rank),
        OBJECT_LABEL: "worker",
    }
