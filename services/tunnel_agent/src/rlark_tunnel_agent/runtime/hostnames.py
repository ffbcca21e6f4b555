"""The names a worker answers to, the same on every runtime. Pure: no I/O.

A worker's hostname is its pod's name on Kubernetes (`rlark-<worker id>`), and a job's workers are reachable
under the job's headless Service (`rlark-<job id>`): `<hostname>.<service>`. The local runtime gives its
workers the same names (their UTS namespace and `/etc/hosts`, `local/pod.py`), so a job that names its
workers' hosts runs unchanged on both. Ids longer than a DNS label or containing dots are shortened and
suffixed with a hash of the full id.
"""

from __future__ import annotations

import hashlib
import re

PREFIX = "rlark-"
MAX_LABEL = 63


def short_digest(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()[:10]


def dns_label(value: str, suffix: str = "") -> str:
    """``rlark-<value><suffix>`` as a DNS-1035 label (Service names, pod hostnames).

    Dots become dashes; when that changed anything or the result is too long, a hash of the
    original value keeps distinct ids distinct.
    """
    cleaned = re.sub(r"[^a-z0-9-]", "-", value.lower())
    name = f"{PREFIX}{cleaned}{suffix}"
    if cleaned == value and len(name) <= MAX_LABEL:
        return name
    room = MAX_LABEL - len(PREFIX) - len(suffix) - 11
    return f"{PREFIX}{cleaned[:room].strip('-')}-{short_digest(value)}{suffix}"


def worker_hostname(worker_id: str) -> str:
    """The worker's hostname: its pod's name on Kubernetes."""
    return dns_label(worker_id)


def job_service_name(job_id: str) -> str:
    """The job's headless Service on Kubernetes: ``<hostname>.<service>`` names each of its workers."""
    return dns_label(job_id)
