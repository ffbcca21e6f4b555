"""The Kubernetes driver against a real API server with KWOK playing the kubelets."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

import pytest
from k8s_driver_helpers import OTHER_KEY, PUBLIC_KEY, driver_config, eventually, header_spec, worker_spec
from pydantic import SecretStr
from rlark_devinfra.k8s import testbed
from rlark_tunnel_agent.runtime.driver import (
    Mount,
    MountType,
    RuntimeDriver,
    WorkerPhase,
    WorkerStatusChanged,
)
from rlark_tunnel_agent.runtime.kubernetes import KubernetesDriver, manifests, names
from rlark_tunnel_agent.runtime.kubernetes.kube import Kube
from rlark_tunnel_agent.runtime.kubernetes.observe import DELETED_OUTSIDE

pytestmark = pytest.mark.k8s


def _objects(kube: Kube, namespace: str, selector: str) -> dict[str, list[str]]:
    return {
        kind: sorted(o["metadata"]["name"] for o in kube.list_items(kind, namespace, selector)[0])
        for kind in ("pod", "config_map", "service")
    }


async def _pod(kube: Kube, namespace: str, worker_id: str) -> dict[str, Any] | None:
    return await asyncio.to_thread(kube.get, "pod", namespace, names.pod_name(worker_id))


async def test_the_driver_implements_the_runtime_driver_protocol(driver: KubernetesDriver) -> None:
    assert isinstance(driver, RuntimeDriver)


async def test_nodes_are_observed_with_gpu_counts_models_labels_and_readiness(
    driver: KubernetesDriver, gpu_nodes: list[str]
) -> None:
    async def ours() -> dict[str, Any]:
        found = {n.name: n for n in await driver.observe_nodes() if n.name in gpu_nodes}
        return found if len(found) == 3 and all(n.ready for n in found.values()) else {}

    nodes = await eventually(ours, 30, "three Ready GPU nodes observed")
    first, second, third = (nodes[n] for n in gpu_nodes)
    assert (first.gpu_count, first.gpu_model, first.schedulable) == (8, "A100", True)
    assert second.labels["rlark.io/pool"] == "a"
    assert (third.gpu_count, third.gpu_model) == (4, "H100")
    assert third.labels["rlark.io/node-category"] == "train"
    assert first.cpu_millis == 64000
    assert (third.gpu_count, third.gpu_allocatable, third.gpu_allocated) == (4, 4, 0)


async def test_a_nodes_pod_cidr_and_the_clusters_service_cidr_are_observed(
    driver: KubernetesDriver, k8s_cluster: testbed.Cluster
) -> None:
    node = testbed.GpuNode(name=f"cidr-{uuid.uuid4().hex[:6]}", gpus=0, pod_cidr="10.244.7.0/24")
    testbed.create_gpu_nodes(k8s_cluster, [node])
    try:

        async def observed() -> list[str]:
            return next((n.pod_cidrs for n in await driver.observe_nodes() if n.name == node.name), [])

        assert await eventually(observed, 30, "the node's pod CIDR observed") == ["10.244.7.0/24"]
        # The API server serves the service range it was started with as the default ServiceCIDR.
        assert await driver.observe_service_cidrs() == (testbed.SERVICE_CIDR,)
    finally:
        testbed.delete_nodes(k8s_cluster, [node.name])


async def test_cordon_and_uncordon_go_through_the_api_and_are_observed(
    driver: KubernetesDriver, gpu_nodes: list[str], admin_kube: Kube
) -> None:
    await driver.cordon(gpu_nodes[0])
    node = await asyncio.to_thread(admin_kube.core.read_node, gpu_nodes[0])
    assert node.spec.unschedulable is True

    async def cordoned() -> bool:
        return any(n.name == gpu_nodes[0] and not n.schedulable for n in await driver.observe_nodes())

    await eventually(cordoned, 10, "cordon observed")
    await driver.uncordon(gpu_nodes[0])
    node = await asyncio.to_thread(admin_kube.core.read_node, gpu_nodes[0])
    assert not node.spec.unschedulable


async def test_a_placement_creates_a_pod_bound_to_the_node_with_gpus_env_labels_scripts_and_keys(
    driver: KubernetesDriver, gpu_nodes: list[str], admin_kube: Kube, namespace: str
) -> None:
    spec = header_spec("job-place", gpu_nodes[2], gpus=4, mounts=())
    await driver.ensure_worker(spec)

    pod = await _pod(admin_kube, namespace, spec.worker_id)
    assert pod is not None
    assert pod["spec"]["nodeName"] == gpu_nodes[2]
    (container,) = pod["spec"]["containers"]
    assert container["resources"]["limits"] == {"nvidia.com/gpu": "4"}
    assert container["image"] == spec.image
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert (env["RLARK_JOB_ID"], env["RLARK_NODE_RANK"], env["RLARK_IS_HEADER"]) == ("job-place", "0", "1")
    assert env["CONFIG"] == "ppo.yaml"
    labels = pod["metadata"]["labels"]
    assert labels[names.JOB_LABEL] == "job-place"
    assert labels[names.WORKER_LABEL] == spec.worker_id
    assert labels[names.ROLE_LABEL] == "header"
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    owner = pod["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["name"]) == ("ConfigMap", names.job_config_name("job-place"))

    worker_cm = await asyncio.to_thread(
        admin_kube.get, "config_map", namespace, names.worker_config_name(spec.worker_id)
    )
    assert worker_cm is not None
    assert worker_cm["data"]["authorized_keys"] == PUBLIC_KEY + "\n"
    assert worker_cm["data"]["run.sh"] == spec.run_script
    assert worker_cm["data"]["prepare.sh"] == spec.prepare_script
    job_cm = await asyncio.to_thread(
        admin_kube.get, "config_map", namespace, names.job_config_name("job-place")
    )
    assert job_cm is not None
    assert "ray start" in job_cm["data"]["bootstrap.sh"]
    assert set(job_cm["data"]) == {"bootstrap.sh", "entrypoint.sh", "rlark_node.py"}
    service = await asyncio.to_thread(admin_kube.get, "service", namespace, names.service_name("job-place"))
    assert service is not None
    assert service["spec"]["clusterIP"] == "None"

    async def running() -> bool:
        current = await _pod(admin_kube, namespace, spec.worker_id)
        status = await driver.get_status(spec.worker_id)
        return bool(
            current
            and current["status"].get("phase") == "Running"
            and status
            and status.phase == WorkerPhase.STARTING
        )

    await eventually(running, 30, "pod Running (KWOK) and worker Starting")
    status = await driver.get_status(spec.worker_id)
    assert status is not None
    assert status.address
    reports = {r.name: r for r in await driver.observe_nodes()}
    assert (reports[gpu_nodes[2]].gpu_allocated, reports[gpu_nodes[2]].gpu_allocated_foreign) == (4, 0)
    assert await driver.list_workers() == [spec.worker_id]


async def test_ensure_worker_twice_creates_nothing_new(
    driver: KubernetesDriver, gpu_nodes: list[str], admin_kube: Kube, namespace: str
) -> None:
    spec = header_spec("job-twice", gpu_nodes[0], mounts=())
    await driver.ensure_worker(spec)
    first = await _pod(admin_kube, namespace, spec.worker_id)
    await asyncio.gather(driver.ensure_worker(spec), driver.ensure_worker(spec))
    again = await _pod(admin_kube, namespace, spec.worker_id)
    assert first
    assert again
    assert first["metadata"]["uid"] == again["metadata"]["uid"]
    assert len(_objects(admin_kube, namespace, names.job_selector("job-twice"))["pod"]) == 1


async def test_stop_deletes_every_object_the_job_had(
    driver: KubernetesDriver, gpu_nodes: list[str], admin_kube: Kube, namespace: str
) -> None:
    job = "job-stop"
    specs = [header_spec(job, gpu_nodes[0], num_nodes=3, mounts=())] + [
        worker_spec(job, gpu_nodes[i + 1], i, num_nodes=3) for i in range(2)
    ]
    await asyncio.gather(*(driver.ensure_worker(s) for s in specs))
    created = _objects(admin_kube, namespace, names.job_selector(job))
    assert (len(created["pod"]), len(created["config_map"]), len(created["service"])) == (3, 4, 1)
    # The job's NetworkPolicy (ADR 0022) came with it, as rendered, and goes with it.
    policy = await asyncio.to_thread(admin_kube.get, "network_policy", namespace, names.service_name(job))
    assert policy is not None
    assert policy["spec"] == manifests.job_network_policy(job, namespace, driver.config, {})["spec"]

    await asyncio.gather(*(driver.stop_worker(s.worker_id) for s in specs))

    def gone() -> bool:
        return _objects(admin_kube, namespace, names.job_selector(job)) == {
            "pod": [],
            "config_map": [],
            "service": [],
        }

    await eventually(lambda: asyncio.to_thread(gone), 30, "every object of the job deleted")
    assert (
        await asyncio.to_thread(admin_kube.get, "network_policy", namespace, names.service_name(job)) is None
    )
    assert _objects(admin_kube, namespace, names.managed_selector()) == {
        "pod": [],
        "config_map": [],
        "service": [],
    }

    async def stopped() -> bool:
        statuses = [await driver.get_status(s.worker_id) for s in specs]
        return all(s is not None and s.phase == WorkerPhase.STOPPED for s in statuses)

    await eventually(stopped, 10, "all workers Stopped")
    assert await driver.list_workers() == []


async def test_a_restarted_driver_adopts_its_workers_without_duplicates(
    k8s_cluster: testbed.Cluster, gpu_nodes: list[str], admin_kube: Kube, namespace: str
) -> None:
    job = "job-restart"
    specs = [
        header_spec(job, gpu_nodes[0], num_nodes=3, mounts=()),
        worker_spec(job, gpu_nodes[1], 0, num_nodes=3),
    ]
    first = KubernetesDriver(driver_config(k8s_cluster, namespace))
    await first.start()
    await asyncio.gather(*(first.ensure_worker(s) for s in specs))
    uids = {
        p["metadata"]["name"]: p["metadata"]["uid"]
        for p in admin_kube.list_items("pod", namespace, names.job_selector(job))[0]
    }
    await first.close()

    # Mid-job: a third worker was recorded but the agent died before creating its pod.
    third = worker_spec(job, gpu_nodes[2], 1, num_nodes=3, gpus=4)
    owner = manifests.owner_reference(
        admin_kube.get("config_map", namespace, names.job_config_name(job)) or {}
    )
    admin_kube.create("config_map", namespace, manifests.worker_config_map(third, namespace, owner))

    second = KubernetesDriver(driver_config(k8s_cluster, namespace))
    await second.start()
    try:
        assert await second.list_workers() == sorted([*(s.worker_id for s in specs), third.worker_id])
        # The placements are delivered again (at-least-once): nothing is created twice.
        await asyncio.gather(*(second.ensure_worker(s) for s in [*specs, third]))
        pods = admin_kube.list_items("pod", namespace, names.job_selector(job))[0]
        assert len(pods) == 3
        for pod in pods:
            if pod["metadata"]["name"] in uids:
                assert pod["metadata"]["uid"] == uids[pod["metadata"]["name"]]
        assert len(admin_kube.list_items("service", namespace, names.job_selector(job))[0]) == 1

        async def adopted() -> bool:
            statuses = [await second.get_status(w) for w in await second.list_workers()]
            return all(s is not None and s.phase == WorkerPhase.STARTING for s in statuses)

        await eventually(adopted, 30, "adopted workers Starting")
    finally:
        await second.close()


async def test_a_pod_deleted_by_hand_fails_its_worker(
    driver: KubernetesDriver, gpu_nodes: list[str], admin_kube: Kube, namespace: str
) -> None:
    spec = header_spec("job-handdel", gpu_nodes[0], mounts=())
    await driver.ensure_worker(spec)
    seen: list[WorkerStatusChanged] = []

    async def collect() -> None:
        async for event in driver.events():
            if isinstance(event, WorkerStatusChanged) and event.status.worker_id == spec.worker_id:
                seen.append(event)

    collector = asyncio.create_task(collect())
    try:
        await asyncio.to_thread(admin_kube.delete, "pod", namespace, names.pod_name(spec.worker_id), 0)

        async def failed() -> bool:
            status = await driver.get_status(spec.worker_id)
            return status is not None and status.phase == WorkerPhase.FAILED

        await eventually(failed, 30, "worker failed after its pod was deleted")
        status = await driver.get_status(spec.worker_id)
        assert status is not None
        assert status.reason == DELETED_OUTSIDE
        await eventually(
            lambda: any(e.status.reason == DELETED_OUTSIDE for e in seen), 5, "status event emitted"
        )
        # Policy: not recreated, even by a resync or a re-delivered placement.
        await driver.resync()
        await driver.ensure_worker(spec)
        assert await _pod(admin_kube, namespace, spec.worker_id) is None
    finally:
        collector.cancel()


async def test_a_pod_deleted_while_the_agent_was_down_is_detected_at_start(
    k8s_cluster: testbed.Cluster, gpu_nodes: list[str], admin_kube: Kube, namespace: str
) -> None:
    spec = header_spec("job-downdel", gpu_nodes[1], mounts=())
    first = KubernetesDriver(driver_config(k8s_cluster, namespace))
    await first.start()
    await first.ensure_worker(spec)
    await first.close()
    admin_kube.delete("pod", namespace, names.pod_name(spec.worker_id), 0)
    await eventually(
        lambda: asyncio.to_thread(
            lambda: admin_kube.get("pod", namespace, names.pod_name(spec.worker_id)) is None
        ),
        30,
        "pod gone",
    )

    second = KubernetesDriver(driver_config(k8s_cluster, namespace))
    await second.start()
    try:
        status = await second.get_status(spec.worker_id)
        assert status is not None
        assert (status.phase, status.reason) == (WorkerPhase.FAILED, DELETED_OUTSIDE)
    finally:
        await second.close()


async def test_a_node_deleted_under_a_running_worker_fails_it_as_node_gone_and_its_stop_removes_the_pod(
    driver: KubernetesDriver, k8s_cluster: testbed.Cluster, admin_kube: Kube, namespace: str
) -> None:
    """KWOK stops simulating a deleted Node and the test bed has no pod garbage collector: the pod stays
    bound to a node that no longer exists. The driver fails the worker naming the node, and stopping it
    deletes the pod at once (no kubelet is left to finish a graceful deletion)."""
    doomed = testbed.GpuNode(name=f"doomed-{uuid.uuid4().hex[:6]}", gpus=8)
    testbed.create_gpu_nodes(k8s_cluster, [doomed])
    try:
        spec = worker_spec("job-nodegone", doomed.name, 0)
        await eventually(
            lambda: asyncio.to_thread(testbed.node_ready, k8s_cluster, doomed.name), 30, "node Ready"
        )
        await driver.ensure_worker(spec)

        async def phase() -> WorkerPhase | None:
            status = await driver.get_status(spec.worker_id)
            return None if status is None else status.phase

        await eventually(lambda: _is(phase, WorkerPhase.STARTING), 30, "worker Starting")
        testbed.delete_nodes(k8s_cluster, [doomed.name])

        await eventually(lambda: _is(phase, WorkerPhase.FAILED), 30, "worker failed after its node went")
        status = await driver.get_status(spec.worker_id)
        assert status is not None
        assert status.reason == f"NodeGone: node {doomed.name} was deleted from the cluster"
        assert doomed.name not in {n.name for n in await driver.observe_nodes()}
        pod = await _pod(admin_kube, namespace, spec.worker_id)
        assert pod is not None, "the pod outlives its node here (no pod garbage collector)"

        await driver.stop_worker(spec.worker_id)
        assert await _pod(admin_kube, namespace, spec.worker_id) is None
        status = await driver.get_status(spec.worker_id)
        assert status is not None
        assert status.phase == WorkerPhase.FAILED  # a failure stays the failure it was
    finally:
        testbed.delete_nodes(k8s_cluster, [doomed.name])


async def _is(read: Any, phase: WorkerPhase) -> bool:
    return bool(await read() == phase)


async def test_resync_repairs_a_deleted_service_and_removes_a_pod_without_its_record(
    driver: KubernetesDriver, gpu_nodes: list[str], admin_kube: Kube, namespace: str
) -> None:
    job = "job-drift"
    keep, orphan = header_spec(job, gpu_nodes[0], mounts=()), worker_spec(job, gpu_nodes[1], 0)
    await asyncio.gather(driver.ensure_worker(keep), driver.ensure_worker(orphan))
    admin_kube.delete("service", namespace, names.service_name(job))
    admin_kube.delete("config_map", namespace, names.worker_config_name(orphan.worker_id))

    await driver.resync()

    assert admin_kube.get("service", namespace, names.service_name(job)) is not None

    def orphan_gone() -> bool:
        return admin_kube.get("pod", namespace, names.pod_name(orphan.worker_id)) is None

    await eventually(lambda: asyncio.to_thread(orphan_gone), 30, "orphan pod deleted")
    assert admin_kube.get("pod", namespace, names.pod_name(keep.worker_id)) is not None


async def test_key_rotation_rewrites_the_worker_config_map_and_refuses_private_keys(
    driver: KubernetesDriver, gpu_nodes: list[str], admin_kube: Kube, namespace: str
) -> None:
    spec = header_spec("job-keys", gpu_nodes[0], mounts=())
    await driver.ensure_worker(spec)
    await driver.update_authorized_keys(spec.worker_id, [OTHER_KEY])
    cm = admin_kube.get("config_map", namespace, names.worker_config_name(spec.worker_id))
    assert cm is not None
    assert cm["data"]["authorized_keys"] == OTHER_KEY + "\n"
    assert manifests.spec_from_config_map(cm).ssh_public_keys == (OTHER_KEY,)
    with pytest.raises(ValueError, match="private key"):
        await driver.update_authorized_keys(spec.worker_id, ["-----BEGIN OPENSSH PRIVATE KEY-----"])
    with pytest.raises(LookupError):
        await driver.update_authorized_keys("job-keys-nobody-9", [OTHER_KEY])


async def test_a_placement_the_runtime_cannot_express_fails_visibly_and_creates_nothing(
    driver: KubernetesDriver, gpu_nodes: list[str], admin_kube: Kube, namespace: str
) -> None:
    from rlark_tunnel_agent.runtime.driver import Mount

    spec = header_spec("job-badmount", gpu_nodes[0], mounts=(Mount(source="relative/dir", target="/data"),))
    await driver.ensure_worker(spec)
    status = await driver.get_status(spec.worker_id)
    assert status is not None
    assert status.phase == WorkerPhase.FAILED
    assert "/data" in status.reason
    assert _objects(admin_kube, namespace, names.job_selector("job-badmount")) == {
        "pod": [],
        "config_map": [],
        "service": [],
    }


async def test_the_worker_pod_passes_server_side_validation_including_the_sidecar(
    admin_kube: Kube, namespace: str
) -> None:
    from ipaddress import IPv4Address, IPv4Interface

    from rlark_tunnel_agent.runtime.kubernetes.config import KubernetesDriverConfig
    from rlark_tunnel_agent.runtime.kubernetes.network import SidecarAccess

    config = KubernetesDriverConfig(
        namespace=namespace,
        privileged_namespace=namespace,
        network_sidecar_image="registry.example.com/rlark/net:1.0",
        shm_size="8Gi",
    )
    owner = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "name": "x",
        "uid": "0d6f4c1e-1111-2222-3333-444455556666",
    }
    access = SidecarAccess(
        "rlark-tunnel-agent.rlark-agent.svc", 8106, IPv4Interface("10.200.0.5/16"), 1500, "t0k"
    )
    for spec in (
        header_spec("job-dry", "n1"),
        worker_spec("job-dry", "n2", 0, virtual_ip=IPv4Address("10.200.0.5")),
    ):
        pod = manifests.worker_pod(spec, config, owner, access)
        await asyncio.to_thread(admin_kube.core.create_namespaced_pod, namespace, pod, dry_run="All")
    secret = manifests.worker_secret(spec, namespace, owner, access.token)
    await asyncio.to_thread(admin_kube.core.create_namespaced_secret, namespace, secret, dry_run="All")


async def test_worker_logs_are_followed_numbered_and_their_markers_move_the_status(
    k8s_cluster: testbed.Cluster, gpu_nodes: list[str], namespace: str, tmp_path: Path
) -> None:
    from rlark_tunnel_agent.runtime.driver import WorkerLogLine, WorkerMarkerSeen
    from rlark_tunnel_agent.runtime.markers import format_marker

    spec = header_spec("job-logs", gpu_nodes[0], mounts=())
    log_file = tmp_path / "worker.log"
    lines = [
        "rlark-bootstrap: starting",
        format_marker("prepare_started"),
        "Successfully installed rlinf",
        format_marker("prepare_done"),
        format_marker("ray_head_up", address="10.64.0.2:6379"),
        format_marker("nodes_joined", joined=2, expected=2),
        format_marker("run_started"),
    ]
    log_file.write_text("".join(testbed.cri_log_line(t) for t in lines))
    testbed.set_pod_log(k8s_cluster, namespace, names.pod_name(spec.worker_id), "worker", log_file)

    drv = KubernetesDriver(driver_config(k8s_cluster, namespace, follow_logs=True))
    await drv.start()
    seen: list[Any] = []

    async def collect() -> None:
        async for event in drv.events():
            seen.append(event)

    collector = asyncio.create_task(collect())
    try:
        await drv.ensure_worker(spec)

        async def running() -> bool:
            status = await drv.get_status(spec.worker_id)
            return status is not None and status.phase == WorkerPhase.RUNNING

        await eventually(running, 60, "status Running from the run_started marker")
        log_lines = [e for e in seen if isinstance(e, WorkerLogLine)]
        assert [(line.seq, line.text) for line in log_lines] == list(enumerate(lines, start=1))
        assert [e.marker.event for e in seen if isinstance(e, WorkerMarkerSeen)] == [
            "prepare_started",
            "prepare_done",
            "ray_head_up",
            "nodes_joined",
            "run_started",
        ]
        phases = [e.status.phase for e in seen if isinstance(e, WorkerStatusChanged)]
        assert phases[0] == WorkerPhase.CREATED
        assert phases[-1] == WorkerPhase.RUNNING
        assert WorkerPhase.PREPARING in phases

        with log_file.open("a") as out:  # followed: a line written later arrives too
            out.write(testbed.cri_log_line(format_marker("run_exited", exit_code=0)))

        async def succeeded() -> bool:
            status = await drv.get_status(spec.worker_id)
            return status is not None and status.phase == WorkerPhase.SUCCEEDED

        await eventually(succeeded, 30, "Succeeded from the run_exited marker")

        tail = await drv.tail_logs(spec.worker_id, 2)
        assert [(line.seq, line.text) for line in tail] == [
            (7, lines[-1]),
            (8, format_marker("run_exited", exit_code=0)),
        ]
        streamed = [line async for line in drv.stream_logs(spec.worker_id, follow=False)]
        assert [line.text for line in streamed] == [*lines, format_marker("run_exited", exit_code=0)]
    finally:
        collector.cancel()
        await drv.close()


async def test_a_stale_pod_list_never_brings_back_a_deleted_pod(
    driver: KubernetesDriver, gpu_nodes: list[str], admin_kube: Kube, namespace: str
) -> None:
    spec = header_spec("job-stale", gpu_nodes[2], gpus=4, mounts=())
    await driver.ensure_worker(spec)
    stale = await _pod(admin_kube, namespace, spec.worker_id)
    assert stale is not None
    await driver.stop_worker(spec.worker_id)

    async def stopped() -> bool:
        status = await driver.get_status(spec.worker_id)
        return status is not None and status.phase == WorkerPhase.STOPPED

    await eventually(stopped, 30, "worker Stopped")

    async def allocated() -> int:
        reports = {r.name: r for r in await driver.observe_nodes()}
        return reports[gpu_nodes[2]].gpu_allocated

    # A list taken before the deletion arrives after it (a resync racing the watch).
    driver._on_pod_event("LISTED", stale)
    assert await allocated() == 0
    # A deletion the watch missed entirely: the cache still has the pod; a resync clears it.
    driver._pods[spec.worker_id] = stale
    assert await allocated() == 4
    await driver.resync()
    assert await allocated() == 0
    status = await driver.get_status(spec.worker_id)
    assert status is not None
    assert status.phase == WorkerPhase.STOPPED


async def test_a_pod_rlark_did_not_create_shows_up_as_allocated_on_its_node(
    driver: KubernetesDriver, gpu_nodes: list[str], admin_kube: Kube
) -> None:
    """Another team's training pod, in its own namespace, holding all 8 GPUs of a node."""
    other = f"team-{uuid.uuid4().hex[:8]}"
    await asyncio.to_thread(admin_kube.core.create_namespace, {"metadata": {"name": other}})
    gpus = {"nvidia.com/gpu": "8"}
    pod = {
        "metadata": {"name": "trainer", "namespace": other},
        "spec": {
            "nodeName": gpu_nodes[0],
            "containers": [
                {
                    "name": "train",
                    "image": "example.com/train:1.0",
                    "resources": {"requests": {"cpu": "2", "memory": "4Gi", **gpus}, "limits": gpus},
                }
            ],
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        },
    }
    await asyncio.to_thread(admin_kube.core.create_namespaced_pod, other, pod)

    async def held() -> tuple[int, int, int, int] | None:
        node = next((n for n in await driver.observe_nodes() if n.name == gpu_nodes[0]), None)
        if node is None or node.gpu_allocated == 0:
            return None
        return (
            node.gpu_allocated,
            node.gpu_allocated_foreign,
            node.cpu_allocated_millis,
            node.gpu_allocatable,
        )

    assert await eventually(held, 30, "the other pod's GPUs counted") == (8, 8, 2000, 8)

    # Our own worker on another node counts as allocated there, not as foreign.
    spec = header_spec("job-alloc", gpu_nodes[1], gpus=4, mounts=())
    await driver.ensure_worker(spec)

    async def ours() -> tuple[int, int] | None:
        node = next(n for n in await driver.observe_nodes() if n.name == gpu_nodes[1])
        return (node.gpu_allocated, node.gpu_allocated_foreign) if node.gpu_allocated else None

    assert await eventually(ours, 30, "our worker's GPUs counted") == (4, 0)

    # The other pod ends: its GPUs are free again.
    await asyncio.to_thread(admin_kube.core.delete_namespaced_pod, "trainer", other, grace_period_seconds=0)

    async def freed() -> bool:
        node = next(n for n in await driver.observe_nodes() if n.name == gpu_nodes[0])
        return node.gpu_allocated == 0 and node.gpu_allocated_foreign == 0

    await eventually(freed, 30, "the other pod's GPUs freed")
    await driver.stop_worker(spec.worker_id)


async def test_a_worker_with_a_bucket_mount_gets_its_credentials_secret_and_loses_it_with_the_worker(
    k8s_cluster: testbed.Cluster, gpu_nodes: list[str], admin_kube: Kube, namespace: str
) -> None:
    """Issue 33: the CSI volume of an ``objectStorage`` mount reads a Secret the agent wrote from the RLark secret
    the mount names (ADR 0024); the worker's own Secret (its Ray token, its named secrets) and that one are
    created with the pod and deleted with the worker, whatever sidecars it has."""
    credentials = (
        '{"accessKeyId": "AKIAEXAMPLE", "secretAccessKey": "s3cr3t", "endpoint": "http://s3.lab:9000"}'
    )
    bucket = Mount(
        type=MountType.OBJECT_STORAGE, source="s3://ckpt/run", target="/ckpt", secret_ref="s3-keys"
    )
    spec = header_spec(
        "job-bucket",
        gpu_nodes[0],
        num_nodes=1,
        mounts=(bucket,),
        secrets=("s3-keys",),
        secret_values={"s3-keys": SecretStr(credentials)},
        ray_token=SecretStr("t" * 43),
        ray_authenticated=True,
    )
    config = driver_config(k8s_cluster, namespace, object_storage_csi_driver="ru.yandex.s3.csi")
    drv = KubernetesDriver(config)
    await drv.start()
    try:
        await drv.ensure_worker(spec)
        pod = await _pod(admin_kube, namespace, spec.worker_id)
        assert pod is not None
        bucket_secret = names.bucket_secret_name(spec.worker_id, 0)
        csi = next(v["csi"] for v in pod["spec"]["volumes"] if "csi" in v)
        assert csi["nodePublishSecretRef"] == {"name": bucket_secret}
        for name in (names.worker_secret_name(spec.worker_id), bucket_secret):
            assert await asyncio.to_thread(admin_kube.get, "secret", namespace, name) is not None, name
        stored = await asyncio.to_thread(admin_kube.get, "secret", namespace, bucket_secret)
        assert stored is not None
        assert set(stored["data"]) == set(manifests.BUCKET_SECRET_KEYS)

        await drv.stop_worker(spec.worker_id)
        for name in (names.worker_secret_name(spec.worker_id), bucket_secret):
            assert await asyncio.to_thread(admin_kube.get, "secret", namespace, name) is None, name
    finally:
        await drv.close()
