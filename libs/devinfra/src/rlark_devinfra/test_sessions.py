"""The test servers of one checkout, shared by every test session that runs at the same time.

Several sessions use one checkout's servers at once: ``make test``'s two pytest-xdist workers, or a
developer's run beside another. So:

- each session registers its pid under ``<state>/sessions/`` (``pytest_plugin``'s session hooks; a pid
  left by a killed session is dropped when found dead);
- a fixture starts a server under :func:`locked` (one session starts it, the others find it running) and,
  when it started it, marks it *owned by the tests* (:func:`own`, under ``<state>/owned/``);
- the last session out (:func:`finish`: no other live session registered) stops every owned server,
  unless ``RLARK_KEEP_SERVERS`` is set. A server the tests did not start (one kept from an earlier run)
  is never stopped by them.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable, Mapping
from pathlib import Path

from rlark_devinfra import paths
from rlark_devinfra.process import pid_alive

Stop = Callable[[list[str]], object]
"""Stops an owned server; gets the parts this run started (for the Kubernetes test bed), else []."""


def _sessions() -> Path:
    return paths.state_dir() / "sessions"


def _owned() -> Path:
    return paths.state_dir() / "owned"


def locked() -> contextlib.AbstractContextManager[None]:
    """Exclusive among this checkout's sessions: start or stop servers inside."""
    return paths.file_lock(_sessions() / "lock")


def register() -> None:
    _sessions().mkdir(parents=True, exist_ok=True)
    (_sessions() / str(os.getpid())).touch()


def unregister() -> None:
    (_sessions() / str(os.getpid())).unlink(missing_ok=True)


def others_running() -> bool:
    """Whether another live test session of this checkout is registered."""
    if not _sessions().is_dir():
        return False
    for entry in _sessions().iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            if pid_alive(int(entry.name)):
                return True
            entry.unlink(missing_ok=True)
    return False


def own(server: str, parts: list[str] | None = None) -> None:
    """Mark ``server`` (and the ``parts`` of it this session started) as started by the tests."""
    _owned().mkdir(parents=True, exist_ok=True)
    marker = _owned() / f"{server}.json"
    known = json.loads(marker.read_text()) if marker.exists() else []
    marker.write_text(json.dumps(sorted(set(known) | set(parts or []))))


def finish(stops: Mapping[str, Stop]) -> list[str]:
    """End this session; when it is the last, stop the servers the tests started (``stops`` by name).
    Returns the servers stopped."""
    unregister()
    if os.environ.get("RLARK_KEEP_SERVERS"):
        return []
    stopped: list[str] = []
    with locked():
        if others_running() or not _owned().is_dir():
            return []
        for marker in sorted(_owned().glob("*.json")):
            stop = stops.get(marker.stem)
            if stop is not None:
                stop(json.loads(marker.read_text()))
                stopped.append(marker.stem)
            marker.unlink()
    return stopped
