"""A real S3 server for tests and benchmarks: the Versity S3 Gateway (versitygw, Apache-2.0), built from its Go
module (ADR 0024).

Build: no prebuilt binary can be downloaded here, so ``versitygw`` is compiled once per machine from the Go module
proxy inside a small generated module under ``cache_dir()/<CACHE_KEY>`` (``go get -tool``, then
``CGO_ENABLED=0 go build -trimpath``), as the Kubernetes test bed's binaries are (``k8s/build.py``). ``make
prereqs`` builds it; the fixtures only look it up (:func:`require_built`).

Server: one ``versitygw posix`` process on a free loopback port, serving the S3 API and, on the same port, its
admin API. Buckets are directories of its data directory (object metadata in extended attributes); accounts live
in its internal IAM (``users.json`` in its IAM directory). Everything is under this checkout's state directory
(mode 700: the IAM file holds keys). The root account's keys reach it in its environment only
(``ROOT_ACCESS_KEY_ID``/``ROOT_SECRET_ACCESS_KEY``), never on its command line. Every S3 request is
authenticated (SigV4): an anonymous or wrongly signed request is refused. It is ready when a signed ListBuckets
answers (well under a second).

Keys limited to one bucket: versitygw has no per-user IAM policies in its internal IAM; it has accounts with a
role, and an account of role ``user`` may use only the buckets it owns (or that a bucket policy or ACL opens to
it — none here). :meth:`S3Server.bucket_keys` therefore creates an account of role ``user`` with new keys
(admin API ``create-user``) and makes it the bucket's owner (``change-bucket-owner``); any other bucket answers
403 ``AccessDenied``. The admin API takes requests signed like S3 ones (service ``s3``) with the root's keys.
Root passes every bucket's checks, so tests put and read in any bucket with the admin keys.
"""

from __future__ import annotations

import fcntl
import json
import os
import secrets
import shutil
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from xml.sax.saxutils import escape

from rlark_devinfra.paths import NotBuilt, cache_dir, state_dir
from rlark_devinfra.process import free_port, read_pid, run_logged, stop_process_group, wait_until

MODULE = "github.com/versity/versitygw"
VERSION = "v1.8.0"
COMMAND = f"{MODULE}/cmd/versitygw"
CACHE_KEY = f"versitygw-{VERSION}-v1"
BUILD_COMMAND = "make prereqs"
EXPECTED_BUILD = "~3 min on 2 idle cores, 10–15 min on a busy machine (under 2 min of it downloading modules)"
REGION = "us-east-1"
OWNER_ONLY = 0o700


def root() -> Path:
    """The versioned cache directory: the generated Go module and the built binary."""
    return cache_dir() / CACHE_KEY


def binary() -> Path:
    """Where ``versitygw`` is (or will be) — no build."""
    return root() / "bin" / "versitygw"


def is_built() -> bool:
    return binary().exists()


def require_built() -> Path:
    """The binary, or :class:`NotBuilt` naming the command — never a build (fixtures run inside a test's
    timeout; the build belongs before them)."""
    if not is_built():
        raise NotBuilt(
            f"the S3 test server (versitygw) is not built ({binary()} missing): run `{BUILD_COMMAND}` (or "
            "`uv run python -m rlark_devinfra.versitygw build`) first, once per machine"
        )
    return binary()


def _go_env() -> dict[str, str]:
    env = dict(os.environ)
    env.update({"CGO_ENABLED": "0", "GOWORK": "off", "GOFLAGS": "-p=1 -buildvcs=false"})
    env.setdefault("GOMAXPROCS", "2")
    return env


def _log(message: str) -> None:
    print(f"[versitygw] {message}", file=sys.stderr, flush=True)


def _go(work: Path, *args: str) -> str:
    go = shutil.which("go")
    if go is None:
        raise RuntimeError("the Go toolchain (go) is needed once to build the S3 test server (versitygw)")
    return run_logged(
        f"go {args[0]} ({work.name})", [go, *args], log=_log, cwd=work, env=_go_env(), nice=True
    )


def build() -> Path:
    """Build ``versitygw`` when missing (see the module docstring); return its path. Holds a lock in the cache
    directory: two sessions starting at once build once."""
    target = binary()
    target.parent.mkdir(parents=True, exist_ok=True)
    with (root() / "build.lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if target.exists():
            return target
        _log(f"building versitygw from {MODULE}@{VERSION} (once per machine, {EXPECTED_BUILD})…")
        started = time.monotonic()
        work = root() / "src"
        work.mkdir(parents=True, exist_ok=True)
        if not (work / "go.mod").exists():
            _go(work, "mod", "init", "rlark.local/versitygwbuild")
        _go(work, "get", "-tool", f"{COMMAND}@{VERSION}")
        partial = target.with_suffix(".partial")
        _go(work, "build", "-trimpath", "-ldflags", "-s -w", "-o", str(partial), COMMAND)
        partial.rename(target)
        _log(f"versitygw built in {time.monotonic() - started:.0f} s: {target}")
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
    return state_dir() / "versitygw"


def _pid_file() -> Path:
    return _home() / "versitygw.pid"


def _log_file() -> Path:
    return _home() / "versitygw.log"


def _endpoint_file() -> Path:
    return _home() / "endpoint"


def _new_keys(prefix: str) -> S3Keys:
    return S3Keys(prefix + secrets.token_hex(5).upper(), secrets.token_urlsafe(30))


def admin_keys() -> S3Keys:
    """The root account's keys: made once per state directory, kept in ``admin.json`` (mode 600)."""
    path = _home() / "admin.json"
    _make_private(_home())
    if not path.exists():
        keys = _new_keys("RLARKADMIN")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as fh:
            json.dump({"accessKeyId": keys.access_key_id, "secretAccessKey": keys.secret_access_key}, fh)
    data = json.loads(path.read_text())
    return S3Keys(data["accessKeyId"], data["secretAccessKey"])


def _make_private(path: Path) -> None:
    path.mkdir(mode=OWNER_ONLY, parents=True, exist_ok=True)
    path.chmod(OWNER_ONLY)


def status() -> S3Status:
    pid = read_pid(_pid_file())
    endpoint = _endpoint_file().read_text().strip() if pid is not None and _endpoint_file().exists() else None
    return S3Status(running=pid is not None, endpoint=endpoint, pid=pid, log_file=_log_file())


def client(endpoint: str, keys: S3Keys | None) -> Any:
    """A botocore S3 client at ``endpoint``; ``keys=None`` sends unsigned (anonymous) requests."""
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
        "s3",
        region_name=REGION,
        endpoint_url=endpoint,
        aws_access_key_id=keys.access_key_id if keys else "",
        aws_secret_access_key=keys.secret_access_key if keys else "",
        config=config,
    )


def _admin_call(endpoint: str, admin: S3Keys, path: str, body: bytes = b"") -> None:
    """One request to versitygw's admin API (``PATCH <path>``, signed like an S3 request); raise naming the
    server's answer when it is not a success."""
    from botocore.auth import S3SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials
    from botocore.httpsession import URLLib3Session

    request = AWSRequest(method="PATCH", url=f"{endpoint}{path}", data=body)
    S3SigV4Auth(Credentials(admin.access_key_id, admin.secret_access_key), "s3", REGION).add_auth(request)
    answer = URLLib3Session(timeout=30).send(request.prepare())
    if answer.status_code >= 300:
        said = answer.content.decode(errors="replace")[:500]
        raise RuntimeError(f"versitygw admin {path.split('?')[0]}: HTTP {answer.status_code}: {said}")


def _answers(endpoint: str, admin: S3Keys) -> bool:
    client(endpoint, admin).list_buckets()
    return True


def _answers_now(endpoint: str, admin: S3Keys) -> bool:
    """Whether a running server answers a signed ListBuckets (any failure: it does not, start a new one)."""
    try:
        return _answers(endpoint, admin)
    except Exception:
        return False


def start(timeout_s: float = 60.0) -> S3Status:
    """Start the server unless it already runs (idempotent); return once a signed ListBuckets answers."""
    gateway = require_built()
    home = _home()
    _make_private(home)
    admin = admin_keys()
    current = status()
    if current.running and current.endpoint and _answers_now(current.endpoint, admin):
        return current
    if current.pid is not None:
        stop_process_group(current.pid)
    data, iam = home / "data", home / "iam"
    _make_private(data)
    _make_private(iam)
    port = free_port()
    argv = [
        str(gateway),
        f"--port=127.0.0.1:{port}",
        f"--region={REGION}",
        f"--iam-dir={iam}",
        "--quiet",
        "posix",
        "--dir-perms=0700",
        "--file-perms=0600",
        str(data),
    ]
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "ROOT_ACCESS_KEY_ID": admin.access_key_id,
        "ROOT_SECRET_ACCESS_KEY": admin.secret_access_key,
    }
    log = _log_file().open("ab")
    process = subprocess.Popen(
        argv,
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
        cwd=home,
        env=env,
        umask=0o077,
    )
    _pid_file().write_text(str(process.pid))
    endpoint = f"http://127.0.0.1:{port}"
    _endpoint_file().write_text(endpoint)
    try:
        wait_until(lambda: _answers(endpoint, admin), timeout_s, f"versitygw S3 at {endpoint}", 0.1)
    except TimeoutError as exc:
        stop_process_group(process.pid)
        tail = _log_file().read_text(errors="replace")[-3000:]
        raise RuntimeError(f"{exc}; versitygw log tail:\n{tail}") from exc
    return status()


def stop() -> None:
    """Stop the server by its PID file; a no-op when it does not run."""
    pid = read_pid(_pid_file())
    if pid is not None:
        stop_process_group(pid, grace_s=10)
    _pid_file().unlink(missing_ok=True)


def reset_data() -> None:
    """Stop and delete the server's data: buckets and the accounts added at run time."""
    stop()
    for part in ("data", "iam"):
        shutil.rmtree(_home() / part, ignore_errors=True)


# --- what tests use ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class S3Server:
    """A running S3 server as tests see it: where it is and who administers it, and helpers that make
    buckets and keys limited to one bucket."""

    endpoint: str
    region: str
    admin: S3Keys

    def client(self, keys: S3Keys | None = None) -> Any:
        """A botocore S3 client signed with ``keys`` (the admin's by default); anonymous requests go through
        :meth:`anonymous`."""
        return client(self.endpoint, keys or self.admin)

    def anonymous(self) -> Any:
        return client(self.endpoint, None)

    def create_bucket(self, prefix: str = "t") -> str:
        """A new, empty bucket with a unique name (owned by the admin until :meth:`bucket_keys`)."""
        name = f"{prefix}-{uuid.uuid4().hex[:12]}"
        self.client().create_bucket(Bucket=name)
        return name

    def delete_bucket(self, bucket: str) -> None:
        """Delete the bucket with everything in it: its objects and unfinished multipart uploads first (S3
        deletes only an empty bucket)."""
        s3 = self.client()
        for page in s3.get_paginator("list_multipart_uploads").paginate(Bucket=bucket):
            for upload in page.get("Uploads", []):
                s3.abort_multipart_upload(Bucket=bucket, Key=upload["Key"], UploadId=upload["UploadId"])
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket):
            keys = [{"Key": o["Key"]} for o in page.get("Contents", [])]
            if keys:
                s3.delete_objects(Bucket=bucket, Delete={"Objects": keys, "Quiet": True})
        s3.delete_bucket(Bucket=bucket)

    def bucket_keys(self, bucket: str) -> S3Keys:
        """Keys that may read, list, write and delete in ``bucket`` only: a new account of role ``user`` made
        the bucket's owner (see the module docstring). A bucket has one owner: keys made earlier for it lose
        it."""
        keys = _new_keys("RLARKB")
        account = (
            f"<Account><Access>{escape(keys.access_key_id)}</Access><Secret>{escape(keys.secret_access_key)}"
            "</Secret><Role>user</Role></Account>"
        )
        _admin_call(self.endpoint, self.admin, "/create-user", account.encode())
        _admin_call(
            self.endpoint, self.admin, f"/change-bucket-owner?bucket={bucket}&owner={keys.access_key_id}"
        )
        return keys

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
    """``python -m rlark_devinfra.versitygw build|start|stop|status``."""
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
