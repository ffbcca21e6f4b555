"""The Kubernetes objects of a job and its workers, rendered as plain manifests (dicts). Pure.

Per job: a ConfigMap (``rlark-<job>-job``) carrying the worker bootstrap files — it is the owner of
every other object of the job, so deleting it garbage-collects the job on a real cluster — and a
headless Service (``rlark-<job>``) so each worker resolves as ``<pod>.<service>.<ns>.svc``.
Per worker: a ConfigMap (``rlark-<worker>-cfg``: prepare/run scripts, public keys for
``authorized_keys``, and the worker spec as the durable record that the worker should exist) and
the Pod (``rlark-<worker>``) bound to the placed node by ``spec.nodeName``; a worker with a network
sidecar, a files sidecar or a Ray token (ADR 0022: every worker an agent creates) also gets a Secret
(``rlark-<worker>-net``) holding only those secrets; the worker container sees only its Ray token, at
``SECRETS_MOUNT``, mode 0440 for the pod's group.

Pod shape (every field deliberate; a golden-file test pins it):
- no scheduler involved: ``nodeName`` is the scheduler's placement; ``restartPolicy: Never``
  (a worker that exits is done: the job decides, not the kubelet);
- ``automountServiceAccountToken: false`` and ``enableServiceLinks: false``: user code gets no
  cluster credential and no service environment noise;
- pod security: non-root UID/GID (configurable), ``fsGroup`` for writable volumes, seccomp
  RuntimeDefault; the worker container: ``allowPrivilegeEscalation: false``, ``privileged:
  false``, every capability dropped;
- GPU: ``nvidia.com/gpu`` in requests and limits (extended resources need both equal); a
  toleration of the usual ``nvidia.com/gpu`` NoSchedule taint of GPU nodes;
- volumes: the job ConfigMap at /opt/rlark/bootstrap (read-only, 0555), the worker ConfigMap at
  /opt/rlark/worker (read-only, whole directory so key rotation propagates), an emptyDir $HOME,
  a memory-backed /dev/shm, then the role's mounts;
- env: the worker contract (``runtime/contract.py``): the role's variables, the platform's (which
  win), ``RLARK_KEYS_SYNC_S`` and, for a worker holding GPUs, ``RLARK_GPU_SAMPLE_S`` (this runtime's own)
  and ``RLARK_NODE_IP`` from the pod's IP outside a network domain; sorted by name, every value escaped so Kubernetes' ``$(VAR)`` expansion cannot
  rewrite it; the container ports are the contract's (ssh; on the Header Ray's GCS and dashboard);
- the network sidecar (only for workers with a virtual IP, a configured sidecar image and the
  agent's ``SidecarAccess``) is the one container with a capability: NET_ADMIN, nothing else, and
  /dev/net/tun. A native sidecar (an init container with ``restartPolicy: Always``) whose startup
  probe waits for the TUN device, so the worker starts only once its virtual IP exists. It runs
  ``tunnel/sidecar.py`` with the agent's address, the worker id, the address and MTU as arguments;
  its token comes from the worker's Secret through ``secretKeyRef`` — never in the pod spec;
- the files sidecar (only for workers declaring outputs or a ``tensorboardDir`` that a volume holds, on a
  cluster with a files image and a fixed ``run_as_user``; ADR 0013): a native sidecar serving them to the
  agent (``rlark_tunnel_agent.files_server``) on ``files_sidecar_port`` at the pod's IP, as the job's uid,
  no capability, no privilege escalation, a read-only root file system, small requests, the volumes that
  hold those paths mounted read-only at the worker's paths (``files_sidecar.plan``) and a small emptyDir
  ``/tmp``; its secret comes from the worker's Secret (key ``files``), never in the pod spec. It meets Pod
  Security ``restricted``, so it never moves a worker to the privileged namespace.

Namespaces (`worker_namespace`): a pod that meets Pod Security ``restricted`` goes to
``config.namespace`` (labelled ``enforce: restricted``); one with a hostPath volume or the network
sidecar (`privileged_needs`) to ``config.privileged_namespace`` (``enforce: privileged``). Every
object a pod names (its worker ConfigMap, Secret, the job's ConfigMap and headless Service) is
rendered into the pod's namespace, and each pod searches the other namespace's DNS domain
(`dns_searches`) so a job split across both resolves its peers by the same names.

Mount sources map to volume types: an absolute path → ``hostPath`` (``Directory`` when read-only,
``DirectoryOrCreate`` otherwise); ``pvc://<claim>[/<sub/path>]`` → ``persistentVolumeClaim`` with
``subPath``; ``csi://<driver>?<attr>=<value>&...`` → an inline CSI ephemeral volume (object storage
through whichever CSI driver the cluster offers, e.g. a Mountpoint-for-S3 or csi-s3 driver);
``emptyDir`` mounts → ``emptyDir``; ``pvc`` mounts (a claim name) → ``persistentVolumeClaim``;
``objectStorage`` mounts (``s3://bucket/prefix``) → an inline CSI volume of the driver named by
``object_storage_csi_driver`` with ``bucketName``/``prefix`` attributes and ``nodePublishSecretRef``
naming a per-worker Secret the agent writes from the RLark secret the mount's ``secretRef`` names
(`bucket_secrets`; ADR 0024). Object-storage credentials never travel in a placement: the agent fetches the
secret's value for this worker (ADR 0025) and the Secret lives and dies with the worker.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from rlark_contracts.storage import CredentialsError, parse_s3_credentials

from rlark_tunnel_agent.runtime.contract import (
    KEYS_FILE,
    KUBERNETES,
    RAY_TOKEN_FILE,
    RuntimeFacts,
    compose_env,
    worker_contract,
    worker_files,
    worker_secret_files,
    worker_secrets,
)
from rlark_tunnel_agent.runtime.driver import Mount, MountType, RayPorts, WorkerSpec
from rlark_tunnel_agent.runtime.kubernetes import files_sidecar, names
from rlark_tunnel_agent.runtime.kubernetes.config import KubernetesDriverConfig
from rlark_tunnel_agent.runtime.kubernetes.network import SidecarAccess

GPU_RESOURCE = "nvidia.com/gpu"
WORKER_CONTAINER = "worker"
SIDECAR_CONTAINER = "rlark-net"
FILES_CONTAINER = "rlark-files"
FILES_SECRET_KEY = "files"  # noqa: S105 - the key name inside the Secret, not a secret
FILES_SECRET_ENV = "RLARK_FILES_SECRET"  # noqa: S105 - a variable name
FILES_TMP = "/tmp"  # noqa: S108 - the files sidecar's own emptyDir
BOOTSTRAP_MOUNT = "/opt/rlark/bootstrap"
WORKER_MOUNT = "/opt/rlark/worker"
SECRETS_MOUNT = "/var/run/rlark/secrets"
"""Where the worker's own Secret shows the worker's secrets (`contract.worker_secrets`), read-only."""
ENTRYPOINT_FILE = "entrypoint.sh"
SPEC_KEY = "spec.json"
KEYS_KEY = KEYS_FILE
TOKEN_KEY = "token"  # noqa: S105 - the key name inside the Secret, not a secret
TOKEN_ENV = "RLARK_TUNNEL_TOKEN"  # noqa: S105 - a variable name
TUN_DEVICE = "rlark0"
"""The sidecar's TUN device (``run_sidecar``'s default name): Ray's and RLinf's network device."""
POD_DEVICE = "eth0"
"""The pod's interface, which carries its IP (every CNI names the pod's side ``eth0``)."""
RAY_TEMP_DIR = "/tmp/ray"  # noqa: S108 - inside the worker's own container

Manifest = dict[str, Any]


def owner_reference(job_config: Mapping[str, Any]) -> dict[str, Any]:
    """An ownerReference to the job's ConfigMap (needs its uid, so the ConfigMap comes first)."""
    meta = job_config["metadata"]
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "name": meta["name"],
        "uid": meta["uid"],
        "blockOwnerDeletion": False,
        "controller": False,
    }


def job_config_map(job_id: str, namespace: str, bootstrap_files: Mapping[str, str]) -> Manifest:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": names.job_config_name(job_id),
            "namespace": namespace,
            "labels": names.job_labels(job_id),
            "annotations": {names.JOB_ANNOTATION: job_id},
        },
        "data": dict(sorted(bootstrap_files.items())),
    }


AGENT_POD_LABELS = {"app.kubernetes.io/name": "tunnel-agent"}
"""The agent's pods' labels (deploy/agent/deployment.yaml)."""
DNS_PEER = {
    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
    "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}},
}
"""The cluster's DNS (CoreDNS and kube-dns both carry ``k8s-app=kube-dns``)."""


def job_network_policy(
    job_id: str, namespace: str, config: KubernetesDriverConfig, owner: Mapping[str, Any]
) -> Manifest:
    """The job's NetworkPolicy in ``namespace`` (ADR 0022), owned by the job's ConfigMap like the rest.

    It selects the job's worker pods. In: only from the job's own pods (in either worker namespace) and the
    agent (its pods, or ``agent_cidrs`` when it is a host process). Out: the job's own pods, the agent, the
    cluster's DNS on 53, and any address outside ``worker_egress_except``. Another job's pods — which carry
    the same labels but another job id — are neither reached nor reaching."""
    job_pods = {
        "namespaceSelector": {
            "matchExpressions": [
                {
                    "key": "kubernetes.io/metadata.name",
                    "operator": "In",
                    "values": list(config.worker_namespaces),
                }
            ]
        },
        "podSelector": {
            "matchLabels": {
                names.MANAGED_BY_LABEL: names.MANAGED_BY,
                names.JOB_LABEL: names.label_value(job_id),
            }
        },
    }
    agent: list[dict[str, Any]] = [
        {
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": config.agent_namespace}},
            "podSelector": {"matchLabels": dict(AGENT_POD_LABELS)},
        },
        *({"ipBlock": {"cidr": cidr}} for cidr in config.agent_cidrs),
    ]
    dns_ports = [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}]
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {
            "name": names.service_name(job_id),
            "namespace": namespace,
            "labels": names.job_labels(job_id),
            "annotations": {names.JOB_ANNOTATION: job_id},
            "ownerReferences": [dict(owner)],
        },
        "spec": {
            "podSelector": {
                "matchLabels": {
                    names.MANAGED_BY_LABEL: names.MANAGED_BY,
                    names.JOB_LABEL: names.label_value(job_id),
                    names.OBJECT_LABEL: "worker",
                }
            },
            "policyTypes": ["Ingress", "Egress"],
            "ingress": [{"from": [job_pods, *agent]}],
            "egress": [
                {"to": [job_pods, *agent]},
                {"to": [DNS_PEER], "ports": dns_ports},
                {"to": [{"ipBlock": {"cidr": "0.0.0.0/0", "except": list(config.worker_egress_except)}}]},
            ],
        },
    }


def headless_service(job_id: str, namespace: str, ray_port: int, owner: Mapping[str, Any]) -> Manifest:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": names.service_name(job_id),
            "namespace": namespace,
            "labels": names.job_labels(job_id),
            "annotations": {names.JOB_ANNOTATION: job_id},
            "ownerReferences": [dict(owner)],
        },
        "spec": {
            "clusterIP": "None",
            # Workers must resolve the Header before any readiness: Ray joins at start-up.
            "publishNotReadyAddresses": True,
            "selector": {
                names.MANAGED_BY_LABEL: names.MANAGED_BY,
                names.JOB_LABEL: names.label_value(job_id),
                names.OBJECT_LABEL: "worker",
            },
            "ports": [{"name": "ray-gcs", "port": ray_port, "targetPort": ray_port, "protocol": "TCP"}],
        },
    }


def _worker_object_metadata(
    spec: WorkerSpec, name: str, namespace: str, owner: Mapping[str, Any]
) -> dict[str, Any]:
    """Metadata of a per-worker object: the worker's labels and annotations, owned by the job."""
    return {
        "name": name,
        "namespace": namespace,
        "labels": names.worker_labels(spec.job_id, spec.worker_id, spec.role, spec.rank),
        "annotations": {names.JOB_ANNOTATION: spec.job_id, names.WORKER_ANNOTATION: spec.worker_id},
        "ownerReferences": [dict(owner)],
    }


def worker_config_map(spec: WorkerSpec, namespace: str, owner: Mapping[str, Any]) -> Manifest:
    """The worker contract's files (mounted at ``WORKER_MOUNT``) and the spec, the worker's record."""
    data = {**worker_files(spec), SPEC_KEY: spec.model_dump_json()}
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": _worker_object_metadata(spec, names.worker_config_name(spec.worker_id), namespace, owner),
        "data": dict(sorted(data.items())),
    }


def worker_secret(
    spec: WorkerSpec, namespace: str, owner: Mapping[str, Any], token: str = "", files_secret: str = ""
) -> Manifest:
    """The Secret holding the worker's network sidecar token, its files sidecar's secret and its own secrets
    (the attempt's Ray token; each only when given); immutable (new secrets are a new Secret)."""
    own = {secret_key(name): value for name, value in worker_secrets(spec).items()}
    data = {TOKEN_KEY: token, FILES_SECRET_KEY: files_secret, **own}
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "immutable": True,
        "metadata": _worker_object_metadata(spec, names.worker_secret_name(spec.worker_id), namespace, owner),
        "stringData": {k: v for k, v in data.items() if v},
    }


BUCKET_SECRET_KEYS = {
    "accessKeyID": "access_key_id",
    "secretAccessKey": "secret_access_key",
    "endpoint": "endpoint",
    "region": "region",
    "key_id": "access_key_id",
    "access_key": "secret_access_key",
}
"""The keys of a bucket credentials Secret and the credential field each holds: csi-s3's (``accessKeyID``,
``secretAccessKey``, ``endpoint``, ``region``) and Mountpoint for Amazon S3's (``key_id``, ``access_key``), so
either driver reads it as it is (a driver reading other names needs its own Secret: ADR 0024)."""


def bucket_credential_names(spec: WorkerSpec) -> tuple[str, ...]:
    """The distinct RLark secrets the worker's ``objectStorage`` mounts take their credentials from, in name
    order: the i-th is written to `names.bucket_secret_name` (worker, i)."""
    return tuple(
        sorted({m.secret_ref for m in spec.mounts if m.type == MountType.OBJECT_STORAGE and m.secret_ref})
    )


def bucket_secrets(spec: WorkerSpec, namespace: str, owner: Mapping[str, Any]) -> list[Manifest]:
    """One immutable Secret per credential secret the worker's ``objectStorage`` mounts name, holding the S3
    credential document's fields under the keys CSI drivers read (`BUCKET_SECRET_KEYS`). Raises ValueError
    naming the secret (never a value) when its value did not reach the agent or is no credential document."""
    manifests: list[Manifest] = []
    for index, secret in enumerate(bucket_credential_names(spec)):
        value = spec.secret_values.get(secret)
        if value is None:
            raise ValueError(
                f"objectStorage credentials {secret}: the secret's value did not reach the agent"
            )
        try:
            credentials = parse_s3_credentials(value.get_secret_value())
        except CredentialsError as exc:
            raise ValueError(f"objectStorage credentials {secret}: {exc}") from None
        fields = {
            "access_key_id": credentials.access_key_id,
            "secret_access_key": credentials.secret_access_key.get_secret_value(),
            "endpoint": credentials.endpoint,
            "region": credentials.region,
        }
        name = names.bucket_secret_name(spec.worker_id, index)
        manifests.append(
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "type": "Opaque",
                "immutable": True,
                "metadata": _worker_object_metadata(spec, name, namespace, owner),
                "stringData": {key: fields[field] for key, field in BUCKET_SECRET_KEYS.items()},
            }
        )
    return manifests


def secret_key(file_name: str) -> str:
    """The key of the worker's Secret holding one of its secrets' files: the Ray token's ``ray-token``, a named
    secret's ``secret.<name>`` (apart from the sidecars' ``token`` and ``files``, whatever a user names theirs)."""
    return "ray-token" if file_name == RAY_TOKEN_FILE else f"secret.{file_name}"


def spec_from_config_map(config_map: Mapping[str, Any]) -> WorkerSpec:
    """The worker spec recorded in a worker ConfigMap (how a restarted agent knows its workers)."""
    return WorkerSpec.model_validate(json.loads(config_map["data"][SPEC_KEY]))


def _escape(value: str) -> str:
    # Kubernetes expands $(VAR) in env values; "$$" is a literal "$".
    return value.replace("$", "$$")


def workdir(config: KubernetesDriverConfig) -> str:
    """The worker's work dir (``RLARK_WORKDIR``: where relative paths start), in its emptyDir ``$HOME``."""
    return f"{config.home_dir}/work"


def runtime_facts(spec: WorkerSpec, config: KubernetesDriverConfig, tun: bool) -> RuntimeFacts:
    """What only this runtime knows about the worker (the worker contract's input): its address is the
    pod's (known inside the pod only), its files are the worker ConfigMap's, its device the pod's
    ``eth0`` or, with a network sidecar (``tun``), the sidecar's TUN device."""
    return RuntimeFacts(
        node_ip=None,
        header_address=spec.header_address,
        comm_device=POD_DEVICE,
        tun_device=TUN_DEVICE if tun else None,
        gcs_port=spec.ray_port,
        ports=RayPorts(),
        home_dir=config.home_dir,
        workdir=workdir(config),
        ray_temp_dir=RAY_TEMP_DIR,
        files_dir=WORKER_MOUNT,
        secrets_dir=SECRETS_MOUNT,
        ssh_port=config.ssh_port,
    )


def _env(spec: WorkerSpec, config: KubernetesDriverConfig, tun: bool) -> list[dict[str, Any]]:
    contract = worker_contract(spec, runtime_facts(spec, config, tun))
    own = {"RLARK_KEYS_SYNC_S": str(config.keys_sync_interval_s)}
    if spec.gpus > 0:
        # Only a worker holding GPUs: a pod without a GPU request may still see every GPU of its node
        # (NVIDIA_VISIBLE_DEVICES=all in CUDA images), which are not its own.
        own["RLARK_GPU_SAMPLE_S"] = f"{config.gpu_sample_interval_s:g}"
    env = compose_env(contract, KUBERNETES, own=own)
    entries: list[dict[str, Any]] = [{"name": k, "value": _escape(v)} for k, v in sorted(env.items())]
    if "RLARK_NODE_IP" not in env:
        # Ray binds and advertises the pod's own IP.
        entries.append({"name": "RLARK_NODE_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}})
    return entries


def _container_ports(spec: WorkerSpec, config: KubernetesDriverConfig) -> list[dict[str, Any]]:
    ports = worker_contract(spec, runtime_facts(spec, config, tun=False)).ports
    return [{"name": name, "containerPort": port, "protocol": "TCP"} for name, port in ports.items()]


def _object_storage_volume(
    name: str, spec: WorkerSpec, mount: Mount, config: KubernetesDriverConfig
) -> dict[str, Any]:
    """An inline CSI volume of the cluster's object-storage driver; its credentials in the worker's bucket
    Secret for the mount's ``secretRef`` (`bucket_secrets`)."""
    if not config.object_storage_csi_driver:
        raise ValueError(
            f"mount {mount.target}: this cluster has no object-storage CSI driver configured "
            "(RLARK_K8S_OBJECT_STORAGE_CSI_DRIVER)"
        )
    if not mount.secret_ref:
        raise ValueError(f"mount {mount.target}: objectStorage needs secretRef (the credentials' secret)")
    parts = urlsplit(mount.source)
    if not parts.scheme or not parts.netloc:
        raise ValueError(f"mount {mount.target}: source must be a bucket URL such as s3://bucket/prefix")
    attributes = {"bucketName": parts.netloc}
    if prefix := parts.path.strip("/"):
        attributes["prefix"] = prefix + "/"
    csi: dict[str, Any] = {
        "driver": config.object_storage_csi_driver,
        "readOnly": mount.read_only,
        "volumeAttributes": attributes,
        "nodePublishSecretRef": {
            "name": names.bucket_secret_name(
                spec.worker_id, bucket_credential_names(spec).index(mount.secret_ref)
            )
        },
    }
    return {"name": name, "csi": csi}


def _user_volume(
    spec: WorkerSpec, index: int, mount: Mount, config: KubernetesDriverConfig
) -> tuple[dict[str, Any], dict[str, Any]]:
    name = f"mount-{index}"
    volume_mount: dict[str, Any] = {"name": name, "mountPath": mount.target, "readOnly": mount.read_only}
    if mount.type == MountType.EMPTY_DIR:
        return {"name": name, "emptyDir": {}}, volume_mount
    if mount.type == MountType.PVC:
        pvc = {"claimName": mount.source, "readOnly": mount.read_only}
        return {"name": name, "persistentVolumeClaim": pvc}, volume_mount
    if mount.type == MountType.OBJECT_STORAGE:
        return _object_storage_volume(name, spec, mount, config), volume_mount
    source = mount.source
    if source.startswith("pvc://"):
        claim, _, sub_path = source.removeprefix("pvc://").partition("/")
        if not claim:
            raise ValueError(f"mount {mount.target}: pvc:// needs a claim name")
        if sub_path:
            volume_mount["subPath"] = sub_path
        volume = {"name": name, "persistentVolumeClaim": {"claimName": claim, "readOnly": mount.read_only}}
        return volume, volume_mount
    if source.startswith("csi://"):
        parts = urlsplit(source)
        if not parts.netloc:
            raise ValueError(f"mount {mount.target}: csi:// needs a driver name")
        attributes = dict(parse_qsl(parts.query))
        csi: dict[str, Any] = {"driver": parts.netloc, "readOnly": mount.read_only}
        if attributes:
            csi["volumeAttributes"] = attributes
        return {"name": name, "csi": csi}, volume_mount
    if not source.startswith("/") or ".." in source.split("/"):
        raise ValueError(f"mount {mount.target}: source must be an absolute path, pvc:// or csi://")
    host_type = "Directory" if mount.read_only else "DirectoryOrCreate"
    return {"name": name, "hostPath": {"path": source, "type": host_type}}, volume_mount


def _resources(spec: WorkerSpec, config: KubernetesDriverConfig) -> dict[str, Any]:
    requests: dict[str, str] = {}
    limits: dict[str, str] = {}
    if spec.gpus:
        requests[GPU_RESOURCE] = limits[GPU_RESOURCE] = str(spec.gpus)
    if config.cpu_request:
        requests["cpu"] = config.cpu_request
    if config.memory_request:
        requests["memory"] = config.memory_request
    if config.memory_limit:
        limits["memory"] = config.memory_limit
    resources: dict[str, Any] = {}
    if requests:
        resources["requests"] = dict(sorted(requests.items()))
    if limits:
        resources["limits"] = dict(sorted(limits.items()))
    return resources


def _sidecar(spec: WorkerSpec, config: KubernetesDriverConfig, access: SidecarAccess) -> dict[str, Any]:
    token_ref = {"name": names.worker_secret_name(spec.worker_id), "key": TOKEN_KEY}
    args = [
        "--agent",
        f"{access.agent_host}:{access.agent_port}",
        "--worker",
        spec.worker_id,
        "--address",
        str(access.address),
        "--mtu",
        str(access.mtu),
    ]
    return {
        "name": SIDECAR_CONTAINER,
        "image": config.network_sidecar_image,
        "imagePullPolicy": config.image_pull_policy,
        # A native sidecar: starts before the worker, stops after it.
        "restartPolicy": "Always",
        "command": list(config.network_sidecar_command),
        "args": args,
        "env": [
            {"name": TOKEN_ENV, "valueFrom": {"secretKeyRef": token_ref}},
            {"name": "PYTHONDONTWRITEBYTECODE", "value": "1"},
        ],
        # The worker container starts once this succeeds: Ray binds the virtual IP at start-up.
        "startupProbe": {
            "exec": {
                "command": [
                    config.network_sidecar_command[0],
                    "-c",
                    f"import os,sys; sys.exit(not os.path.exists('/sys/class/net/{TUN_DEVICE}'))",
                ]
            },
            "periodSeconds": 1,
            "failureThreshold": 120,
        },
        "securityContext": {
            # Configuring a TUN device and routes needs NET_ADMIN, which a non-root process only
            # has through file capabilities; the sidecar runs as root with that one capability.
            "runAsNonRoot": False,
            "runAsUser": 0,
            "allowPrivilegeEscalation": False,
            "privileged": False,
            "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"], "add": ["NET_ADMIN"]},
        },
        "volumeMounts": [{"name": "dev-net-tun", "mountPath": "/dev/net/tun"}],
    }


def _home_and_user_mounts(spec: WorkerSpec, config: KubernetesDriverConfig) -> list[dict[str, Any]]:
    """The worker container's mounts that may hold its outputs: its ``$HOME`` and the role's mounts."""
    home = {"name": "home", "mountPath": config.home_dir}
    return [home, *(_user_volume(spec, i, m, config)[1] for i, m in enumerate(spec.mounts))]


def files_plan(spec: WorkerSpec, config: KubernetesDriverConfig) -> files_sidecar.FilesPlan:
    """What the worker's files sidecar would serve and mount (``files_sidecar.plan``)."""
    return files_sidecar.plan(spec, workdir(config), _home_and_user_mounts(spec, config))


def wants_files_sidecar(spec: WorkerSpec, config: KubernetesDriverConfig) -> bool:
    """A worker gets a files sidecar when the cluster has a files image, its pods run as a fixed uid (the
    sidecar runs as the job's user) and a volume holds one of its outputs or its TensorBoard dir."""
    return (
        bool(config.files_image)
        and config.run_as_user is not None
        and files_plan(spec, config).serves_anything
    )


def _files_sidecar(spec: WorkerSpec, config: KubernetesDriverConfig) -> dict[str, Any]:
    plan = files_plan(spec, config)
    port = config.files_sidecar_port
    secret_ref = {"name": names.worker_secret_name(spec.worker_id), "key": FILES_SECRET_KEY}
    args = [
        "--host",
        "$(RLARK_POD_IP)",
        "--port",
        str(port),
        "--job",
        spec.job_id,
        "--roots",
        _escape(json.dumps(files_sidecar.roots_json(plan.roots), separators=(",", ":"))),
    ]
    if plan.tensorboard_dir:
        args += ["--tensorboard-dir", _escape(plan.tensorboard_dir)]
    return {
        "name": FILES_CONTAINER,
        "image": config.files_image,
        "imagePullPolicy": config.image_pull_policy,
        # A native sidecar: it listens before the worker starts (the worker cannot take its port first).
        "restartPolicy": "Always",
        "command": list(config.files_sidecar_command),
        "args": args,
        "env": [
            {"name": "RLARK_POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
            {"name": FILES_SECRET_ENV, "valueFrom": {"secretKeyRef": secret_ref}},
            {"name": "HOME", "value": FILES_TMP},
            {"name": "PYTHONDONTWRITEBYTECODE", "value": "1"},
        ],
        "ports": [{"name": "rlark-files", "containerPort": port, "protocol": "TCP"}],
        "startupProbe": {"tcpSocket": {"port": port}, "periodSeconds": 1, "failureThreshold": 120},
        "resources": {
            "requests": {
                "cpu": config.files_sidecar_cpu_request,
                "memory": config.files_sidecar_memory_request,
            },
            "limits": {"memory": config.files_sidecar_memory_limit},
        },
        "securityContext": {
            # The job's own uid: it reads exactly what the worker could (wants_files_sidecar needs one).
            "runAsNonRoot": True,
            "runAsUser": config.run_as_user,
            "runAsGroup": config.run_as_group,
            "allowPrivilegeEscalation": False,
            "privileged": False,
            "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"]},
        },
        "volumeMounts": [*plan.mounts, {"name": "files-tmp", "mountPath": FILES_TMP}],
        "terminationMessagePolicy": "FallbackToLogsOnError",
    }


def wants_sidecar(spec: WorkerSpec, config: KubernetesDriverConfig) -> bool:
    """A worker with a virtual IP on a cluster with a network sidecar image gets a sidecar."""
    return spec.virtual_ip is not None and bool(config.network_sidecar_image)


def privileged_needs(spec: WorkerSpec, config: KubernetesDriverConfig) -> tuple[str, ...]:
    """What in the worker's pod Pod Security refuses at ``restricted`` (and at ``baseline``): each
    mount rendered as a ``hostPath`` volume, and the network sidecar (``NET_ADMIN``, ``/dev/net/tun``,
    UID 0). Empty: the pod meets ``restricted``. Raises ValueError for a mount this runtime cannot
    express (as `worker_pod` does)."""
    needs = [
        f"hostPath mount {mount.target}"
        for index, mount in enumerate(spec.mounts)
        if "hostPath" in _user_volume(spec, index, mount, config)[0]
    ]
    if wants_sidecar(spec, config):
        needs.append("network sidecar (NET_ADMIN, /dev/net/tun)")
    return tuple(needs)


def worker_namespace(spec: WorkerSpec, config: KubernetesDriverConfig) -> str:
    """The namespace of the worker's pod and of every per-worker object: the privileged one when the pod
    has `privileged_needs`, else the restricted one (``config.namespace``). Pure: the same spec and
    settings give the same namespace, so a re-delivered placement finds its objects."""
    return config.privileged_namespace if privileged_needs(spec, config) else config.namespace


def dns_searches(namespace: str, config: KubernetesDriverConfig) -> list[str]:
    """The search domains a pod in ``namespace`` adds to its own: the other worker namespaces', so
    ``<hostname>.<job service>`` (`hostnames.py`) names a peer whichever namespace its pod is in (the
    job has a headless Service of that name in each namespace holding its workers)."""
    return [f"{ns}.svc.{config.cluster_domain}" for ns in config.worker_namespaces if ns != namespace]


def worker_pod(
    spec: WorkerSpec,
    config: KubernetesDriverConfig,
    owner: Mapping[str, Any],
    sidecar: SidecarAccess | None = None,
) -> Manifest:
    """The worker's Pod; with its network sidecar when it ``wants_sidecar`` and ``sidecar`` (the
    agent's answer) is given. Raises ValueError for a mount this runtime cannot express."""
    with_sidecar = sidecar is not None and wants_sidecar(spec, config)
    namespace = worker_namespace(spec, config)
    volumes: list[dict[str, Any]] = [
        {
            "name": "rlark-bootstrap",
            "configMap": {"name": names.job_config_name(spec.job_id), "defaultMode": 0o555},
        },
        {
            "name": "rlark-worker",
            "configMap": {"name": names.worker_config_name(spec.worker_id), "defaultMode": 0o444},
        },
        {"name": "home", "emptyDir": {}},
        {
            "name": "dshm",
            "emptyDir": {"medium": "Memory", **({"sizeLimit": config.shm_size} if config.shm_size else {})},
        },
    ]
    mounts: list[dict[str, Any]] = [
        {"name": "rlark-bootstrap", "mountPath": BOOTSTRAP_MOUNT, "readOnly": True},
        {"name": "rlark-worker", "mountPath": WORKER_MOUNT, "readOnly": True},
        {"name": "home", "mountPath": config.home_dir},
        {"name": "dshm", "mountPath": "/dev/shm"},  # noqa: S108 - the pod's own shm
    ]
    if secret_files := worker_secret_files(spec):
        # Only the worker's own keys of its Secret, readable by the pod's group (fsGroup), never by others.
        volumes.append(
            {
                "name": "rlark-secrets",
                "secret": {
                    "secretName": names.worker_secret_name(spec.worker_id),
                    "items": [{"key": secret_key(name), "path": name} for name in secret_files],
                    "defaultMode": 0o440,
                },
            }
        )
        mounts.append({"name": "rlark-secrets", "mountPath": SECRETS_MOUNT, "readOnly": True})
    for index, mount in enumerate(spec.mounts):
        volume, volume_mount = _user_volume(spec, index, mount, config)
        volumes.append(volume)
        mounts.append(volume_mount)

    non_root = config.run_as_user is not None
    container_security: dict[str, Any] = {
        "allowPrivilegeEscalation": False,
        "privileged": False,
        "capabilities": {"drop": ["ALL"]},
        "runAsNonRoot": non_root,
        # Training installs packages and writes caches all over the image: a read-only root
        # file system would break ordinary images; nothing else is writable beyond the pod.
        "readOnlyRootFilesystem": False,
    }
    pod_security: dict[str, Any] = {
        "runAsNonRoot": non_root,
        "fsGroup": config.fs_group,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    if config.run_as_user is not None:
        pod_security["runAsUser"] = config.run_as_user
        pod_security["runAsGroup"] = config.run_as_group

    container: dict[str, Any] = {
        "name": WORKER_CONTAINER,
        "image": spec.image,
        "imagePullPolicy": config.image_pull_policy,
        "command": ["/bin/bash", f"{BOOTSTRAP_MOUNT}/{ENTRYPOINT_FILE}"],
        "workingDir": config.home_dir,
        "env": _env(spec, config, with_sidecar),
        "ports": _container_ports(spec, config),
        "resources": _resources(spec, config),
        "securityContext": container_security,
        "volumeMounts": mounts,
        "terminationMessagePolicy": "FallbackToLogsOnError",
    }
    pod_spec: dict[str, Any] = {
        "nodeName": spec.node_name,
        "restartPolicy": "Never",
        "hostname": names.pod_name(spec.worker_id),
        "subdomain": names.service_name(spec.job_id),
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "terminationGracePeriodSeconds": config.termination_grace_period_s + spec.termination_grace_s,
        "securityContext": pod_security,
        "tolerations": [{"key": GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"}],
        "containers": [container],
        "volumes": volumes,
    }
    if sidecar is not None and with_sidecar:
        pod_spec["initContainers"] = [_sidecar(spec, config, sidecar)]
        volumes.append({"name": "dev-net-tun", "hostPath": {"path": "/dev/net/tun", "type": "CharDevice"}})
    if wants_files_sidecar(spec, config):
        pod_spec.setdefault("initContainers", []).append(_files_sidecar(spec, config))
        volumes.append({"name": "files-tmp", "emptyDir": {"sizeLimit": "256Mi"}})
    if searches := dns_searches(namespace, config):
        pod_spec["dnsConfig"] = {"searches": searches}
    if config.image_pull_secrets:
        pod_spec["imagePullSecrets"] = [{"name": n} for n in config.image_pull_secrets]
    if config.priority_class_name:
        pod_spec["priorityClassName"] = config.priority_class_name
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": names.pod_name(spec.worker_id),
            "namespace": namespace,
            "labels": names.worker_labels(spec.job_id, spec.worker_id, spec.role, spec.rank),
            "annotations": {
                names.JOB_ANNOTATION: spec.job_id,
                names.WORKER_ANNOTATION: spec.worker_id,
            },
            "ownerReferences": [dict(owner)],
        },
        "spec": pod_spec,
    }
