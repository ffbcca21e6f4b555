"""Build ``rlark-tunnel-dp``, the network-domain data path (Go), once per machine and source.

The sources live in ``services/tunnel_agent/dataplane`` (ADR 0008); the only module they need,
golang.org/x/crypto, comes from the Go module proxy and is pinned by the committed go.sum. The
binary goes to ``cache_dir()/tunnel-dp-<hash of the sources>/rlark-tunnel-dp``: a change to any
source gives a new key (and one build), every checkout with the same sources shares the binary.
``make prereqs`` builds it; the test bed, the benchmark and the dev stack only look it up
(``require_built``) and never build inside a test.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from rlark_devinfra.paths import NotBuilt, cache_dir, repo_root

BUILD_COMMAND = "make prereqs"
BINARY = "rlark-tunnel-dp"
_SOURCE_SUFFIXES = (".go", ".mod", ".sum")


def source_dir() -> Path:
    return repo_root() / "services" / "tunnel_agent" / "dataplane"


def _sources() -> list[Path]:
    return sorted(p for p in source_dir().iterdir() if p.suffix in _SOURCE_SUFFIXES and p.is_file())


def cache_key() -> str:
    """``tunnel-dp-<first 16 hex of sha256 over the sources' names and bytes>``."""
    digest = hashlib.sha256()
    for path in _sources():
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return f"tunnel-dp-{digest.hexdigest()[:16]}"


def binary() -> Path:
    """Where the binary for the current sources is (or will be) — no build."""
    return cache_dir() / cache_key() / BINARY


def is_built() -> bool:
    return binary().exists()


def require_built() -> Path:
    """The binary, or :class:`NotBuilt` naming the command — never a build."""
    path = binary()
    if not path.exists():
        raise NotBuilt(
            f"the tunnel data path is not built for these sources ({path} missing): run `{BUILD_COMMAND}` "
            "(or `uv run python -m rlark_devinfra.tunnel_dp`) first"
        )
    return path


def build() -> Path:
    """Build the binary if missing (about 30 s cold on 2 cores, most of it fetching x/crypto)."""
    target = binary()
    target.parent.mkdir(parents=True, exist_ok=True)
    with (target.parent / "build.lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if target.exists():
            return target
        go = shutil.which("go")
        if go is None:
            raise RuntimeError("the Go toolchain (go) is needed once to build the tunnel data path")
        env = {**os.environ, "CGO_ENABLED": "0", "GOWORK": "off", "GOFLAGS": "-mod=readonly -buildvcs=false"}
        partial = target.with_suffix(".partial")
        started = time.monotonic()
        print(f"[tunnel-dp] building {BINARY} ({target.parent.name})…", file=sys.stderr, flush=True)
        result = subprocess.run(
            ["nice", "-n", "19", go, "build", "-trimpath", "-ldflags", "-s -w", "-o", str(partial), "."],
            cwd=source_dir(),
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
        if result.returncode != 0:
            raise RuntimeError(
                f"go build in {source_dir()} failed (exit {result.returncode}):\n{result.stderr[-4000:]}"
            )
        partial.rename(target)
        print(
            f"[tunnel-dp] built in {time.monotonic() - started:.0f} s: {target}", file=sys.stderr, flush=True
        )
        return target


if __name__ == "__main__":
    print(build())
