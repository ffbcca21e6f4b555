"""The worker's sshd as the bootstrap starts it when it is not root (a Kubernetes pod's runAsUser, issue 32): a
host key of the worker's own, the unprivileged options, the job's keys file, and its own user alone let in.

The first test runs the real bootstrap (with stand-ins for `ray` and `python3`) as an unprivileged user under the
Kubernetes runtime's contract, with no `RLARK_SSH_HOST_KEY` (a pod gets none), and logs in with real OpenSSH.
Before the fix that sshd ran with Debian's configuration: it could not read root's host keys in /etc/ssh and
exited, and a login as a user it cannot become failed with `Failed to set uids to 0.`
"""

from __future__ import annotations

import contextlib
import os
import pwd
import re
import shutil
import signal
import socket
import stat
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from rlark_tunnel_agent.runtime.bootstrap import BOOTSTRAP_DIR
from rlark_tunnel_agent.runtime.contract import KUBERNETES, RuntimeFacts, compose_env, worker_contract
from rlark_tunnel_agent.runtime.driver import RayPorts, WorkerSpec

pytestmark = pytest.mark.unit

FAKE_RAY = "#!/bin/bash\n[[ $1 == start ]]\n"  # the head starts
FAKE_PYTHON = "#!/bin/bash\nexit 0\n"  # the helper's wait-nodes, reap, manifest: all fine
SSHD = shutil.which("sshd") or ("/usr/sbin/sshd" if os.access("/usr/sbin/sshd", os.X_OK) else None)
NOLOGIN_SHELLS = ("nologin", "false", "sync", "shutdown", "halt")


def _unprivileged_user() -> pwd.struct_passwd:
    """The user the bootstrap runs as: this one when it is not root; else one with a login shell (so a
    command runs), or ``nobody`` (its shell refuses, after sshd let it in)."""
    if os.geteuid() != 0:
        return pwd.getpwuid(os.geteuid())
    users = [
        u for u in pwd.getpwall() if u.pw_uid >= 1000 and u.pw_uid != 65534 and os.path.exists(u.pw_shell)
    ]
    users = [u for u in users if not u.pw_shell.endswith(NOLOGIN_SHELLS)]
    return min(users, key=lambda u: u.pw_uid) if users else pwd.getpwnam("nobody")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def reachable() -> Iterator[Path]:
    """A directory another user can reach (pytest's own tmp_path sits under a 0700 directory)."""
    path = Path(tempfile.mkdtemp(prefix="rlark-sshd-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _client_key(tmp: Path) -> str:
    key = tmp / "client" / "id_ed25519"
    key.parent.mkdir()
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "laptop", "-f", str(key)], check=True
    )
    return (tmp / "client" / "id_ed25519.pub").read_text().strip()


def _start(
    tmp: Path, user: pwd.struct_passwd, port: int, public_key: str, sshd: str | None
) -> subprocess.Popen[str]:
    """The Header's bootstrap under the Kubernetes contract, as ``user`` (when this is root), its run script
    sleeping; ``sshd``: the one it finds on its PATH (a stand-in, or None for the system's)."""
    bin_dir, files, home = tmp / "bin", tmp / "files", tmp / "home"
    for directory in (bin_dir, files, home):
        directory.mkdir(mode=0o755)
        directory.chmod(0o755)
    stand_ins = {"ray": FAKE_RAY, "python3": FAKE_PYTHON, **({"sshd": sshd} if sshd else {})}
    for name, text in stand_ins.items():
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    spec = WorkerSpec(
        job_id="job-s",
        worker_id="job-s-actor-0",
        cluster="k8s-test",
        role="actor",
        index=0,
        rank=0,
        num_nodes=1,
        is_header=True,
        node_name="node-a",
        run_script="sleep 120\n",
        ssh_public_keys=(public_key,),
    )
    facts = RuntimeFacts(
        node_ip="127.0.0.1",
        header_address="",
        comm_device="lo",
        gcs_port=_free_port(),
        ports=RayPorts(),
        home_dir=str(home),
        workdir=str(home / "work"),
        ray_temp_dir=str(tmp / "ray"),
        files_dir=str(files),
        secrets_dir=str(tmp / "secrets"),
        ssh_port=port,
    )
    contract = worker_contract(spec, facts)
    for name, text in contract.files.items():
        (files / name).write_text(text)
        (files / name).chmod(0o644)
    env = compose_env(contract, KUBERNETES)
    assert "RLARK_SSH_HOST_KEY" not in env  # a pod gets none: the bootstrap makes its own
    env.update(
        PATH=f"{bin_dir}:{os.environ['PATH']}",
        RLARK_RAY=str(bin_dir / "ray"),
        RLARK_PYTHON=str(bin_dir / "python3"),
        FAKE_LOG=str(tmp),
    )
    # A copy the other user can read (the checkout may sit under a directory it cannot enter).
    shutil.copytree(BOOTSTRAP_DIR, tmp / "bootstrap", ignore=shutil.ignore_patterns("__pycache__"))
    for path in (tmp / "bootstrap", *(tmp / "bootstrap").iterdir()):
        path.chmod(0o755)
    argv = ["bash", str(tmp / "bootstrap" / "bootstrap.sh")]
    if os.geteuid() == 0 and user.pw_uid != 0:
        os.chown(home, user.pw_uid, user.pw_gid)
        argv = ["setpriv", f"--reuid={user.pw_uid}", f"--regid={user.pw_gid}", "--clear-groups", *argv]
    return subprocess.Popen(
        argv,
        env=env,
        stdout=subprocess.PIPE,
        stderr=(tmp / "bootstrap.err").open("w"),
        text=True,
        start_new_session=True,
    )


def _marker(process: subprocess.Popen[str], event: str) -> str:
    assert process.stdout is not None
    for line in process.stdout:
        if f'"event":"{event}"' in line:
            return line
    raise AssertionError(f"the bootstrap exited (code {process.wait()}) before {event}")


def _stop(process: subprocess.Popen[str]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)  # the bootstrap's session: its sshd and run script too
    process.wait(timeout=10)


def _ssh(tmp: Path, port: int, login: str, command: str) -> subprocess.CompletedProcess[str]:
    argv = ["ssh", "-F", "/dev/null", "-i", str(tmp / "client" / "id_ed25519"), "-o", "IdentitiesOnly=yes"]
    argv += ["-o", f"UserKnownHostsFile={tmp / 'known_hosts'}", "-o", "StrictHostKeyChecking=accept-new"]
    argv += ["-o", "BatchMode=yes", "-o", "ConnectTimeout=10", "-p", str(port), f"{login}@127.0.0.1", command]
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)


def _wait_listening(port: int, process: subprocess.Popen[str], tmp: Path) -> None:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        with socket.socket() as sock, contextlib.suppress(OSError):
            sock.settimeout(1)
            sock.connect(("127.0.0.1", port))
            if sock.recv(64).startswith(b"SSH-"):
                return
        time.sleep(0.1)
    raise AssertionError(f"sshd did not answer on {port}: {(tmp / 'bootstrap.err').read_text()[-2000:]}")


def test_a_non_root_worker_s_sshd_has_a_host_key_of_its_own_and_lets_its_own_user_in_with_the_job_s_key(
    reachable: Path,
) -> None:
    # OpenSSH's sshd and ssh come with `make setup` (scripts/setup.sh): their absence is a broken set-up, not a skip.
    assert SSHD is not None, "no sshd: run make setup"
    assert shutil.which("ssh") is not None, "no ssh: run make setup"
    user = _unprivileged_user()
    assert user.pw_uid != 0
    port = _free_port()
    process = _start(reachable, user, port, _client_key(reachable), sshd=None)
    try:
        started = _marker(process, "sshd_started")
        _wait_listening(port, process, reachable)
        key = reachable / "home" / ".ssh" / "ssh_host_ed25519_key"
        assert (stat.S_IMODE(key.stat().st_mode), key.stat().st_uid) == (0o600, user.pw_uid)
        assert stat.S_IMODE(key.parent.stat().st_mode) == 0o700

        done = _ssh(reachable, port, user.pw_name, "echo in-$(id -un)")
        if user.pw_shell.endswith(NOLOGIN_SHELLS):  # sshd let it in; its shell says no
            assert "account is currently not available" in done.stdout + done.stderr, done
        else:
            assert (done.returncode, done.stdout.strip()) == (0, f"in-{user.pw_name}"), done
        assert f'"port":{port},"user":"{user.pw_name}"' in started, started  # whom it lets in
        # The host key the client now knows is the worker's own.
        host_public = (key.parent / "ssh_host_ed25519_key.pub").read_text().split()[1]
        assert host_public in (reachable / "known_hosts").read_text()

        # Any other name (root: the old Kubernetes login user) is refused at once, and the worker's log says why.
        refused = _ssh(reachable, port, "root", "true")
        assert refused.returncode == 255, refused
        assert "Permission denied" in refused.stderr, refused
    finally:
        _stop(process)
    log = (reachable / "bootstrap.err").read_text()
    # (an unprivileged sshd that can read the machine's shadow file may find root locked first)
    assert re.search(
        r"User root (from \S+ )?not allowed because (not listed in AllowUsers|account is locked)", log
    ), log[-2000:]
    assert "Failed to set uids" not in log


# Written whole, then renamed: the test reads the file as soon as it exists (a redirect creates it empty first).
RECORDING_SSHD = (
    '#!/bin/bash\nprintf "%s\\n" "$@" >"$FAKE_LOG/sshd.args.tmp"\n'
    'mv "$FAKE_LOG/sshd.args.tmp" "$FAKE_LOG/sshd.args"\nexec sleep 120\n'
)


def test_a_root_worker_s_sshd_keeps_the_image_s_configuration(reachable: Path) -> None:
    assert os.geteuid() == 0, "the suite runs as root (the local runtime's namespaces need it): this test too"
    process = _start(reachable, pwd.getpwuid(0), _free_port(), "ssh-ed25519 AAAA laptop", sshd=RECORDING_SSHD)
    try:
        _marker(process, "sshd_started")
        deadline = time.monotonic() + 10
        while not (reachable / "sshd.args").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        args = (reachable / "sshd.args").read_text().splitlines()
    finally:
        _stop(process)
    assert "-h" not in args, args
    assert "UsePAM=no" not in args, args
    assert f"AuthorizedKeysFile={reachable / 'home' / '.ssh' / 'authorized_keys'}" in args
    assert not (reachable / "home" / ".ssh" / "ssh_host_ed25519_key").exists()
