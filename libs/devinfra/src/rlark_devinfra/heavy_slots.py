"""Slots for the tests that need the whole machine: at most a few of them run at once, machine-wide.

A test marked ``heavy`` starts a multi-node Ray cluster (RLinf's ranks, real pods, a three-worker job):
each wants more than one core for minutes. Two of them side by side on a two-core machine each run at half
speed past Ray's own start-up limits (its raylet gets 30 s to register, hard-coded) and fail for load, not
for a defect. So a heavy test takes a slot first, and waits while every slot is held; the other tests run
beside it as before. The slots are ``flock``ed files in the machine's temporary directory, so two test
runs of different checkouts (a ``clean-ci`` beside a developer's run) share them too (or
``RLARK_TEST_HEAVY_SLOTS_DIR``); a killed holder's lock goes with its process.

Slots: ``RLARK_TEST_HEAVY_SLOTS``, else half the machine's cores (at least one). The wait is bounded by
``RLARK_TEST_HEAVY_WAIT_S`` (default 3,600 s), past which the test runs anyway and says so.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO

POLL_S = 0.5


def slot_count() -> int:
    if given := os.environ.get("RLARK_TEST_HEAVY_SLOTS"):
        return max(1, int(given))
    return max(1, (os.cpu_count() or 2) // 2)


def slots_dir() -> Path:
    if given := os.environ.get("RLARK_TEST_HEAVY_SLOTS_DIR"):
        return Path(given)
    return Path(tempfile.gettempdir()) / "rlark-test-heavy-slots"


def _try_slot(index: int) -> IO[str] | None:
    directory = slots_dir()
    directory.mkdir(parents=True, exist_ok=True)
    handle = (directory / f"slot-{index}").open("a")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        return None
    return handle


@contextlib.contextmanager
def heavy_slot(what: str, *, slots: int | None = None, wait_s: float | None = None) -> Iterator[float]:
    """Hold one of the machine's heavy-test slots while inside; yields the seconds waited for it."""
    count = slot_count() if slots is None else slots
    limit = float(os.environ.get("RLARK_TEST_HEAVY_WAIT_S", "3600")) if wait_s is None else wait_s
    started = time.monotonic()
    handle: IO[str] | None = None
    while handle is None:
        handle = next((h for h in map(_try_slot, range(count)) if h is not None), None)
        if handle is None:
            if time.monotonic() - started > limit:
                print(
                    f"{what}: no heavy-test slot free after {limit:.0f} s; running without one",
                    file=sys.stderr,
                )
                break
            time.sleep(POLL_S)
    try:
        yield time.monotonic() - started
    finally:
        if handle is not None:
            fcntl.flock(handle, fcntl.LOCK_UN)
            handle.close()
