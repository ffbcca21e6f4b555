"""A job's output files through the platform, the pure part (issue 15.3, ADR 0010).

Role: which worker a listing or a download is for (any status: outputs outlive the job, as long as the
agent's machine keeps them), what the scheduler's output manifests (written when a worker ends) say when a
worker's agent cannot be asked, and how the agent's files head becomes HTTP headers. The agent decides what
a path means on its machine; the gateway passes the path on as the user wrote it.

Pure: no I/O.
"""

from __future__ import annotations

import contextlib
import re
from typing import Any
from urllib.parse import quote

from rlark_contracts.messages import Text

from rlark_gateway.domain.relay import RelayRefused, RelayTarget, worker_names

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
"""Characters a header value may not hold (a job names its files; a newline there would break the answer)."""


def job_workers(job: dict[str, Any]) -> list[RelayTarget]:
    """Every worker of ``job`` (the scheduler's job detail), whatever the job's status."""
    return [RelayTarget(str(job["id"]), str(w["id"]), str(w["cluster"])) for w in job.get("workers") or []]


def pick_output_worker(job: dict[str, Any], name: str | None) -> RelayTarget:
    """The worker ``name`` (id or ``ROLE-INDEX``) of ``job``; without a name, its only worker. ``RelayRefused``
    404 ``worker_not_found`` or 400 ``worker_required`` otherwise."""
    workers: list[dict[str, Any]] = list(job.get("workers") or [])
    known = ", ".join(sorted(f"{w.get('role')}-{w.get('index')}" for w in workers)) or "none yet"
    if name is None or not name.strip():
        if len(workers) == 1:
            return job_workers(job)[0]
        raise RelayRefused(
            400, "worker_required", f"job {job.get('id')} has several workers: name one ({known})", "worker"
        )
    for worker in workers:
        if name in worker_names(worker):
            return RelayTarget(str(job["id"]), str(worker["id"]), str(worker["cluster"]))
    raise RelayRefused(
        404, "worker_not_found", f"job {job.get('id')} has no worker {name!r} (workers: {known})", "worker"
    )


def manifest_files(job: dict[str, Any], worker_id: str) -> tuple[list[dict[str, Any]], bool] | None:
    """The files of ``worker_id``'s output manifest as the scheduler keeps it (``job["outputs"]``), in the
    listing's shape (no time: the manifest has none); None when the worker sent none."""
    for entry in job.get("outputs") or []:
        if entry.get("worker_id") != worker_id:
            continue
        files = [
            {"path": str(f.get("path", "")), "size": int(f.get("size") or 0), "mtime": None}
            for f in entry.get("files") or []
        ]
        return files, bool(entry.get("truncated"))
    return None


def refused(head: dict[str, Any]) -> RelayRefused | None:
    """The agent's refusal in a files head, or None when it answered. A refusal the agent said as a catalogue
    sentence (``message_key`` and ``params``, ADR 0011: a download over its limit) stays one, so the user
    reads it in their language; an unknown key or odd parameters leave the agent's English."""
    if head.get("ok") is True:
        return None
    status = int(head.get("status") or 502)
    message: str = str(head.get("message") or "the agent could not answer")
    key, params = head.get("message_key"), head.get("params")
    if isinstance(key, str) and isinstance(params, dict):
        with contextlib.suppress(KeyError):
            message = Text(key, {str(k): v for k, v in params.items() if isinstance(v, str | int)})
    return RelayRefused(
        status if 400 <= status < 600 else 502,
        str(head.get("code") or "files_failed"),
        message,
        "path",
    )


def download_headers(head: dict[str, Any]) -> tuple[str, dict[str, str]]:
    """The media type and headers of a download the agent described: a file with its length, or a
    directory as ``<name>.tar``."""
    name = str(head.get("name") or "outputs")
    if head.get("kind") == "dir":
        media, filename, headers = "application/x-tar", f"{name}.tar", {}
    else:
        media, filename = "application/octet-stream", name
        headers = {"Content-Length": str(int(head.get("size") or 0))}
    ascii_name = (
        _CONTROL.sub("_", filename.encode("ascii", "replace").decode()).replace('"', "_").replace("\\", "_")
    )
    headers["Content-Disposition"] = (
        f"attachment; filename=\"{ascii_name}\"; filename*=UTF-8''{quote(filename, safe='')}"
    )
    return media, headers
