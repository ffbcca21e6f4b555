"""Which test sessions of this checkout use its test servers, so the last one out stops them.

Each ``pytest`` session registers its pid under ``<state>/sessions/`` (``pytest_plugin``'s session hooks);
a fixture that started a server stops it at the end only when no other live session is registered — two
runs side by side (a developer's and a helper's, or two terminals) no longer stop the broker or the
database under each other. A pid left by a killed session is dropped when found dead.
"""

from __future__ import annotations

import os
from pathlib import Path

from rlark_devinfra import paths
from rlark_devinfra.process import pid_alive


def _dir() -> Path:
    return paths.state_dir() / "sessions"


def register() -> None:
    _dir().mkdir(parents=True, exist_ok=True)
    (_dir() / str(os.getpid())).touch()


def unregister() -> None:
    (_dir() / str(os.getpid())).unlink(missing_ok=True)


def others_running() -> bool:
    """Whether another live test session of this checkout is registered."""
    if not _dir().is_dir():
        return False
    for entry in _dir().iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            if pid_alive(int(entry.name)):
                return True
            entry.unlink(missing_ok=True)
    return False


def stop_when_done(started: bool) -> bool:
    """Whether a server this session ``started`` should stop now: not kept on purpose
    (``RLARK_KEEP_SERVERS``) and no other session still uses it."""
    return started and not os.environ.get("RLARK_KEEP_SERVERS") and not others_running()
