"""The pod entrypoint keeps ~/.ssh/authorized_keys in step with the mounted worker ConfigMap."""

from __future__ import annotations

import os
import shutil
import signal
import stat
import subprocess
import tempfile
import time
from collections.abc import Iterator
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


NOBODY = 65534


@pytest.fixture
def reachable() -> Iterator[Path]:
    """A directory ``nobody`` can reach (pytest's own tmp_path sits under a 0700 directory)."""
    path = Path(tempfile.mkdtemp(prefix="rlark-entrypoint-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _run_entrypoint(tmp_path: Path, *, unprivileged: bool) -> str:
    """Run the entrypoint (as ``nobody`` when ``unprivileged`` and this is root, else as this user) with a
    stand-in bootstrap that checks sshd's configuration the way the bootstrap would start it; return
    what the stand-in printed."""
    bootstrap_dir = tmp_path / "bootstrap"
    bootstrap_dir.mkdir()
    shutil.copy(ENTRYPOINT, bootstrap_dir / "entrypoint.sh")
    (bootstrap_dir / "bootstrap.sh").write_text(
        'echo "host_key=${RLARK_SSH_HOST_KEY:-}"\n'
        "if [[ -n ${RLARK_SSH_HOST_KEY:-} ]]; then\n"
        '  stat -c "mode=%a uid=%u" "$RLARK_SSH_HOST_KEY"\n'
        '  "$(command -v sshd || echo /usr/sbin/sshd)" -t -p 2222 -h "$RLARK_SSH_HOST_KEY" \\\n'
        "    -o UsePAM=no -o PidFile=none -o StrictModes=no && echo sshd-config-ok\n"
        "fi\n"
    )
    for path in (tmp_path, bootstrap_dir, bootstrap_dir / "entrypoint.sh", bootstrap_dir / "bootstrap.sh"):
        path.chmod(0o755)
    home = tmp_path / "home"
    home.mkdir()
    argv = ["bash", str(bootstrap_dir / "entrypoint.sh")]
    if unprivileged and os.geteuid() == 0:
        os.chown(home, NOBODY, NOBODY)
        argv = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", *argv]
    env = {"PATH": os.environ["PATH"], "HOME": str(home)}
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_a_non_root_pod_gets_a_host_key_of_its_own_that_its_unprivileged_sshd_accepts(
    reachable: Path,
) -> None:
    out = _run_entrypoint(reachable, unprivileged=True)
    key = reachable / "home" / ".ssh" / "ssh_host_ed25519_key"
    uid = NOBODY if os.geteuid() == 0 else os.geteuid()
    assert f"host_key={key}" in out
    assert f"mode=600 uid={uid}" in out
    assert "sshd-config-ok" in out, out


def test_a_root_pod_keeps_the_image_s_host_keys(reachable: Path) -> None:
    out = _run_entrypoint(reachable, unprivileged=False)
    assert ("host_key=\n" in out) is (os.geteuid() == 0)
