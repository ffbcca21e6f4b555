"""Build the Kubernetes test-bed binaries (etcd, kube-apiserver, kwok) from Go modules.

No prebuilt binaries can be downloaded on these machines, so each binary is compiled once per machine
from the Go module proxy inside a small generated Go module under a versioned cache directory
(``cache_dir()/k8s-<version>-v1``). A binary that already exists is never rebuilt, so the second test
run costs nothing. ``k8s.io/kubernetes`` requires its staging modules at ``v0.0.0``; the ``replace``
lines that pin them to the matching ``v0.<minor>.<patch>`` release are generated from its own go.mod
rather than from a hand-kept list.

Builds are niced and run with one package at a time (``-p=1``) because the machines are small and
shared.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from rlark_devinfra.paths import cache_dir

KUBERNETES_VERSION = "v1.36.3"
ETCD_VERSION = "v3.6.16"
KWOK_VERSION = "v0.8.0"
CACHE_KEY = f"k8s-{KUBERNETES_VERSION}-v1"

KWOK_STAGE_FILES = (
    "kustomize/stage/node/fast/node-initialize.yaml",
    "kustomize/stage/node/heartbeat-with-lease/node-heartbeat-with-lease.yaml",
    "kustomize/stage/pod/fast/pod-ready.yaml",
    "kustomize/stage/pod/fast/pod-complete.yaml",
    "kustomize/stage/pod/fast/pod-delete.yaml",
)


@dataclass(frozen=True)
class Binaries:
    """Paths of the built test-bed binaries and KWOK's concatenated stage file."""

    etcd: Path
    kube_apiserver: Path
    kwok: Path
    kwok_stages: Path
    kwok_logs_crd: Path


def root() -> Path:
    """The versioned cache directory holding sources' Go modules and the built binaries."""
    path = cache_dir() / CACHE_KEY
    path.mkdir(parents=True, exist_ok=True)
    return path


def binaries() -> Binaries:
    """Where the binaries are (or will be) — no build is triggered."""
    bin_dir = root() / "bin"
    return Binaries(
        etcd=bin_dir / "etcd",
        kube_apiserver=bin_dir / "kube-apiserver",
        kwok=bin_dir / "kwok",
        kwok_stages=bin_dir / "kwok-stages.yaml",
        kwok_logs_crd=bin_dir / "kwok-logs-crd.yaml",
    )


def is_built() -> bool:
    found = binaries()
    return all(
        p.exists()
        for p in (found.etcd, found.kube_apiserver, found.kwok, found.kwok_stages, found.kwok_logs_crd)
    )


def _go_env(workdir: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["CGO_ENABLED"] = "0"
    env.setdefault("GOFLAGS", "")
    flags = env["GOFLAGS"].split()
    if not any(f.startswith("-p=") for f in flags):
        flags.append("-p=1")
    if not any(f.startswith("-buildvcs") for f in flags):
        flags.append("-buildvcs=false")
    env["GOFLAGS"] = " ".join(flags)
    env["GOWORK"] = "off"
    env.setdefault("GOMAXPROCS", "2")
    return env


def _go(workdir: Path, *args: str, capture: bool = False) -> str:
    """Run ``go`` niced in ``workdir``; raise with the tail of its output on failure."""
    if shutil.which("go") is None:
        raise RuntimeError("the Go toolchain (go) is needed once to build the Kubernetes test bed")
    cmd = ["nice", "-n", "19", "go", *args]
    print(f"[k8s build] ({workdir.name}) {' '.join(args)}", file=sys.stderr, flush=True)
    proc = subprocess.run(cmd, cwd=workdir, env=_go_env(workdir), capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(
            f"go {' '.join(args)} failed in {workdir} (exit {proc.returncode}):\n{proc.stderr[-4000:]}"
        )
    return proc.stdout if capture else ""


def _new_module(path: Path, name: str) -> None:
    path.mkdir(parents=True, exist_ok=True)
    gomod = path / "go.mod"
    if not gomod.exists():
        _go(path, "mod", "init", name)


def _module_dir(workdir: Path, module: str, version: str) -> Path:
    out = _go(workdir, "mod", "download", "-json", f"{module}@{version}", capture=True)
    info = json.loads(out)
    if "Error" in info:
        raise RuntimeError(f"{module}@{version} not served: {info['Error']}")
    return Path(info["Dir"])


def staging_replaces(kubernetes_gomod: str, version: str) -> list[str]:
    """``replace`` lines pinning every ``k8s.io/* v0.0.0`` requirement of kubernetes' go.mod.

    ``version`` is the kubernetes tag (``v1.36.3``); staging modules are tagged ``v0.36.3``.
    """
    staging = "v0." + version.removeprefix("v1.")
    names = sorted(
        set(re.findall(r"^\s*(k8s\.io/[\w.\-/]+) v0\.0\.0(?:\s*//.*)?\s*$", kubernetes_gomod, re.M))
    )
    return [f"replace {name} => {name} {staging}" for name in names]


def godebug_lines(gomod: str) -> list[str]:
    """The ``godebug`` directive(s) of a go.mod (single-line or block), copied verbatim."""
    block = re.search(r"^godebug\s*\((.*?)^\)", gomod, re.M | re.S)
    if block:
        return [f"godebug ({block.group(1)})"]
    return re.findall(r"^godebug\s+.+$", gomod, re.M)


def _build_etcd(target: Path) -> None:
    work = root() / "src-etcd"
    _new_module(work, "rlark.local/etcdbuild")
    _go(work, "get", "-tool", f"go.etcd.io/etcd/server/v3@{ETCD_VERSION}")
    _go(work, "build", "-trimpath", "-o", str(target), "go.etcd.io/etcd/server/v3")


def _build_apiserver(target: Path) -> None:
    work = root() / "src-kubernetes"
    _new_module(work, "rlark.local/kubebuild")
    kdir = _module_dir(work, "k8s.io/kubernetes", KUBERNETES_VERSION)
    kgomod = (kdir / "go.mod").read_text()
    gomod = work / "go.mod"
    text = gomod.read_text()
    if "replace k8s.io/api =>" not in text:
        extra = staging_replaces(kgomod, KUBERNETES_VERSION) + godebug_lines(kgomod)
        gomod.write_text(text.rstrip() + "\n\n" + "\n".join(extra) + "\n")
    _go(work, "get", "-tool", f"k8s.io/kubernetes/cmd/kube-apiserver@{KUBERNETES_VERSION}")
    major_minor = KUBERNETES_VERSION.removeprefix("v").split(".")
    ldflags = " ".join(
        [
            "-s -w",
            f"-X k8s.io/component-base/version.gitVersion={KUBERNETES_VERSION}",
            f"-X k8s.io/component-base/version.gitMajor={major_minor[0]}",
            f"-X k8s.io/component-base/version.gitMinor={major_minor[1]}",
            "-X k8s.io/component-base/version.gitTreeState=clean",
        ]
    )
    _go(
        work,
        "build",
        "-trimpath",
        "-ldflags",
        ldflags,
        "-o",
        str(target),
        "k8s.io/kubernetes/cmd/kube-apiserver",
    )


KWOK_LOGS_CRD = "kustomize/crd/bases/kwok.x-k8s.io_logs.yaml"


def _build_kwok(target: Path, stages: Path, logs_crd: Path) -> None:
    work = root() / "src-kwok"
    _new_module(work, "rlark.local/kwokbuild")
    _go(work, "get", "-tool", f"sigs.k8s.io/kwok/cmd/kwok@{KWOK_VERSION}")
    if not target.exists():
        _go(work, "build", "-trimpath", "-ldflags", "-s -w", "-o", str(target), "sigs.k8s.io/kwok/cmd/kwok")
    kdir = _module_dir(work, "sigs.k8s.io/kwok", KWOK_VERSION)
    parts = []
    for rel in KWOK_STAGE_FILES:
        parts.append((kdir / rel).read_text().strip())
    stages.write_text("\n---\n".join(parts) + "\n")
    # The Logs CRD lets a test give a pod a log file that KWOK serves as its container log.
    logs_crd.write_text((kdir / KWOK_LOGS_CRD).read_text())


def build(only: tuple[str, ...] = ()) -> Binaries:
    """Build what is missing (all three, or the names in ``only``) and return the paths.

    Holds a lock file in the cache directory: two test sessions starting at once build once.
    """
    with (root() / "build.lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            return _build_missing(only)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _build_missing(only: tuple[str, ...]) -> Binaries:
    found = binaries()
    found.etcd.parent.mkdir(parents=True, exist_ok=True)
    wanted = set(only) or {"etcd", "kwok", "kube-apiserver"}
    if "etcd" in wanted and not found.etcd.exists():
        _build_etcd(found.etcd)
    if "kwok" in wanted and not all(p.exists() for p in (found.kwok, found.kwok_stages, found.kwok_logs_crd)):
        _build_kwok(found.kwok, found.kwok_stages, found.kwok_logs_crd)
    if "kube-apiserver" in wanted and not found.kube_apiserver.exists():
        _build_apiserver(found.kube_apiserver)
    return found


def ensure_built() -> Binaries:
    """The binaries, building the missing ones first (8–15 minutes cold on 2 cores)."""
    return binaries() if is_built() else build()
