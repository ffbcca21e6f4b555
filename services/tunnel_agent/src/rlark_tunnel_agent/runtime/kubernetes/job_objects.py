"""A job's objects in one worker namespace, and the workers' Secrets.

Per job and namespace holding its workers: the job's ConfigMap (the bootstrap files; owner of everything
else of the job there), its headless Service and, where the driver keeps jobs apart, its NetworkPolicy —
created before any pod of the job exists there, so no worker of it is ever reachable by other jobs.
They are deleted once the last worker of the job there is gone (and, for objects found without workers
by the resync, only once older than a grace: a job may be starting).

Every create is "already exists = done", so a repeated or interrupted call changes nothing. One lock
per job keeps a creation and a removal of the same job's objects apart.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from rlark_tunnel_agent.runtime.bootstrap import BOOTSTRAP_FILES
from rlark_tunnel_agent.runtime.driver import WorkerSpec
from rlark_tunnel_agent.runtime.kubernetes import manifests, names
from rlark_tunnel_agent.runtime.kubernetes.config import KubernetesDriverConfig
from rlark_tunnel_agent.runtime.kubernetes.kube import Kube, KubernetesApiError, Obj, age_s

Call = Callable[..., Awaitable[Any]]
"""``call(fn, *args)``: a blocking ``Kube`` call run off the event loop (the driver's thread pool)."""

_HERE = Path(__file__).resolve().parent


def bootstrap_files(config: KubernetesDriverConfig) -> dict[str, str]:
    """What every job's ConfigMap carries: the pod's entrypoint and the bootstrap the local runtime ships too."""
    files = {manifests.ENTRYPOINT_FILE: (_HERE / "entrypoint.sh").read_text()}
    for name in BOOTSTRAP_FILES:
        path = config.bootstrap_dir / name
        if not path.exists():
            raise RuntimeError(f"the worker bootstrap file {path} is missing")
        files[name] = path.read_text()
    return files


class JobObjects:
    """Creates, caches and removes each job's objects per namespace (see the module docstring)."""

    def __init__(self, config: KubernetesDriverConfig, call: Call, kube: Callable[[], Kube]) -> None:
        self._config = config
        self._call = call
        self._kube = kube
        self.bootstrap_files: dict[str, str] = {}
        """Read once at the driver's start (``bootstrap_files``)."""
        self._locks: dict[str, asyncio.Lock] = {}
        self._owner: dict[tuple[str, str], dict[str, Any]] = {}
        """(job id, namespace) → owner reference to the job's ConfigMap there."""

    def _lock(self, job_id: str) -> asyncio.Lock:
        return self._locks.setdefault(job_id, asyncio.Lock())

    async def ensure(self, spec: WorkerSpec, namespace: str) -> dict[str, Any]:
        """The job's ConfigMap, Service and NetworkPolicy in ``namespace``; the owner reference to the
        ConfigMap, cached per job and namespace (a job whose workers land in both namespaces has them in both)."""
        async with self._lock(spec.job_id):
            owner = self._owner.get((spec.job_id, namespace))
            if owner is not None:
                return owner
            kube = self._kube()
            body = manifests.job_config_map(spec.job_id, namespace, self.bootstrap_files)
            job_cm = await self._call(kube.create, "config_map", namespace, body)
            if job_cm is None:
                job_cm = await self._call(kube.get, "config_map", namespace, body["metadata"]["name"])
                if job_cm is None:
                    raise RuntimeError(f"job config map of {spec.job_id} vanished while creating it")
            owner = manifests.owner_reference(job_cm)
            await self.ensure_service(spec.job_id, namespace, spec.ray_port, owner)
            if self._config.network_policies:
                # Before any pod of the job exists here: no worker of it is ever reachable by other jobs.
                policy = manifests.job_network_policy(spec.job_id, namespace, self._config, owner)
                await self._call(kube.create, "network_policy", namespace, policy)
            self._owner[(spec.job_id, namespace)] = owner
            return owner

    async def ensure_service(self, job_id: str, namespace: str, ray_port: int, owner: dict[str, Any]) -> None:
        """The job's headless Service in ``namespace`` (a repair when it was deleted)."""
        service = manifests.headless_service(job_id, namespace, ray_port, owner)
        await self._call(self._kube().create, "service", namespace, service)

    def forget(self, job_id: str, namespace: str) -> None:
        """The job's ConfigMap there is gone: the next ``ensure`` creates it again."""
        self._owner.pop((job_id, namespace), None)

    async def remove_if_unused(
        self, job_id: str, namespace: str, workers_here: Callable[[], bool], min_age_s: float = 0.0
    ) -> bool:
        """Delete the job's Service, NetworkPolicy and ConfigMap in ``namespace`` once no worker of the job is
        there (no worker ConfigMap, and ``workers_here()`` false: none being created) and, with ``min_age_s``,
        once its ConfigMap is that old."""
        kube = self._kube()
        async with self._lock(job_id):
            selector = f"{names.job_selector(job_id)},{names.OBJECT_LABEL}=worker"
            remaining, _ = await self._call(kube.list_items, "config_map", namespace, selector)
            if remaining or workers_here():
                return False
            if min_age_s:
                job_cm = await self._call(kube.get, "config_map", namespace, names.job_config_name(job_id))
                if job_cm is not None and age_s(job_cm) < min_age_s:
                    return False
            await self._call(kube.delete, "service", namespace, names.service_name(job_id))
            if self._config.network_policies:
                await self._call(kube.delete, "network_policy", namespace, names.service_name(job_id))
            await self._call(kube.delete, "config_map", namespace, names.job_config_name(job_id))
            self.forget(job_id, namespace)
            return True

    async def put_secret(self, namespace: str, body: Obj) -> None:
        """Create the Secret; one of that name (an earlier try, a previous agent) is replaced. The agent may
        create and delete Secrets but never read them, so "replace" is delete + create."""
        name = body["metadata"]["name"]
        kube = self._kube()
        for _ in range(3):
            if await self._call(kube.create, "secret", namespace, body) is not None:
                return
            await self._call(kube.delete, "secret", namespace, name, 0)
        raise KubernetesApiError(f"secret {name} keeps existing after being deleted")
