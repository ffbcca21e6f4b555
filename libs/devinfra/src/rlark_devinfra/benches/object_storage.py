"""Benchmark: file throughput through a worker's bucket mount (rclone FUSE) against the S3 API directly.

ADR 0024 mounts an `objectStorage` mount with `rclone mount --vfs-cache-mode writes`, made by the local
runtime's own code (`runtime/local/object_storage.py`: the same flags, credentials in rclone's environment).
This measures what that costs against the S3 API on the same versitygw server, same bucket, same payload
(random bytes, so nothing compresses):

- write, S3 API: `put_object` of each file from memory;
- write, mount: `open(..., "wb")` + 1 MiB writes + `close()` of each file, then the mount's drain (rclone's
  `vfs/stats` empty): the time until the files are in the bucket, as a job's checkpoint needs them; the time
  until the last `close()` returned is reported beside it (what the job itself waits for);
- read, S3 API: `get_object` of each file, read whole;
- read, mount: the same objects read whole through a second, read-only mount of their prefix (not cached by
  rclone: `writes` caches only what was written).

    uv run python -m rlark_devinfra.benches.object_storage [--files N] [--mib M]

prints one JSON object: MB/s per path and the ratios mount / S3 API. Needs root (a FUSE mount other users
read, as the agent makes it), rclone, and the versitygw binary (`make prereqs`).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from rlark_contracts.storage import parse_bucket_url, parse_s3_credentials
from rlark_tunnel_agent.runtime.driver import Mount, MountType
from rlark_tunnel_agent.runtime.local import object_storage

from rlark_devinfra import versitygw

CHUNK = 1 << 20


def _mb_per_s(total_bytes: int, seconds: float) -> float:
    return total_bytes / 1e6 / seconds


def run(files: int = 4, mib: int = 64, rounds: int = 1) -> dict[str, Any]:
    """Measure (see the module docstring); the median of `rounds` for each path."""
    if os.geteuid() != 0:
        raise PermissionError("the bucket mount is made as the agent makes it: as root")
    rclone = shutil.which("rclone")
    if rclone is None:
        raise FileNotFoundError("rclone is not installed (apt-get install rclone fuse3)")
    started_here = not versitygw.status().running
    current = versitygw.start()
    assert current.endpoint is not None
    server = versitygw.S3Server(current.endpoint, versitygw.REGION, versitygw.admin_keys())
    bucket = server.create_bucket("bench")
    try:
        keys = server.bucket_keys(bucket)
        s3 = server.client(keys)
        credentials = parse_s3_credentials(server.credential_document(keys))
        payload = os.urandom(mib << 20)
        total = files * len(payload)
        samples: dict[str, list[float]] = {
            k: [] for k in ("api_write", "api_read", "fs_write", "fs_close", "fs_read")
        }
        for round_no in range(rounds):
            prefix = f"r{round_no}"
            began = time.perf_counter()
            for i in range(files):
                s3.put_object(Bucket=bucket, Key=f"{prefix}/api/{i}.bin", Body=payload)
            samples["api_write"].append(time.perf_counter() - began)
            began = time.perf_counter()
            for i in range(files):
                body = s3.get_object(Bucket=bucket, Key=f"{prefix}/api/{i}.bin")["Body"]
                while body.read(CHUNK):
                    pass
            samples["api_read"].append(time.perf_counter() - began)
            with tempfile.TemporaryDirectory(prefix="rlark-bench-s3-") as scratch:
                storage = Path(scratch) / "object-storage" / "bench"
                mounts = [
                    Mount(type=MountType.OBJECT_STORAGE, source=f"s3://{bucket}/{prefix}/fs", target="/w"),
                    Mount(
                        type=MountType.OBJECT_STORAGE,
                        source=f"s3://{bucket}/{prefix}/api",
                        target="/r",
                        read_only=True,
                    ),
                ]
                plans = [
                    object_storage.StorageMount(i, m, parse_bucket_url(m.source), credentials)
                    for i, m in enumerate(mounts)
                ]
                object_storage.mount_all(
                    plans, storage, rclone=rclone, uid=0, token=f"bench/{bucket}", wait_s=60
                )
                try:
                    write_dir = object_storage.staging_dir(storage, 0)
                    began = time.perf_counter()
                    for i in range(files):
                        with open(write_dir / f"{i}.bin", "wb") as fh:
                            for offset in range(0, len(payload), CHUNK):
                                fh.write(payload[offset : offset + CHUNK])
                    samples["fs_close"].append(time.perf_counter() - began)
                    left = object_storage.drain(storage, 600, poll_s=0.05)
                    samples["fs_write"].append(time.perf_counter() - began)
                    if left:
                        raise RuntimeError(f"uploads left after 600 s: {left}")
                    read_dir = object_storage.staging_dir(storage, 1)
                    began = time.perf_counter()
                    for i in range(files):
                        with open(read_dir / f"{i}.bin", "rb") as fh:
                            while fh.read(CHUNK):
                                pass
                    samples["fs_read"].append(time.perf_counter() - began)
                finally:
                    for rc in storage.glob("rc-*.json"):
                        with_pid = json.loads(rc.read_text())
                        with contextlib.suppress(ProcessLookupError):
                            os.kill(int(with_pid["pid"]), signal.SIGTERM)
                    time.sleep(0.5)
                    object_storage.unmount(storage)
            stored = s3.head_object(Bucket=bucket, Key=f"{prefix}/fs/{files - 1}.bin")["ContentLength"]
            if stored != len(payload):
                raise RuntimeError(f"the mount stored {stored} bytes, not {len(payload)}")
        medians = {k: statistics.median(v) for k, v in samples.items()}
        mbps = {k: _mb_per_s(total, s) for k, s in medians.items()}
        return {
            "files": files,
            "mib": mib,
            "rounds": rounds,
            "seconds": medians,
            "mb_per_s": mbps,
            "write_ratio": mbps["fs_write"] / mbps["api_write"],
            "read_ratio": mbps["fs_read"] / mbps["api_read"],
            "samples": samples,
        }
    finally:
        server.delete_bucket(bucket)
        if started_here:
            versitygw.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=4)
    parser.add_argument("--mib", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args()
    print(json.dumps(run(args.files, args.mib, args.rounds), indent=2))


if __name__ == "__main__":
    main()
