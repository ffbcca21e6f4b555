"""``python -m rlark_devinfra.prereqs``: every heavy one-time test prerequisite, before the tests run.

Role: the README's test command runs this first, so no test ever carries a download or a build inside
its own timeout (pytest-timeout's 300 s cut off a cold kube-apiserver build on a new CI machine). Each
step is idempotent — a cached build costs a hash or a file check — and says what it does and how long a
cold build takes before it starts. Fixtures never build: they find what is here or fail naming
``make prereqs``.

Caches live under ``RLARK_CACHE_DIR`` (default ``~/.cache/rlark``) keyed by version; Go honours
``GOMODCACHE``/``GOCACHE``, npm ``npm_config_cache`` and uv ``UV_CACHE_DIR`` as they are set.
"""

from __future__ import annotations

import importlib.metadata
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated

import typer

from rlark_devinfra import kafka, paths, product_images, tunnel_dp, versitygw, web
from rlark_devinfra.k8s import build as k8s_build
from rlark_devinfra.k8s import images as k8s_images

RLINF_VERSION = "0.3.0"
"""The RLinf release the end-to-end tests run (the `rlinf` dependency group of the workspace)."""


@dataclass(frozen=True)
class Step:
    """One prerequisite: how to tell it is in place without building, and how to put it there."""

    name: str
    cold: str
    """Cold cost on 2 cores, printed before a build."""
    ready: Callable[[], bool]
    make: Callable[[], object]
    unavailable: Callable[[], str | None] = lambda: None
    """Why this machine cannot have it (say so and go on: the tests that need it fail naming the reason)."""


def _web_ready() -> bool:
    try:
        web.build_web(build_missing=False)
    except web.WebBuildError:
        return False
    return web.node_modules_installed()


def _web_make() -> None:
    web.build_web()
    web.ensure_node_modules()


def _rlinf_ready() -> bool:
    try:
        return importlib.metadata.version("rlinf") == RLINF_VERSION
    except importlib.metadata.PackageNotFoundError:
        return False


def _rlinf_make() -> None:
    """``uv sync --group rlinf`` into this checkout's environment (inexact: nothing else is removed)."""
    uv = shutil.which("uv")
    if uv is None:
        raise RuntimeError("uv is not on PATH: run `make setup` first")
    subprocess.run(
        [uv, "sync", "--frozen", "--inexact", "--quiet", "--group", "rlinf"],
        cwd=paths.repo_root(),
        check=True,
    )


STEPS = (
    Step(
        f"Apache Kafka {kafka.KAFKA_VERSION} broker jars (Maven Central)",
        "~1 min",
        kafka.jars_ready,
        kafka.libs_dir,
    ),
    Step(
        f"Kubernetes test bed: etcd {k8s_build.ETCD_VERSION}, KWOK {k8s_build.KWOK_VERSION}, "
        f"kube-apiserver, kubelet, kube-controller-manager, kube-scheduler, kubectl {k8s_build.KUBERNETES_VERSION} "
        "(Go modules)",
        "~20 min, ~7 min more for the deployment test bed's three",
        k8s_build.is_built,
        k8s_build.build,
    ),
    Step(
        f"real-node images: pause and worker (Debian {k8s_images.DEBIAN_SUITE}, OpenSSH, Ray "
        f"{k8s_images.ray_version()}) as OCI tarballs",
        "~3 min",
        k8s_images.is_built,
        k8s_images.build,
        k8s_images.can_build,
    ),
    Step(
        "network-domain data path rlark-tunnel-dp (Go; golang.org/x/crypto from the module proxy)",
        "~30 s",
        tunnel_dp.is_built,
        tunnel_dp.build,
    ),
    Step(
        f"S3 test server: versitygw {versitygw.VERSION} (Versity S3 Gateway, Go module)",
        versitygw.EXPECTED_BUILD,
        versitygw.is_built,
        versitygw.build,
    ),
    Step("web console (npm ci + Vite build)", "~2 min", _web_ready, _web_make),
    Step(
        "service and agent images from the Dockerfile (buildah; bases from Debian packages) as OCI archives",
        "~5 min cold (twice that on a busy machine), 1–2 min after a source change",
        product_images.is_built,
        product_images.build,
        product_images.can_build,
    ),
    Step(
        f"RLinf {RLINF_VERSION} with torch from PyPI (CPU use; the `rlinf` dependency group, ~5 GB)",
        "~1–3 min with a fast registry",
        _rlinf_ready,
        _rlinf_make,
    ),
)


def missing() -> list[Step]:
    """The steps not in place that this machine can build."""
    return [step for step in STEPS if not step.ready() and step.unavailable() is None]


def ensure_all(echo: Callable[[str], None]) -> float:
    """Bring every step into place; return the seconds spent. Raises what a failing step raised."""
    started = time.monotonic()
    for step in STEPS:
        if step.ready():
            echo(f"prereqs: {step.name}: ready")
            continue
        if reason := step.unavailable():
            echo(f"prereqs: {step.name}: cannot be built here ({reason}); the tests needing it will say so")
            continue
        echo(f"prereqs: {step.name}: not here yet, building (once per machine, {step.cold})…")
        step_started = time.monotonic()
        step.make()
        echo(f"prereqs: {step.name}: ready after {time.monotonic() - step_started:.0f} s")
    return time.monotonic() - started


def main(
    check: Annotated[
        bool, typer.Option("--check", help="Only say what is missing (exit 1 if anything is); build nothing.")
    ] = False,
) -> None:
    """Build or download every heavy one-time test prerequisite that is missing (idempotent)."""

    def echo(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    if check:
        absent = missing()
        for step in STEPS:
            reason = None if step.ready() else step.unavailable()
            state = "MISSING" if step in absent else f"cannot be built here ({reason})" if reason else "ready"
            echo(f"prereqs: {step.name}: {state}")
        raise typer.Exit(1 if absent else 0)
    try:
        spent = ensure_all(echo)
    except Exception as exc:
        echo(f"prereqs: failed: {exc}")
        raise typer.Exit(1) from exc
    echo(f"prereqs: everything in place ({spent:.0f} s)")


if __name__ == "__main__":
    typer.run(main)
