"""Durable agent state that must outlive the agent's process and its pod: the tunnel host keys (ADR 0018).

Role: each network domain's Ed25519 key pair is the agent's SSH host key for that domain (peers pin its
public half, ADR 0003). A replacement agent that drew a new one would make every peer's pinned key wrong
until the netdomain service republished it, so the keys are kept where a restarted or replacement agent of
the cluster finds them:

- :class:`DirectoryStore` — files in the state directory, mode 0600 (the local runtime; also the
  Kubernetes agent's default when no Secret is configured, on whatever volume holds its state);
- :class:`SecretStore` — one Kubernetes Secret in the agent's namespace (``RLARK_STATE_SECRET``), one data
  entry per key, read and merge-patched through the Kubernetes API the agent already uses. The agent's
  Role may get and patch that one Secret by name (``deploy/kubernetes``), nothing else of its kind.

Contract: ``load(name)`` is the stored bytes or None; ``save(name, data)`` returns once they are stored.
Names are ``[A-Za-z0-9_.-]`` (callers sanitise). Key material is never logged. Both stores run their
blocking I/O in a worker thread.
"""

from __future__ import annotations

import asyncio
import base64
import os
import re
from pathlib import Path
from typing import Any, Protocol

import structlog

log = structlog.get_logger(__name__)

_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,200}$")


class DurableStore(Protocol):
    async def load(self, name: str) -> bytes | None: ...

    async def save(self, name: str, data: bytes) -> None: ...


def _checked(name: str) -> str:
    if not _NAME.match(name):
        raise ValueError(f"durable state name: must match {_NAME.pattern}, got {name!r}")
    return name


class DirectoryStore:
    """Files ``<directory>/<name>``, readable by their owner only."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    async def load(self, name: str) -> bytes | None:
        path = self.directory / _checked(name)
        return await asyncio.to_thread(lambda: path.read_bytes() if path.exists() else None)

    async def save(self, name: str, data: bytes) -> None:
        path = self.directory / _checked(name)
        await asyncio.to_thread(self._write, path, data)

    def _write(self, path: Path, data: bytes) -> None:
        self.directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        temporary = path.with_name(f".{path.name}.tmp")
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        temporary.replace(path)


class SecretApi(Protocol):
    """The calls of ``runtime.kubernetes.kube.Kube`` this store needs (blocking, on dicts)."""

    def get(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None: ...

    def patch(self, kind: str, namespace: str, name: str, body: dict[str, Any]) -> dict[str, Any] | None: ...


class SecretMissing(RuntimeError):
    """The configured Secret does not exist (the deploy manifests create it, empty)."""


class SecretStore:
    """Entries ``<prefix><name>`` of the Secret ``namespace/secret``, which must exist (the manifests create
    it empty: the agent may not create Secrets of that name, only get and patch it)."""

    def __init__(self, api: SecretApi, namespace: str, secret: str, prefix: str = "") -> None:
        self._api = api
        self.namespace = namespace
        self.secret = secret
        self._prefix = prefix

    async def load(self, name: str) -> bytes | None:
        found = await asyncio.to_thread(self._api.get, "secret", self.namespace, self.secret)
        if found is None:
            raise SecretMissing(f"Secret {self.namespace}/{self.secret} not found (RLARK_STATE_SECRET)")
        encoded = (found.get("data") or {}).get(self._prefix + _checked(name))
        return base64.b64decode(encoded) if encoded else None

    async def save(self, name: str, data: bytes) -> None:
        body = {"data": {self._prefix + _checked(name): base64.b64encode(data).decode()}}
        patched = await asyncio.to_thread(self._api.patch, "secret", self.namespace, self.secret, body)
        if patched is None:
            raise SecretMissing(f"Secret {self.namespace}/{self.secret} not found (RLARK_STATE_SECRET)")
        log.info("durable agent state saved", secret=f"{self.namespace}/{self.secret}", entry=name)
