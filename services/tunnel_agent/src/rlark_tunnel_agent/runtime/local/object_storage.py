"""Object-storage mounts of local workers: one rclone FUSE mount per `objectStorage` mount (ADR 0024).

The agent, as root in the host's namespaces, runs `rclone mount` for each such mount of a worker before the
worker starts, at a staging directory of its own, `<state>/object-storage/<worker>/mnt/<n>` (every directory
on the way is root's, mode 700). `pod_init.py` then binds that mount at the job's target inside the worker's
root like any other volume (`pod.container_binds`: opened as a descriptor, mounted through it, checked by
device and inode, read-only when asked), so the worker sees the bucket at its path and nothing of how it got
there. Why rclone runs outside the worker: a worker's network namespace has no route out of the machine (nor
to the host, `firewall.py`), so it could not reach the object store; and outside its pid and mount namespaces
the job cannot see, signal, trace or read rclone — its uid is not root's, and its root holds neither the
staging directory nor rclone's cache.

Credentials: the mount's `secretRef` names a secret delivered to the worker as `<worker>/secrets/<name>` (an
S3 credential document, `rlark_contracts.storage`). The agent reads it and hands it to rclone in rclone's
environment only (`RCLONE_CONFIG_<REMOTE>_*`): no configuration file with a key exists anywhere, and
`/proc/<pid>/environ` of a root process is root's alone. rclone's remote-control API (`vfs/stats`, for the drain
below) listens on the host's loopback with a random user and password, kept in `rc.json` (mode 600) beside the
staging directories so that an agent restarted meanwhile can still drain.

File semantics: `--vfs-cache-mode writes` (a file is written to the local cache, so seeks and rewrites work,
and uploaded after it is closed — `close()` returns before the upload ends). Files and directories belong to
the job's uid, mode 600/700, with the kernel checking permissions (`--default-permissions`).

Lifecycle: `mount` waits (bounded) until the mount answers a listing of its prefix, so a wrong key or a missing
bucket fails the worker before it starts, with a catalogue sentence naming the mount, the endpoint and the S3
error code (never a key). rclone carries the worker's bootstrap token, so the driver's sweep of a worker's
processes finds it: `drain` waits (bounded) until every file written has been uploaded, when the worker has
exited; the teardown then kills it with the rest of the worker and `unmount` detaches the staging mount and
removes the cache (kept when uploads were left; the worker's log says so).

Blocking: everything here is blocking file and process work; the driver calls it in a thread.
"""

from __future__ import annotations

import base64
import ctypes
import errno
import json
import os
import re
import secrets
import shutil
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from rlark_contracts.messages import Text, text
from rlark_contracts.storage import (
    BucketLocation,
    BucketUrlError,
    CredentialsError,
    S3Credentials,
    parse_bucket_url,
    parse_s3_credentials,
)
from rlark_tunnel_agent.runtime.driver import Mount, MountType

REMOTE = "BUCKET"
"""The rclone remote's name (its configuration comes in `RCLONE_CONFIG_BUCKET_*`)."""
RC_FILE = "rc.json"
_MNT_DETACH = 2
SERVING = re.compile(r"Serving remote control on (http://127\.0\.0\.1:\d+/)")
_S3_ERROR = re.compile(r"\b([A-Z][A-Za-z]+): [^\n]*?\n?\s*status code: (\d{3})")
_REFUSALS = frozenset({401, 403, 404})
"""HTTP statuses that say the credentials or the bucket are wrong (not worth retrying)."""
_SECRET_MAX_BYTES = 64 * 1024
_libc = ctypes.CDLL(None, use_errno=True)


class ObjectStorageRefused(ValueError):
    """A mount that cannot work as declared (its secret, its source, credentials the server refuses): the
    worker fails with this reason, a catalogue sentence, and is not retried."""


class ObjectStorageUnavailable(RuntimeError):
    """A mount that did not come up now (the server unreachable, rclone slow to start): worth retrying."""


@dataclass(frozen=True, slots=True)
class StorageMount:
    """One `objectStorage` mount of a worker, resolved: its number among the worker's mounts of the kind,
    the bucket location and the credentials read from its secret."""

    index: int
    mount: Mount
    location: BucketLocation
    credentials: S3Credentials


def object_storage_mounts(mounts: tuple[Mount, ...] | list[Mount]) -> list[tuple[int, Mount]]:
    """The spec's `objectStorage` mounts, numbered in order (the number names the staging directory)."""
    found = [m for m in mounts if m.type == MountType.OBJECT_STORAGE]
    return list(enumerate(found))


def staging_root(storage_dir: Path) -> Path:
    """The directory holding a worker's staging mounts (a bind's `within`: root's, mode 700)."""
    return storage_dir / "mnt"


def staging_dir(storage_dir: Path, index: int) -> Path:
    """Where the `index`-th object-storage mount of a worker is mounted on the host, before `pod_init` binds it."""
    return staging_root(storage_dir) / str(index)


def location_of(mount: Mount) -> BucketLocation:
    """The mount's bucket and prefix, or :class:`ObjectStorageRefused` saying what is wrong with its source."""
    try:
        return parse_bucket_url(mount.source)
    except BucketUrlError as exc:
        raise ObjectStorageRefused(
            text("object_storage.source_invalid", target=mount.target, source=mount.source, problem=str(exc))
        ) from None


def read_credentials(secrets_dir: Path, mount: Mount) -> S3Credentials:
    """The credential document of the secret the mount names, from the worker's secrets directory (root's;
    the file opened without following a link), or :class:`ObjectStorageRefused` — never quoting the file."""
    name = mount.secret_ref or ""
    missing = text("object_storage.secret_missing", target=mount.target, secret=name or "(none)")
    if not name or "/" in name or name in (".", ".."):
        raise ObjectStorageRefused(missing)
    try:
        fd = os.open(secrets_dir / name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        raise ObjectStorageRefused(missing) from None
    with os.fdopen(fd, "rb") as fh:
        raw = fh.read(_SECRET_MAX_BYTES + 1)
    try:
        if len(raw) > _SECRET_MAX_BYTES:
            raise CredentialsError(f"larger than {_SECRET_MAX_BYTES} bytes")
        return parse_s3_credentials(raw)
    except CredentialsError as exc:
        raise ObjectStorageRefused(
            text("object_storage.secret_invalid", target=mount.target, secret=name, problem=str(exc))
        ) from None


def resolve(mounts: tuple[Mount, ...] | list[Mount], secrets_dir: Path) -> list[StorageMount]:
    """Every `objectStorage` mount of a spec with its location and credentials (see `read_credentials`)."""
    return [
        StorageMount(index, mount, location_of(mount), read_credentials(secrets_dir, mount))
        for index, mount in object_storage_mounts(mounts)
    ]


def rclone_env(
    credentials: S3Credentials, *, home: Path, token: str, rc_user: str, rc_pass: str
) -> dict[str, str]:
    """rclone's whole environment: the remote's configuration (the keys travel only here), the remote-control
    login, the worker's bootstrap token (the driver's process sweep finds rclone by it) and nothing of the
    agent's own environment."""
    prefix = f"RCLONE_CONFIG_{REMOTE}_"
    return {
        "PATH": "/usr/sbin:/usr/bin:/sbin:/bin",
        "HOME": str(home),
        "RLARK_BOOTSTRAP_TOKEN": token,
        f"{prefix}TYPE": "s3",
        f"{prefix}PROVIDER": "Other",
        f"{prefix}ENV_AUTH": "false",
        f"{prefix}ACCESS_KEY_ID": credentials.access_key_id,
        f"{prefix}SECRET_ACCESS_KEY": credentials.secret_access_key.get_secret_value(),
        f"{prefix}ENDPOINT": credentials.endpoint,
        f"{prefix}REGION": credentials.region,
        f"{prefix}FORCE_PATH_STYLE": "true",
        # The bucket exists (the mount lists it before the worker starts); no CreateBucket attempts.
        f"{prefix}NO_CHECK_BUCKET": "true",
        "RCLONE_RC_USER": rc_user,
        "RCLONE_RC_PASS": rc_pass,
    }


def rclone_argv(
    rclone: str,
    plan: StorageMount,
    storage_dir: Path,
    *,
    uid: int | None,
    write_back_s: float = 1.0,
    target: Path | None = None,
) -> list[str]:
    """`rclone mount` of one mount at its staging directory (or at `target`), owned by the job's uid (see the
    module docstring). Nothing secret is on the command line (`/proc/<pid>/cmdline` is everyone's to read).

    With `uid` None (the CSI node plugin, which does not know the pod's uid: `rlark_tunnel_agent.csi`), files
    belong to rclone's own user and the kernel checks no permission bits (no `--default-permissions`): every
    process that can reach the mount — only the pod whose volume it is — may read and write it, as the modes
    0777/0666 shown say."""
    owner = ["--umask", "000", "--dir-perms", "0777", "--file-perms", "0666"]
    if uid is not None:
        owner = ["--default-permissions", "--uid", str(uid), "--gid", str(uid), "--umask", "077"]
        owner += ["--dir-perms", "0700", "--file-perms", "0600"]
    argv = [
        rclone,
        "mount",
        f"{REMOTE}:{plan.location.path}",
        str(target if target is not None else staging_dir(storage_dir, plan.index)),
        "--config",
        str(storage_dir / "rclone.conf"),  # never written: the remote is in the environment
        "--allow-other",
        *owner,
        "--vfs-cache-mode",
        "writes",
        "--vfs-write-back",
        f"{write_back_s:g}s",
        "--cache-dir",
        str(storage_dir / "cache" / str(plan.index)),
        "--dir-cache-time",
        "30s",
        "--use-server-modtime",
        "--contimeout",
        "10s",
        "--rc",
        "--rc-addr",
        "127.0.0.1:0",
        "--log-file",
        str(log_file(storage_dir, plan.index)),
        "--log-level",
        "NOTICE",
    ]
    if plan.mount.read_only:
        argv.append("--read-only")
    return argv


def log_file(storage_dir: Path, index: int) -> Path:
    return storage_dir / f"rclone-{index}.log"


def s3_error(log: str) -> tuple[str, int] | None:
    """The last S3 error rclone logged: (its code, its HTTP status), e.g. ("InvalidAccessKeyId", 403)."""
    found = _S3_ERROR.findall(log)
    if not found:
        return None
    code, status = found[-1]
    return code, int(status)


def _private_dir(path: Path) -> None:
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chown(path, 0, 0)
    path.chmod(0o700)


def mount_all(
    plans: list[StorageMount],
    storage_dir: Path,
    *,
    rclone: str,
    uid: int,
    token: str,
    wait_s: float,
) -> None:
    """Mount every plan at its staging directory and return once each answers a listing of its prefix;
    :class:`ObjectStorageRefused` or :class:`ObjectStorageUnavailable` otherwise (the caller's teardown stops
    whatever was started: rclone carries `token`)."""
    if not plans:
        return
    _private_dir(storage_dir.parent)
    _private_dir(storage_dir)
    _private_dir(staging_root(storage_dir))
    for plan in plans:
        _mount_one(plan, storage_dir, rclone=rclone, uid=uid, token=token, wait_s=wait_s)


def _mount_one(
    plan: StorageMount, storage_dir: Path, *, rclone: str, uid: int, token: str, wait_s: float
) -> None:
    target, endpoint = plan.mount.target, plan.credentials.endpoint

    def unavailable(error: str) -> ObjectStorageUnavailable:
        return ObjectStorageUnavailable(
            text("object_storage.unavailable", target=target, endpoint=endpoint, error=error)
        )

    staging = staging_dir(storage_dir, plan.index)
    staging.mkdir(mode=0o700, exist_ok=True)
    log = log_file(storage_dir, plan.index)
    log.unlink(missing_ok=True)
    rc_user, rc_pass = secrets.token_hex(8), secrets.token_urlsafe(24)
    env = rclone_env(plan.credentials, home=storage_dir, token=token, rc_user=rc_user, rc_pass=rc_pass)
    proc = subprocess.Popen(
        rclone_argv(rclone, plan, storage_dir, uid=uid),
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        cwd=storage_dir,
        umask=0o077,
    )
    deadline = time.monotonic() + wait_s
    while not os.path.ismount(staging):
        if proc.poll() is not None:
            raise unavailable(log_tail(log) or f"rclone exited with {proc.returncode}")
        if time.monotonic() > deadline:
            raise unavailable(f"not mounted after {wait_s:.0f} s")
        time.sleep(0.05)
    rc_url = _rc_url(log, deadline)
    if rc_url is None:
        raise unavailable("rclone's remote control did not start")
    rc = storage_dir / f"rc-{plan.index}.json"
    about = {"target": target, "bucket": plan.location.url(), "endpoint": endpoint}
    rc.write_text(json.dumps({"url": rc_url, "user": rc_user, "pass": rc_pass, "pid": proc.pid, **about}))
    rc.chmod(0o600)
    # A listing of the prefix asks the server once: wrong keys and a missing bucket show here, not in the job.
    try:
        os.listdir(staging)
    except OSError as exc:
        found = s3_error(_read(log))
        if found is not None and found[1] in _REFUSALS:
            code, status = found
            raise ObjectStorageRefused(
                text(
                    "object_storage.refused",
                    target=target,
                    endpoint=endpoint,
                    bucket=plan.location.url(),
                    secret=plan.mount.secret_ref or "",
                    error=f"{code} (HTTP {status})",
                )
            ) from None
        detail = f"{found[0]} (HTTP {found[1]})" if found else (log_tail(log) or exc.strerror or str(exc))
        raise unavailable(f"listing {plan.location.url()} failed: {detail}") from None


def _rc_url(log: Path, deadline: float) -> str | None:
    while True:
        found = SERVING.search(_read(log))
        if found:
            return found.group(1)
        if time.monotonic() > deadline:
            return None
        time.sleep(0.05)


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


def log_tail(log: Path) -> str:
    """rclone's last error line, without its timestamp (rclone never logs a key)."""
    lines = [
        line for line in _read(log).splitlines() if "ERROR" in line or "CRITICAL" in line or "Fatal" in line
    ]
    if not lines:
        return ""
    return re.sub(r"^\S+ \S+ ", "", lines[-1]).strip()[:300]


@dataclass(frozen=True, slots=True)
class Pending:
    """What one mount's rclone had not uploaded when the drain ended."""

    target: str
    bucket: str
    endpoint: str
    files: int
    cache: Path

    def said(self) -> Text:
        """The line the worker's log gets (a catalogue sentence)."""
        return text(
            "object_storage.not_uploaded",
            target=self.target,
            bucket=self.bucket,
            endpoint=self.endpoint,
            count=self.files,
            cache=str(self.cache),
        )


def drain(storage_dir: Path, wait_s: float, poll_s: float = 0.5) -> list[Pending]:
    """Wait until every mount's rclone has uploaded what the worker wrote (its remote control's `vfs/stats`:
    nothing queued, nothing in progress), at most `wait_s` in all. The mounts that still hold files (or
    whose rclone no longer answers, with what its cache holds), for the caller to say."""
    deadline = time.monotonic() + wait_s
    left: list[Pending] = []
    for rc_file in sorted(storage_dir.glob("rc-*.json")):
        index = int(rc_file.stem.removeprefix("rc-"))
        rc = json.loads(rc_file.read_text())
        cache = storage_dir / "cache" / str(index)
        about = (str(rc["target"]), str(rc["bucket"]), str(rc["endpoint"]))
        while True:
            waiting = _uploads_waiting(rc)
            if waiting == 0:
                break
            if waiting is None:  # rclone is gone: what it had not uploaded is in its cache, marked dirty
                left.append(Pending(*about, dirty_files(cache), cache))
                break
            if time.monotonic() >= deadline:
                left.append(Pending(*about, waiting, cache))
                break
            time.sleep(poll_s)
    return [p for p in left if p.files]


def _uploads_waiting(rc: dict[str, object]) -> int | None:
    token = base64.b64encode(f"{rc['user']}:{rc['pass']}".encode()).decode()
    request = urllib.request.Request(  # noqa: S310 - the host's loopback, rclone's own address
        f"{rc['url']}vfs/stats",
        data=b"{}",
        headers={"Authorization": f"Basic {token}", "Content-Type": "application/json"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:  # noqa: S310
            stats = json.load(answer)
    except (OSError, ValueError, urllib.error.URLError):
        return None
    cache = stats.get("diskCache") or {}
    return int(cache.get("uploadsInProgress", 0)) + int(cache.get("uploadsQueued", 0))


def dirty_files(cache: Path) -> int:
    """Files rclone VFS caches below `cache` hold that were never uploaded: their metadata (`vfsMeta/`, the cache's own
    format, which rclone reads back to resume such uploads when it starts again) says `Dirty`."""
    count = 0
    for top, _, files in os.walk(cache):
        if "vfsMeta" not in Path(top).relative_to(cache).parts:
            continue
        for name in files:
            try:
                count += bool(json.loads(Path(top, name).read_text()).get("Dirty"))
            except (OSError, ValueError, AttributeError):
                continue
    return count


def unmount(storage_dir: Path) -> bool:
    """Detach every staging mount of a worker (rclone is gone by then: it went with the worker's processes)
    and remove its directory — all of it, or all but the caches when they hold files never uploaded, which
    rclone would upload if started again on them. Whether caches were kept. Idempotent."""
    root = staging_root(storage_dir)
    if root.is_dir():
        for entry in root.iterdir():
            _detach(entry)
    if dirty_files(storage_dir / "cache") == 0:
        shutil.rmtree(storage_dir, ignore_errors=True)
        return False
    for leftover in storage_dir.glob("rc-*.json"):
        leftover.unlink(missing_ok=True)
    shutil.rmtree(root, ignore_errors=True)
    return True


def _detach(path: Path) -> None:
    """`umount2(path, MNT_DETACH)`: also for a FUSE mount whose daemon died (stat would say ENOTCONN)."""
    if _libc.umount2(str(path).encode(), _MNT_DETACH) != 0:
        err = ctypes.get_errno()
        if err not in (errno.EINVAL, errno.ENOENT):  # not a mount (any more), or gone
            raise OSError(err, os.strerror(err), str(path))


def reap(storage_root: Path, live: set[str]) -> list[str]:
    """Detach the staging mounts of workers that are not live (an agent that died mid-teardown) and remove their
    directories, caches holding files never uploaded excepted (`unmount`). The worker ids reaped."""
    if not storage_root.is_dir():
        return []
    reaped = []
    for entry in sorted(storage_root.iterdir()):
        if entry.name in live or not entry.is_dir() or not (entry / "mnt").exists():
            continue
        unmount(entry)
        reaped.append(entry.name)
    return reaped
