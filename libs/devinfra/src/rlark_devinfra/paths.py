"""Where devinfra keeps state (per checkout) and heavy one-time builds (per machine, versioned)."""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path


class NotBuilt(RuntimeError):
    """A heavy prerequisite (`make prereqs` builds it) is missing: the message names the command. Fixtures
    raise it instead of building inside a test's timeout."""


def repo_root() -> Path:
    """The checkout this package was installed from (the uv workspace root)."""
    here = Path(__file__).resolve()
    for parent in here.parents:
        if (parent / "uv.lock").exists() and (parent / "services").is_dir():
            return parent
    return Path.cwd()


def state_dir() -> Path:
    """Data, logs and PID files of servers started for this checkout (``RLARK_STATE_DIR`` overrides)."""
    configured = os.environ.get("RLARK_STATE_DIR")
    path = Path(configured) if configured else repo_root() / ".state"
    path.mkdir(parents=True, exist_ok=True)
    return path


def cache_dir() -> Path:
    """Builds shared by every checkout on this machine, keyed by version (``RLARK_CACHE_DIR`` overrides)."""
    configured = os.environ.get("RLARK_CACHE_DIR")
    base = Path(configured) if configured else Path.home() / ".cache" / "rlark"
    base.mkdir(parents=True, exist_ok=True)
    return base


@contextlib.contextmanager
def file_lock(path: Path) -> Iterator[None]:
    """Exclusive among processes of this machine while held (``flock`` on ``path``, created if missing)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
