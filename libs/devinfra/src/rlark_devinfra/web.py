"""Build the web console once per source version and put its static files in ``web/dist``.

Role: the gateway, end-to-end tests and ``make run`` need the built console, but ``npm ci`` and a
Vite build cost a minute on a small machine. The build is keyed by the sha256 of everything that
shapes it (``package-lock.json``, ``package.json``, ``index.html``, the config files and every file
under ``web/src``) and kept under ``cache_dir()/web-<key>``, shared by every checkout on the machine.
``build_web()`` then copies it into ``web/dist`` (gitignored). When nothing changed it only hashes
the sources: no npm, no node.

``npm ci`` runs only when ``web/node_modules`` was installed from another ``package-lock.json``
(a marker file records the lock's hash); its output is kept quiet and shown only on failure.
Concurrent callers (test workers, two checkouts) serialise on a file lock in the cache directory.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import AbstractContextManager
from pathlib import Path

from rlark_devinfra.paths import cache_dir, file_lock, repo_root

KEY_FILES = ("package-lock.json", "package.json", "index.html", "vite.config.ts", "tsconfig.json")
"""Files of ``web/`` (besides ``src/`` and ``public/``) whose content changes the build."""
KEY_DIRS = ("src", "public")
INSTALL_MARKER = ".rlark-lock-sha256"
"""Written into ``node_modules`` after ``npm ci``: the hash of the lock file it installed."""
DIST_MARKER = ".rlark-build-key"
"""Written into ``web/dist``: the key of the cached build it was copied from."""
OUTPUT_TAIL_LINES = 60


class WebBuildError(RuntimeError):
    """npm is missing, or ``npm ci`` / ``npm run build`` failed; the message has the output tail."""


def web_dir() -> Path:
    """The console's source tree (``<checkout>/web``)."""
    return repo_root() / "web"


def _key_inputs(web: Path) -> Iterator[Path]:
    for name in KEY_FILES:
        path = web / name
        if path.is_file():
            yield path
    for name in KEY_DIRS:
        root = web / name
        if root.is_dir():
            yield from sorted(p for p in root.rglob("*") if p.is_file())


def source_key(web: Path | None = None) -> str:
    """A short hex digest of every input of the build: equal keys give identical ``dist`` trees."""
    web = web or web_dir()
    if not (web / "package-lock.json").is_file():
        lock = web / "package-lock.json"
        raise WebBuildError(f"{lock} is missing: the console's dependencies are not locked")
    digest = hashlib.sha256()
    for path in sorted(_key_inputs(web), key=lambda p: p.relative_to(web).as_posix()):
        digest.update(path.relative_to(web).as_posix().encode())
        digest.update(b"\0")
        digest.update(path.read_bytes())
        digest.update(b"\0")
    return digest.hexdigest()[:24]


def _file_sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _run(command: list[str], cwd: Path) -> None:
    """Run ``command`` quietly; on failure raise with what it printed (the end of it)."""
    env = {**os.environ, "CI": "true", "NO_UPDATE_NOTIFIER": "1", "npm_config_fund": "false"}
    env.setdefault("npm_config_audit", "false")
    result = subprocess.run(
        command,
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        tail = "\n".join(result.stdout.splitlines()[-OUTPUT_TAIL_LINES:])
        raise WebBuildError(
            f"`{' '.join(command)}` in {cwd} failed with exit code {result.returncode}:\n{tail}"
        )


def _npm() -> str:
    npm = shutil.which("npm")
    if npm is None:
        raise WebBuildError("npm is not on PATH: install Node.js 20 or newer to build the web console")
    return npm


def node_modules_installed(web: Path | None = None) -> bool:
    """Whether ``node_modules`` holds the packages of this lock file (no npm call)."""
    web = web or web_dir()
    marker = web / "node_modules" / INSTALL_MARKER
    return marker.is_file() and marker.read_text().strip() == _file_sha256(web / "package-lock.json")


def ensure_node_modules(web: Path | None = None) -> bool:
    """``npm ci`` unless ``node_modules`` already holds this lock file's packages; True if it ran."""
    web = web or web_dir()
    if node_modules_installed(web):
        return False
    _run([_npm(), "ci", "--no-audit", "--no-fund", "--loglevel=error"], web)
    (web / "node_modules" / INSTALL_MARKER).write_text(_file_sha256(web / "package-lock.json") + "\n")
    return True


def _build_lock() -> AbstractContextManager[None]:
    return file_lock(cache_dir() / "web.lock")


def _build_into_cache(web: Path, key: str, target: Path) -> None:
    ensure_node_modules(web)
    staging = target.with_name(f".{target.name}.tmp-{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    try:
        _run([_npm(), "run", "build", "--", "--outDir", str(staging), "--emptyOutDir"], web)
        if not (staging / "index.html").is_file():
            raise WebBuildError(f"the build finished but wrote no index.html into {staging}")
        (staging / DIST_MARKER).write_text(key + "\n")
        shutil.rmtree(target, ignore_errors=True)
        staging.rename(target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _install_dist(web: Path, key: str, built: Path) -> Path:
    """Copy ``built`` into ``web/dist`` unless it already holds this key's build."""
    dist = web / "dist"
    marker = dist / DIST_MARKER
    if dist.is_dir() and not dist.is_symlink() and marker.is_file() and marker.read_text().strip() == key:
        return dist
    staging = web / f".dist.tmp-{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    shutil.copytree(built, staging)
    if dist.is_symlink() or dist.is_file():
        dist.unlink()
    else:
        shutil.rmtree(dist, ignore_errors=True)
    staging.rename(dist)
    return dist


def build_web(force: bool = False, build_missing: bool = True) -> Path:
    """``web/dist`` holding the console built from the current sources; builds only when needed.

    ``force`` rebuilds even when the cache has this key (e.g. after a Node upgrade). Raises
    :class:`WebBuildError` with the tool's output when npm is missing or a step fails, and — with
    ``build_missing=False`` (tests: the build belongs before them) — naming ``make prereqs`` when
    these sources were never built.
    """
    web = web_dir()
    key = source_key(web)
    target = cache_dir() / f"web-{key}"
    if not build_missing and not (target / "index.html").is_file():
        raise WebBuildError(
            f"the console is not built for these sources (no {target}): run `make prereqs` "
            "(or `uv run python -m rlark_devinfra.web`) first"
        )
    if force or not (target / "index.html").is_file():
        with _build_lock():
            if force or not (target / "index.html").is_file():
                _build_into_cache(web, key, target)
    return _install_dist(web, key, target)


def main() -> int:
    """``python -m rlark_devinfra.web [--force] [--install]``: build if needed and print the dist path;
    ``--install`` also makes sure ``node_modules`` is installed (the component tests need it even when the
    built console came from the cache)."""
    try:
        print(build_web(force="--force" in sys.argv[1:]))
        if "--install" in sys.argv[1:]:
            ensure_node_modules()
    except WebBuildError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
