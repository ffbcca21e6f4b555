"""The node service of RLark's CSI plugin: what a NodePublishVolume asks for, checked, and the rclone mount
that serves it (ADR 0024, "The Kubernetes runtime").

A Kubernetes worker's ``objectStorage`` mount is an inline CSI volume (``manifests._object_storage_volume``):
``volume_context`` holds ``bucketName`` and ``prefix``, the request's ``secrets`` are the worker's bucket
Secret (``manifests.bucket_secrets``: ``accessKeyID``, ``secretAccessKey``, ``endpoint``, ``region``, or
Mountpoint's ``key_id``/``access_key``). `publish_request` turns a request into a :class:`Volume` or a
:class:`CsiError` naming the field (INVALID_ARGUMENT), never a value of ``secrets``.

:class:`RcloneVolumes` mounts a volume the way the local runtime mounts a bucket — the same client, rclone, with
the same environment and arguments (`rclone_env`, `rclone_argv`): credentials only in rclone's environment,
``--vfs-cache-mode writes``; here directly at the kubelet's ``target_path`` (the plugin runs as root in the
node's mount namespace, so the kubelet binds that mount into the pod), ``--allow-other`` so the pod's
non-root user reaches it, read-only when the volume is. A publish returns once the mount is in
``/proc/self/mountinfo`` and answered a listing of its prefix (a wrong key fails the pod's start with the S3
error, not the job). An unpublish first waits, bounded, until rclone has uploaded what was written (its remote
control's ``vfs/stats``, as the local runtime's drain), then unmounts, stops rclone and removes the target;
both calls are idempotent. Each volume's rclone runs in a session of its own: a plugin restarted meanwhile
leaves the pods' mounts alone, and unpublishes them later from what it kept in ``<state>/volumes/<key>/``.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import grpc
import structlog
from rlark_contracts.storage import (
    BucketLocation,
    BucketUrlError,
    CredentialsError,
    S3Credentials,
    parse_bucket_url,
    parse_s3_credentials,
)

from rlark_tunnel_agent.csi import proto
from rlark_tunnel_agent.runtime.driver import Mount, MountType
from rlark_tunnel_agent.runtime.local import object_storage

log = structlog.get_logger(__name__)

VENDOR_VERSION = "0.1.0"
SECRET_KEYS = {
    "access_key_id": ("accessKeyID", "key_id"),
    "secret_access_key": ("secretAccessKey", "access_key"),
    "endpoint": ("endpoint",),
    "region": ("region",),
}
"""Where each credential field is read from in the request's secrets (csi-s3's key first, Mountpoint's second):
the keys the agent's bucket Secret holds (``manifests.BUCKET_SECRET_KEYS``)."""
_DOCUMENT_FIELD = {
    "access_key_id": "accessKeyId",
    "secret_access_key": "secretAccessKey",
    "endpoint": "endpoint",
    "region": "region",
}
_SECRETS_MAX = 16 * 1024
_OCTAL = re.compile(r"\\([0-7]{3})")


class CsiError(Exception):
    """A call that fails with a gRPC status and a message (naming fields, never a secret's value)."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code, self.message = code, message


def _invalid(message: str) -> CsiError:
    return CsiError(grpc.StatusCode.INVALID_ARGUMENT, message)


@dataclass(frozen=True, slots=True)
class Volume:
    """One NodePublishVolume, checked: where, which bucket and prefix, with which credentials."""

    volume_id: str
    target: Path
    location: BucketLocation
    credentials: S3Credentials
    read_only: bool


def _path(value: str, field: str) -> Path:
    if not value:
        raise _invalid(f"{field} is required")
    if not value.startswith("/") or "\0" in value or ".." in value.split("/"):
        raise _invalid(f"{field} must be an absolute path without '..'")
    return Path(value)


def _volume_id(value: str) -> str:
    if not value:
        raise _invalid("volume_id is required")
    return value


def credentials_from_secrets(given: dict[str, str]) -> S3Credentials:
    """The S3 credentials the request's ``secrets`` hold, or INVALID_ARGUMENT naming the keys (never a value)."""
    if sum(len(k) + len(v) for k, v in given.items()) > _SECRETS_MAX:
        raise _invalid(f"secrets: larger than {_SECRETS_MAX} bytes")
    document: dict[str, str] = {}
    for field, keys in SECRET_KEYS.items():
        found = next((given[key] for key in keys if given.get(key)), None)
        if found is not None:
            document[_DOCUMENT_FIELD[field]] = found
        elif field != "region":
            raise _invalid(
                f"secrets.{keys[0]} is required (the volume's nodePublishSecretRef names the Secret holding "
                f"{', '.join(k for f in SECRET_KEYS.values() for k in f[:1])})"
            )
    try:
        return parse_s3_credentials(json.dumps(document))
    except CredentialsError as exc:
        raise _invalid(f"secrets: {exc}") from None


def location_from_context(context: dict[str, str]) -> BucketLocation:
    """The bucket and prefix of ``volume_context`` (``bucketName``, optional ``prefix``), checked as bucket URLs
    are (`rlark_contracts.storage.parse_bucket_url`)."""
    bucket = context.get("bucketName", "")
    if not bucket:
        raise _invalid("volume_context.bucketName is required")
    prefix = context.get("prefix", "").strip("/")
    try:
        return parse_bucket_url(f"s3://{bucket}/{prefix}" if prefix else f"s3://{bucket}")
    except BucketUrlError as exc:
        field = "prefix" if prefix and "prefix" in str(exc) else "bucketName"
        raise _invalid(f"volume_context.{field}: {exc}") from None


def publish_request(request: Any) -> Volume:
    """A NodePublishVolumeRequest as a :class:`Volume`, or :class:`CsiError` INVALID_ARGUMENT naming the field."""
    volume_id = _volume_id(request.volume_id)
    target = _path(request.target_path, "target_path")
    if not request.HasField("volume_capability"):
        raise _invalid("volume_capability is required")
    capability = request.volume_capability
    if capability.WhichOneof("access_type") != "mount":
        raise _invalid("volume_capability: only mount access is supported (a bucket is no block device)")
    if capability.mount.fs_type:
        raise _invalid("volume_capability.mount.fs_type: must be empty (the bucket is mounted by rclone)")
    location = location_from_context(dict(request.volume_context))
    credentials = credentials_from_secrets(dict(request.secrets))
    read_only = request.readonly or capability.access_mode.mode in proto.READ_ONLY_MODES
    return Volume(volume_id, target, location, credentials, read_only)


class Volumes(Protocol):
    """What mounts and unmounts volumes (rclone on a node; a fake in unit tests)."""

    def publish(self, volume: Volume) -> None: ...

    def unpublish(self, volume_id: str, target: Path) -> None: ...


def mounted(path: Path) -> bool:
    """Whether ``path`` is a mount point, from ``/proc/self/mountinfo`` (no stat: a FUSE mount whose daemon
    is gone would hang or fail one)."""
    wanted = {str(path), os.path.realpath(path)}
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return False
    for line in lines:
        fields = line.split(" ")
        if len(fields) > 4 and _unescape(fields[4]) in wanted:
            return True
    return False


def _unescape(field: str) -> str:
    """mountinfo's octal escapes (``\\040`` for a space)."""
    return _OCTAL.sub(lambda found: chr(int(found.group(1), 8)), field)


class RcloneVolumes:
    """Volumes mounted by rclone at their target paths; their state under ``<state_dir>/volumes``."""

    def __init__(
        self,
        state_dir: Path,
        *,
        rclone: str = "rclone",
        mount_wait_s: float = 60.0,
        drain_s: float = 60.0,
    ) -> None:
        self.state_dir, self.rclone = state_dir, rclone
        self.mount_wait_s, self.drain_s = mount_wait_s, drain_s
        self._locks: dict[str, threading.Lock] = {}
        self._guard = threading.Lock()

    def _dir(self, target: Path) -> Path:
        return self.state_dir / "volumes" / hashlib.sha256(str(target).encode()).hexdigest()[:24]

    def _lock(self, target: Path) -> threading.Lock:
        with self._guard:
            return self._locks.setdefault(str(target), threading.Lock())

    def publish(self, volume: Volume) -> None:
        with self._lock(volume.target):
            if mounted(volume.target):
                return  # published before (the kubelet retries a call it timed out on)
            self._mount(volume)

    def _mount(self, volume: Volume) -> None:
        storage = self._dir(volume.target)
        for directory in (self.state_dir, storage.parent, storage):
            directory.mkdir(mode=0o700, parents=True, exist_ok=True)
            directory.chmod(0o700)
        volume.target.mkdir(mode=0o750, parents=True, exist_ok=True)
        mount = Mount(
            type=MountType.OBJECT_STORAGE,
            source=volume.location.url(),
            target=str(volume.target),
            read_only=volume.read_only,
        )
        plan = object_storage.StorageMount(0, mount, volume.location, volume.credentials)
        rc_user, rc_pass = secrets.token_hex(8), secrets.token_urlsafe(24)
        env = object_storage.rclone_env(
            volume.credentials, home=storage, token=f"csi/{storage.name}", rc_user=rc_user, rc_pass=rc_pass
        )
        log_path = object_storage.log_file(storage, 0)
        log_path.unlink(missing_ok=True)
        argv = object_storage.rclone_argv(self.rclone, plan, storage, uid=None, target=volume.target)
        proc = subprocess.Popen(  # rclone; nothing secret among its arguments
            argv,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,  # outlives this plugin: the pod keeps its mount over a plugin restart
            cwd=storage,
            umask=0o077,
        )
        try:
            self._wait_mounted(proc, volume.target, log_path)
            rc_url = self._rc_url(log_path)
            record = {"url": rc_url, "user": rc_user, "pass": rc_pass, "pid": proc.pid}
            record |= {"target": str(volume.target), "bucket": volume.location.url()}
            record |= {"endpoint": volume.credentials.endpoint, "volume_id": volume.volume_id}
            rc_file = storage / "rc-0.json"
            rc_file.write_text(json.dumps(record))
            rc_file.chmod(0o600)
            self._check_listing(volume, log_path)
        except CsiError:
            self._stop(proc.pid, volume.target)
            proc.poll()  # collect it when it had exited by itself
            with contextlib.suppress(OSError):
                volume.target.rmdir()
            shutil.rmtree(storage, ignore_errors=True)  # nothing was written: no cache worth keeping
            raise
        log.info(
            "volume published",
            volume_id=volume.volume_id,
            bucket=volume.location.url(),
            endpoint=volume.credentials.endpoint,
            target=str(volume.target),
            read_only=volume.read_only,
        )

    def _wait_mounted(self, proc: subprocess.Popen[bytes], target: Path, log_path: Path) -> None:
        deadline = time.monotonic() + self.mount_wait_s
        while not mounted(target):
            if proc.poll() is not None:
                said = object_storage.log_tail(log_path) or f"rclone exited with {proc.returncode}"
                raise CsiError(grpc.StatusCode.UNAVAILABLE, f"rclone mount failed: {said}")
            if time.monotonic() > deadline:
                raise CsiError(grpc.StatusCode.UNAVAILABLE, f"not mounted after {self.mount_wait_s:.0f} s")
            time.sleep(0.05)

    def _rc_url(self, log_path: Path) -> str:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            found = object_storage.SERVING.search(_read(log_path))
            if found:
                return found.group(1)
            time.sleep(0.05)
        raise CsiError(grpc.StatusCode.UNAVAILABLE, "rclone's remote control did not start")

    def _check_listing(self, volume: Volume, log_path: Path) -> None:
        """A listing of the prefix asks the server once: wrong keys and a missing bucket fail the publish."""
        try:
            os.listdir(volume.target)
        except OSError as exc:
            found = object_storage.s3_error(_read(log_path))
            where = f"{volume.credentials.endpoint} for {volume.location.url()}"
            if found is not None and found[1] in (401, 403):
                raise CsiError(
                    grpc.StatusCode.PERMISSION_DENIED,
                    f"{where} refused the credentials of the volume's secret: {found[0]} (HTTP {found[1]})",
                ) from None
            if found is not None and found[1] == 404:
                raise CsiError(grpc.StatusCode.NOT_FOUND, f"{where}: {found[0]} (HTTP {found[1]})") from None
            detail = (
                f"{found[0]} (HTTP {found[1]})" if found else (object_storage.log_tail(log_path) or str(exc))
            )
            raise CsiError(grpc.StatusCode.UNAVAILABLE, f"listing {where} failed: {detail}") from None

    def unpublish(self, volume_id: str, target: Path) -> None:
        with self._lock(target):
            storage = self._dir(target)
            record = _read_record(storage / "rc-0.json")
            if record is not None and mounted(target):
                left = object_storage.drain(storage, self.drain_s)
                for pending in left:
                    log.warning(
                        "files not uploaded when the volume was unpublished; kept in the cache",
                        volume_id=volume_id,
                        files=pending.files,
                        bucket=pending.bucket,
                        waited_s=self.drain_s,
                        cache=str(pending.cache),
                    )
            self._stop(int(record["pid"]) if record else None, target)
            with contextlib.suppress(OSError):
                target.rmdir()
            if object_storage.dirty_files(storage / "cache") == 0:
                shutil.rmtree(storage, ignore_errors=True)
            else:
                (storage / "rc-0.json").unlink(missing_ok=True)
            log.info("volume unpublished", volume_id=volume_id, target=str(target))

    def _stop(self, pid: int | None, target: Path) -> None:
        """Unmount ``target`` (rclone then exits) and end the rclone process when it has not."""
        if mounted(target):
            done = subprocess.run(["fusermount3", "-u", str(target)], capture_output=True, check=False)
            if done.returncode != 0 and mounted(target):
                subprocess.run(["umount", "-l", str(target)], capture_output=True, check=False)
        if pid is None or not _is_rclone(pid):
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 5
        while _is_rclone(pid) and time.monotonic() < deadline:
            _reap(pid)
            time.sleep(0.05)
        if _is_rclone(pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        _reap(pid)


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


def _read_record(path: Path) -> dict[str, Any] | None:
    try:
        found = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return found if isinstance(found, dict) else None


def _is_rclone(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    state = stat.rsplit(")", 1)[-1].split()[0]
    return state != "Z" and b"rclone" in cmdline.split(b"\0", 1)[0]


def _reap(pid: int) -> None:
    """Collect our own child's exit status (a zombie otherwise); another process's pid is left alone."""
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)


class NodeService:
    """The Identity and Node services of the plugin, as plain methods taking and returning messages (the
    gRPC handlers in `server` wrap them)."""

    def __init__(self, driver_name: str, node_id: str, volumes: Volumes) -> None:
        self.driver_name, self.node_id, self.volumes = driver_name, node_id, volumes

    def get_plugin_info(self, _request: Any) -> Any:
        return proto.GET_PLUGIN_INFO.response(name=self.driver_name, vendor_version=VENDOR_VERSION)

    def get_plugin_capabilities(self, _request: Any) -> Any:
        # A node plugin only: no controller service, no topology.
        return proto.GET_PLUGIN_CAPABILITIES.response()

    def probe(self, _request: Any) -> Any:
        return proto.PROBE.response(ready=proto.BOOL_VALUE(value=True))

    def node_get_capabilities(self, _request: Any) -> Any:
        # No STAGE_UNSTAGE_VOLUME: the kubelet calls NodePublishVolume directly with the pod's target path.
        return proto.NODE_GET_CAPABILITIES.response()

    def node_get_info(self, _request: Any) -> Any:
        return proto.NODE_GET_INFO.response(node_id=self.node_id)

    def node_publish_volume(self, request: Any) -> Any:
        self.volumes.publish(publish_request(request))
        return proto.NODE_PUBLISH_VOLUME.response()

    def node_unpublish_volume(self, request: Any) -> Any:
        volume_id = _volume_id(request.volume_id)
        self.volumes.unpublish(volume_id, _path(request.target_path, "target_path"))
        return proto.NODE_UNPUBLISH_VOLUME.response()
