"""Ray jobs in real pods: the test bed's real nodes (a containerd and a real kubelet per cluster, ADR 0021)
run the worker image the project builds (Debian, Python, OpenSSH, the locked Ray), the real agent with the
driver's production settings creates the pods (no KWOK flags: markers expected, logs followed), and the
worker bootstrap shipped in the job's ConfigMap starts the Ray head, joins the other workers and runs the
run script. The second job spans two clusters in a network domain: each pod's TUN device comes from the
real network sidecar (the sidecar image: the worker image with the agent's package), Ray binds the virtual
IPs and its traffic crosses the agents' tunnels.

What it shows, each from the real part that owns it: pod phases and container IDs from the kubelet, pod IPs
from the CNI bridge, the worker's lines from the pod log API (through the agent's log follower into the
platform's job log), worker phases from the bootstrap's marker lines, and the job Succeeded with the run
script's exit code. A third logs in to a real worker pod with OpenSSH through the platform (issue 32): the pod's
sshd runs as the pod's user with a host key of its own, and the job's key lets that user in. A fourth mounts a
bucket of the suite's S3 server into a real pod through RLark's own CSI node plugin (ADR 0024, issue 33),
registered with the node's kubelet: the job reads what the test put and writes what the test reads back.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import os
import subprocess
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from jobs import add_key, document, logs, make_public_key, role, submit, wait_placeable, wait_status
from k8s_agents import admin, create_namespace, job_objects, kubernetes_agent, privileged_namespace
from rlark_devinfra.k8s import images, realnode, testbed
from rlark_devinfra.pytest_plugin import S3Bucket
from rlark_tunnel_agent.agent.sidecars import SidecarOptions
from rlark_tunnel_agent.agent.tunnels import TunnelOptions
from rlark_tunnel_agent.runtime.kubernetes import names
from rlark_tunnel_agent.runtime.kubernetes.kube import Kube
from rlark_tunnel_agent.runtime.kubernetes.manifests import SIDECAR_CONTAINER
from stack import Stack, eventually, platform

# The limit is the test's own: the first test of a session also starts five real nodes (one to three
# minutes, bounded by the node's own waits), which must not eat into the job's time.
pytestmark = [pytest.mark.k8s, pytest.mark.e2e, pytest.mark.heavy, pytest.mark.timeout(420, func_only=True)]

GPUS_PER_NODE = 4
"""What each real node advertises (an extended resource, as a device plugin would): Ray counts them as
logical GPUs, so placement and Ray's GPU accounting run as on a GPU node."""

REAL_DRIVER: dict[str, Any] = {"resync_interval_s": 2.0, "termination_grace_period_s": 5}
"""The driver's production defaults otherwise: markers expected, logs followed."""

RUN = """\
echo "worker identity: uid=$(id -u) caps=$(awk '/^CapEff/ {print $2}' /proc/self/status)" \
  "no_new_privs=$(awk '/^NoNewPrivs/ {print $2}' /proc/self/status)"
python - <<'EOF'
import os, urllib.error, urllib.request

jobs = os.environ["RAY_API_SERVER_ADDRESS"] + "/api/jobs/"
try:
    print("ray jobs api without a token:", urllib.request.urlopen(jobs, timeout=10).status, flush=True)
except urllib.error.HTTPError as exc:
    print("ray jobs api without a token:", exc.code, flush=True)
with open(os.environ["RAY_AUTH_TOKEN_PATH"]) as token:
    asked = urllib.request.Request(jobs, headers={"Authorization": "Bearer " + token.read().strip()})
print("ray jobs api with the attempt's token:", urllib.request.urlopen(asked, timeout=10).status, flush=True)
EOF
python - <<'EOF'
import socket

import ray
from ray.util.placement_group import placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

ray.init(address="auto")
alive = [node for node in ray.nodes() if node["Alive"]]
print(f"ray nodes alive: {len(alive)}, GPUs: {ray.cluster_resources().get('GPU', 0):g}", flush=True)
print("ray node addresses:", " ".join(sorted(node["NodeManagerAddress"] for node in alive)), flush=True)


@ray.remote(num_gpus=1)
def where() -> str:
    return socket.gethostname()


group = placement_group([{"CPU": 1, "GPU": 1}] * 3, strategy="STRICT_SPREAD")
ray.get(group.ready(), timeout=120)
hosts = ray.get(
    [
        where.options(
            scheduling_strategy=PlacementGroupSchedulingStrategy(group, placement_group_bundle_index=i)
        ).remote()
        for i in range(3)
    ]
)
print("tasks ran on:", " ".join(sorted(hosts)), flush=True)
EOF
"""


DOMAIN_CIDR = "10.201.0.0/16"


@pytest.fixture
async def stack(postgres_server_url: str, kafka_bootstrap: str, tmp_path: Path) -> AsyncIterator[Stack]:
    async with platform(postgres_server_url, kafka_bootstrap, tmp_path) as running:
        yield running


class PodHistory:
    """Every state the job's pods were seen in, polled from the API servers until stopped (the agent deletes
    a job's pods when it ends, so their last states are only seen while it runs)."""

    def __init__(self, places: list[tuple[Kube, str]], job_id: str) -> None:
        self.places, self.job_id = places, job_id
        self.seen: dict[str, list[dict[str, Any]]] = {}
        self._task: asyncio.Task[None] | None = None

    def phases(self, pod: str) -> list[str]:
        """The pod's phases in the order seen, each once."""
        return list(dict.fromkeys(state["status"].get("phase") for state in self.seen.get(pod, [])))

    def last(self, pod: str, phase: str) -> dict[str, Any]:
        return next(state for state in reversed(self.seen[pod]) if state["status"].get("phase") == phase)

    def _pods(self) -> list[dict[str, Any]]:
        return [pod for kube, ns in self.places for pod in job_objects(kube, ns, self.job_id)["pod"]]

    async def _poll(self) -> None:
        while True:
            for pod in await asyncio.to_thread(self._pods):
                self.seen.setdefault(pod["metadata"]["name"], []).append(pod)
            await asyncio.sleep(0.2)

    async def removed(self) -> bool:
        return not await asyncio.to_thread(self._pods)

    def __enter__(self) -> PodHistory:
        self._task = asyncio.create_task(self._poll())
        return self

    def __exit__(self, *_: object) -> None:
        assert self._task is not None
        self._task.cancel()


@dataclass
class Side:
    """One cluster of a test: its real nodes, an admin client, the test's worker namespaces, its credential."""

    nodes: list[realnode.RealNode]
    kube: Kube
    namespace: str
    credential: str

    @property
    def cluster(self) -> testbed.Cluster:
        return self.nodes[0].cluster

    @property
    def places(self) -> list[tuple[Kube, str]]:
        return [(self.kube, self.namespace), (self.kube, privileged_namespace(self.namespace))]


async def side(stack: Stack, nodes: list[realnode.RealNode], pool: str) -> Side:
    """Label the nodes for ``pool`` (4 GPUs each), make the namespaces, register the cluster."""
    for node in nodes:
        realnode.advertise(node, gpus=GPUS_PER_NODE, gpu_model="A100", labels={"rlark.io/pool": pool})
    kube = admin(nodes[0].cluster)
    namespace = create_namespace(kube, "real")
    create_namespace(kube, name=privileged_namespace(namespace))
    credential = await stack.register_cluster(
        nodes[0].cluster.name,
        runtime="kubernetes",
        pod_cidrs=[node.subnet for node in nodes],
        service_cidrs=[testbed.SERVICE_CIDR],
    )
    return Side(nodes, kube, namespace, credential)


@contextlib.asynccontextmanager
async def agent(stack: Stack, at: Side, tmp_path: Path, domains: bool = False) -> AsyncIterator[None]:
    """The real agent of ``at``'s cluster with the driver's production settings; with ``domains``, its
    tunnels and the network sidecars (the sidecar image; pods dial the agent at this machine's address)."""
    driver = dict(REAL_DRIVER)
    extra: dict[str, Any] = {}
    if domains:
        driver["network_sidecar_image"] = images.images().sidecar_ref
        extra["tunnels"] = TunnelOptions(listen_host="127.0.0.1")
        extra["sidecars"] = SidecarOptions(listen_port=0, advertise_host=realnode.node_address())
    async with kubernetes_agent(
        stack.url, at.credential, at.cluster, at.namespace, tmp_path / at.cluster.name, driver=driver, **extra
    ):
        yield


async def nodes_listed(stack: Stack, pool: str, count: int) -> list[dict[str, Any]]:
    async def listed() -> list[dict[str, Any]] | None:
        async with stack.client() as client:
            response = await client.get("/api/v1/nodes", params={"selector": f"rlark.io/pool={pool}"})
            assert response.status_code == 200, response.text
        items: list[dict[str, Any]] = [n for n in response.json()["items"] if n["ready"]]
        return items if len(items) == count else None

    found: list[dict[str, Any]] = await eventually(listed, timeout_s=120, what="the real nodes in inventory")
    return found


async def run_to_success(
    stack: Stack, doc: dict[str, Any], places: list[tuple[Kube, str]]
) -> tuple[dict[str, Any], PodHistory, list[str]]:
    """Submit ``doc`` once placeable, wait for Succeeded and for its pods to go; the job, what its pods went
    through, and its log lines (the last 60 in the failure when it does not succeed)."""
    await wait_placeable(stack, doc, timeout_s=120)
    job_id = (await submit(stack, doc))["id"]
    with PodHistory(places, job_id) as history:
        try:
            done = await wait_status(stack, job_id, {"Succeeded"}, timeout_s=300)
        except AssertionError as exc:
            tail = "\n".join(f"{e['worker_id']}: {e['line']}" for e in (await logs(stack, job_id))[-60:])
            raise AssertionError(f"{exc}\nthe job's log ends:\n{tail}") from None
        # The job's end removes its pods: each kubelet stops the containers, the API server forgets them.
        await eventually(history.removed, timeout_s=60, what="the job's pods removed")
    return done, history, [entry["line"] for entry in await logs(stack, job_id)]


def check_pods(done: dict[str, Any], history: PodHistory, nodes: list[realnode.RealNode]) -> None:
    """Every worker's pod ran on its own real node, as its kubelet reported: Running (after Pending, when a poll
    caught that) with containerd's containers and an address from that node's bridge."""
    pods = {names.pod_name(w["id"]) for w in done["workers"]}
    assert set(history.seen) == pods
    subnet_of = {node.name: ipaddress.ip_network(node.subnet) for node in nodes}
    placed = [history.seen[pod][-1]["spec"]["nodeName"] for pod in pods]
    assert set(placed) <= set(subnet_of), placed
    assert len(set(placed)) == len(pods), placed
    for pod in pods:
        # Polled every 0.2 s: a pod whose image is in place can be Running by its first sighting.
        phases = history.phases(pod)
        assert "Running" in phases, (pod, phases)
        assert set(phases[: phases.index("Running")]) <= {"Pending"}, (pod, phases)
        running = history.last(pod, "Running")
        assert ipaddress.ip_address(running["status"]["podIP"]) in subnet_of[running["spec"]["nodeName"]]
        statuses = running["status"]["containerStatuses"]
        assert all(s["containerID"].startswith("containerd://") for s in statuses), statuses


async def check_phases(stack: Stack, done: dict[str, Any]) -> None:
    """Each worker's phases came from the bootstrap's marker lines: the Header's Ray head, every worker
    joined, the Header ran the script (a container that merely runs would stop at Starting)."""
    phases: dict[str, set[str]] = {w["id"]: set() for w in done["workers"]}
    async with stack.client() as client:
        response = await client.get(f"/api/v1/jobs/{done['id']}/events")
        assert response.status_code == 200, response.text
    for entry in response.json()["items"]:
        if entry["kind"] == "worker" and entry["worker_id"] in phases:
            phases[entry["worker_id"]].add(entry["phase"])
    for worker_id, seen in phases.items():
        assert "Joined" in seen, (worker_id, seen)
    header = next(w for w in done["workers"] if w["is_header"])
    assert {"RayHeadUp", "Running", "Succeeded"} <= phases[header["id"]], phases


def check_ray(done: dict[str, Any], lines: list[str]) -> list[str]:
    """The run script's own lines, streamed from the pod log API into the job's log: three Ray nodes, a
    task on each pod; the Ray nodes' addresses."""
    assert "ray nodes alive: 3, GPUs: 3" in lines, lines[-40:]
    # The runtime enforced the pod's security context: the job's code is uid 1000 with no capability, and
    # cannot gain one (what a hostile job would need to reach the node or the agent's credentials).
    assert "worker identity: uid=1000 caps=0000000000000000 no_new_privs=1" in lines, lines[-40:]
    # Its Ray wants the attempt's token (ADR 0022), which the worker reads from its own Secret.
    assert "ray jobs api without a token: 401" in lines, lines[-40:]
    assert "ray jobs api with the attempt's token: 200" in lines, lines[-40:]
    ran_on = next(line for line in lines if line.startswith("tasks ran on: "))
    assert sorted(ran_on.removeprefix("tasks ran on: ").split()) == sorted(
        names.pod_name(w["id"]) for w in done["workers"]
    )
    addresses = next(line for line in lines if line.startswith("ray node addresses: "))
    return addresses.removeprefix("ray node addresses: ").split()


def ray_job(name: str, pool: str, rollouts_in: str, **extra: Any) -> dict[str, Any]:
    """The job both tests run: an actor (the Header) in alpha and two rollouts, on the pool's real nodes, in the
    project's worker image, running ``RUN``."""
    common = {
        "gpusPerWorker": 1,
        "nodeSelector": {"rlark.io/pool": pool},
        "image": images.images().worker_ref,
    }
    roles = [role("actor", 1, cluster="alpha", **common), role("rollout", 2, cluster=rollouts_in, **common)]
    return document(name, roles, RUN, **extra)


async def test_a_three_worker_ray_job_runs_in_real_pods_through_the_real_bootstrap(
    stack: Stack, k8s_real_nodes: dict[str, list[realnode.RealNode]], tmp_path: Path
) -> None:
    pool = f"real-{uuid.uuid4().hex[:8]}"
    alpha = await side(stack, k8s_real_nodes["alpha"][:3], pool)
    async with agent(stack, alpha, tmp_path):
        found = await nodes_listed(stack, pool, 3)
        assert sorted((n["name"], n["cluster"], n["gpu_count"]) for n in found) == [
            (node.name, "alpha", GPUS_PER_NODE) for node in alpha.nodes
        ]
        doc = ray_job("ray in real pods", pool, rollouts_in="alpha")
        done, history, lines = await run_to_success(stack, doc, alpha.places)
    addresses = check_ray(done, lines)
    pod_ips = {history.last(p, "Running")["status"]["podIP"] for p in history.seen}
    assert set(addresses) == pod_ips  # no domain: Ray binds the pods' own addresses
    check_pods(done, history, alpha.nodes)
    await check_phases(stack, done)


async def test_a_job_across_two_clusters_runs_ray_over_the_network_sidecars_tun_devices(
    stack: Stack, k8s_real_nodes: dict[str, list[realnode.RealNode]], tmp_path: Path
) -> None:
    pool = f"real-{uuid.uuid4().hex[:8]}"
    alpha = await side(stack, k8s_real_nodes["alpha"][:1], pool)
    beta = await side(stack, k8s_real_nodes["beta"][:2], pool)
    domain = f"net-{uuid.uuid4().hex[:6]}"
    async with stack.client() as client:
        created = await client.post("/api/v1/domains", json={"name": domain, "cidr": DOMAIN_CIDR})
        assert created.status_code == 201, created.text
    async with agent(stack, alpha, tmp_path, domains=True), agent(stack, beta, tmp_path, domains=True):
        await nodes_listed(stack, pool, 3)
        doc = ray_job("ray across clusters in real pods", pool, rollouts_in="beta", networkDomain=domain)
        done, history, lines = await run_to_success(stack, doc, [*alpha.places, *beta.places])
    # Ray bound the workers' virtual IPs: every byte between the pods crossed the sidecars and the tunnels.
    addresses = check_ray(done, lines)
    assert sorted(addresses) == sorted(w["virtual_ip"] for w in done["workers"])
    assert all(ipaddress.ip_address(a) in ipaddress.ip_network(DOMAIN_CIDR) for a in addresses)
    check_pods(done, history, [*alpha.nodes, *beta.nodes])
    for pod in history.seen:  # each pod's TUN came from its network sidecar, running beside the worker
        running = history.last(pod, "Running")["status"]
        sidecars = [c for c in running.get("initContainerStatuses") or [] if c["name"] == SIDECAR_CONTAINER]
        assert [list(c["state"]) for c in sidecars] == [["running"]], running
    await check_phases(stack, done)


async def openssh(stack: Stack, tmp: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    """``ssh`` with the config `rlark ssh-config` wrote (its ProxyCommand: the gateway's relay to the agent)."""
    env = {**os.environ, "RLARK_URL": stack.url, "RLARK_TOKEN": stack.admin_token}
    env["RLARK_CONFIG_DIR"] = str(tmp / "cli-config")
    options = ["-F", str(tmp / "ssh_config"), "-o", f"UserKnownHostsFile={tmp / 'known_hosts'}"]
    options += ["-o", "BatchMode=yes", "-o", "ConnectTimeout=30"]
    return await asyncio.to_thread(
        subprocess.run, ["ssh", *options, *argv], env=env, capture_output=True, text=True, timeout=120
    )


async def test_ssh_through_the_platform_runs_a_command_in_a_real_worker_pod_as_the_pod_s_user(
    stack: Stack, k8s_real_nodes: dict[str, list[realnode.RealNode]], tmp_path: Path
) -> None:
    pool = f"real-{uuid.uuid4().hex[:8]}"
    alpha = await side(stack, k8s_real_nodes["alpha"][:1], pool)
    await add_key(stack, "laptop", make_public_key(tmp_path, "laptop"))
    async with kubernetes_agent(
        stack.url,
        alpha.credential,
        alpha.cluster,
        alpha.namespace,
        tmp_path / "alpha",
        driver=dict(REAL_DRIVER),
    ) as running_agent:
        await asyncio.wait_for(running_agent.agent.ssh_link.connected.wait(), 30)
        await nodes_listed(stack, pool, 1)
        actor = role(
            "actor",
            1,
            cluster="alpha",
            nodeSelector={"rlark.io/pool": pool},
            image=images.images().worker_ref,
        )
        doc = document("ssh into a real pod", [actor], "sleep 600\n", sshKeys=["laptop"])
        await wait_placeable(stack, doc, timeout_s=120)
        job_id = (await submit(stack, doc))["id"]
        running = await wait_status(stack, job_id, {"Running"}, timeout_s=240)
        worker = running["workers"][0]
        assert worker["login_user"] == "rlark"  # the worker image's user of the pods' uid (1000)
        made = await stack.cli("ssh-config", job_id, "-i", str(tmp_path / "laptop"))
        assert made.returncode == 0, made.stderr
        assert "User rlark" in made.stdout, made.stdout
        (tmp_path / "ssh_config").write_text(made.stdout)

        async def logged_in() -> subprocess.CompletedProcess[str] | None:
            done = await openssh(stack, tmp_path, worker["id"], "echo in-$(id -un)-$(id -u) on $(hostname)")
            return done if done.returncode == 0 else None

        try:
            done = await eventually(
                logged_in, timeout_s=120, interval_s=2, what="ssh into the real worker pod"
            )
        except AssertionError as exc:
            last = await openssh(stack, tmp_path, worker["id"], "true")
            tail = "\n".join(e["line"] for e in (await logs(stack, job_id))[-30:])
            raise AssertionError(f"{exc}\nssh: {last.stderr}\nthe worker's log ends:\n{tail}") from None
        # The pod's own user, in the pod the job's worker runs in (its hostname: the pod's name).
        assert done.stdout.strip() == f"in-rlark-1000 on {names.pod_name(worker['id'])}", done
        # Its host key is the worker's own, accepted on first use under the worker's id.
        assert worker["id"] in (tmp_path / "known_hosts").read_text()
        async with stack.client() as client:
            cancelled = await client.post(f"/api/v1/jobs/{job_id}:cancel")
            assert cancelled.status_code in (200, 202), cancelled.text
        await wait_status(stack, job_id, {"Cancelled"}, timeout_s=120)


BUCKET_RUN = """\
echo "bucket says: $(cat /data/input/hello.txt)"
mkdir -p /data/output
echo "written in $(hostname) by $(id -u)" > /data/output/result.txt
echo "mount type: $(grep ' /data ' /proc/self/mountinfo | sed 's/.* - //' | cut -d' ' -f1)"
"""


async def test_a_job_in_a_real_pod_reads_and_writes_a_bucket_through_rlark_s_csi_node_plugin(
    stack: Stack, k8s_real_nodes: dict[str, list[realnode.RealNode]], s3_bucket: S3Bucket, tmp_path: Path
) -> None:
    """Issue 33 on Kubernetes: the worker's ``objectStorage`` mount is an inline volume of the CSI driver the agent
    names (RLARK_K8S_OBJECT_STORAGE_CSI_DRIVER), served by RLark's node plugin (rclone, as the local runtime)
    running beside the node's kubelet; its credentials come from the user's RLark secret, stored through the API."""
    node = k8s_real_nodes["alpha"][0]
    await asyncio.to_thread(realnode.csi_plugin_up, node)
    pool = f"real-{uuid.uuid4().hex[:8]}"
    alpha = await side(stack, [node], pool)
    token = uuid.uuid4().hex
    s3 = s3_bucket.client()
    await asyncio.to_thread(
        s3.put_object, Bucket=s3_bucket.name, Key="run/input/hello.txt", Body=f"{token}\n".encode()
    )
    keys = s3_bucket.server.credential_document(s3_bucket.keys)
    async with stack.client() as client:
        stored = await client.post("/api/v1/secrets", json={"name": "bucket-keys", "value": keys})
        assert stored.status_code == 201, stored.text
    driver = {**REAL_DRIVER, "object_storage_csi_driver": realnode.CSI_DRIVER}
    mount = {
        "name": "data",
        "type": "objectStorage",
        "source": f"s3://{s3_bucket.name}/run",
        "path": "/data",
        "secretRef": "bucket-keys",
    }
    async with kubernetes_agent(
        stack.url, alpha.credential, alpha.cluster, alpha.namespace, tmp_path / "alpha", driver=driver
    ):
        await nodes_listed(stack, pool, 1)
        actor = role(
            "actor",
            1,
            cluster="alpha",
            nodeSelector={"rlark.io/pool": pool},
            image=images.images().worker_ref,
            mounts=[mount],
        )
        doc = document("a bucket in a real pod", [actor], BUCKET_RUN)
        done, history, lines = await run_to_success(stack, doc, alpha.places)

    [pod] = history.seen
    assert f"bucket says: {token}" in lines, lines[-30:]
    assert "mount type: fuse.rclone" in lines, lines[-30:]
    # The pod's volume was the plugin's, its credentials in the Secret the agent wrote for this worker.
    running = history.last(pod, "Running")
    [volume] = [v["csi"] for v in running["spec"]["volumes"] if "csi" in v]
    assert volume["driver"] == realnode.CSI_DRIVER
    assert volume["volumeAttributes"] == {"bucketName": s3_bucket.name, "prefix": "run/"}
    assert volume["nodePublishSecretRef"]["name"] == names.bucket_secret_name(done["workers"][0]["id"], 0)
    # The kubelet tears the volume down after the pod has left the API: the plugin's unpublish uploads what was
    # written, then unmounts, cleans its cache and says so; once nothing of it is mounted under the node's
    # kubelet directory and the plugin said it, the file is in the bucket.
    root = str(realnode.kubelet_root(node))
    plugin_log = node.directory / "csi-node.log"

    async def unpublished() -> bool:
        mountinfo = await asyncio.to_thread(Path("/proc/self/mountinfo").read_text)
        if [line for line in mountinfo.splitlines() if root in line and "fuse.rclone" in line]:
            return False
        return "volume unpublished" in await asyncio.to_thread(plugin_log.read_text)

    await eventually(unpublished, timeout_s=90, what="the bucket volume unpublished")
    answer = await asyncio.to_thread(s3.get_object, Bucket=s3_bucket.name, Key="run/output/result.txt")
    assert answer["Body"].read().decode() == f"written in {pod} by 1000\n"
    said = await asyncio.to_thread(plugin_log.read_text)
    assert "volume published" in said, said[-2000:]
    assert s3_bucket.keys.secret_access_key not in said
