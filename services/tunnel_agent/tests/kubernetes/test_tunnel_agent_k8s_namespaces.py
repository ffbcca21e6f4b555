"""Two worker namespaces, judged by the real API server: the driver puts each worker where Pod Security
admits it, and the restricted namespace's labels keep anything else out.

The namespaces carry the labels of ``deploy/agent/namespace.yaml`` (``rlark-workers``: enforce
``restricted``; ``rlark-workers-privileged``: enforce ``privileged``, warn/audit ``restricted``) under
names of this test's own. A plain worker's pod is admitted in the restricted one; a hostPath mount or
the network sidecar sends a worker, with every object its pod names, to the privileged one; the
sidecar's pod sent to the restricted namespace is refused there.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from ipaddress import IPv4Address, IPv4Interface
from typing import Any

import pytest
import yaml
from k8s_driver_helpers import driver_config, eventually, header_spec, worker_spec
from kubernetes.client.exceptions import ApiException
from rlark_devinfra.k8s import testbed
from rlark_devinfra.paths import repo_root
from rlark_tunnel_agent.runtime.driver import Mount, MountType, WorkerPhase, WorkerSpec
from rlark_tunnel_agent.runtime.kubernetes import KubernetesDriver, KubernetesDriverConfig, manifests, names
from rlark_tunnel_agent.runtime.kubernetes.kube import Kube
from rlark_tunnel_agent.runtime.kubernetes.network import SidecarAccess

pytestmark = pytest.mark.k8s

HOST_PATH = Mount(type=MountType.HOST_PATH, source="/data/datasets", target="/datasets", read_only=True)
SIDECAR_IMAGE = "registry.example.com/rlark/net:1.0"
JOB_KINDS = ("pod", "service", "config_map")


class AgentSidecars:
    """The agent's side of `NetworkSidecarHooks` for a cluster whose domain tunnels are not under test:
    admits every worker with a virtual IP at the agent's Service, and records who left."""

    def __init__(self) -> None:
        self.left: list[str] = []

    async def sidecar_for(self, spec: WorkerSpec) -> SidecarAccess:
        if spec.virtual_ip is None:
            raise ValueError(f"worker {spec.worker_id} has no virtual IP")
        address = IPv4Interface(f"{spec.virtual_ip}/16")
        return SidecarAccess("rlark-tunnel-agent.rlark-agent.svc", 8106, address, 1500, f"t-{spec.worker_id}")

    async def released(self, worker_id: str) -> None:
        self.left.append(worker_id)


def _deploy_labels() -> dict[str, dict[str, str]]:
    docs = yaml.safe_load_all((repo_root() / "deploy/agent/namespace.yaml").read_text())
    return {d["metadata"]["name"]: d["metadata"]["labels"] for d in docs if d}


@pytest.fixture
def worker_namespaces(admin_kube: Kube) -> tuple[str, str]:
    """(restricted, privileged): fresh namespaces labelled as deploy/agent labels its two."""
    labels = _deploy_labels()
    tag = uuid.uuid4().hex[:8]
    created = []
    for deployed, name in (("rlark-workers", f"w-{tag}"), ("rlark-workers-privileged", f"w-{tag}-priv")):
        meta = {"name": name, "labels": {**labels[deployed], "rlark.io/test": "true"}}
        admin_kube.core.create_namespace({"metadata": meta})
        created.append(name)
    return created[0], created[1]


@pytest.fixture
async def split_driver(
    k8s_cluster: testbed.Cluster, worker_namespaces: tuple[str, str]
) -> AsyncIterator[KubernetesDriver]:
    restricted, privileged = worker_namespaces
    drv = KubernetesDriver(
        driver_config(
            k8s_cluster,
            restricted,
            privileged_namespace=privileged,
            network_sidecar_image=SIDECAR_IMAGE,
        )
    )
    drv.sidecar_hooks = AgentSidecars()
    await drv.start()
    try:
        yield drv
    finally:
        await drv.close()


def _objects(kube: Kube, namespace: str, job_id: str) -> dict[str, list[str]]:
    selector = names.job_selector(job_id)
    return {
        kind: sorted(o["metadata"]["name"] for o in kube.list_items(kind, namespace, selector)[0])
        for kind in JOB_KINDS
    }


async def _refusal(kube: Kube, namespace: str, pod: dict[str, Any]) -> str | None:
    try:
        await asyncio.to_thread(kube.core.create_namespaced_pod, namespace, pod)
    except ApiException as exc:
        return f"{exc.status} {exc.body}"
    return None


async def test_a_job_split_across_both_namespaces_runs_each_worker_where_pod_security_admits_it(
    split_driver: KubernetesDriver,
    worker_namespaces: tuple[str, str],
    gpu_nodes: list[str],
    admin_kube: Kube,
) -> None:
    restricted, privileged = worker_namespaces
    job = f"job-{uuid.uuid4().hex[:6]}"
    header = header_spec(job, gpu_nodes[0], num_nodes=3, mounts=(HOST_PATH,))
    plain = worker_spec(job, gpu_nodes[1], 0, num_nodes=3)
    domain = worker_spec(job, gpu_nodes[1], 1, num_nodes=3, gpus=0, virtual_ip=IPv4Address("10.200.0.6"))
    for spec in (header, plain, domain):
        await split_driver.ensure_worker(spec)

    # The API server admitted every pod: the plain worker in the restricted namespace, the others there
    # only because the privileged one enforces nothing more.
    def pods_in(namespace: str) -> list[str]:
        return [
            p["metadata"]["name"] for p in admin_kube.list_items("pod", namespace, names.job_selector(job))[0]
        ]

    assert sorted(pods_in(restricted)) == [names.pod_name(plain.worker_id)]
    assert sorted(pods_in(privileged)) == sorted(names.pod_name(s.worker_id) for s in (header, domain))
    # Every object a pod names sits in its pod's namespace: the job's ConfigMap and headless Service in
    # both (the same name: <hostname>.<job service> resolves in each), each worker's ConfigMap by its pod.
    assert _objects(admin_kube, restricted, job) == {
        "pod": [names.pod_name(plain.worker_id)],
        "service": [names.service_name(job)],
        "config_map": sorted([names.job_config_name(job), names.worker_config_name(plain.worker_id)]),
    }
    assert _objects(admin_kube, privileged, job)["config_map"] == sorted(
        [names.job_config_name(job), *(names.worker_config_name(s.worker_id) for s in (header, domain))]
    )
    assert _objects(admin_kube, privileged, job)["service"] == [names.service_name(job)]
    plain_pod = admin_kube.get("pod", restricted, names.pod_name(plain.worker_id))
    domain_pod = admin_kube.get("pod", privileged, names.pod_name(domain.worker_id))
    assert plain_pod is not None
    assert domain_pod is not None
    assert plain_pod["spec"]["dnsConfig"]["searches"] == [f"{privileged}.svc.cluster.local"]
    assert domain_pod["spec"]["dnsConfig"]["searches"] == [f"{restricted}.svc.cluster.local"]
    owner_uid = admin_kube.get("config_map", privileged, names.job_config_name(job))["metadata"]["uid"]  # type: ignore[index]
    assert domain_pod["metadata"]["ownerReferences"][0]["uid"] == owner_uid  # owned within its namespace
    # The sidecar's token Secret is created beside its pod (the agent cannot read it back: a delete
    # that finds it is the proof).
    assert await asyncio.to_thread(
        admin_kube.delete, "secret", privileged, names.worker_secret_name(domain.worker_id), 0
    )
    assert not await asyncio.to_thread(
        admin_kube.delete, "secret", restricted, names.worker_secret_name(domain.worker_id), 0
    )

    # The pods run (KWOK) and the driver follows them in both namespaces.
    async def started() -> bool:
        statuses = [await split_driver.get_status(s.worker_id) for s in (header, plain, domain)]
        return all(s is not None and s.phase == WorkerPhase.STARTING for s in statuses)

    await eventually(started, 60, "every worker's container running, seen through both pod watches")

    # A stop cleans each worker's namespace; the job's objects go with its last worker there.
    await split_driver.stop_worker(plain.worker_id)
    assert _objects(admin_kube, restricted, job) == {"pod": [], "service": [], "config_map": []}
    assert _objects(admin_kube, privileged, job)["service"] == [names.service_name(job)]
    for spec in (header, domain):
        await split_driver.stop_worker(spec.worker_id)
    assert isinstance(split_driver.sidecar_hooks, AgentSidecars)
    assert domain.worker_id in split_driver.sidecar_hooks.left
    await eventually(
        lambda: _objects(admin_kube, privileged, job) == {"pod": [], "service": [], "config_map": []},
        30,
        "the privileged namespace emptied of the job",
    )


async def test_a_restarted_agent_adopts_its_workers_from_both_namespaces(
    k8s_cluster: testbed.Cluster,
    split_driver: KubernetesDriver,
    worker_namespaces: tuple[str, str],
    gpu_nodes: list[str],
) -> None:
    restricted, privileged = worker_namespaces
    job = f"job-{uuid.uuid4().hex[:6]}"
    header = header_spec(job, gpu_nodes[0], mounts=(HOST_PATH,))
    plain = worker_spec(job, gpu_nodes[1], 0)
    for spec in (header, plain):
        await split_driver.ensure_worker(spec)
    restarted = KubernetesDriver(
        driver_config(
            k8s_cluster, restricted, privileged_namespace=privileged, network_sidecar_image=SIDECAR_IMAGE
        )
    )
    await restarted.start()
    try:
        assert await restarted.list_workers() == sorted([header.worker_id, plain.worker_id])
        await restarted.resync()  # nothing to repair: both workers' objects are where they belong
        for spec in (header, plain):
            status = await restarted.get_status(spec.worker_id)
            assert status is not None
            assert status.phase != WorkerPhase.FAILED, status
        await restarted.update_authorized_keys(header.worker_id, list(plain.ssh_public_keys))
    finally:
        await restarted.close()


async def test_the_restricted_namespace_refuses_the_network_sidecar_and_host_paths(
    admin_kube: Kube, worker_namespaces: tuple[str, str]
) -> None:
    restricted, privileged = worker_namespaces
    config = KubernetesDriverConfig(
        namespace=restricted, privileged_namespace=privileged, network_sidecar_image=SIDECAR_IMAGE
    )
    owner = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "name": "x",
        "uid": "0d6f4c1e-1111-2222-3333-444455556666",
    }
    domain = worker_spec("job-ref", "n2", 0, virtual_ip=IPv4Address("10.200.0.5"))
    access = SidecarAccess(
        "rlark-tunnel-agent.rlark-agent.svc", 8106, IPv4Interface("10.200.0.5/16"), 1500, "t"
    )
    for spec, sidecar, why in (
        (domain, access, '\\"NET_ADMIN\\"'),
        (header_spec("job-ref", "n1", mounts=(HOST_PATH,)), None, "hostPath"),
    ):
        pod = manifests.worker_pod(spec, config, owner, sidecar)
        assert pod["metadata"]["namespace"] == privileged
        pod["metadata"]["namespace"] = restricted  # what a driver without the split would do
        refusal = await _refusal(admin_kube, restricted, pod)
        assert refusal is not None
        assert refusal.startswith("403"), refusal
        assert 'violates PodSecurity \\"restricted:latest\\"' in refusal
        assert why in refusal
    # The plain worker's pod is admitted there (a real create, not a dry run).
    plain = manifests.worker_pod(worker_spec("job-ref", "n2", 1, num_nodes=3), config, owner)
    assert plain["metadata"]["namespace"] == restricted
    assert await _refusal(admin_kube, restricted, plain) is None
