"""Valid sample events for tests: every required field filled, any field overridden.

Tests of several packages build the same events; one factory here keeps them from restating every
required field (and from breaking together when a field is added).
"""

from __future__ import annotations

from typing import Any

from rlark_contracts.events.scheduler import WorkerPlaced


def worker_placed(**fields: Any) -> WorkerPlaced:
    """A one-worker job's Header placement on ``alpha/n1``, with ``fields`` overriding the defaults."""
    values: dict[str, Any] = {
        "job_id": "job-1",
        "worker_id": "job-1-header-0",
        "cluster": "alpha",
        "node": "n1",
        "role": "header",
        "index": 0,
        "rank": 0,
        "num_nodes": 1,
        "is_header": True,
        "gpus": 0,
        "image": "python:3.11",
    }
    return WorkerPlaced(**{**values, **fields})
