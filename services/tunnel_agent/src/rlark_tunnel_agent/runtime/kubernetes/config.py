"""Settings of the Kubernetes driver: where workers go and how their pods are shaped.

Every field has a deliberate default for a GPU cluster running untrusted training code: workers run
as a non-root user with no capabilities, no privilege escalation and no service-account token.

A pydantic-settings class with the ``RLARK_K8S_`` prefix (``RLARK_K8S_NAMESPACE``, ``RLARK_K8S_RUN_AS_USER``,
...): built by the agent's composition root, where arguments win over the environment. A tuple is read
comma-separated (``RLARK_K8S_IMAGE_PULL_SECRETS=a,b``); an empty value leaves an optional field unset.
"""

from __future__ import annotations

import ipaddress
import types
from pathlib import Path
from typing import Annotated, Any, Union, get_args, get_origin

from pydantic import Field, ValidationInfo, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

DEFAULT_BOOTSTRAP_DIR = Path(__file__).resolve().parent.parent / "bootstrap"
_NAMESPACE = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
"""A namespace name: a DNS-1123 label."""


def _optional(annotation: Any) -> bool:
    return get_origin(annotation) in (Union, types.UnionType) and type(None) in get_args(annotation)


class KubernetesDriverConfig(BaseSettings):
    """How the driver talks to its cluster and shapes worker pods."""

    model_config = SettingsConfigDict(env_prefix="RLARK_K8S_", frozen=True, extra="forbid")

    namespace: str = Field(default="rlark-workers", pattern=_NAMESPACE, max_length=63)
    """Namespace of the workers that meet Pod Security ``restricted`` (labelled ``enforce: restricted``):
    every worker without a hostPath volume or a network sidecar (``manifests.worker_namespace``)."""
    privileged_namespace: str = Field(default="rlark-workers-privileged", pattern=_NAMESPACE, max_length=63)
    """Namespace of the workers that need a hostPath volume or the network sidecar (``NET_ADMIN``,
    ``/dev/net/tun``), which Pod Security refuses at ``baseline`` and ``restricted``; labelled ``enforce:
    privileged`` (warn/audit ``restricted``). Each worker's objects (ConfigMaps, Secret, the job's Service)
    live in its pod's namespace. The same name as ``namespace``: one namespace for all (it must then
    enforce ``privileged``)."""
    cluster_domain: str = Field(default="cluster.local", pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")
    """The cluster's DNS domain: each pod also searches ``<other worker namespace>.svc.<domain>``, so a
    job's workers resolve each other as ``<hostname>.<job service>`` across both namespaces."""
    kubeconfig: Path | None = None
    """A kubeconfig file; in-cluster configuration (service account) when unset."""
    context: str | None = None

    run_as_user: int | None = 1000
    """UID of the worker container; None keeps the image's user (and drops runAsNonRoot)."""
    run_as_group: int = 1000
    fs_group: int = 1000
    home_dir: str = "/home/rlark"
    """A writable emptyDir used as $HOME: ~/.ssh, the work dir and pip caches live here."""
    ssh_port: Annotated[int, Field(ge=1, le=65535)] = 2222
    """sshd's port inside the pod: a non-root sshd cannot bind 22."""
    shm_size: str | None = None
    """Size limit of the memory-backed /dev/shm (NCCL and Ray's object store need more than 64Mi)."""
    cpu_request: str | None = None
    dcgm_url: str = Field(default="", pattern=r"^(https?://\S+)?$", max_length=2000)
    """A DCGM exporter's metrics URL (``http://dcgm-exporter.gpu-operator:9400/metrics``): the workers' GPU
    utilization and memory are read there every sampling round; a worker's pod it does not measure (unset: none)
    counts by its own ``gpus_sampled`` reports (``gpu_sample_interval_s``, ADR 0017)."""
    gpu_sample_interval_s: Annotated[float, Field(gt=0, le=3600)] = 15.0
    """How often a worker holding GPUs runs ``nvidia-smi`` in its container and prints the answer as a
    ``gpus_sampled`` marker (``RLARK_GPU_SAMPLE_S``; only where its image has ``nvidia-smi``). The agent sets it
    to its ``USAGE_INTERVAL_S``; a report older than three of these counts as none."""
    memory_request: str | None = None
    memory_limit: str | None = None
    image_pull_policy: str = Field(default="IfNotPresent", pattern="^(Always|IfNotPresent|Never)$")
    image_pull_secrets: Annotated[tuple[str, ...], NoDecode] = ()
    """Names of docker-registry Secrets in the namespace (references only; never their content)."""
    priority_class_name: str = ""
    termination_grace_period_s: Annotated[int, Field(ge=0)] = 30
    network_sidecar_image: str = ""
    """Image of the per-pod network sidecar (TUN device + route of the domain CIDR; it holds the
    ``rlark_tunnel_agent`` package — the agent's image does). Only used for workers with a virtual
    IP, and only when the agent runs network-domain tunnels; only this sidecar gets NET_ADMIN.
    Empty: workers with a virtual IP get no TUN (the address is only exported, as on a cluster
    without domains)."""
    network_sidecar_command: Annotated[tuple[str, ...], NoDecode] = (
        "python",
        "-m",
        "rlark_tunnel_agent.tunnel.sidecar",
    )
    """The sidecar's command; the driver appends ``--agent H:P --worker W --address VIP/PREFIX --mtu N``.
    Where it dials (the agent's Service) and its token come from the agent (``network.py``)."""
    files_sidecar_image: str = ""
    """Image of the per-pod files sidecar (``rlark_tunnel_agent.files_server``, ADR 0013) that serves a
    worker's declared outputs and TensorBoard to the agent: every worker declaring outputs or a
    ``tensorboardDir`` gets one (when ``run_as_user`` is set: it runs as the job's uid). It must hold the
    ``rlark_tunnel_agent`` package (the agent's image does) and, for TensorBoard, ``tensorboard``. Empty:
    ``network_sidecar_image``; both empty: no files sidecar (downloads answer 501 on this cluster)."""
    files_sidecar_command: Annotated[tuple[str, ...], NoDecode] = (
        "python",
        "-m",
        "rlark_tunnel_agent.files_server",
    )
    """The files sidecar's command; the driver appends ``--host``, ``--port``, ``--job``, ``--roots`` and
    ``--tensorboard-dir``. Its secret comes from the worker's Secret (``secretKeyRef``)."""
    files_sidecar_port: Annotated[int, Field(ge=1024, le=65535)] = 8109
    """The port the files sidecar listens on at the pod's IP (the agent connects there)."""
    files_sidecar_cpu_request: str = "50m"
    files_sidecar_memory_request: str = "128Mi"
    files_sidecar_memory_limit: str = "2Gi"
    """TensorBoard runs in the sidecar: its memory grows with the event files it loads."""
    object_storage_csi_driver: str = ""
    """CSI driver for ``objectStorage`` mounts (e.g. ``s3.csi.aws.com``, Mountpoint for Amazon S3);
    empty: such mounts fail with a reason naming this setting. The driver must support inline
    (ephemeral) volumes; it reads credentials from the per-worker Secret the agent writes from the RLark
    secret the mount's ``secretRef`` names (`manifests.bucket_secrets`, ADR 0024)."""
    network_policies: bool = True
    """A NetworkPolicy per job and namespace (ADR 0022): the job's pods take connections only from the job's
    own pods and the agent, and reach only the job's pods, the agent, the cluster's DNS and addresses outside
    `worker_egress_except`. Enforced only by a network plugin that enforces NetworkPolicy (a prerequisite)."""
    network_policy_enforced: bool = False
    """The admin's word that this cluster's network plugin enforces NetworkPolicy. The agent cannot tell by
    itself; until this is set, `rlark clusters show` says that jobs here are apart only if it does."""
    agent_namespace: str = Field(default="rlark-agent", pattern=_NAMESPACE, max_length=63)
    """The agent's own namespace (deploy/agent): its pods (``app.kubernetes.io/name=tunnel-agent``) may reach
    workers (SSH, tools, files relays) and be reached by their sidecars."""
    agent_cidrs: Annotated[tuple[str, ...], NoDecode] = ()
    """Where the agent connects from when it is no pod there (a host process: the test bed's agents), as
    CIDRs; comma-separated in the environment."""
    worker_egress_except: Annotated[tuple[str, ...], NoDecode] = (
        "10.0.0.0/8",
        "172.16.0.0/12",
        "192.168.0.0/16",
        "100.64.0.0/10",
        "169.254.0.0/16",
    )
    """Addresses workers never reach (but their own job's pods, the agent and DNS): private, shared and
    link-local ranges — other jobs, nodes, the lab's services, cloud metadata. Everything else (a model hub,
    a package index) stays reachable. Comma-separated in the environment."""
    bootstrap_dir: Path = DEFAULT_BOOTSTRAP_DIR
    """Where bootstrap.sh and rlark_node.py are read from (shipped in the per-job ConfigMap)."""
    keys_sync_interval_s: Annotated[int, Field(ge=1)] = 10

    resync_interval_s: Annotated[float, Field(gt=0)] = 30.0
    image_pull_timeout_s: Annotated[float, Field(gt=0)] = 600.0
    """A worker whose image cannot be pulled for this long fails (a wrong image never heals)."""
    api_concurrency: Annotated[int, Field(ge=1, le=128)] = 16
    """Threads for blocking API calls (watches and log followers have their own threads)."""
    watch_timeout_s: Annotated[int, Field(ge=5)] = 300
    log_buffer_lines: Annotated[int, Field(ge=10)] = 2000
    follow_logs: bool = True
    """Stream every worker's log into `events()` (markers become status changes)."""
    running_without_markers: bool = False
    """For clusters whose containers run no bootstrap (KWOK's simulated pods): no marker line will
    ever move a worker past Starting, so a running worker container is reported as phase Joined,
    with a reason that says so — the job then runs once every worker's container runs (not Running:
    a Header in Running would make the job Running before the other workers exist). Off on real
    clusters, where the bootstrap's markers say when Ray joined and the run script started."""

    @property
    def files_image(self) -> str:
        """The files sidecar's image: its own setting, else the network sidecar's ("" when neither)."""
        return self.files_sidecar_image or self.network_sidecar_image

    @property
    def worker_namespaces(self) -> tuple[str, ...]:
        """The namespaces holding workers: the restricted one first, the privileged one (when distinct)."""
        return tuple(dict.fromkeys((self.namespace, self.privileged_namespace)))

    @field_validator("*", mode="before")
    @classmethod
    def _from_text(cls, value: Any, info: ValidationInfo) -> Any:
        """The environment's forms: ``a,b`` for a tuple, empty for an unset optional field."""
        if not isinstance(value, str) or info.field_name is None:
            return value
        annotation = cls.model_fields[info.field_name].annotation
        if value == "" and _optional(annotation):
            return None
        if get_origin(annotation) is tuple:
            return tuple(part.strip() for part in value.split(",") if part.strip())
        return value

    @field_validator("agent_cidrs", "worker_egress_except")
    @classmethod
    def _cidrs(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        """IPv4 networks, as NetworkPolicy ipBlocks write them (``10.0.0.5`` → ``10.0.0.5/32``)."""
        return tuple(str(ipaddress.IPv4Network(cidr, strict=False)) for cidr in value)
