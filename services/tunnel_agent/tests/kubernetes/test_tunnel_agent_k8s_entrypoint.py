"""The pod entrypoint keeps ~/.ssh/authorized_keys in step with the mounted worker ConfigMap."""

from __future__ import annotations

import os
import shutil
import signal
import stat
import subprocess
import time
from pathlib import Path

import pytest
import rlark_tunnel_agent.runtime.kubernetes as k8s_runtime
from k8s_driver_helpers import OTHER_KEY, PUBLIC_KEY

pytestmark = pytest.mark.unit

ENTRYPOINT = Path(k8s_runtime.__file__).parent / "entrypoint.sh"


def _wait_for(predicate: object, timeout_s: float = 10.0) -> None:
    assert callable(predicate)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError("condition not reached")


def test_a_rotated_key_file_is_installed_atomically_with_mode_600_and_without_private_keys(
    tmp_path: Path,
) -> None:
    bootstrap_dir = tmp_path / "bootstrap"
    bootstrap_dir.mkdir()
    shutil.copy(ENTRYPOINT, bootstrap_dir / "entrypoint.sh")
    # A stand-in bootstrap: install the keys once (as the real one does), then stay up.
    (bootstrap_dir / "bootstrap.sh").write_text(
        'mkdir -p "$HOME/.ssh" && cp "$RLARK_AUTHORIZED_KEYS_FILE" "$HOME/.ssh/authorized_keys"\n'
        "echo bootstrap-running\nexec sleep 30\n"
    )
    keys = tmp_path / "worker" / "authorized_keys"
    keys.parent.mkdir()
    keys.write_text(PUBLIC_KEY + "\n")
    home = tmp_path / "home"
    home.mkdir()
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(home),
        "RLARK_AUTHORIZED_KEYS_FILE": str(keys),
        "RLARK_KEYS_SYNC_S": "1",
    }
    process = subprocess.Popen(
        ["bash", str(bootstrap_dir / "entrypoint.sh")],
        env=env,
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    installed = home / ".ssh" / "authorized_keys"
    try:
        assert process.stdout is not None
        assert process.stdout.readline().strip() == "bootstrap-running"
        assert installed.read_text() == PUBLIC_KEY + "\n"
        # The kubelet swaps the mounted file; a pasted private key line must be dropped.
        keys.write_text(f"{OTHER_KEY}\n-----BEGIN OPENSSH PRIVATE KEY-----\n\n")
        _wait_for(lambda: installed.read_text() == OTHER_KEY + "\n")
        assert stat.S_IMODE(installed.stat().st_mode) == 0o600
        assert stat.S_IMODE(installed.parent.stat().st_mode) == 0o700
        assert '##rlark {"event":"keys_installed","count":1}' in process.stdout.readline()
    finally:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
