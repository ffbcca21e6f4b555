"""Build the Kubernetes test-bed binaries from Go modules: etcd, kube-apiserver, kwok, kubelet, and for the
deployment test bed (ADR 0027) kube-controller-manager, kube-scheduler and kubectl (whose ``kustomize`` and
``apply -k`` are what a lab runs).

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
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from rlark_devinfra.paths import NotBuilt, cache_dir

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
    kubelet: Path
    """The real kubelet of the test bed's real nodes (`realnode`); built from the kube-apiserver's module."""
    kube_controller_manager: Path
    """Deployments, ReplicaSets, Jobs, EndpointSlices, ServiceAccount tokens (the deployment test bed)."""
    kube_scheduler: Path
    """Binds the deployment test bed's pods to its real nodes."""
    kubectl: Path
    """``kubectl kustomize`` / ``kubectl apply -k``: the lab's own commands (kustomize is built into it)."""


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
        kubelet=bin_dir / "kubelet",
        kube_controller_manager=bin_dir / "kube-controller-manager",
        kube_scheduler=bin_dir / "kube-scheduler",
        kubectl=bin_dir / "kubectl",
    )


def is_built() -> bool:
    return not missing()


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


HEARTBEAT_S = 60.0
"""How often a long ``go`` step says it is still working (a cold kube-apiserver build is silent for minutes)."""


def _go(workdir: Path, *args: str, capture: bool = False) -> str:
    """Run ``go`` niced in ``workdir``, printing a line every minute it runs; raise with the tail of
    its output on failure."""
    if shutil.which("go") is None:
        raise RuntimeError("the Go toolchain (go) is needed once to build the Kubernetes test bed")
    cmd = ["nice", "-n", "19", "go", *args]
    print(f"[k8s build] ({workdir.name}) go {' '.join(args)}", file=sys.stderr, flush=True)
    started = time.monotonic()
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(cmd, cwd=workdir, env=_go_env(workdir), stdout=out, stderr=err)
        while True:
            try:
                proc.wait(timeout=HEARTBEAT_S)
                break
            except subprocess.TimeoutExpired:
                minutes = (time.monotonic() - started) / 60
                print(
                    f"[k8s build] ({workdir.name}) still running: {minutes:.0f} min",
                    file=sys.stderr,
                    flush=True,
                )
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read().decode(errors="replace"), err.read().decode(errors="replace")
    if proc.returncode != 0:
        raise RuntimeError(
            f"go {' '.join(args)} failed in {workdir} (exit {proc.returncode}):\n{stderr[-4000:]}"
        )
    return stdout if capture else ""


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


def _kubernetes_module() -> Path:
    """The generated module that builds ``k8s.io/kubernetes`` commands, its staging modules pinned."""
    work = root() / "src-kubernetes"
    _new_module(work, "rlark.local/kubebuild")
    kdir = _module_dir(work, "k8s.io/kubernetes", KUBERNETES_VERSION)
    kgomod = (kdir / "go.mod").read_text()
    gomod = work / "go.mod"
    text = gomod.read_text()
    if "replace k8s.io/api =>" not in text:
        extra = staging_replaces(kgomod, KUBERNETES_VERSION) + godebug_lines(kgomod)
        gomod.write_text(text.rstrip() + "\n\n" + "\n".join(extra) + "\n")
    return work


def _build_kubernetes_command(command: str, target: Path) -> None:
    """``k8s.io/kubernetes/cmd/<command>`` at the pinned version, stamped with it (``--version``)."""
    work = _kubernetes_module()
    _go(work, "get", "-tool", f"k8s.io/kubernetes/cmd/{command}@{KUBERNETES_VERSION}")
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
        f"k8s.io/kubernetes/cmd/{command}",
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
    """Build what is missing (all four, or the names in ``only``) and return the paths.

    Holds a lock file in the cache directory: two test sessions starting at once build once.
    """
    with (root() / "build.lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            return _build_missing(only)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


DEPLOYMENT_COMMANDS = ("kubelet", "kube-controller-manager", "kube-scheduler", "kubectl")
"""Commands of ``k8s.io/kubernetes`` built after kube-apiserver (they reuse its compiled packages)."""

BUILD_COMMAND = "make prereqs"
"""What a person runs to build the test bed (and every other heavy test prerequisite) before the tests."""

EXPECTED = {
    "etcd": "~3 min",
    "kwok": "~3 min",
    "kube-apiserver": "~15 min",
    "kubelet": "~2 min after kube-apiserver",
    "kube-controller-manager": "~4 min after kube-apiserver",
    "kube-scheduler": "~2 min after kube-apiserver",
    "kubectl": "~3 min after kube-apiserver",
}
"""Cold build times on 2 cores, printed before each build so a long silence is expected."""


def missing() -> list[str]:
    """Names of the binaries (or KWOK's stage files) not built yet, in build order."""
    found = binaries()
    names = []
    if not found.etcd.exists():
        names.append("etcd")
    if not all(p.exists() for p in (found.kwok, found.kwok_stages, found.kwok_logs_crd)):
        names.append("kwok")
    if not found.kube_apiserver.exists():
        names.append("kube-apiserver")
    for name in DEPLOYMENT_COMMANDS:
        if not (found.kubelet.parent / name).exists():
            names.append(name)
    return names


def require_built() -> Binaries:
    """The binaries, or :class:`NotBuilt` naming the command — never a build (tests call this inside
    their timeout; the build belongs before them)."""
    if absent := missing():
        raise NotBuilt(
            f"the Kubernetes test bed is not built ({', '.join(absent)} missing under {root() / 'bin'}): "
            f"run `{BUILD_COMMAND}` (or `uv run python -m rlark_devinfra.k8s build`) first, "
            "once per machine"
        )
    return binaries()


def _build_missing(only: tuple[str, ...]) -> Binaries:
    found = binaries()
    found.etcd.parent.mkdir(parents=True, exist_ok=True)
    versions = {
        "etcd": ETCD_VERSION,
        "kwok": KWOK_VERSION,
        "kube-apiserver": KUBERNETES_VERSION,
        **dict.fromkeys(DEPLOYMENT_COMMANDS, KUBERNETES_VERSION),
    }

    def command(name: str) -> Callable[[], None]:
        return lambda: _build_kubernetes_command(name, found.kubelet.parent / name)

    builders: dict[str, Callable[[], None]] = {
        "etcd": lambda: _build_etcd(found.etcd),
        "kwok": lambda: _build_kwok(found.kwok, found.kwok_stages, found.kwok_logs_crd),
        "kube-apiserver": lambda: _build_kubernetes_command("kube-apiserver", found.kube_apiserver),
        **{name: command(name) for name in DEPLOYMENT_COMMANDS},
    }
    for name in missing():
        if only and name not in only:
            continue
        print(
            f"[k8s build] building {name} {versions[name]} from Go modules "
            f"(once per machine, {EXPECTED[name]} on 2 cores)…",
            file=sys.stderr,
            flush=True,
        )
        started = time.monotonic()
        builders[name]()
        print(f"[k8s build] {name} built in {time.monotonic() - started:.0f} s", file=sys.stderr, flush=True)
    return found


def ensure_built() -> Binaries:
    """The binaries, building the missing ones first (about 20 minutes cold on 2 cores)."""
    return build() if missing() else binaries()
