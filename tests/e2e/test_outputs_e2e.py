"""Output files through the platform (issue 15.3, ADR 0010): a running local-runtime job's outputs are listed
and downloaded through the gateway from the cluster's agent — a 1 GiB file arrives with its checksum while
the memory of the process holding the gateway and the agent stays flat, a directory arrives as tar (with
`rlark jobs download`), links the job planted in its outputs are refused, a sparse 20 GiB file is refused
413 by its apparent size (the agent's download limit), another user gets the scheduler's 404, and the files
stay downloadable after the job ended."""

from __future__ import annotations

import hashlib
import tarfile
from pathlib import Path

import pytest
from agents import local_agent, nodes, write_cluster_file
from jobs import document, role, submit, wait_placeable, wait_status
from stack import Stack, eventually

pytestmark = pytest.mark.e2e

GIB = 1 << 30
RSS_GROWTH_LIMIT = 200 << 20
"""A generous bound: the stream is bounded queues of 64 KiB frames, so a GiB must not grow memory by much."""

RUN = """set -e
out=/outputs
mkdir -p $out/run1/ckpt $out/other
head -c 1073741824 /dev/urandom > $out/big.bin
echo "loss 0.5" > $out/run1/metrics.txt
head -c 100000 /dev/urandom > $out/run1/ckpt/model.bin
truncate -s 20G $out/sparse.img
ln -s /etc/shadow $out/shadow
ln -s /etc $out/run1/etc-dir
echo done > $out/ready
sleep 600
"""


def rss_bytes() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


async def test_outputs_download_through_the_gateway_from_the_agent(stack: Stack, tmp_path: Path) -> None:
    _, token = await stack.new_user()
    _, stranger = await stack.new_user()
    credential = await stack.register_cluster("lab")
    cluster_file = write_cluster_file(tmp_path / "lab.yaml", "lab", nodes("lab", 1))
    async with local_agent(stack.url, credential, cluster_file, tmp_path / "agent") as agent:
        await eventually(lambda: _linked(agent), timeout_s=30, what="the agent's control link")
        doc = document("outputs", [role("actor", 1)], RUN, outputs=["/outputs"])
        await wait_placeable(stack, doc, token=token)
        job_id = (await submit(stack, doc, token=token))["id"]
        running = await wait_status(stack, job_id, {"Running"})
        worker = running["workers"][0]["id"]
        host_file = tmp_path / "agent" / "lab" / "workers" / worker / "fs" / "outputs" / "big.bin"

        async def ready() -> dict | None:  # type: ignore[type-arg]
            async with stack.client(token) as client:
                listing = (await client.get(f"/api/v1/jobs/{job_id}/outputs")).json()
            paths = {f["path"] for f in listing.get("files", [])}
            return listing if "/outputs/ready" in paths else None

        listing = await eventually(ready, timeout_s=120, interval_s=1, what="the job's outputs written")
        by_path = {f["path"]: f for f in listing["files"]}
        assert by_path["/outputs/big.bin"]["size"] == GIB
        assert by_path["/outputs/run1/metrics.txt"]["worker"] == worker
        assert by_path["/outputs/big.bin"]["mtime"] > 0
        assert "/outputs/shadow" not in by_path  # links are not listed
        assert listing["workers"] == [
            {"worker": worker, "source": "agent", "truncated": False, "reason": None}
        ]

        # 1 GiB through agent → gateway → client, all in this process: memory stays flat.
        digest, received, baseline, peak = hashlib.sha256(), 0, rss_bytes(), 0
        async with (
            stack.client(token) as client,
            client.stream(
                "GET",
                f"/api/v1/jobs/{job_id}/outputs/download",
                params={"path": "/outputs/big.bin"},
                timeout=120,
            ) as response,
        ):
            assert response.status_code == 200
            assert response.headers["content-length"] == str(GIB)
            async for chunk in response.aiter_bytes():
                digest.update(chunk)
                received += len(chunk)
                if received % (64 << 20) < len(chunk):
                    peak = max(peak, rss_bytes())
        peak = max(peak, rss_bytes())
        assert received == GIB
        assert digest.hexdigest() == _sha256(host_file)
        print(f"RSS baseline {baseline >> 20} MiB, peak {peak >> 20} MiB during the 1 GiB download")
        assert peak - baseline < RSS_GROWTH_LIMIT

        # A directory as a tar, with the CLI.
        saved = await stack.cli(
            "jobs", "download", job_id, "/outputs/run1", "-o", str(tmp_path / "dl"), token=token
        )
        assert saved.returncode == 0, saved.stderr
        with tarfile.open(tmp_path / "dl" / "run1.tar") as tar:
            assert sorted(tar.getnames()) == ["run1", "run1/ckpt", "run1/ckpt/model.bin", "run1/metrics.txt"]
            metrics = tar.extractfile("run1/metrics.txt")
            assert metrics is not None
            assert metrics.read() == b"loss 0.5\n"
        listed = await stack.cli("jobs", "outputs", job_id, token=token)
        assert listed.returncode == 0, listed.stderr
        assert "/outputs/run1/ckpt/model.bin" in listed.stdout

        async with stack.client(token) as client:
            for link in ("/outputs/shadow", "/outputs/run1/etc-dir/passwd"):
                refused = await client.get(f"/api/v1/jobs/{job_id}/outputs/download", params={"path": link})
                assert refused.status_code == 403, refused.text
                assert refused.json()["error"]["code"] == "output_link_refused"
            outside = await client.get(
                f"/api/v1/jobs/{job_id}/outputs/download", params={"path": "/etc/passwd"}
            )
            assert outside.status_code == 404
            # 20 GiB that take no disk would stream whole: over the agent's 2 GiB limit by its apparent size.
            sparse = await client.get(
                f"/api/v1/jobs/{job_id}/outputs/download", params={"path": "/outputs/sparse.img"}
            )
            assert sparse.status_code == 413, sparse.text
            error = sparse.json()["error"]
            assert (error["code"], error["field"], error["params"]["size"]) == (
                "download_too_large",
                "path",
                20 * GIB,
            )
            assert "RLARK_FILES_MAX_DOWNLOAD_BYTES" in error["message"]
        async with stack.client(stranger) as client:
            hidden = await client.get(
                f"/api/v1/jobs/{job_id}/outputs/download", params={"path": "/outputs/ready"}
            )
            assert hidden.status_code == 404
            assert hidden.json()["error"]["code"] == "job_not_found"

        # After the job ended, while the files exist.
        async with stack.client(token) as client:
            cancelled = await client.post(f"/api/v1/jobs/{job_id}:cancel")
            assert cancelled.status_code in (200, 202), cancelled.text
        await wait_status(stack, job_id, {"Cancelled"})
        async with stack.client(token) as client:
            after = await client.get(
                f"/api/v1/jobs/{job_id}/outputs/download", params={"path": "/outputs/run1/metrics.txt"}
            )
        assert after.status_code == 200, after.text
        assert after.content == b"loss 0.5\n"


async def _linked(agent: object) -> bool:
    link = getattr(agent, "ssh_link", None)
    return link is not None and link.connected.is_set()


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()
