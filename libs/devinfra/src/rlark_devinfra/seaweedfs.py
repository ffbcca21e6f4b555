"""A real S3 server for tests and benchmarks: SeaweedFS (Apache-2.0), built from its Go module (ADR 0024).

Build: no prebuilt binary can be downloaded here, so ``weed`` is compiled once per machine from the Go module
proxy inside a small generated module under ``cache_dir()/<CACHE_KEY>`` (``go get -tool``, then
``CGO_ENABLED=0 go build -trimpath``), as the Kubernetes test bed's binaries are (``k8s/build.py``).
SeaweedFS's own go.mod replaces a module that no longer resolves upstream (``tyler-smith/go-bip39``); a
dependency's ``replace`` lines do not apply to the module that requires it, so they are copied from that go.mod
into ours. ``make prereqs`` builds it; the fixtures only look it up (:func:`require_built`).

Server: one ``weed server`` process — master, volume server, filer and S3 gateway — on free loopback ports
(kept with its data: a restart reuses them), its data, config and log under this checkout's state directory
(mode 700: the identities file holds keys). S3
requests are authenticated: the identities come from a config file (``-s3.config``) holding one admin, so an
anonymous or wrongly signed request is refused. It is ready when a signed ListBuckets answers and a first write
has landed (in the bucket ``rlark-ready``).

Identities limited to one bucket (``Read:<bucket>``, ``Write:<bucket>``, ``List:<bucket>``,
``Tagging:<bucket>``) are added while it runs through SeaweedFS's IAM API on the S3 port (``-s3.iam``, writable):
CreateUser, CreateAccessKey and PutUserPolicy with a policy on ``arn:aws:s3:::<bucket>`` and ``<bucket>/*``,
which SeaweedFS turns into those actions. Signed with the admin's key, as any IAM client would.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import secrets
import shutil
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlark_devinfra.paths import NotBuilt, cache_dir, state_dir
from rlark_devinfra.process import free_port, read_pid, run_logged, stop_process_group, wait_until

MODULE = "github.com/seaweedfs/seaweedfs"
VERSION = "v0.0.0-20261109003541-7506e5f91cd6"
"""The pseudo-version the module proxy serves (SeaweedFS 4.53's sources, 2026-11-09)."""
CACHE_KEY = f"seaweedfs-{VERSION.rsplit('-', 1)[-1]}-v1"
BUILD_COMMAND = "make prereqs"
EXPECTED_BUILD = "~26 min on 2 cores (~1 min of it downloading modules; 45 s with warm Go caches)"
REGION = "us-east-1"
OWNER_ONLY = 0o700


def root() -> Path:
    """The versioned cache directory: the generated Go module and the built binary."""
    return cache_dir() / CACHE_KEY


def binary() -> Path:
    """Where ``weed`` is (or will be) — no build."""
    return root() / "bin" / "weed"


def is_built() -> bool:
    return binary().exists()


def require_built() -> Path:
    """The binary, or :class:`NotBuilt` naming the command — never a build (fixtures run inside a test's
    timeout; the build belongs before them)."""
    if not is_built():
        raise NotBuilt(
            f"the S3 test server (SeaweedFS weed) is not built ({binary()} missing): run `{BUILD_COMMAND}` (or "
            "`uv run python -m rlark_devinfra.seaweedfs build`) first, once per machine"
        )
    return binary()


def module_replaces(gomod: str) -> list[str]:
    """The ``replace`` lines of a go.mod that name another module (a local path one cannot be copied)."""
    lines = []
    for old, new in re.findall(r"^replace\s+(\S+(?:\s+v\S+)?)\s+=>\s+(.+?)\s*$", gomod, re.M):
        if new.startswith((".", "/")):
            continue
        lines.append(f"replace {old} => {new}")
    return lines


def _go_env() -> dict[str, str]:
    env = dict(os.environ)
    env.update({"CGO_ENABLED": "0", "GOWORK": "off", "GOFLAGS": "-p=1 -buildvcs=false"})
    env.setdefault("GOMAXPROCS", "2")
    return env


def _log(message: str) -> None:
    print(f"[seaweedfs] {message}", file=sys.stderr, flush=True)


def _go(work: Path, *args: str) -> str:
    go = shutil.which("go")
    if go is None:
        raise RuntimeError("the Go toolchain (go) is needed once to build the S3 test server (SeaweedFS)")
    return run_logged(
        f"go {args[0]} ({work.name})", [go, *args], log=_log, cwd=work, env=_go_env(), nice=True
    )


def build() -> Path:
    """Build ``weed`` when missing (see the module docstring); return its path. Holds a lock in the cache
    directory: two sessions starting at once build once."""
    target = binary()
    target.parent.mkdir(parents=True, exist_ok=True)
    with (root() / "build.lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if target.exists():
            return target
        _log(f"building weed from {MODULE}@{VERSION} (once per machine, {EXPECTED_BUILD})…")
        started = time.monotonic()
        work = root() / "src"
        work.mkdir(parents=True, exist_ok=True)
        if not (work / "go.mod").exists():
            _go(work, "mod", "init", "rlark.local/seaweedfsbuild")
        gomod = work / "go.mod"
        if "replace " not in gomod.read_text():
            info = json.loads(_go(work, "mod", "download", "-json", f"{MODULE}@{VERSION}"))
            if "Error" in info:
                raise RuntimeError(f"{MODULE}@{VERSION} is not served: {info['Error']}")
            replaces = module_replaces(Path(info["GoMod"]).read_text())
            gomod.write_text(gomod.read_text().rstrip() + "\n\n" + "\n".join(replaces) + "\n")
        _go(work, "get", "-tool", f"{MODULE}/weed@{VERSION}")
        partial = target.with_suffix(".partial")
        _go(work, "build", "-trimpath", "-ldflags", "-s -w", "-o", str(partial), f"{MODULE}/weed")
        partial.rename(target)
        _log(f"weed built in {time.monotonic() - started:.0f} s: {target}")
        return target


# --- the server -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class S3Keys:
    """An access key pair. ``repr`` hides the secret."""

    access_key_id: str
    secret_access_key: str

    def __repr__(self) -> str:
        return f"S3Keys(access_key_id={self.access_key_id!r}, secret_access_key='***')"


@dataclass(frozen=True)
class S3Status:
    running: bool
    endpoint: str | None
    pid: int | None
    log_file: Path


def _home() -> Path:
    return state_dir() / "seaweedfs"


def _pid_file() -> Path:
    return _home() / "weed.pid"


def _log_file() -> Path:
    return _home() / "weed.log"


def _endpoint_file() -> Path:
    return _home() / "endpoint"


def admin_keys() -> S3Keys:
    """The admin identity's keys: made once per state directory, kept in ``admin.json`` (mode 600)."""
    path = _home() / "admin.json"
    _make_private(_home())
    if not path.exists():
        keys = {
            "accessKeyId": "RLARKADMIN" + secrets.token_hex(5).upper(),
            "secretAccessKey": secrets.token_urlsafe(30),
        }
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as fh:
            json.dump(keys, fh)
    data = json.loads(path.read_text())
    return S3Keys(data["accessKeyId"], data["secretAccessKey"])


def _identities(admin: S3Keys) -> dict[str, Any]:
    return {
        "identities": [
            {
                "name": "rlark-admin",
                "credentials": [{"accessKey": admin.access_key_id, "secretKey": admin.secret_access_key}],
                "actions": ["Admin", "Read", "List", "Tagging", "Write"],
            }
        ]
    }


def _make_private(path: Path) -> None:
    path.mkdir(mode=OWNER_ONLY, parents=True, exist_ok=True)
    path.chmod(OWNER_ONLY)


def status() -> S3Status:
    pid = read_pid(_pid_file())
    endpoint = _endpoint_file().read_text().strip() if pid is not None and _endpoint_file().exists() else None
    return S3Status(running=pid is not None, endpoint=endpoint, pid=pid, log_file=_log_file())


def client(endpoint: str, keys: S3Keys | None, service: str = "s3") -> Any:
    """A botocore client for ``service`` (``s3`` or ``iam``) at ``endpoint``; ``keys=None`` sends unsigned
    (anonymous) requests."""
    import botocore.session
    from botocore import UNSIGNED
    from botocore.config import Config

    session = botocore.session.get_session()
    config = Config(
        s3={"addressing_style": "path"},
        retries={"max_attempts": 2, "mode": "standard"},
        connect_timeout=5,
        read_timeout=120,
        signature_version=UNSIGNED if keys is None else None,
    )
    return session.create_client(
        service,
        region_name=REGION,
        endpoint_url=endpoint,
        aws_access_key_id=keys.access_key_id if keys else "",
        aws_secret_access_key=keys.secret_access_key if keys else "",
        config=config,
    )


def _answers(endpoint: str, admin: S3Keys) -> bool:
    client(endpoint, admin).list_buckets()
    return True


READY_BUCKET = "rlark-ready"


def _writes(endpoint: str, admin: S3Keys) -> bool:
    """A write lands: the master leads and the volume server has registered (the first write after a start
    otherwise waits for both, seconds inside some test)."""
    s3 = client(endpoint, admin)
    if READY_BUCKET not in {b["Name"] for b in s3.list_buckets().get("Buckets", [])}:
        s3.create_bucket(Bucket=READY_BUCKET)
    s3.put_object(Bucket=READY_BUCKET, Key="ready", Body=b"ready")
    return True


def _answers_now(endpoint: str, admin: S3Keys) -> bool:
    """Whether a running server answers a signed ListBuckets (any failure: it does not, start a new one)."""
    try:
        return _answers(endpoint, admin)
    except Exception:
        return False


def start(timeout_s: float = 90.0) -> S3Status:
    """Start the server unless it already runs (idempotent); return once a signed ListBuckets answers."""
    weed = require_built()
    home = _home()
    _make_private(home)
    admin = admin_keys()
    current = status()
    if current.running and current.endpoint and _answers_now(current.endpoint, admin):
        return current
    if current.pid is not None:
        stop_process_group(current.pid)
    data = home / "data"
    _make_private(data)
    config = home / "s3.json"
    fd = os.open(config, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        json.dump(_identities(admin), fh)
    ports = _ports(data)
    # Read from the working directory: one volume per new bucket (a collection) instead of 7, and no hold on
    # the first allocation of a fresh master (both cost seconds on every test's first write to its bucket).
    (home / "master.toml").write_text(
        '[master.volume_growth]\ncopy_1 = 1\ncopy_other = 1\nallocation_deferral = "0s"\n'
    )
    argv = [
        str(weed),
        "server",
        "-ip=127.0.0.1",
        "-ip.bind=127.0.0.1",
        f"-dir={data}",
        "-volume.max=0",
        "-master.volumeSizeLimitMB=256",
        "-master.telemetry=false",
        "-master.electionTimeout=1s",  # one master: no peer to wait for
        "-volume.preStopSeconds=0",
        "-filer",
        "-s3",
        f"-s3.config={config}",
        "-s3.iam=true",
        "-s3.iam.readOnly=false",
        "-s3.port.iceberg=0",
        "-s3.port.lance=0",
        "-s3.allowDeleteBucketNotEmpty=true",
        f"-filer.localSocket={home / 'filer.sock'}",
        f"-s3.localSocket={home / 's3.sock'}",
    ]
    for name in SERVERS:
        argv += [f"-{name}.port={ports[name]}", f"-{name}.port.grpc={ports[name + '.grpc']}"]
    log = _log_file().open("ab")
    process = subprocess.Popen(
        argv,
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
        cwd=home,
        umask=0o077,
    )
    _pid_file().write_text(str(process.pid))
    endpoint = f"http://127.0.0.1:{ports['s3']}"
    _endpoint_file().write_text(endpoint)
    try:
        wait_until(lambda: _answers(endpoint, admin), timeout_s, f"SeaweedFS S3 at {endpoint}", 0.3)
        wait_until(lambda: _writes(endpoint, admin), timeout_s, f"writes to SeaweedFS S3 at {endpoint}", 0.3)
    except TimeoutError as exc:
        stop_process_group(process.pid)
        tail = _log_file().read_text(errors="replace")[-3000:]
        raise RuntimeError(f"{exc}; weed log tail:\n{tail}") from exc
    return status()


SERVERS = ("master", "volume", "filer", "s3")


def _ports(data: Path) -> dict[str, int]:
    """The server's ports: those its data was made with, when all are still free — the master's state is kept
    per port and a volume server known under other ports freezes volume growth (``topology id`` mismatch) — else
    new free ones on empty data (it is test data)."""
    names = [part for name in SERVERS for part in (name, f"{name}.grpc")]
    saved = _home() / "ports.json"
    if saved.exists() and any(data.iterdir()):
        known: dict[str, int] = json.loads(saved.read_text())
        deadline = time.monotonic() + 10  # a port the stopped server held may take a moment to be free
        while set(known) == set(names) and time.monotonic() < deadline:
            if all(_port_free(port) for port in known.values()):
                return known
            time.sleep(0.2)
        shutil.rmtree(data)
        _make_private(data)
    chosen = {name: free_port() for name in names}
    saved.write_text(json.dumps(chosen))
    return chosen


def _port_free(port: int) -> bool:
    import socket

    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the server's own listeners do
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def stop() -> None:
    """Stop the server by its PID file; a no-op when it does not run."""
    pid = read_pid(_pid_file())
    if pid is not None:
        stop_process_group(pid, grace_s=10)
    _pid_file().unlink(missing_ok=True)


def reset_data() -> None:
    """Stop and delete the server's data (buckets, identities added at run time)."""
    stop()
    shutil.rmtree(_home() / "data", ignore_errors=True)


# --- what tests use ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class S3Server:
    """A running S3 server as tests see it: where it is and who administers it, and helpers that make
    buckets and keys limited to one bucket."""

    endpoint: str
    region: str
    admin: S3Keys

    def client(self, keys: S3Keys | None = None, service: str = "s3") -> Any:
        """A botocore client signed with ``keys`` (the admin's by default); ``keys=None`` for anonymous
        requests goes through :meth:`anonymous`."""
        return client(self.endpoint, keys or self.admin, service)

    def anonymous(self) -> Any:
        return client(self.endpoint, None)

    def create_bucket(self, prefix: str = "t") -> str:
        """A new, empty bucket with a unique name."""
        name = f"{prefix}-{uuid.uuid4().hex[:12]}"
        self.client().create_bucket(Bucket=name)
        return name

    def delete_bucket(self, bucket: str) -> None:
        """Delete the bucket with everything in it (the server allows deleting a bucket that is not empty)."""
        self.client().delete_bucket(Bucket=bucket)

    def bucket_keys(self, bucket: str) -> S3Keys:
        """A new identity allowed to read, list, write and tag in ``bucket`` only, and its keys (through the
        server's IAM API; see the module docstring)."""
        iam = self.client(service="iam")
        user = f"u-{bucket}"[:64]
        iam.create_user(UserName=user)
        policy = {
            "Version": "2012-10-17",
            "Statement": [
                {
                    "Effect": "Allow",
                    "Action": ["s3:*"],
                    "Resource": [f"arn:aws:s3:::{bucket}", f"arn:aws:s3:::{bucket}/*"],
                }
            ],
        }
        iam.put_user_policy(UserName=user, PolicyName="bucket", PolicyDocument=json.dumps(policy))
        made = iam.create_access_key(UserName=user)["AccessKey"]
        return S3Keys(made["AccessKeyId"], made["SecretAccessKey"])

    def credential_document(self, keys: S3Keys) -> str:
        """The S3 credential document (``rlark_contracts.storage``) of ``keys`` at this server."""
        return json.dumps(
            {
                "accessKeyId": keys.access_key_id,
                "secretAccessKey": keys.secret_access_key,
                "endpoint": self.endpoint,
                "region": self.region,
            }
        )


def main(argv: list[str]) -> None:
    """``python -m rlark_devinfra.seaweedfs build|start|stop|status``."""
    command = argv[0] if argv else "status"
    if command == "build":
        print(build())
    elif command == "start":
        print(start())
    elif command == "stop":
        stop()
    else:
        print(status())


if __name__ == "__main__":
    main(sys.argv[1:])
