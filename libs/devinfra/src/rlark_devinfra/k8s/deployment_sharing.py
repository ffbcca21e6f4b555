"""One deployment test bed for the test processes of one run (``make test``'s two pytest-xdist workers).

pytest-xdist's ``worksteal`` can hand a module's tests to both workers, and each worker then sets up the
module's fixture: the deployment e2e's fixture brought the whole bed up from nothing a second time (``up``
starts with ``reset``) while the first worker's tests still used it, and the first worker's teardown stopped
it under the second's. So the fixture takes the bed through :func:`shared`:

- the first user in a run brings it up and writes its values beside it, stamped with the run's id (xdist's
  ``PYTEST_XDIST_TESTRUNUID``, the same in every worker of a run; else the process id): a later user in the
  same run finds them and uses the bed as it is; a bed left by an earlier run is never taken for this one's;
- each user is a file named by its pid while it uses the bed; the last one out (no other live pid left)
  stops the bed, unless ``RLARK_KEEP_SERVERS`` is set.

The deployment tests are ``heavy``, so one at a time holds the machine's heavy slot: two users never run a
test against the bed at once; they only overlap in holding it between their tests.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from pathlib import Path

from rlark_devinfra.k8s import deployment
from rlark_devinfra.paths import file_lock, state_dir
from rlark_devinfra.process import pid_alive


def _folder() -> Path:
    """Beside the bed's home, which ``deployment.reset`` deletes."""
    return state_dir() / "deploy-users"


def run_id() -> str:
    return os.environ.get("PYTEST_XDIST_TESTRUNUID") or f"pid-{os.getpid()}"


def _values(run: str) -> dict[str, str] | None:
    try:
        recorded = json.loads((_folder() / "values.json").read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None
    if recorded.get("run") != run:
        return None
    values: dict[str, str] = recorded["values"]
    return values


def _others_alive(users: Path) -> bool:
    alive = False
    for entry in users.iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            if pid_alive(int(entry.name)):
                alive = True
            else:
                entry.unlink(missing_ok=True)
    return alive


@contextlib.contextmanager
def shared(run: str | None = None) -> Iterator[dict[str, str]]:
    """The bed's values while this process uses it: brought up by the run's first user, stopped by its last."""
    run = run or run_id()
    users = _folder() / "users"
    with file_lock(_folder() / "lock"):
        values = _values(run)
        if values is None:
            (_folder() / "values.json").unlink(missing_ok=True)
            values = deployment.up()
            (_folder() / "values.json").touch(mode=0o600)  # the lab's passwords are in it
            (_folder() / "values.json").write_text(json.dumps({"run": run, "values": values}))
        users.mkdir(parents=True, exist_ok=True)
        (users / str(os.getpid())).touch()
    try:
        yield values
    finally:
        with file_lock(_folder() / "lock"):
            (users / str(os.getpid())).unlink(missing_ok=True)
            if not _others_alive(users):
                (_folder() / "values.json").unlink(missing_ok=True)
                if not os.environ.get("RLARK_KEEP_SERVERS"):
                    deployment.down()
