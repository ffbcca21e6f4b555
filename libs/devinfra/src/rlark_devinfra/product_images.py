"""Build the product's images — the ``service`` and ``agent`` targets of the repository's ``Dockerfile`` — without
a Docker engine, once per machine and source state (ADR 0023).

Role: ``make prereqs`` builds them (:func:`build`); tests only look them up (:func:`require_built`) and start
them. The recipe is the ``Dockerfile`` a lab builds with ``docker build``, not a copy of it:

* **Bases.** Docker Hub cannot be reached here, so the Dockerfile's base arguments (``NODE_BASE``, ``GO_BASE``,
  ``PYTHON_BASE``) get images made on this machine from Debian packages by ``mmdebstrap`` (as the real-node
  worker image is, :mod:`rlark_devinfra.k8s.images`), packed by :func:`rlark_devinfra.k8s.oci.pack` into
  ``cache_dir()/product-bases-<key>/``: ``python`` is bookworm's Python 3.11 with pip and venv (what
  ``python:3.11-slim-bookworm`` gives the recipe); ``tools`` is trixie's Node.js 20 and Go 1.24 with npm from
  the npm registry (bookworm's Node.js 18 and Go 1.19 are too old for Vite and the data path's go.mod), for
  the ``web`` and ``tunnel-dp`` stages, whose outputs are files. Keyed by their recipe: built once per machine.
* **Build.** ``buildah build`` (Debian's 1.28) of the Dockerfile with those bases as ``--build-arg``; RUN steps
  use the host's network (the package registries: npm, uv, Go and apt fetch as in a lab), and the host's CA
  bundle is mounted read-only over the image's for the RUN steps only (HTTPS here goes through a proxy only
  the host trusts; a mount leaves nothing in a layer).
* **Key.** The context is staged in a scratch directory: the files the Dockerfile ``COPY``s, less
  ``.dockerignore`` (:func:`context_files`). Their names, modes and bytes, the Dockerfile, and the bases'
  references make ``product-images-<16 hex>``; the archives go to
  ``cache_dir()/product-images-<key>/{service,agent}-oci.tar`` (``buildah push`` to ``oci-archive``, gzip
  layers, what ``docker save``/``podman load`` and a registry take) with ``build.json`` (seconds, bytes).
* **Storage.** buildah's own, ``overlay`` (root, kernel overlayfs), under ``cache_dir()/buildah/storage``; its
  run root is keyed by boot id (stale mount state never outlives a reboot). It keeps the layer cache
  (``--layers``), so a source change rebuilds from the first step it touches. Missing, it is made again from
  the base tarballs.

Concurrency: :func:`build` holds ``product-images.lock`` (flock) in the cache directory, so two sessions build
once; an archive appears under its final name only when complete. Building needs root, ``mmdebstrap``,
``buildah``, ``npm`` and the registries.
"""

from __future__ import annotations

import base64
import contextlib
import fnmatch
import hashlib
import json
import os
import posixpath
import re
import shutil
import stat
import subprocess
import sys
import tarfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from rlark_devinfra.k8s import oci
from rlark_devinfra.paths import NotBuilt, cache_dir, file_lock, repo_root
from rlark_devinfra.process import run_logged

BUILD_COMMAND = "make prereqs"
RECIPE_VERSION = "product-images-v1"
"""Bump when the build changes in a way the key's other inputs do not show (buildah's flags, the staging)."""
TARGETS = ("service", "agent")
REPOSITORY = "rlark.local/rlark-{target}"
STORAGE_DRIVER = "overlay"
HOST_CA_BUNDLE = "/etc/ssl/certs/ca-certificates.crt"
BASE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
EXPECTED = {
    "bases": "~2 min: mmdebstrap of bookworm (Python) and trixie (Node.js, Go) side by side",
    "service": "~2 min cold: npm ci and the console's build beside uv sync; ~1 min after a source change",
    "agent": "~1 min cold, ~30 s after: the Go data path and apt-get on the service's layers",
}
"""Build times on 2 cores, printed before each step so a long silence is expected."""
HEARTBEAT_S = 60.0
KEEP_OTHER_KEYS = 2
"""Archive directories of other source states kept (newest first): another checkout's, the previous commit's."""

NPM_VERSION = "10.8.2"
NPM_INTEGRITY = (
    "sha512-x/AIjFIKRllrhcb48dqUNAAZl0ig9+qMuN91RpZo3Cb2+zuibfh+KISl6+kVVyktDz230JKc208UkQwwMqyB+w=="
)
"""The npm Node.js 20 ships (``node:20`` images carry it), checked against the registry's integrity."""


@dataclass(frozen=True)
class Base:
    """A base image made from Debian packages, standing in for the public image the build arguments name."""

    name: str
    suite: str
    packages: tuple[str, ...]
    env: tuple[str, ...]
    hooks: tuple[str, ...] = ()
    npm: bool = False
    """npm from the npm registry under /usr/local (Debian's npm pulls in a compiler toolchain and 400 packages)."""

    def mirrors(self) -> tuple[str, ...]:
        return (
            f"deb http://deb.debian.org/debian {self.suite} main",
            f"deb http://deb.debian.org/debian-security {self.suite}-security main",
        )


PYTHON_BASE = Base(
    name="python",
    suite="bookworm",
    packages=("python3", "python3-pip", "python3-venv", "python-is-python3", "ca-certificates"),
    # uv's own TLS roots do not hold the host's proxy CA: it reads the system bundle when told.
    env=(f"PATH={BASE_PATH}", "LANG=C.UTF-8", f"SSL_CERT_FILE={HOST_CA_BUNDLE}"),
    # python:3.11-slim's interpreter is not "externally managed": the recipe's `pip install uv` must work.
    hooks=('rm -f "$1"/usr/lib/python3*/EXTERNALLY-MANAGED',),
)
TOOLS_BASE = Base(
    name="tools",
    suite="trixie",
    packages=("nodejs", "golang-go", "ca-certificates"),
    env=(f"PATH={BASE_PATH}", "LANG=C.UTF-8", f"NODE_EXTRA_CA_CERTS={HOST_CA_BUNDLE}"),
    npm=True,
)
BASES = (PYTHON_BASE, TOOLS_BASE)
BUILD_ARGS = {"NODE_BASE": TOOLS_BASE, "GO_BASE": TOOLS_BASE, "PYTHON_BASE": PYTHON_BASE}
"""The Dockerfile's base arguments and the local base each gets."""


@dataclass(frozen=True)
class Images:
    """The archives and the references they load as."""

    root: Path
    service_tar: Path
    service_ref: str
    agent_tar: Path
    agent_ref: str

    def tar(self, target: str) -> Path:
        return {"service": self.service_tar, "agent": self.agent_tar}[target]

    def ref(self, target: str) -> str:
        return {"service": self.service_ref, "agent": self.agent_ref}[target]


# --- the bases ---------------------------------------------------------------------------------------------


def _mmdebstrap_command(base: Base, rootfs: Path) -> list[str]:
    excludes = ("/usr/share/man/*", "/usr/share/doc/*", "/usr/share/locale/*")
    hooks = (
        'rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*',
        # mmdebstrap leaves the build host's; the container runtime mounts the container's own.
        'rm -f "$1"/etc/resolv.conf "$1"/etc/hostname',
        *base.hooks,
    )
    return [
        "mmdebstrap",
        "--variant=minbase",
        "--mode=root",
        # merged /usr by usr-is-merged, not the usrmerge package (which pulls in Perl, ~50 MB)
        "--hook-dir=/usr/share/mmdebstrap/hooks/merged-usr",
        f"--include={','.join(base.packages)}",
        "--dpkgopt=force-unsafe-io",
        *(f"--dpkgopt=path-exclude={pattern}" for pattern in excludes),
        *(f"--customize-hook={hook}" for hook in hooks),
        base.suite,
        str(rootfs),
        *base.mirrors(),
    ]


def bases_key() -> str:
    """``product-bases-<16 hex>`` over the bases' mmdebstrap command lines, environments and npm."""
    digest = hashlib.sha256()
    for base in BASES:
        parts = [base.name, *_mmdebstrap_command(base, Path("rootfs")), *base.env]
        if base.npm:
            parts += [NPM_VERSION, NPM_INTEGRITY]
        for part in parts:
            digest.update(part.encode() + b"\0")
    return f"product-bases-{digest.hexdigest()[:16]}"


def base_ref(base: Base) -> str:
    return f"rlark.local/base-{base.name}:{base.suite}-{bases_key().removeprefix('product-bases-')}"


def base_tar(base: Base) -> Path:
    return cache_dir() / bases_key() / f"{base.name}-oci.tar"


def _build_base(base: Base, scratch: Path) -> None:
    rootfs = scratch / f"{base.name}-rootfs"
    _remove(rootfs)
    try:
        run_logged(
            f"mmdebstrap {base.suite} ({base.name})",
            _mmdebstrap_command(base, rootfs),
            log=_log,
            nice=True,
            heartbeat_s=HEARTBEAT_S,
        )
        if base.npm:
            _add_npm(rootfs, scratch)
        oci.pack(rootfs, base_ref(base), base_tar(base), env=list(base.env), cmd=["/bin/bash"])
    finally:
        _remove(rootfs)


def _add_npm(rootfs: Path, scratch: Path) -> None:
    """npm :data:`NPM_VERSION` (it bundles its dependencies) as ``node:20`` images have it: the package under
    /usr/local/lib/node_modules/npm, ``npm`` and ``npx`` in /usr/local/bin."""
    downloads = scratch / "npm-pack"
    downloads.mkdir(parents=True, exist_ok=True)
    run_logged(
        f"npm pack npm@{NPM_VERSION}",
        ["npm", "pack", f"npm@{NPM_VERSION}", "--pack-destination", str(downloads), "--silent"],
        log=_log,
        cwd=downloads,
    )
    tgz = downloads / f"npm-{NPM_VERSION}.tgz"
    algorithm, _, expected = NPM_INTEGRITY.partition("-")
    actual = base64.b64encode(hashlib.new(algorithm, tgz.read_bytes()).digest()).decode()
    if actual != expected:
        raise RuntimeError(f"{tgz.name}: {algorithm} {actual} is not the pinned {expected}")
    target = rootfs / "usr/local/lib/node_modules/npm"
    target.mkdir(parents=True)
    with tarfile.open(tgz) as archive:
        for member in archive.getmembers():
            member.name = member.name.removeprefix("package/")
            if member.name and member.name != "package":
                archive.extract(member, target, filter="data")
    for command in ("npm", "npx"):
        (rootfs / "usr/local/bin" / command).symlink_to(f"../lib/node_modules/npm/bin/{command}-cli.js")


# --- the context and the key -------------------------------------------------------------------------------


def _instructions(dockerfile: str) -> Iterator[tuple[str, str]]:
    """(INSTRUCTION, arguments) of each Dockerfile instruction, continuation lines joined, comments dropped."""
    logical = ""
    for line in dockerfile.splitlines():
        if not logical and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if line.rstrip().endswith("\\"):
            logical += line.rstrip()[:-1] + " "
            continue
        logical += line
        word, _, rest = logical.strip().partition(" ")
        yield word.upper(), rest.strip()
        logical = ""


def context_sources(dockerfile: str) -> list[str]:
    """The context paths the Dockerfile's ``COPY``/``ADD`` instructions read (not ``--from`` another stage)."""
    sources: list[str] = []
    for instruction, rest in _instructions(dockerfile):
        if instruction not in ("COPY", "ADD"):
            continue
        words = json.loads(rest) if rest.startswith("[") else rest.split()
        if any(word.startswith("--from") for word in words):
            continue
        for source in [word for word in words if not word.startswith("--")][:-1]:
            path = posixpath.normpath(source)
            if path not in sources:
                sources.append(path)
    return sources


def dockerignore_patterns(text: str) -> list[str]:
    """The patterns of a ``.dockerignore``. Exceptions (``!``) are refused: :func:`is_ignored` does not
    implement them, and an exception it missed would leave a file out of the key that the build reads."""
    patterns = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("!"):
            raise ValueError(
                f".dockerignore exception {line!r}: not supported by rlark_devinfra.product_images"
            )
        patterns.append(posixpath.normpath(line.lstrip("/")))
    return patterns


def _match(pattern: list[str], parts: list[str]) -> bool:
    if not pattern:
        return not parts
    if pattern[0] == "**":
        return any(_match(pattern[1:], parts[i:]) for i in range(len(parts) + 1))
    return bool(parts) and fnmatch.fnmatchcase(parts[0], pattern[0]) and _match(pattern[1:], parts[1:])


def is_ignored(path: str, patterns: list[str]) -> bool:
    """Whether Docker's rules leave the context-relative ``path`` out: a pattern (``*``, ``?``, ``[…]`` within a
    name, ``**`` across directories) matches it or a directory above it."""
    parts = path.split("/")
    return any(
        _match(pattern.split("/"), parts[:depth])
        for pattern in patterns
        for depth in range(1, len(parts) + 1)
    )


def context_files(repo: Path | None = None) -> list[str]:
    """The context-relative paths a build of ``repo``'s Dockerfile reads: the Dockerfile, ``.dockerignore`` and
    every file under a ``COPY`` source that ``.dockerignore`` leaves in. Ignored directories are not walked."""
    repo = repo or repo_root()
    patterns = dockerignore_patterns((repo / ".dockerignore").read_text())
    found = {"Dockerfile", ".dockerignore"}
    for source in context_sources((repo / "Dockerfile").read_text()):
        start = repo / source
        if start.is_file() or start.is_symlink():
            if not is_ignored(source, patterns):
                found.add(source)
            continue
        if not start.is_dir():
            raise RuntimeError(f"the Dockerfile copies {source}, which {repo} does not have")
        for folder, dirs, files in os.walk(start):
            here = Path(folder).relative_to(repo).as_posix()
            dirs[:] = sorted(d for d in dirs if not is_ignored(f"{here}/{d}", patterns))
            found.update(f"{here}/{name}" for name in files if not is_ignored(f"{here}/{name}", patterns))
    return sorted(found)


def cache_key(repo: Path | None = None) -> str:
    """``product-images-<16 hex of sha256>`` over :data:`RECIPE_VERSION`, the bases' references and each
    context file's path, kind (file, executable, link) and bytes or link target."""
    repo = repo or repo_root()
    digest = hashlib.sha256()
    for part in (RECIPE_VERSION, *(f"{arg}={base_ref(base)}" for arg, base in BUILD_ARGS.items())):
        digest.update(part.encode() + b"\0")
    for rel in context_files(repo):
        path = repo / rel
        info = path.lstat()
        if stat.S_ISLNK(info.st_mode):
            kind, data = b"l", os.readlink(path).encode()
        else:
            kind, data = (b"x" if info.st_mode & 0o111 else b"f"), path.read_bytes()
        digest.update(rel.encode() + b"\0" + kind + b"\0" + hashlib.sha256(data).digest())
    return f"product-images-{digest.hexdigest()[:16]}"


def images(key: str | None = None) -> Images:
    """Where the archives for the current sources are (or will be) — no build."""
    key = key or cache_key()
    folder = cache_dir() / key
    tag = key.removeprefix("product-images-")
    return Images(
        root=folder,
        service_tar=folder / "service-oci.tar",
        service_ref=f"{REPOSITORY.format(target='service')}:{tag}",
        agent_tar=folder / "agent-oci.tar",
        agent_ref=f"{REPOSITORY.format(target='agent')}:{tag}",
    )


def missing() -> list[str]:
    """The targets (``service``, ``agent``) not built for the current sources, in build order."""
    found = images()
    return [target for target in TARGETS if not found.tar(target).exists()]


def is_built() -> bool:
    return not missing()


def require_built() -> Images:
    """The archives, or :class:`NotBuilt` naming the command — never a build."""
    found = images()
    if absent := [target for target in TARGETS if not found.tar(target).exists()]:
        raise NotBuilt(
            f"the {' and '.join(absent)} image(s) are not built for these sources ({found.root} has no "
            f"{', '.join(f'{t}-oci.tar' for t in absent)}): run `{BUILD_COMMAND}` (or `uv run python -m "
            "rlark_devinfra.product_images`) first, as root"
        )
    return found


_TOOLS = ("mmdebstrap", "buildah", "npm", "nice")


def can_build() -> str | None:
    """Why this machine cannot build the images (not root, a tool missing), or None when it can."""
    reasons = []
    if os.geteuid() != 0:
        reasons.append("needs root (mmdebstrap --mode=root, buildah's overlay storage)")
    if absent := [tool for tool in _TOOLS if shutil.which(tool) is None]:
        reasons.append(f"missing {', '.join(absent)} (make setup installs buildah and mmdebstrap)")
    return "; ".join(reasons) or None


# --- buildah -----------------------------------------------------------------------------------------------


def storage_root() -> Path:
    return cache_dir() / "buildah" / "storage"


def run_root() -> Path:
    """buildah's run root (locks, mount state), one per boot: what a reboot left behind is never read."""
    boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()[:8]
    return cache_dir() / "buildah" / f"run-{boot}"


def buildah(*args: str) -> list[str]:
    """A ``buildah`` command line on the images' own storage."""
    return [
        "buildah",
        "--root",
        str(storage_root()),
        "--runroot",
        str(run_root()),
        "--storage-driver",
        STORAGE_DRIVER,
        *args,
    ]


def _has_image(ref: str) -> bool:
    found = subprocess.run(buildah("inspect", "--type", "image", ref), capture_output=True, check=False)
    return found.returncode == 0


def _ensure_base_in_storage(base: Base) -> None:
    ref = base_ref(base)
    if _has_image(ref):
        return
    _log(f"loading the {base.name} base into buildah's storage ({ref})")
    image_id = run_logged(
        f"buildah pull {base.name}", buildah("pull", "-q", f"oci-archive:{base_tar(base)}"), log=_log
    ).split()[-1]
    run_logged(f"buildah tag {base.name}", buildah("tag", image_id, ref), log=_log)


def _stage_context(repo: Path, context: Path) -> None:
    """Copy :func:`context_files` into ``context``: the build reads exactly what the key hashed."""
    _remove(context)
    for rel in context_files(repo):
        target = context / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(repo / rel, target, follow_symlinks=False)


def _build_target(target: str, ref: str, context: Path, out: Path) -> None:
    command = [
        "build",
        "--layers",
        "--jobs=2",
        "--pull=never",
        "--network=host",
        f"--target={target}",
        f"--tag={ref}",
        f"--file={context / 'Dockerfile'}",
    ]
    command += [f"--build-arg={arg}={base_ref(base)}" for arg, base in BUILD_ARGS.items()]
    if Path(HOST_CA_BUNDLE).is_file():
        command.append(f"--volume={HOST_CA_BUNDLE}:{HOST_CA_BUNDLE}:ro")
    run_logged(f"buildah build --target {target}", buildah(*command, str(context)), log=_log, nice=True)
    partial = out.with_name(f".{out.name}.partial")
    partial.unlink(missing_ok=True)
    run_logged(f"buildah push {target}", buildah("push", "-q", ref, f"oci-archive:{partial}:{ref}"), log=_log)
    os.chmod(partial, 0o644)
    partial.rename(out)


def _image_size(ref: str) -> str:
    listed = subprocess.run(buildah("images", "--json", ref), capture_output=True, text=True, check=False)
    with contextlib.suppress(ValueError, IndexError, KeyError):
        return str(json.loads(listed.stdout)[0]["size"])
    return "?"


# --- the build ---------------------------------------------------------------------------------------------


def build() -> Images:
    """Build what is missing for the current sources (about 5 minutes cold on 2 cores, 1–2 after a source
    change) and return the archives. Raises RuntimeError when :func:`can_build` gives a reason."""
    if not missing():
        return images()
    if reason := can_build():
        raise RuntimeError(f"cannot build the service and agent images here: {reason}")
    repo = repo_root()
    with file_lock(cache_dir() / "product-images.lock"):
        scratch = cache_dir() / "product-images-scratch"
        _remove(scratch)
        scratch.mkdir(parents=True)
        seconds: dict[str, float] = {}
        try:
            # Keyed by the staged copy, not the checkout: an edit made meanwhile never lands under the old key.
            context = scratch / "context"
            _stage_context(repo, context)
            key = cache_key(context)
            found = images(key)
            todo = [target for target in TARGETS if not found.tar(target).exists()]
            if not todo:
                return found
            started = time.monotonic()
            if absent := [base for base in BASES if not base_tar(base).exists()]:
                _log(f"building the base images {', '.join(b.name for b in absent)} ({EXPECTED['bases']})…")
                with ThreadPoolExecutor(max_workers=len(absent)) as pool:
                    for done in [pool.submit(_build_base, base, scratch) for base in absent]:
                        done.result()
                _remove_other(bases_key(), "product-bases-")
            storage_root().mkdir(parents=True, exist_ok=True)
            _remove_stale_run_roots()
            # Working containers an interrupted build left (this lock excludes any other build here).
            subprocess.run(buildah("rm", "--all"), capture_output=True, check=False)
            for base in BASES:
                _ensure_base_in_storage(base)
            seconds["bases"] = time.monotonic() - started
            found.root.mkdir(parents=True, exist_ok=True)
            for target in todo:
                _log(f"building the {target} image {found.ref(target)} ({EXPECTED[target]})…")
                started = time.monotonic()
                _build_target(target, found.ref(target), context, found.tar(target))
                seconds[target] = time.monotonic() - started
                _log(
                    f"{target}: {seconds[target]:.0f} s, {_image_size(found.ref(target))} "
                    f"({_mib(found.tar(target))} as a gzip OCI archive)"
                )
        finally:
            _remove(scratch)
        report = {
            "key": key,
            "seconds": {name: round(value, 1) for name, value in seconds.items()},
            "archive_bytes": {target: found.tar(target).stat().st_size for target in TARGETS},
            "image_size": {target: _image_size(found.ref(target)) for target in TARGETS},
        }
        (found.root / "build.json").write_text(json.dumps(report, indent=2) + "\n")
        _forget_other_keys(key)
    return found


def _forget_other_keys(key: str) -> None:
    """Keep the :data:`KEEP_OTHER_KEYS` newest other archive directories; untag older images in the storage
    (their layers stay while the layer cache uses them)."""
    others = sorted(
        (
            p
            for p in cache_dir().glob("product-images-*")
            if p.is_dir() and p.name not in (key, "product-images-scratch")
        ),
        key=lambda p: p.stat().st_mtime,
        reverse=True,
    )
    for old in others[KEEP_OTHER_KEYS:]:
        _remove(old)
    kept = {
        key.removeprefix("product-images-"),
        *(p.name.removeprefix("product-images-") for p in others[:KEEP_OTHER_KEYS]),
    }
    listed = subprocess.run(buildah("images", "--json"), capture_output=True, text=True, check=False)
    with contextlib.suppress(ValueError):
        for image in json.loads(listed.stdout or "[]"):
            for name in image.get("names") or []:
                repository, _, tag = name.rpartition(":")
                if repository in {REPOSITORY.format(target=t) for t in TARGETS} and tag not in kept:
                    subprocess.run(buildah("rmi", name), capture_output=True, check=False)


def _remove_other(keep: str, prefix: str) -> None:
    for old in cache_dir().glob(f"{prefix}*"):
        if old.is_dir() and old.name != keep:
            _remove(old)


def _remove_stale_run_roots() -> None:
    current = run_root()
    for old in (cache_dir() / "buildah").glob("run-*"):
        if old != current:
            _remove(old)


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)


def _log(message: str) -> None:
    print(f"[product images] {message}", file=sys.stderr, flush=True)


def _mib(path: Path) -> str:
    return f"{path.stat().st_size / (1 << 20):.0f} MiB"


def dockerfile_base_args(dockerfile: str) -> dict[str, str]:
    """The Dockerfile's ``ARG NAME=default`` lines before its first ``FROM`` (the base arguments)."""
    found: dict[str, str] = {}
    for instruction, rest in _instructions(dockerfile):
        if instruction == "FROM":
            break
        if instruction == "ARG" and (match := re.fullmatch(r"(\w+)=(\S+)", rest)):
            found[match[1]] = match[2]
    return found


if __name__ == "__main__":
    print(build())
