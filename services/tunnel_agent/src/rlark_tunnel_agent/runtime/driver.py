"""The runtime driver seam of the tunnel-agent: what a runtime must offer, in data types.

The agent turns worker placements into `WorkerSpec`s and hands them to one `RuntimeDriver` per
cluster (ARCHITECTURE §4): the local driver (process groups, network namespaces) or the
Kubernetes driver (pods). Both run the same worker bootstrap (§6) and report through the same
`events()` stream, so everything above this module is runtime-agnostic.

Contract every driver keeps:
- `ensure_worker` is idempotent by worker id: a worker that already exists, in any state, is
  success and is never restarted or duplicated (placements are delivered at least once).
- `stop_worker` is idempotent and leaves nothing running: the whole worker (its bootstrap, Ray,
  anything the user's scripts started) gets SIGTERM, then SIGKILL after a grace period.
- `update_authorized_keys` rewrites the worker's `~/.ssh/authorized_keys` atomically (mode 600)
  without restarting anything: key rotation reaches running workers.
- `events()` yields status changes (folded from the bootstrap's marker lines and the process
  exit) and every output line, numbered per stream, so the agent can ship them; a consumer that
  sees a line twice after a restart can drop it by `(worker_id, stream, seq)`.

Nodes are observed in the contracts' `NodeObservation` (re-exported here): drivers report exactly
what the agent publishes, so there is one node type and no translation between them.

This module is pure: types only, no I/O.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from ipaddress import IPv4Address, IPv4Network
from typing import Annotated, Literal, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator

# The contracts' own definitions, re-exported for the runtimes.
from rlark_contracts.events.agent import NodeObservation as NodeObservation
from rlark_contracts.events.agent import WorkerPhase as WorkerPhase
from rlark_contracts.events.agent import WorkerUsage as WorkerUsage
from rlark_contracts.events.scheduler import worker_id_for as worker_id_for
from rlark_contracts.secrets import is_secret_name

from rlark_tunnel_agent.runtime.markers import Marker

_SAFE_ID = re.compile(r"^[a-z0-9]([a-z0-9.-]{0,251}[a-z0-9])?$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

# Ports every Ray node of a job binds. Fixed and declared so that network policies, tunnels and
# people can reason about them; each worker has its own address (pod IP, network namespace), so
# all workers use the same numbers. The GCS port is `WorkerSpec.ray_port`.
DEFAULT_RAY_PORT = 6379


class RayPorts(BaseModel):
    """The fixed ports of one Ray node besides the GCS port (all pinned, none random).

    Ray's defaults leave the node manager, object manager and agent ports random; pinning them
    makes a worker's footprint deterministic and documented. `min_worker_port..max_worker_port`
    bounds the ports of Ray's worker processes (one per task/actor process).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    dashboard_port: int = 8265
    node_manager_port: int = 6380
    object_manager_port: int = 6381
    dashboard_agent_grpc_port: int = 6382
    dashboard_agent_listen_port: int = 6383
    metrics_export_port: int = 6384
    runtime_env_agent_port: int = 6385
    min_worker_port: int = 10002
    max_worker_port: int = 10999

    def as_env(self, gcs_port: int) -> dict[str, str]:
        """The bootstrap's port variables (`RLARK_RAY_*_PORT`) for these ports."""
        return {
            "RLARK_RAY_PORT": str(gcs_port),
            "RLARK_RAY_DASHBOARD_PORT": str(self.dashboard_port),
            "RLARK_RAY_NODE_MANAGER_PORT": str(self.node_manager_port),
            "RLARK_RAY_OBJECT_MANAGER_PORT": str(self.object_manager_port),
            "RLARK_RAY_DASHBOARD_AGENT_GRPC_PORT": str(self.dashboard_agent_grpc_port),
            "RLARK_RAY_DASHBOARD_AGENT_LISTEN_PORT": str(self.dashboard_agent_listen_port),
            "RLARK_RAY_METRICS_EXPORT_PORT": str(self.metrics_export_port),
            "RLARK_RAY_RUNTIME_ENV_AGENT_PORT": str(self.runtime_env_agent_port),
            "RLARK_RAY_MIN_WORKER_PORT": str(self.min_worker_port),
            "RLARK_RAY_MAX_WORKER_PORT": str(self.max_worker_port),
        }


class MountType(StrEnum):
    """Kinds of storage a role can mount; runtimes may support a subset."""

    HOST_PATH = "hostPath"
    EMPTY_DIR = "emptyDir"
    PVC = "pvc"
    OBJECT_STORAGE = "objectStorage"


class Mount(BaseModel):
    """One storage mount of a worker: `source` on the node appears at `target` in the worker.

    `source` by type: hostPath an absolute path; pvc a claim name; objectStorage a bucket URL
    (`s3://bucket/prefix`) whose credentials are in the cluster's secret named `secret_ref`.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    type: MountType = MountType.HOST_PATH
    source: str = ""
    target: str
    read_only: bool = False
    secret_ref: str | None = None

    @field_validator("target")
    @classmethod
    def _target_is_absolute(cls, value: str) -> str:
        if not value.startswith("/") or "\0" in value or ".." in value.split("/"):
            raise ValueError("mount target must be an absolute path without '..'")
        return value


class WorkerSpec(BaseModel):
    """Everything a runtime needs to create one worker of a job (from one worker placement)."""

    # Errors never echo inputs: a private key pasted as a public key must not reach a log.
    model_config = ConfigDict(frozen=True, extra="forbid", hide_input_in_errors=True)

    job_id: str
    worker_id: str
    cluster: str = ""
    """The cluster the worker was placed in (the worker's `RLARK_CLUSTER`; "" in records made before it)."""
    role: str
    index: Annotated[int, Field(ge=0)]
    rank: Annotated[int, Field(ge=0)]
    num_nodes: Annotated[int, Field(ge=1)]
    is_header: bool
    node_name: str
    gpus: Annotated[int, Field(ge=0)] = 0
    total_gpus: Annotated[int, Field(ge=0)] = 0
    """GPUs of the whole job; the Header waits until Ray reports at least this many (0: no check)."""
    image: str = ""
    prepare_script: str = ""
    run_script: str = ""
    env: dict[str, str] = Field(default_factory=dict)
    mounts: tuple[Mount, ...] = ()
    ssh_public_keys: tuple[str, ...] = ()
    header_address: str = ""
    """Host or IP of the Header's Ray head; empty on the Header itself (it uses its own)."""
    ray_port: Annotated[int, Field(ge=1, le=65535)] = DEFAULT_RAY_PORT
    virtual_ip: IPv4Address | None = None
    domain: str = ""
    """The network domain of `virtual_ip` ("" without one). Recorded with the spec so that a restarted
    agent can put an adopted worker back into its domain without its placement event (not redelivered)."""
    domain_cidr: IPv4Network | None = None
    """The domain's network (the TUN's route); recorded for the same reason as `domain`."""
    outputs: tuple[str, ...] = ()
    tensorboard_dir: str = ""
    join_deadline_s: Annotated[float, Field(gt=0)] = 120.0
    """How long the Header waits for all Ray nodes, and others retry joining. Runs have no deadline."""
    rlinf_config: str = ""
    """The job's inline RLinf config (Hydra YAML, "" without one), shipped as `$RLARK_RLINF_CONFIG`."""
    owner: str = ""
    """The job's owner; on the local runtime all workers of one owner share one uid ("" → a uid per job)."""
    resume_checkpoints_dir: str = ""
    """The Header's: the container path where the job's `global_step_N` checkpoints are (`spec.resume`, ADR 0015;
    "" without resume). The agent looks there before the Header starts and sets `resume_dir`."""
    resume_dir: str = ""
    """The checkpoint the attempt resumes from (a container path below `resume_checkpoints_dir`; "": fresh):
    the run script's `RLARK_RESUME_DIR` and the inline RLinf config's `runner.resume_dir`."""
    progress_deadline_s: int = 0
    """The Header's progress deadline (0: none): the agent watches its output and TensorBoard steps
    (`agent/progress.py`); the bootstrap reports the steps (`RLARK_PROGRESS_DEADLINE_S`)."""
    termination_grace_s: int = 0
    """The Header's: seconds its run script has after SIGTERM when the worker stops (`RLARK_TERMINATION_GRACE_S`);
    runtimes wait that much longer before killing the worker."""
    ray_token: SecretStr | None = Field(default=None, exclude=True)
    """The job attempt's Ray authentication token (ADR 0022), fetched by the agent for this worker (never in a
    placement). Never serialised: a recorded spec (worker.json, the worker ConfigMap) lacks it; the runtime
    keeps it where only the worker reads it (`contract.worker_secrets`) before the worker starts."""
    ray_authenticated: bool = False
    """Ray runs with token authentication (`RAY_AUTH_MODE=token`): set with `ray_token` and recorded, so a
    recorded spec still says where the worker's token is. Without it (specs of driver tests) Ray runs open."""
    secret_env: dict[str, str] = Field(default_factory=dict)
    """Variables the worker takes from named secrets: variable → secret name (ADR 0025; names only)."""
    secrets: tuple[str, ...] = ()
    """Every named secret the worker gets (a file each in its secrets directory); names only, recorded."""
    secret_values: dict[str, SecretStr] = Field(default_factory=dict, exclude=True)
    """Their values, fetched by the agent with the Ray token; never serialised, like `ray_token`."""

    @field_validator("worker_id", "job_id")
    @classmethod
    def _ids_are_safe_names(cls, value: str) -> str:
        # Ids name directories, network namespaces and pods: keep them DNS-label-like.
        if not _SAFE_ID.match(value):
            raise ValueError("must be lower-case letters, digits, '-' or '.', at most 253 chars")
        return value

    @field_validator("env")
    @classmethod
    def _env_names_are_shell_names(cls, value: dict[str, str]) -> dict[str, str]:
        for name, val in value.items():
            if not _ENV_NAME.match(name):
                raise ValueError(f"env name {name!r} is not a valid variable name")
            if "\0" in val:
                raise ValueError(f"env {name} contains a NUL byte")
        return value

    @field_validator("outputs")
    @classmethod
    def _outputs_are_plain_paths(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for path in value:
            _check_output_path(path)
        return value

    @field_validator("tensorboard_dir")
    @classmethod
    def _tensorboard_dir_is_a_plain_path(cls, value: str) -> str:
        if value:
            _check_output_path(value)
        return value

    @field_validator("ssh_public_keys")
    @classmethod
    def _keys_are_public_key_lines(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(validate_authorized_key_lines(value))

    @model_validator(mode="after")
    def _roles_are_consistent(self) -> WorkerSpec:
        if self.ray_token is not None and not self.ray_authenticated:
            raise ValueError("a spec with a Ray token has ray_authenticated set")
        if not set(self.secret_env.values()) <= set(self.secrets):
            raise ValueError("every secret a variable names is one of the worker's secrets")
        if not set(self.secret_values) <= set(self.secrets):
            raise ValueError("a secret's value arrived for a secret the worker does not name")
        for name in self.secrets:
            if not is_secret_name(name):
                raise ValueError(f"secret name {name!r} is not a secret's name")
        if self.rank >= self.num_nodes:
            raise ValueError("rank must be below num_nodes")
        if self.is_header and self.rank != 0:
            raise ValueError("the Header has rank 0")
        if not self.is_header and self.run_script:
            raise ValueError("only the Header has a run script")
        if not self.is_header and not self.header_address:
            raise ValueError("a non-Header worker needs the Header's address")
        if self.domain or self.domain_cidr is not None:
            if not self.domain or self.domain_cidr is None or self.virtual_ip is None:
                raise ValueError("a network domain needs its name, its CIDR and the worker's virtual IP")
            if self.virtual_ip not in self.domain_cidr:
                raise ValueError("the virtual IP is outside the domain's CIDR")
        return self


def _check_output_path(path: str) -> None:
    # ':' separates paths in RLARK_OUTPUTS; '..' would let a path leave where a runtime puts it.
    if not path or ":" in path or "\0" in path or ".." in path.split("/"):
        raise ValueError(f"output path {path!r} must be non-empty, without ':' or '..'")


def validate_authorized_key_lines(lines: Sequence[str]) -> list[str]:
    """Check lines meant for `authorized_keys`: one public key per line, never key material.

    The message never echoes the line: a pasted private key must not end up in a log.
    """
    checked: list[str] = []
    for number, line in enumerate(lines, start=1):
        if "\n" in line or "\r" in line or "\0" in line:
            raise ValueError(f"authorized key line {number} contains a line break")
        if "PRIVATE KEY" in line:
            raise ValueError(f"authorized key line {number} looks like a private key")
        stripped = line.strip()
        if stripped:
            checked.append(stripped)
    return checked


class WorkerStatus(BaseModel):
    """A worker's current status as the agent reports it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    worker_id: str
    job_id: str = ""
    phase: WorkerPhase
    exit_code: int | None = None
    reason: str = ""
    ray_nodes_joined: int | None = None
    ray_nodes_expected: int | None = None
    address: str = ""


class LogStream(StrEnum):
    STDOUT = "stdout"
    STDERR = "stderr"


class WorkerLogLine(BaseModel):
    """One output line of a worker; `seq` counts lines per (worker, stream) from 1."""

    model_config = ConfigDict(frozen=True)

    kind: Literal["log"] = "log"
    worker_id: str
    stream: LogStream
    seq: int
    text: str


class WorkerStatusChanged(BaseModel):
    """A worker's status moved (phase, exit code, Ray node counts)."""

    model_config = ConfigDict(frozen=True)

    kind: Literal["status"] = "status"
    status: WorkerStatus


class WorkerMarkerSeen(BaseModel):
    """A bootstrap marker, as parsed: carries payloads a status cannot (the output manifest)."""

    model_config = ConfigDict(frozen=True)

    kind: Literal["marker"] = "marker"
    worker_id: str
    marker: Marker


RuntimeEvent = WorkerStatusChanged | WorkerLogLine | WorkerMarkerSeen


@dataclass(frozen=True)
class OutputRoot:
    """Where one of a worker's declared outputs lies on the agent's machine (issue 15.3, ADR 0010).

    ``path`` is the output as the job declared it (the worker's path); its files are below ``anchor`` (a host
    directory the runtime trusts: the worker's own directory, or a hostPath source it refused links in) and
    then ``parts``, each opened without following a link (``agent/files.py``). ``reader``: the job's (uid, gid)
    whose mode bits the agent applies from the output down — the agent reads as root, and serves only what the
    job's user could read (not another user's file in a shared hostPath, not a hard link to a root file where
    ``fs.protected_hardlinks`` is off); None where the workers run as the agent's own user."""

    path: str
    anchor: str
    parts: tuple[str, ...]
    reader: tuple[int, int] | None = None


class FilesAt(StrEnum):
    """Where the agent reads a worker's outputs and TensorBoard directory (downloads ADR 0010, TensorBoard issue
    15.4, files sidecars ADR 0013): a runtime says which, and answers the other side's calls with "none"."""

    AGENT_HOST = "agent host"
    """On the agent's own machine: the runtime says where each output lies (``output_roots``,
    ``output_location``) and how to run TensorBoard over a worker's directory (``tensorboard_command``)."""
    WORKER_POD = "worker pod"
    """Beside the worker, by a files server the agent connects to (``files_endpoint``; Kubernetes: a pod's
    volumes are visible only to its containers). Its address comes from the runtime's own state (the pod's
    IP), never from the control plane."""


@dataclass(frozen=True)
class FilesEndpoint:
    """Where a worker's files server listens (Kubernetes: its pod's files sidecar, ADR 0013) and the worker's
    secret that server proves the agent with (never logged, not in repr)."""

    host: str
    port: int
    secret: str = field(repr=False)


class FilesUnreachable(LookupError):
    """Why the agent cannot reach a worker's files server, said to the user: ``supported`` is False when the
    worker has none at all (the cluster runs no files sidecar, or the worker declares nothing to serve), True
    when it has one that cannot answer now (its pod not running yet, or ended)."""

    def __init__(self, message: str, *, supported: bool) -> None:
        super().__init__(message)
        self.supported = supported


@runtime_checkable
class RuntimeDriver(Protocol):
    """What the tunnel-agent needs from a cluster runtime (see the module docstring)."""

    async def start(self) -> None:
        """Prepare the runtime and adopt or reap what a previous run left behind."""

    async def close(self) -> None:
        """Stop watching; running workers are left running (an agent restart is not a stop)."""

    @property
    def not_enforced(self) -> tuple[str, ...]:
        """What this runtime cannot enforce on its workers, one sentence each (settled by `start()`; the agent
        reports it with every heartbeat)."""
        ...

    @property
    def unmountable(self) -> tuple[str, ...]:
        """Mount types this runtime offers (``rlark_contracts.runtimes.MOUNT_TYPES``) but this agent is not set
        up for; the agent reports them with every heartbeat so the scheduler refuses them at preview."""
        ...

    async def observe_nodes(self) -> list[NodeObservation]:
        """Every node now, as the agent reports it (the contracts' type): capacity, allocatable and
        what is allocated on it — GPUs, CPU, memory — by everything that holds resources there."""
        ...

    async def ensure_worker(self, spec: WorkerSpec) -> None: ...

    async def stop_worker(self, worker_id: str) -> None: ...

    async def update_authorized_keys(self, worker_id: str, lines: Sequence[str]) -> None: ...

    async def list_workers(self) -> list[str]: ...

    async def get_status(self, worker_id: str) -> WorkerStatus | None: ...

    async def tail_logs(self, worker_id: str, lines: int = 50) -> list[WorkerLogLine]:
        """The last `lines` output lines of a worker, both streams, oldest first."""
        ...

    def events(self) -> AsyncIterator[RuntimeEvent]:
        """Status changes, markers and log lines of all workers; one consumer."""
        ...

    @property
    def files_at(self) -> FilesAt:
        """Where the agent reads its workers' files (see ``FilesAt``)."""
        ...

    def output_roots(self, worker_id: str) -> list[OutputRoot] | None:
        """Where the worker's declared outputs lie on the agent's machine; None when this runtime does not know
        the worker, or keeps its files beside it (``FilesAt.WORKER_POD``)."""
        ...

    def output_location(self, spec: WorkerSpec, path: str) -> OutputRoot | None:
        """Before a worker of ``spec`` starts, where ``path`` (a container path under the spec's outputs or
        mounts) will lie on the agent's machine, so the agent can look for the checkpoint it resumes from
        (ADR 0015); None where the runtime keeps its files beside the worker."""
        ...

    def tensorboard_command(self, worker_id: str, server_args: Sequence[str]) -> list[str] | None:
        """The command line that runs ``python -m tensorboard.main --logdir <the dir> *server_args`` reading
        only what the job could (local root mode: in a pod of its own as the job's uid, the directory at its
        container path, read-only); None when the worker is unknown, declares no TensorBoard dir, or its files
        are served beside it."""
        ...

    def files_endpoint(self, worker_id: str) -> FilesEndpoint:
        """The worker's files server (``FilesAt.WORKER_POD``); raises ``FilesUnreachable`` saying why there is
        none now (``supported=False`` on a runtime whose files the agent reads itself)."""
        ...

    async def observe_service_cidrs(self) -> tuple[str, ...]:
        """The cluster's service CIDRs now, reported with every node snapshot so that no network domain overlaps
        them (issue 15.6); empty where the runtime has no service network (local) or cannot tell."""
        ...

    async def sample_usage(self) -> list[WorkerUsage]:
        """What each live worker uses of its node, one sample per worker it can measure (issue 19 item 1,
        `worker_usage.py`); a call also moves each worker's CPU rate window."""
        ...

    def ssh_endpoint(self, worker_id: str) -> tuple[str, int] | None:
        """Host and port of the worker's sshd (ADR 0010), from the runtime's own state — a namespace's address,
        a pod's IP — never from the control plane; None when this worker has none (unknown, stopped, not
        started yet, or a runtime mode without sshd)."""
        ...

    def ray_dashboard_endpoint(self, worker_id: str) -> tuple[str, int] | None:
        """Host and port of the Header worker's Ray dashboard (ADR 0012), the worker contract's
        (``RLARK_NODE_IP``, ``ray-dashboard``) as the runtime's own state knows them; None when it serves none
        (not the Header, unknown, stopped, or its address is known only inside its pod)."""
        ...

    async def learn_addresses(self, job_id: str, addresses: dict[str, str]) -> None:
        """A network domain's virtual IPs of job ``job_id``'s workers (worker id → address), so that names of
        the job's workers on other clusters resolve in its workers here (the local runtime's `/etc/hosts`);
        a runtime whose workers resolve names otherwise (Kubernetes: the network sidecar) ignores it."""
        ...

    def forget_addresses(self, job_id: str) -> None:
        """The job's domain addresses were released (see ``learn_addresses``)."""
        ...
