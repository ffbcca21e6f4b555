"""Outputs the agent serves for downloads (issue 15.3, ADR 0010): files and directories inside the job's
declared outputs, as the runtime locates them; links planted by the worker are refused, never followed —
to ``/etc/shadow``, to another job's directory, an output replaced by a link, a link on the way."""

from __future__ import annotations

import hashlib
import io
import os
import tarfile
from pathlib import Path
from typing import Any

import pytest
from rlark_tunnel_agent.agent.files import DEFAULT_MAX_DOWNLOAD_BYTES, FilesRefused, answer, list_outputs
from rlark_tunnel_agent.runtime.driver import Mount, MountType, OutputRoot, WorkerSpec
from rlark_tunnel_agent.runtime.local.pod import host_location


def roots(worker_dir: Path) -> list[OutputRoot]:
    return [OutputRoot("/data/out", str(worker_dir), ("fs", "data", "out"))]


@pytest.fixture
def worker_dir(tmp_path: Path) -> Path:
    out = tmp_path / "w" / "fs" / "data" / "out"
    (out / "ckpt").mkdir(parents=True)
    (out / "metrics.txt").write_text("loss 0.1\n")
    (out / "ckpt" / "model.bin").write_bytes(os.urandom(300_000))
    return tmp_path / "w"


async def fetch(worker_dir: Path, path: str, action: str = "download") -> tuple[dict[str, Any], bytes]:
    head, body = await answer(roots(worker_dir), {"action": action, "path": path})
    return head, b"".join([chunk async for chunk in body])


async def test_a_file_comes_whole_with_its_size(worker_dir: Path) -> None:
    head, data = await fetch(worker_dir, "/data/out/ckpt/model.bin")
    expected = (worker_dir / "fs/data/out/ckpt/model.bin").read_bytes()
    assert head == {"ok": True, "kind": "file", "name": "model.bin", "size": len(expected)}
    assert hashlib.sha256(data).digest() == hashlib.sha256(expected).digest()


async def test_a_directory_comes_as_a_tar_of_its_files(worker_dir: Path) -> None:
    head, data = await fetch(worker_dir, "/data/out")
    assert head == {"ok": True, "kind": "dir", "name": "out"}
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        names = sorted(tar.getnames())
        model = tar.extractfile("out/ckpt/model.bin")
        assert model is not None
        assert model.read() == (worker_dir / "fs/data/out/ckpt/model.bin").read_bytes()
    assert names == ["out", "out/ckpt", "out/ckpt/model.bin", "out/metrics.txt"]


async def test_the_listing_names_files_as_the_worker_sees_them(worker_dir: Path) -> None:
    head, data = await fetch(worker_dir, "", action="list")
    assert head["kind"] == "list"
    assert head["truncated"] is False
    files, _ = list_outputs(roots(worker_dir))
    assert [f["path"] for f in files] == ["/data/out/ckpt/model.bin", "/data/out/metrics.txt"]
    assert files[1]["size"] == len("loss 0.1\n")
    assert files[1]["mtime"] > 0
    assert b"/data/out/metrics.txt" in data
    assert list_outputs(roots(worker_dir), limit=1) == (files[:1], True)


async def test_a_link_to_a_host_file_is_refused_not_followed(worker_dir: Path, tmp_path: Path) -> None:
    secret = tmp_path / "shadow"
    secret.write_text("root:$6$secret\n")
    (worker_dir / "fs/data/out/shadow").symlink_to(secret)
    os.symlink("/etc/shadow", worker_dir / "fs/data/out/etc-shadow")
    for path in ("/data/out/shadow", "/data/out/etc-shadow"):
        with pytest.raises(FilesRefused) as refused:
            await fetch(worker_dir, path)
        assert (refused.value.status, refused.value.code) == (403, "output_link_refused")
    files, _ = list_outputs(roots(worker_dir))
    assert all("shadow" not in f["path"] for f in files)
    _, tar_bytes = await fetch(worker_dir, "/data/out")
    assert b"root:$6$secret" not in tar_bytes


async def test_a_linked_directory_to_another_jobs_files_is_refused(worker_dir: Path, tmp_path: Path) -> None:
    other = tmp_path / "other-job" / "fs" / "data" / "out"
    other.mkdir(parents=True)
    (other / "their-model.bin").write_text("not yours")
    (worker_dir / "fs/data/out/theirs").symlink_to(other, target_is_directory=True)
    with pytest.raises(FilesRefused) as refused:
        await fetch(worker_dir, "/data/out/theirs/their-model.bin")
    assert refused.value.code == "output_link_refused"
    _, tar_bytes = await fetch(worker_dir, "/data/out")
    assert b"not yours" not in tar_bytes


async def test_an_output_replaced_by_a_link_is_refused(worker_dir: Path, tmp_path: Path) -> None:
    out = worker_dir / "fs/data/out"
    os.rename(out, tmp_path / "moved")
    os.symlink("/etc", out, target_is_directory=True)
    with pytest.raises(FilesRefused) as refused:
        await fetch(worker_dir, "/data/out/passwd")
    assert refused.value.code == "output_link_refused"
    assert list_outputs(roots(worker_dir)) == ([], False)


@pytest.mark.parametrize(
    ("path", "code"),
    [
        ("/data/out/../../../etc/passwd", "invalid_path"),
        ("/etc/passwd", "output_not_found"),
        ("/data/outside", "output_not_found"),
        ("/data/out/missing.bin", "output_not_found"),
    ],
)
async def test_paths_outside_the_outputs_are_refused(worker_dir: Path, path: str, code: str) -> None:
    with pytest.raises(FilesRefused) as refused:
        await fetch(worker_dir, path)
    assert refused.value.code == code


async def test_a_fifo_is_not_read(worker_dir: Path) -> None:
    os.mkfifo(worker_dir / "fs/data/out/pipe")
    with pytest.raises(FilesRefused) as refused:
        await fetch(worker_dir, "/data/out/pipe")
    assert refused.value.code == "output_not_readable"


def test_the_local_runtime_locates_outputs_where_its_binds_put_them(tmp_path: Path) -> None:
    spec = WorkerSpec.model_validate(
        {
            "worker_id": "w1",
            "job_id": "j1",
            "role": "actor",
            "index": 0,
            "rank": 0,
            "num_nodes": 1,
            "is_header": True,
            "node_name": "n1",
            "outputs": ["/data/out", "/mnt/ds/results", "/scratch/x", "rel/out"],
            "mounts": [
                Mount(type=MountType.HOST_PATH, source="/srv/ds", target="/mnt/ds"),
                Mount(type=MountType.EMPTY_DIR, target="/scratch"),
            ],
        }
    )
    wdir = tmp_path / "w1"
    pod = [host_location(spec, wdir, p, namespaced=True) for p in spec.outputs]
    assert [(r.anchor, r.parts) for r in pod] == [
        (str(wdir), ("fs", "data", "out")),
        ("/", ("srv", "ds", "results")),
        (str(wdir), ("fs", "scratch", "x")),
        (str(wdir), ("work", "rel", "out")),
    ]
    plain = host_location(spec, wdir, "/data/out", namespaced=False)
    assert (plain.anchor, plain.parts) == ("/", ("data", "out"))


def test_a_listing_stops_in_a_tree_of_empty_directories(worker_dir: Path) -> None:
    for index in range(40):
        (worker_dir / "fs/data/out/empty" / f"d{index:02}").mkdir(parents=True)
    files, truncated = list_outputs(roots(worker_dir), limit=3)
    assert truncated is True
    assert len(files) <= 3


def test_a_listing_of_long_nested_names_stops_at_its_byte_budget(worker_dir: Path) -> None:
    deep = worker_dir / "fs/data/out" / ("n" * 200) / ("m" * 200)
    deep.mkdir(parents=True)
    for index in range(20):
        (deep / f"{index:02}-{'x' * 200}").write_text("")
    files, truncated = list_outputs(roots(worker_dir), path_bytes=3000)
    assert truncated is True
    assert sum(len(f["path"]) for f in files) <= 3000


async def test_a_sparse_file_over_the_limit_is_refused_by_its_apparent_size_naming_the_setting(
    worker_dir: Path,
) -> None:
    sparse = worker_dir / "fs/data/out/sparse.img"
    sparse.touch()
    os.truncate(sparse, 20 << 30)  # 20 GiB that take no disk: they would stream whole
    with pytest.raises(FilesRefused) as refused:
        await answer(roots(worker_dir), {"action": "download", "path": "/data/out/sparse.img"})
    assert DEFAULT_MAX_DOWNLOAD_BYTES == 2 << 30
    assert (refused.value.status, refused.value.code) == (413, "download_too_large")
    head = refused.value.head()
    assert head["params"] == {
        "path": "/data/out/sparse.img",
        "size": 20 << 30,
        "limit": DEFAULT_MAX_DOWNLOAD_BYTES,
        "setting": "RLARK_FILES_MAX_DOWNLOAD_BYTES",
    }
    assert "RLARK_FILES_MAX_DOWNLOAD_BYTES" in head["message"]


async def test_a_file_at_the_limit_comes_whole_and_a_directory_over_it_is_refused(worker_dir: Path) -> None:
    size = 300_000
    head, body = await answer(
        roots(worker_dir), {"action": "download", "path": "/data/out/ckpt/model.bin"}, size
    )
    assert head["size"] == size
    assert len(b"".join([chunk async for chunk in body])) == size
    with pytest.raises(FilesRefused) as refused:
        await answer(roots(worker_dir), {"action": "download", "path": "/data/out"}, size)
    assert (refused.value.status, refused.value.code) == (413, "download_too_large")
    assert refused.value.head()["params"]["size"] > size


def append(path: Path, count: int) -> None:
    """The job writing on: ``count`` more bytes at the end of ``path``."""
    with path.open("ab") as grown:
        grown.write(os.urandom(count))


async def test_a_file_that_grows_after_its_head_is_sent_up_to_the_size_announced(worker_dir: Path) -> None:
    model = worker_dir / "fs/data/out/ckpt/model.bin"
    head, body = await answer(roots(worker_dir), {"action": "download", "path": "/data/out/ckpt/model.bin"})
    append(model, 500_000)
    data = b"".join([chunk async for chunk in body])
    assert len(data) == head["size"] == 300_000
    assert data == model.read_bytes()[:300_000]


async def test_a_tar_whose_files_grew_past_the_limit_is_cut(worker_dir: Path) -> None:
    limit = 400_000  # above the 300,009 bytes counted before the head
    head, body = await answer(roots(worker_dir), {"action": "download", "path": "/data/out"}, limit)
    assert head["kind"] == "dir"
    append(worker_dir / "fs/data/out/ckpt/model.bin", 200_000)
    with pytest.raises(FilesRefused) as cut:
        async for _ in body:
            pass
    assert cut.value.code == "download_too_large"
