"""Pod Security Admission, judged by the real API server through namespace labels
(``pod-security.kubernetes.io/enforce``): which level each shape of worker pod meets.

- A worker without user hostPath mounts and without the network sidecar meets ``restricted``
  (non-root, RuntimeDefault seccomp, every capability dropped, no privilege escalation, only
  configMap / emptyDir / PVC / CSI volumes).
  So does one with its files sidecar (ADR 0013: the job's uid, no capability, read-only mounts).
- A user hostPath mount is refused at ``baseline`` and ``restricted`` alike (PSA forbids hostPath
  volumes there); so is the network sidecar (``NET_ADMIN`` is not among baseline's capabilities, and
  it mounts ``/dev/net/tun`` from the host). Those pods need a ``privileged`` namespace — why the
  driver puts them in a second namespace of their own (``rlark-workers-privileged``, enforcing
  ``privileged``, warning and auditing at ``restricted``) and every other worker in ``rlark-workers``,
  which enforces ``restricted`` (``deploy/agent/namespace.yaml``, ADR 0006;
  ``test_tunnel_agent_k8s_namespaces.py``).
"""

from __future__ import annotations

import asyncio
import uuid
from ipaddress import IPv4Address, IPv4Interface
from typing import Any

import pytest
from k8s_driver_helpers import header_spec, worker_spec
from kubernetes.client.exceptions import ApiException
from rlark_tunnel_agent.runtime.driver import Mount, MountType
from rlark_tunnel_agent.runtime.kubernetes import manifests
from rlark_tunnel_agent.runtime.kubernetes.config import KubernetesDriverConfig
from rlark_tunnel_agent.runtime.kubernetes.kube import Kube
from rlark_tunnel_agent.runtime.kubernetes.network import SidecarAccess

pytestmark = pytest.mark.k8s

OWNER = {"apiVersion": "v1", "kind": "ConfigMap", "name": "x", "uid": "0d6f4c1e-1111-2222-3333-444455556666"}
ACCESS = SidecarAccess(
    "rlark-tunnel-agent.rlark-agent.svc", 8106, IPv4Interface("10.200.0.5/16"), 1500, "t0k"
)
NO_HOST_PATHS = (
    Mount(type=MountType.HOST_PATH, source="pvc://checkpoints/job-a", target="/ckpt"),
    Mount(
        type=MountType.HOST_PATH,
        source="csi://s3.csi.example.com?bucket=models",
        target="/models",
        read_only=True,
    ),
    Mount(type=MountType.EMPTY_DIR, target="/scratch"),
)
HOST_PATH = Mount(type=MountType.HOST_PATH, source="/data/datasets", target="/datasets", read_only=True)


def _namespace(kube: Kube, level: str) -> str:
    name = f"psa-{level[:4]}-{uuid.uuid4().hex[:8]}"
    labels = {
        "rlark.io/test": "true",
        "pod-security.kubernetes.io/enforce": level,
        "pod-security.kubernetes.io/enforce-version": "latest",
    }
    kube.core.create_namespace({"metadata": {"name": name, "labels": labels}})
    return name


async def _admit(kube: Kube, namespace: str, pod: dict[str, Any]) -> str | None:
    """None when the API server admits ``pod`` (a dry run), else its refusal."""
    try:
        await asyncio.to_thread(kube.core.create_namespaced_pod, namespace, pod, dry_run="All")
    except ApiException as exc:
        return f"{exc.status} {exc.body}"
    return None


def _config(namespace: str) -> KubernetesDriverConfig:
    # Both worker namespaces the same: these tests ask which level each pod shape meets, wherever the
    # driver would put it (test_tunnel_agent_k8s_namespaces.py checks where it puts them).
    return KubernetesDriverConfig(
        namespace=namespace,
        privileged_namespace=namespace,
        network_sidecar_image="registry.example.com/rlark/net:1.0",
    )


async def test_workers_without_host_paths_or_sidecar_meet_restricted(admin_kube: Kube) -> None:
    namespace = _namespace(admin_kube, "restricted")
    config = _config(namespace)
    for spec in (
        header_spec("job-psa", "n1", num_nodes=3, mounts=NO_HOST_PATHS),
        worker_spec("job-psa", "n2", 0, num_nodes=3),
        worker_spec(
            "job-psa", "n3", 1, num_nodes=3, virtual_ip=IPv4Address("10.200.0.6")
        ),  # no sidecar access
    ):
        assert await _admit(admin_kube, namespace, manifests.worker_pod(spec, config, OWNER)) is None


async def test_a_worker_with_its_files_sidecar_meets_restricted(admin_kube: Kube) -> None:
    namespace = _namespace(admin_kube, "restricted")
    config = _config(namespace).model_copy(
        update={"files_sidecar_image": "registry.example.com/rlark/agent:1.0"}
    )
    spec = header_spec(
        "job-files",
        "n1",
        mounts=NO_HOST_PATHS,
        outputs=("/ckpt/out", "results"),
        tensorboard_dir="/scratch/tb",
    )
    pod = manifests.worker_pod(spec, config, OWNER)
    assert [c["name"] for c in pod["spec"]["initContainers"]] == [manifests.FILES_CONTAINER]
    assert await _admit(admin_kube, namespace, pod) is None


@pytest.mark.parametrize("level", ["restricted", "baseline"])
async def test_a_user_host_path_is_refused_below_privileged(admin_kube: Kube, level: str) -> None:
    namespace = _namespace(admin_kube, level)
    pod = manifests.worker_pod(header_spec("job-hp", "n1", mounts=(HOST_PATH,)), _config(namespace), OWNER)
    refusal = await _admit(admin_kube, namespace, pod)
    assert refusal is not None
    assert refusal.startswith("403")
    assert f'violates PodSecurity \\"{level}:latest\\"' in refusal
    assert '\\"hostPath\\"' in refusal or "hostPath volumes" in refusal


@pytest.mark.parametrize("level", ["restricted", "baseline"])
async def test_the_network_sidecar_is_refused_below_privileged(admin_kube: Kube, level: str) -> None:
    namespace = _namespace(admin_kube, level)
    spec = worker_spec("job-net", "n2", 0, virtual_ip=IPv4Address("10.200.0.5"))
    refusal = await _admit(
        admin_kube, namespace, manifests.worker_pod(spec, _config(namespace), OWNER, ACCESS)
    )
    assert refusal is not None
    assert refusal.startswith("403")
    assert '\\"NET_ADMIN\\"' in refusal


async def test_a_privileged_namespace_admits_host_paths_and_the_sidecar(admin_kube: Kube) -> None:
    namespace = _namespace(admin_kube, "privileged")
    config = _config(namespace)
    host_path = manifests.worker_pod(header_spec("job-pr", "n1", mounts=(HOST_PATH,)), config, OWNER)
    spec = worker_spec("job-pr", "n2", 0, virtual_ip=IPv4Address("10.200.0.5"))
    assert await _admit(admin_kube, namespace, host_path) is None
    assert await _admit(admin_kube, namespace, manifests.worker_pod(spec, config, OWNER, ACCESS)) is None
