"""The names a job's workers resolve each other by on the local runtime: each pod-like worker has its own
``/etc/hosts`` (``pod.py``), which names every worker of its job — those this driver runs, by rank, and those
elsewhere whose addresses the agent learned (a network domain's allocation). A worker being created gets the
whole list; the others get only the lines they lack, appended in one write each (their file is bound in their
mount namespace, so it is never replaced)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path

from rlark_tunnel_agent.runtime.local import host_files
from rlark_tunnel_agent.runtime.local.pod import HostEntry, missing_host_lines
from rlark_tunnel_agent.runtime.local.record import WorkerRecord


def ray_address(record: WorkerRecord) -> str:
    """The address the worker's Ray (and its hostname) uses: its virtual IP on a domain's network."""
    if record.tun_device is not None and record.spec.virtual_ip is not None:
        return str(record.spec.virtual_ip)
    return record.address


class JobHosts:
    """What the driver learned of each job's workers elsewhere, and the entries of a job's hosts files."""

    def __init__(self) -> None:
        self._learned: dict[str, dict[str, str]] = {}
        """job id → worker id → address of the job's workers elsewhere (``learn``)."""

    def learn(self, job_id: str, addresses: dict[str, str]) -> None:
        self._learned[job_id] = {**self._learned.get(job_id, {}), **addresses}

    def forget(self, job_id: str) -> None:
        self._learned.pop(job_id, None)

    def entries(self, job_id: str, ours: Sequence[WorkerRecord]) -> list[HostEntry]:
        """``ours`` (this driver's live workers of the job, in the order given) then the learned others."""
        entries = [HostEntry(record.spec.worker_id, job_id, ray_address(record)) for record in ours]
        known = {e.worker_id for e in entries}
        learned = self._learned.get(job_id, {})
        return entries + [HostEntry(wid, job_id, learned[wid]) for wid in sorted(learned) if wid not in known]


def append_missing(entries: Sequence[HostEntry], hosts_files: Iterable[Path]) -> None:
    """Append to each hosts file the entries' lines it lacks (one write each); a file not there is skipped (a
    worker started before workers had their own hosts file)."""
    for path in hosts_files:
        try:
            lines = missing_host_lines(path.read_text(), entries)
        except FileNotFoundError:
            continue
        if lines:
            host_files.append(path, lines)
