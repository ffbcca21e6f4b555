"""The files sidecar's server (ADR 0013) with the agent's client: real files in a temporary volume, served
over TCP exactly as the local agent serves them — listings, files, directories as tar — and refused the same
way (``..``, a path outside the outputs, a planted link); a wrong secret or a proof made for another
connection gets nothing; TensorBoard is started on demand and reached through the same connection (a
stand-in program that answers like an HTTP server keeps the test fast)."""

from __future__ import annotations

import asyncio
import io
import json
import os
import sys
import tarfile
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from rlark_contracts.relay import TENSORBOARD_PATH
from rlark_devinfra.testing import free_port
from rlark_tunnel_agent import files_server
from rlark_tunnel_agent.agent import pod_files
from rlark_tunnel_agent.agent.files import FilesRefused
from rlark_tunnel_agent.agent.tensorboards import TensorBoards
from rlark_tunnel_agent.files_server import FilesServer, listener_owned_by, proof, roots_from_json
from rlark_tunnel_agent.runtime.driver import FilesEndpoint, OutputRoot

SECRET = "worker-secret-7d1f"
STAND_IN_TENSORBOARD = [
    sys.executable,
    "-c",
    "import socket, sys; a = sys.argv; port = int(a[a.index('--port') + 1]); "
    "prefix = a[a.index('--path_prefix') + 1]; logdir = a[a.index('--logdir') + 1]; "
    "s = socket.socket(); s.bind(('127.0.0.1', port)); s.listen()\n"
    "while True:\n"
    "    c, _ = s.accept(); c.recv(65536)\n"
    "    c.sendall(f'HTTP/1.0 200 OK\\r\\n\\r\\n{prefix} {logdir}'.encode()); c.close()",
]


@pytest.fixture
def volume(tmp_path: Path) -> Path:
    """A volume as the sidecar sees it: the output ``out`` with files, a link the job planted, a file beside."""
    volume = tmp_path / "ckpt"
    (volume / "out" / "sub").mkdir(parents=True)
    (volume / "out" / "a.txt").write_text("alpha")
    (volume / "out" / "sub" / "b.bin").write_bytes(os.urandom(300_000))
    (volume / "out" / "escape").symlink_to("/etc/passwd")
    (volume / "beside.txt").write_text("not an output")
    return volume


@pytest.fixture
async def endpoint(volume: Path, tmp_path: Path) -> AsyncIterator[FilesEndpoint]:
    roots = roots_from_json(json.dumps([{"path": "/ckpt/out", "anchor": str(volume), "parts": ["out"]}]))
    board_dir = tmp_path / "boards"
    board_dir.mkdir()
    server = FilesServer(
        SECRET, "job-1", roots, str(board_dir), TensorBoards(), tensorboard_program=STAND_IN_TENSORBOARD
    )
    port = free_port()
    listener = await asyncio.start_server(server.handle, "127.0.0.1", port, limit=files_server.LINE_BYTES)
    try:
        yield FilesEndpoint("127.0.0.1", port, SECRET)
    finally:
        listener.close()
        await listener.wait_closed()
        server.tensorboards.stop_all()


async def fetch(endpoint: FilesEndpoint, **order: str) -> tuple[dict[str, object], bytes]:
    head, body = await pod_files.answer(endpoint, order)
    return head, b"".join([chunk async for chunk in body])


async def test_a_listing_names_the_outputs_regular_files_and_leaves_links_out(
    endpoint: FilesEndpoint,
) -> None:
    head, content = await fetch(endpoint, action="list")
    listed = {entry["path"]: entry["size"] for entry in map(json.loads, content.splitlines())}
    assert head == {"ok": True, "kind": "list", "count": 2, "truncated": False}
    assert listed == {"/ckpt/out/a.txt": 5, "/ckpt/out/sub/b.bin": 300_000}


async def test_a_file_and_a_directory_are_downloaded_whole(endpoint: FilesEndpoint, volume: Path) -> None:
    head, content = await fetch(endpoint, action="download", path="/ckpt/out/sub/b.bin")
    assert head == {"ok": True, "kind": "file", "name": "b.bin", "size": 300_000}
    assert content == (volume / "out" / "sub" / "b.bin").read_bytes()

    head, content = await fetch(endpoint, action="download", path="/ckpt/out")
    assert head == {"ok": True, "kind": "dir", "name": "out"}
    with tarfile.open(fileobj=io.BytesIO(content)) as tar:
        assert sorted(tar.getnames()) == ["out", "out/a.txt", "out/sub", "out/sub/b.bin"]


@pytest.mark.parametrize(
    ("path", "status", "code"),
    [
        ("/ckpt/out/../beside.txt", 400, "invalid_path"),
        ("/ckpt/beside.txt", 404, "output_not_found"),
        ("/ckpt/out/escape", 403, "output_link_refused"),
    ],
)
async def test_paths_leaving_the_outputs_are_refused(
    endpoint: FilesEndpoint, path: str, status: int, code: str
) -> None:
    with pytest.raises(FilesRefused) as refused:
        await pod_files.answer(endpoint, {"action": "download", "path": path})
    assert (refused.value.status, refused.value.code) == (status, code)


async def test_a_wrong_secret_gets_nothing(endpoint: FilesEndpoint) -> None:
    wrong = FilesEndpoint(endpoint.host, endpoint.port, "not-the-secret")
    with pytest.raises(FilesRefused) as refused:
        await pod_files.answer(wrong, {"action": "list"})
    assert (refused.value.status, refused.value.code) == (403, "files_secret_refused")


async def test_a_proof_made_for_another_connection_is_refused(endpoint: FilesEndpoint) -> None:
    request = {"op": "files", "action": "list", "path": ""}
    reader, writer = await asyncio.open_connection(endpoint.host, endpoint.port)
    try:
        nonce = (await files_server.read_line(reader))["nonce"]
        replayed = proof(SECRET, "0" * len(nonce), request)
        writer.write(files_server.line({**request, "proof": replayed}))
        head = await files_server.read_line(reader)
        assert head["code"] == "files_secret_refused"
        assert await reader.read() == b""  # and nothing follows
    finally:
        writer.close()


async def test_a_content_without_its_end_frame_is_cut() -> None:
    reader = asyncio.StreamReader()
    reader.feed_data(files_server.frame(b"part of a file"))
    reader.feed_eof()
    frames = files_server.read_frames(reader)
    assert await anext(frames) == b"part of a file"
    with pytest.raises(ConnectionError, match="before the end"):
        await anext(frames)


async def test_tensorboard_is_started_on_demand_and_reached_through_the_files_server(
    endpoint: FilesEndpoint, tmp_path: Path
) -> None:
    connected = await pod_files.open_tensorboard(endpoint)
    try:
        connected.writer.write(b"GET / HTTP/1.0\r\n\r\n")
        answer = await asyncio.wait_for(connected.reader.read(), 30)
    finally:
        connected.writer.close()
    assert answer.startswith(b"HTTP/1.0 200 OK")
    assert answer.endswith(f"{TENSORBOARD_PATH.format(job_id='job-1')} {tmp_path / 'boards'}".encode())
    with pytest.raises(LookupError, match="the request does not prove the worker's secret"):
        await pod_files.open_tensorboard(FilesEndpoint(endpoint.host, endpoint.port, "wrong"))


async def test_a_worker_without_a_tensorboard_dir_says_so(volume: Path) -> None:
    server = FilesServer(SECRET, "job-1", [OutputRoot("/ckpt/out", str(volume), ("out",))])
    port = free_port()
    listener = await asyncio.start_server(server.handle, "127.0.0.1", port)
    try:
        with pytest.raises(LookupError, match="declares no tensorboardDir"):
            await pod_files.open_tensorboard(FilesEndpoint("127.0.0.1", port, SECRET))
    finally:
        listener.close()


async def test_only_the_process_holding_the_listener_owns_it() -> None:
    port = free_port()
    listener = await asyncio.start_server(lambda _r, w: w.close(), "127.0.0.1", port)
    try:
        assert listener_owned_by(os.getpid(), port)
        assert not listener_owned_by(1, port)
        assert not listener_owned_by(os.getpid(), free_port())
    finally:
        listener.close()


async def test_the_sidecars_command_serves_with_the_secret_from_its_environment(volume: Path) -> None:
    port = free_port()
    roots = json.dumps([{"path": "/ckpt/out", "anchor": str(volume), "parts": ["out"]}])
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "rlark_tunnel_agent.files_server",
        *("--host", "127.0.0.1", "--port", str(port), "--job", "job-1", "--roots", roots),
        env={**os.environ, "RLARK_FILES_SECRET": SECRET},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    try:
        assert process.stdout is not None
        while b"files server listening" not in (
            said := await asyncio.wait_for(process.stdout.readline(), 30)
        ):
            assert said, "the files server ended before it listened"
        head, content = await fetch(FilesEndpoint("127.0.0.1", port, SECRET), action="list")
        assert head["count"] == 2
        assert b"/ckpt/out/a.txt" in content
    finally:
        process.terminate()
        assert await asyncio.wait_for(process.wait(), 30) == 0  # SIGTERM: a clean stop


def test_the_sidecar_refuses_to_start_without_its_secret(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RLARK_FILES_SECRET", raising=False)
    with pytest.raises(SystemExit, match="RLARK_FILES_SECRET"):
        files_server.main(["--port", "1", "--job", "job-1"])
    monkeypatch.setenv("RLARK_FILES_SECRET", SECRET)
    with pytest.raises(SystemExit, match="--roots"):
        files_server.main(["--port", "1", "--job", "job-1", "--roots", "{not json"])


async def test_the_sidecar_refuses_a_download_over_the_limit_the_agent_sent(endpoint: FilesEndpoint) -> None:
    order = {"action": "download", "path": "/ckpt/out/sub/b.bin", "max_bytes": 299_999}
    with pytest.raises(FilesRefused) as refused:
        await pod_files.answer(endpoint, order)
    assert (refused.value.status, refused.value.code) == (413, "download_too_large")
    head, _ = await pod_files.answer(endpoint, {**order, "max_bytes": 300_000})
    assert head["size"] == 300_000
