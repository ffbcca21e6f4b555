"""Outputs are served with the job's permissions, not the agent's (ADR 0010): the agent runs as root, so a
file inside the declared outputs that the job's user could not read — another user's file in a shared
hostPath, a hard link to a root file where ``fs.protected_hardlinks`` is off — is refused and left out of
listings and tars, like a symbolic link."""

from __future__ import annotations

import io
import os
import tarfile
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from rlark_tunnel_agent.agent.files import FilesRefused, answer, list_outputs
from rlark_tunnel_agent.runtime.driver import OutputRoot, WorkerPhase, WorkerSpec, WorkerStatus
from rlark_tunnel_agent.runtime.local.driver import LocalDriver, _Worker
from rlark_tunnel_agent.runtime.local.record import WorkerRecord

JOB_UID = os.getuid() + 4242
"""A user that is not the one running the tests (nor root): it may read only what its mode bits allow."""


def roots(worker_dir: Path, reader: tuple[int, int] | None = (JOB_UID, JOB_UID)) -> list[OutputRoot]:
    return [OutputRoot("/data/out", str(worker_dir), ("fs", "data", "out"), reader=reader)]


@pytest.fixture
def worker_dir(tmp_path: Path) -> Path:
    out = tmp_path / "w" / "fs" / "data" / "out"
    (out / "private").mkdir(parents=True, mode=0o700)
    os.chmod(out, 0o755)  # noqa: S103 - the job's user searches it as any other user
    (out / "metrics.txt").write_text("loss 0.1\n")
    os.chmod(out / "metrics.txt", 0o644)
    (out / "private" / "notes.txt").write_text("kept\n")
    os.chmod(out / "private" / "notes.txt", 0o644)
    secret = tmp_path / "shadow"
    secret.write_text("root:$6$secret\n")
    os.chmod(secret, 0o600)
    os.link(secret, out / "shadow-link")  # what a job does where protected_hardlinks is off
    return tmp_path / "w"


async def fetch(found: list[OutputRoot], path: str) -> tuple[dict[str, Any], bytes]:
    head, body = await answer(found, {"action": "download", "path": path})
    return head, b"".join([chunk async for chunk in body])


@pytest.mark.parametrize(
    "path", ["/data/out/shadow-link", "/data/out/private", "/data/out/private/notes.txt"]
)
async def test_what_the_jobs_user_cannot_read_is_refused(worker_dir: Path, path: str) -> None:
    with pytest.raises(FilesRefused) as refused:
        await fetch(roots(worker_dir), path)
    assert (refused.value.status, refused.value.code) == (403, "output_not_readable")


async def test_listings_and_tars_leave_out_what_the_jobs_user_cannot_read(worker_dir: Path) -> None:
    files, truncated = list_outputs(roots(worker_dir))
    assert ([f["path"] for f in files], truncated) == (["/data/out/metrics.txt"], False)
    _, data = await fetch(roots(worker_dir), "/data/out")
    assert b"root:$6$secret" not in data
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        assert sorted(tar.getnames()) == ["out", "out/metrics.txt"]


async def test_a_readable_file_is_served_and_no_reader_means_the_agents_own_rights(worker_dir: Path) -> None:
    head, data = await fetch(roots(worker_dir), "/data/out/metrics.txt")
    assert (head["size"], data) == (len(b"loss 0.1\n"), b"loss 0.1\n")
    own = [replace(root, reader=None) for root in roots(worker_dir)]
    _, data = await fetch(own, "/data/out/private/notes.txt")
    assert data == b"kept\n"


def test_the_local_runtime_names_the_jobs_user_as_the_reader_of_its_outputs(tmp_path: Path) -> None:
    spec = WorkerSpec.model_validate(
        {
            "worker_id": "w1",
            "job_id": "job-1",
            "role": "actor",
            "index": 0,
            "rank": 0,
            "num_nodes": 1,
            "is_header": True,
            "node_name": "n1",
            "outputs": ["/data/out", "ckpt"],
        }
    )
    driver = LocalDriver.__new__(LocalDriver)  # output_roots reads only the workers it knows
    status = WorkerStatus(worker_id="w1", job_id="job-1", phase=WorkerPhase.RUNNING)
    for uid, reader in ((JOB_UID, (JOB_UID, JOB_UID)), (None, None)):
        record = WorkerRecord.model_construct(spec=spec, uid=uid, netns="ns" if uid else None)  # type: ignore[call-arg]
        driver._workers = {"w1": _Worker(record, tmp_path, status)}
        found = driver.output_roots("w1")
        assert found is not None
        assert [root.reader for root in found] == [reader, reader]
