"""Build the two OCI images the test bed's real kubelets run, once per machine and recipe.

No registry can be reached from a pod here, so containerd imports both images from tarballs
(``ctr -n k8s.io images import``):

* :data:`PAUSE_IMAGE` — the pod sandbox: a static Go program (``assets/pause/main.go``) that sleeps until
  SIGTERM/SIGINT and reaps children; containerd's ``sandbox_image`` names it.
* the worker image (:func:`worker_ref`) — Debian bookworm minbase (``mmdebstrap``) with python3, sshd and
  the networking tools, a user ``rlark`` (uid/gid 1000: pods run as 1000 and sshd needs its passwd
  entry) and a venv ``/opt/ray`` with the workspace's locked ``ray[default]``, installed by pip in a
  chroot, with what the network sidecar needs beside it (asyncssh, pydantic-settings);
* the sidecar image (:func:`sidecar_ref`) — the worker image with ``rlark_tunnel_agent`` on top as one more
  layer (``PYTHONPATH``): the network sidecar's TUN device and the files sidecar run from it. Keyed by the
  package's sources, so it follows the checkout (~10 s; containerd stores the shared layer once).

The tarballs go to ``cache_dir()/realpods-images-<key>``, where the key hashes every input of the recipe
(Ray version, Debian suite and packages, the pause source, :data:`RECIPE_VERSION`): a change gives a new
directory and one build, every checkout on the machine shares the result. This is the recipe measured in
``libs/devinfra/realpods`` (its README), made a library.

Concurrency: :func:`build` holds ``build.lock`` (flock) in the cache directory, so two sessions build once;
each tarball appears under its final name only when complete (:func:`rlark_devinfra.k8s.oci.pack`
renames), and the scratch trees are removed afterwards. Building needs root (mmdebstrap ``--mode=root``,
chroot, mounting ``/proc``), Go and the Debian and PyPI mirrors; ``make prereqs`` builds, tests only
look up (:func:`require_built`).
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.metadata
import importlib.util
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from rlark_devinfra.k8s import oci
from rlark_devinfra.paths import NotBuilt, cache_dir, file_lock
from rlark_devinfra.process import run_logged

PAUSE_IMAGE = "rlark.local/pause:3.10"
WORKER_REPOSITORY = "rlark.local/rlark-worker"
RECIPE_VERSION = "realpods-images-v1"
"""Bump when the recipe changes in a way the other key inputs do not show (``oci.pack``, the chroot setup)."""

DEBIAN_SUITE = "bookworm"
DEBIAN_MIRRORS = (
    "deb http://deb.debian.org/debian bookworm main",
    "deb http://deb.debian.org/debian-security bookworm-security main",
)
WORKER_PACKAGES = ("python3", "python3-venv", "openssh-server", "iproute2", "procps", "ca-certificates")
WORKER_USER, WORKER_UID, WORKER_GID = "rlark", 1000, 1000
WORKER_HOME, WORKER_SHELL = "/home/rlark", "/bin/bash"
RAY_VENV = "/opt/ray"
BASE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

PAUSE_TAR = "pause-oci.tar"
WORKER_TAR = "worker-oci.tar"
BUILD_COMMAND = "make prereqs"
EXPECTED = {
    "pause": "~10 s",
    "worker": "~70 s on 2 cores: Debian ~30 s, Ray from PyPI ~30 s, packing ~5 s",
    "sidecar": "~10 s: the agent's package on the worker image, again whenever its sources change",
}
"""Cold build times, printed before each build so a long silence is expected."""
HEARTBEAT_S = 60.0
"""How often a long step says it is still working."""


@dataclass(frozen=True)
class Images:
    """The image tarballs and the references they import as."""

    pause_tar: Path
    pause_ref: str
    worker_tar: Path
    worker_ref: str
    sidecar_tar: Path
    sidecar_ref: str


def ray_version() -> str:
    """The Ray version locked in the workspace (the worker image's venv gets the same)."""
    return importlib.metadata.version("ray")


def worker_ref() -> str:
    return f"{WORKER_REPOSITORY}:{DEBIAN_SUITE}-ray{ray_version()}"


SIDECAR_REPOSITORY = "rlark.local/rlark-sidecar"
SIDECAR_PACKAGE = "rlark_tunnel_agent"
SIDECAR_PYTHONPATH = "/opt/rlark/python"
SIDECAR_DEPENDENCIES = ("asyncssh", "pydantic-settings")
"""What ``rlark_tunnel_agent.tunnel.sidecar`` imports beyond the standard library and pydantic (Ray's): the
worker image's venv gets them at the workspace's locked versions."""


def _sidecar_requirements() -> str:
    return " ".join(f'"{name}=={importlib.metadata.version(name)}"' for name in SIDECAR_DEPENDENCIES)


def _sidecar_sources() -> Path:
    spec = importlib.util.find_spec(SIDECAR_PACKAGE)
    if spec is None or spec.origin is None:
        raise RuntimeError(f"{SIDECAR_PACKAGE} is not installed in this environment (uv sync)")
    return Path(spec.origin).parent


def sidecar_key() -> str:
    """16 hex of sha256 over the agent package's Python files: the sidecar image follows the sources."""
    digest = hashlib.sha256()
    folder = _sidecar_sources()
    for path in sorted(folder.rglob("*.py")):
        digest.update(str(path.relative_to(folder)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def sidecar_ref() -> str:
    """The network (and files) sidecar image: the worker image with the agent's package on top."""
    return f"{SIDECAR_REPOSITORY}:{sidecar_key()}"


def _pause_sources() -> dict[str, bytes]:
    """``assets/pause``'s files by name (``main.go``, ``go.mod``)."""
    folder = resources.files("rlark_devinfra").joinpath("assets/pause")
    return {entry.name: entry.read_bytes() for entry in sorted(folder.iterdir(), key=lambda e: e.name)}


def cache_key() -> str:
    """``realpods-images-<first 16 hex of sha256 over the recipe's inputs>``: the image references (so the Ray
    version), the mmdebstrap command line, the Ray install script, the pause sources and
    :data:`RECIPE_VERSION`."""
    digest = hashlib.sha256()
    parts = [
        RECIPE_VERSION.encode(),
        PAUSE_IMAGE.encode(),
        worker_ref().encode(),
        # The Debian suite, mirrors, packages, excludes and hooks (the rlark user), and the Ray install.
        *(arg.encode() for arg in _mmdebstrap_command(Path("rootfs"))),
        _ray_script().encode(),
    ]
    for name, data in _pause_sources().items():
        parts += [name.encode(), data]
    for part in parts:
        digest.update(part + b"\0")
    return f"realpods-images-{digest.hexdigest()[:16]}"


def root() -> Path:
    """The versioned cache directory of the current recipe (not created here)."""
    return cache_dir() / cache_key()


def images() -> Images:
    """Where the tarballs are (or will be) — no build."""
    folder = root()
    return Images(
        pause_tar=folder / PAUSE_TAR,
        pause_ref=PAUSE_IMAGE,
        worker_tar=folder / WORKER_TAR,
        worker_ref=worker_ref(),
        sidecar_tar=folder / f"sidecar-{sidecar_key()}-oci.tar",
        sidecar_ref=sidecar_ref(),
    )


def missing() -> list[str]:
    """Names of the images (``pause``, ``worker``, ``sidecar``) not built yet, in build order."""
    found = images()
    tars = (("pause", found.pause_tar), ("worker", found.worker_tar), ("sidecar", found.sidecar_tar))
    return [name for name, path in tars if not path.exists()]


def is_built() -> bool:
    return not missing()


def require_built() -> Images:
    """The images, or :class:`NotBuilt` naming the command — never a build."""
    if absent := missing():
        raise NotBuilt(
            f"the real-pod images are not built ({', '.join(absent)} missing under {root()}): "
            f"run `{BUILD_COMMAND}` (or `uv run python -m rlark_devinfra.k8s.images`) first, as root, "
            "once per machine"
        )
    return images()


_TOOLS = ("mmdebstrap", "chroot", "go", "tar", "mount", "umount", "nice")


def can_build() -> str | None:
    """Why this machine cannot build the images (not root, a tool missing), or None when it can."""
    reasons = []
    if os.geteuid() != 0:
        reasons.append("needs root (mmdebstrap --mode=root, chroot, mounting /proc)")
    if absent := [tool for tool in _TOOLS if shutil.which(tool) is None]:
        reasons.append(f"missing {', '.join(absent)} (mmdebstrap: apt-get install mmdebstrap)")
    return "; ".join(reasons) or None


def build() -> Images:
    """Build the missing images (about 70 s cold on 2 cores) and return the paths.

    Raises RuntimeError when :func:`can_build` gives a reason and something is missing.
    """
    if not missing():
        return images()
    if reason := can_build():
        raise RuntimeError(f"cannot build the real-pod images here: {reason}")
    folder = root()
    folder.mkdir(parents=True, exist_ok=True)
    with file_lock(folder / "build.lock"):
        found = images()
        scratch = folder / "scratch"
        builders = {
            "pause": lambda: _build_pause(found, scratch),
            "worker": lambda: _build_worker(found, scratch),
            "sidecar": lambda: _build_sidecar(found, scratch),
        }
        for name in missing():
            _log(f"building the {name} image (once per machine, {EXPECTED[name]})…")
            started = time.monotonic()
            _remove_scratch(scratch)
            try:
                builders[name]()
            finally:
                _remove_scratch(scratch)
            tar = {"pause": found.pause_tar, "worker": found.worker_tar, "sidecar": found.sidecar_tar}[name]
            _log(f"{name} image built in {time.monotonic() - started:.0f} s: {tar} ({_mib(tar)})")
        return found


def _build_pause(found: Images, scratch: Path) -> None:
    src, rootfs = scratch / "pause-src", scratch / "pause-rootfs"
    src.mkdir(parents=True)
    rootfs.mkdir()
    # Built from a copy outside the checkout: no VCS stamping, and the package may be installed read-only.
    for name, data in _pause_sources().items():
        (src / name).write_bytes(data)
    env = {**os.environ, "CGO_ENABLED": "0", "GOWORK": "off", "GOFLAGS": "-buildvcs=false"}
    _run(
        "go build pause",
        ["go", "build", "-trimpath", "-ldflags", "-s -w", "-o", str(rootfs / "pause"), "."],
        cwd=src,
        env=env,
    )
    oci.pack(rootfs, found.pause_ref, found.pause_tar, entrypoint=["/pause"])


def _build_worker(found: Images, scratch: Path) -> None:
    rootfs = scratch / "worker-rootfs"
    scratch.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    _run("mmdebstrap", _mmdebstrap_command(rootfs), nice=True)
    _log(f"Debian {DEBIAN_SUITE} rootfs in {time.monotonic() - started:.0f} s")
    started = time.monotonic()
    _install_ray(rootfs)
    _log(f"ray[default]=={ray_version()} in {RAY_VENV} in {time.monotonic() - started:.0f} s")
    started = time.monotonic()
    oci.pack(
        rootfs,
        found.worker_ref,
        found.worker_tar,
        cmd=["/bin/bash"],
        env=[f"PATH={RAY_VENV}/bin:{BASE_PATH}"],
    )
    _log(f"packed in {time.monotonic() - started:.0f} s")


def _build_sidecar(found: Images, scratch: Path) -> None:
    """The agent's package as one more layer on the worker image (``PYTHONPATH``); older sidecar tarballs of
    this directory are removed (one per source state would pile up)."""
    layer = scratch / "sidecar-layer"
    target = layer / SIDECAR_PYTHONPATH.lstrip("/") / SIDECAR_PACKAGE
    shutil.copytree(_sidecar_sources(), target, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    oci.pack(
        layer,
        found.sidecar_ref,
        found.sidecar_tar,
        env=[f"PATH={RAY_VENV}/bin:{BASE_PATH}", f"PYTHONPATH={SIDECAR_PYTHONPATH}"],
        base=found.worker_tar,
    )
    for old in found.sidecar_tar.parent.glob("sidecar-*-oci.tar"):
        if old != found.sidecar_tar:
            old.unlink(missing_ok=True)


def _mmdebstrap_command(rootfs: Path) -> list[str]:
    excludes = ("/usr/share/man/*", "/usr/share/doc/*", "/usr/share/locale/*")
    hooks = (
        'rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*',
        'rm -f "$1"/etc/ssh/ssh_host_*',
        # mmdebstrap leaves the build host's; the container runtime mounts the pod's own.
        'rm -f "$1"/etc/resolv.conf "$1"/etc/hostname',
        f'chroot "$1" groupadd -g {WORKER_GID} {WORKER_USER}',
        f'chroot "$1" useradd -u {WORKER_UID} -g {WORKER_GID} -m -d {WORKER_HOME} -s {WORKER_SHELL} {WORKER_USER}',
    )
    return [
        "mmdebstrap",
        "--variant=minbase",
        "--mode=root",
        f"--include={','.join(WORKER_PACKAGES)}",
        *(f"--dpkgopt=path-exclude={pattern}" for pattern in excludes),
        *(f"--customize-hook={hook}" for hook in hooks),
        DEBIAN_SUITE,
        str(rootfs),
        *DEBIAN_MIRRORS,
    ]


_PASSED_ENV = (
    "http_proxy",
    "https_proxy",
    "no_proxy",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "NO_PROXY",
    "PIP_INDEX_URL",
    "PIP_EXTRA_INDEX_URL",
    "PIP_TRUSTED_HOST",
    "PIP_DEFAULT_TIMEOUT",
)
"""Host settings that reach pip in the chroot; nothing else of the host's environment does (its venv,
``PIP_FIND_LINKS`` and the like name host paths)."""


def _install_ray(rootfs: Path) -> None:
    """``python3 -m venv /opt/ray`` and pip-install the locked ``ray[default]`` inside the rootfs.

    For the install only, the chroot gets the host's CA bundle (HTTPS goes through an intercepting proxy
    whose CA only the host trusts) and resolv.conf; the image's own files are put back afterwards.
    """
    host_files = ("/etc/ssl/certs/ca-certificates.crt", "/etc/resolv.conf")
    env = {"PATH": BASE_PATH, "HOME": "/root", "LANG": "C.UTF-8"}
    env |= {name: os.environ[name] for name in _PASSED_ENV if name in os.environ}
    env |= {
        "PIP_CERT": host_files[0],
        "SSL_CERT_FILE": host_files[0],
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
    }
    with _host_files(rootfs, host_files), _proc_mounted(rootfs):
        _run("pip install ray", ["chroot", str(rootfs), "/bin/sh", "-c", _ray_script()], env=env, nice=True)


def _ray_script() -> str:
    """The shell run in the chroot: the venv, the locked Ray (pip compiles the .pyc files: the venv is
    read-only to the pods' uid 1000), and an import as the check."""
    return (
        f"python3 -m venv {RAY_VENV} && "
        f'{RAY_VENV}/bin/pip install --no-cache-dir -q "ray[default]=={ray_version()}" {_sidecar_requirements()} && '
        f'{RAY_VENV}/bin/python -c "import ray; print(ray.__version__)"'
    )


@contextlib.contextmanager
def _host_files(rootfs: Path, paths: tuple[str, ...]) -> Iterator[None]:
    """The host's copies of ``paths`` inside ``rootfs`` while held; the image's own (file or link, or
    none) put back after."""
    placed: list[tuple[Path, Path | None]] = []  # (path in the rootfs, the image's own moved aside)
    try:
        for path in paths:
            inside = rootfs / path.lstrip("/")
            aside = None
            if inside.exists() or inside.is_symlink():
                aside = inside.with_name(f".{inside.name}.rlark-image")
                inside.rename(aside)
            placed.append((inside, aside))
            shutil.copyfile(path, inside)
        yield
    finally:
        for inside, aside in placed:
            inside.unlink(missing_ok=True)
            if aside is not None:
                aside.rename(inside)


@contextlib.contextmanager
def _proc_mounted(rootfs: Path) -> Iterator[None]:
    proc = rootfs / "proc"
    subprocess.run(["mount", "-t", "proc", "proc", str(proc)], check=True)
    try:
        yield
    finally:
        if subprocess.run(["umount", str(proc)], check=False).returncode != 0:
            subprocess.run(["umount", "-l", str(proc)], check=False)


def _remove_scratch(scratch: Path) -> None:
    """Remove the scratch trees — never through a mount point left by an interrupted build."""
    if not scratch.exists():
        return
    for proc in scratch.glob("*/proc"):
        if os.path.ismount(proc):
            subprocess.run(["umount", "-l", str(proc)], check=False)
            if os.path.ismount(proc):
                raise RuntimeError(f"{proc} is still mounted: unmount it, then remove {scratch}")
    shutil.rmtree(scratch)


def _run(
    label: str,
    cmd: list[str],
    *,
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
    nice: bool = False,
) -> None:
    """Run ``cmd`` (``nice -n 10`` when ``nice``), saying every minute that it still runs; raise with the
    tail of its output on failure."""
    run_logged(label, cmd, log=_log, cwd=cwd, env=env, nice=nice, heartbeat_s=HEARTBEAT_S)


def _log(message: str) -> None:
    print(f"[k8s images] {message}", file=sys.stderr, flush=True)


def _mib(path: Path) -> str:
    return f"{path.stat().st_size / (1 << 20):.0f} MiB"


if __name__ == "__main__":
    print(build())
