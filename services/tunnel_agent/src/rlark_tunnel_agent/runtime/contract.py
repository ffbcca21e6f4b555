"""The worker contract: what every worker of a job receives, computed once for both runtimes. Pure.

Role: `worker_contract(spec, facts)` maps a placed worker (`WorkerSpec`) and the few facts only its runtime
knows (`RuntimeFacts`: the worker's address, the Header's address, the interface carrying that address, the
Ray ports, where home, scripts and keys live inside the worker) to what the worker gets: its environment, the
files its bootstrap reads (scripts, `authorized_keys`, the job's inline RLinf config as `rlinf.yaml` at
`$RLARK_RLINF_CONFIG`, with `runner.resume_dir` set when the attempt resumes, ADR 0015) and the ports it
listens on; a resuming Header also gets `RLARK_RESUME_DIR`. The local driver
(`local/driver.py`) and the Kubernetes manifests (`kubernetes/manifests.py`) both render it; neither sets a
platform variable of its own. A runtime may add only the variables `RUNTIME_PRIVATE` lists for it, through
`compose_env`, which refuses any other. `tests/runtime/test_worker_contract.py` renders one placement through
both runtimes and compares them field by field.

Order of steps: both runtimes ship the same bootstrap (`bootstrap/`, `BOOTSTRAP_FILES`), which fixes it —
keys and sshd, the prepare script, `ray start` (the Header's head also serves Ray's dashboard and state API
on `RLARK_RAY_DASHBOARD_PORT`), then on the Header: wait for every Ray node and GPU, check that peers answer,
run the run script. Kubernetes starts it through `entrypoint.sh` (which keeps `authorized_keys` in sync with
the worker's ConfigMap); the local runtime runs it directly and rewrites the keys file itself.

Communication devices: `RLINF_COMM_NET_DEVICES` names the interface that carries the worker's Ray address
(a network namespace's or a pod's `eth0`, the TUN device in a network domain, `lo` for processes on
127.0.0.1); `GLOO_SOCKET_IFNAME` and `NCCL_SOCKET_IFNAME` match it. Each of the three is left to the job
when its env sets it, and a job's own `RLINF_COMM_NET_DEVICES` is what the other two then match: without
them torch.distributed advertises the address the hostname resolves to, often 127.0.0.1 (notes/rlinf.md).

Paths: the contract's paths are the container paths the job's YAML names (outputs, `tensorboardDir`,
mounts), verbatim, on both runtimes: Kubernetes mounts them there, the local runtime binds them there in
the worker's mount namespace as root and, as plain processes, runs only workers whose paths are the
host's own (`local/pod.py`). Relative paths are relative to `RLARK_WORKDIR`, where the bootstrap runs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated

import yaml
from pydantic import BaseModel, ConfigDict, Field
from rlark_contracts.runtimes import KUBERNETES as KUBERNETES  # the runtimes' names, re-exported
from rlark_contracts.runtimes import LOCAL as LOCAL

from rlark_tunnel_agent.runtime.driver import RayPorts, WorkerSpec

PREPARE_FILE = "prepare.sh"
RUN_FILE = "run.sh"
KEYS_FILE = "authorized_keys"
RLINF_CONFIG_FILE = "rlinf.yaml"
"""The job's inline RLinf config; its directory works as Hydra's ``--config-path`` (``--config-name rlinf``)."""

RAY_TOKEN_FILE = ".ray-token"  # noqa: S105 - a file name, not a secret
"""The job attempt's Ray token (ADR 0022), in the runtime's secrets directory (`RuntimeFacts.secrets_dir`), beside
the job's named secrets (a file each, named after the secret: no secret's name starts with a dot). Never one of
the contract's `files`: those travel in a ConfigMap on Kubernetes."""

RAY_HEALTH_CHECK_THRESHOLD = "RAY_health_check_failure_threshold"
RAY_HEALTH_CHECK_PERIOD_MS = 3000
"""Ray's default period between its GCS's health checks of each node (``RAY_health_check_period_ms``)."""
DOMAIN_OUTAGE_TOLERANCE_S = 60
"""How long a network domain's link may be down before a job across it fails: the scheduler's default
``tunnel_grace_s``. A job's workers in a domain start Ray with a health-check failure threshold that covers it
(``RAY_health_check_failure_threshold``, 20 checks; Ray's own 5 declare a node dead after ~15 s, and an agent's
replacement took the link down that long in the deployment test bed, ADR 0027), unless the job's env sets one."""

COMM_DEVICE_VARIABLES = ("RLINF_COMM_NET_DEVICES", "GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME")
"""RLinf's interface variable and the two it copies into unless they are set (Gloo's and NCCL's)."""


@dataclass(frozen=True, slots=True)
class RuntimePrivate:
    """The variables one runtime adds to the contract's, and nothing else.

    `defaults`: the process environment a container image would otherwise provide; a job's env overrides
    them. `own`: the runtime's bookkeeping with its worker; they win over a job's env.
    """

    defaults: frozenset[str] = frozenset()
    own: frozenset[str] = frozenset()


RUNTIME_PRIVATE: Mapping[str, RuntimePrivate] = {
    LOCAL: RuntimePrivate(
        # A process has no image: the driver gives it what an image's environment would.
        defaults=frozenset(
            {"PATH", "TMPDIR", "LANG", "PYTHONUNBUFFERED", "USER", "RAY_ENABLE_UV_RUN_RUNTIME_ENV"}
        ),
        own=frozenset(
            {
                "RLARK_FS_ROOT",  # the host directory behind the worker's emptyDirs and unmounted outputs
                "RLARK_STATUS_FILE",  # the bootstrap's exit status, read by a restarted agent
                "RLARK_BOOTSTRAP_TOKEN",  # finds the worker's processes on a shared host
                "RLARK_STOP_GRACE_S",  # short: a stopping worker's Ray needs no drain
                "CUDA_VISIBLE_DEVICES",  # the machine's GPUs are shared by all virtual nodes
                "RLARK_SSH_HOST_KEY",  # sshd runs as the worker's unprivileged user, with a host key of its own
            }
        ),
    ),
    KUBERNETES: RuntimePrivate(
        own=frozenset(
            {
                "RLARK_KEYS_SYNC_S",  # entrypoint.sh's key-rotation poll
                "RLARK_GPU_SAMPLE_S",  # workers holding GPUs report them (the local agent reads the host's)
            }
        ),
    ),
}


class RuntimeFacts(BaseModel):
    """What only the runtime knows about one worker (see the module docstring)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    node_ip: str | None
    """The worker's Ray address outside a network domain; None: the runtime supplies it in the worker
    (Kubernetes: the pod's IP through the downward API)."""
    header_address: str
    """The Header's Ray address outside a network domain ("" on the Header itself)."""
    comm_device: str
    """The interface carrying `node_ip`: `eth0` (a namespace's, a pod's) or `lo` (processes on 127.0.0.1)."""
    tun_device: str | None = None
    """The device holding the spec's virtual IP, when the runtime made one: the worker is then on the
    domain network (Ray on the virtual IP, the Header at its virtual IP, traffic out this device)."""
    gcs_port: Annotated[int, Field(ge=1, le=65535)]
    """The Header's Ray GCS port."""
    ports: RayPorts
    """This worker's Ray ports; `dashboard_port` is the Header's (only the head serves the dashboard)."""
    home_dir: str
    workdir: str
    ray_temp_dir: str
    files_dir: str
    """Where the contract's files (scripts, `authorized_keys`) are inside the worker."""
    secrets_dir: str
    """Where `worker_secrets` are inside the worker: a directory only the worker reads (local: root's, of the
    job's group; Kubernetes: the worker's own Secret, mounted read-only)."""
    ssh_port: Annotated[int, Field(ge=1, le=65535)] = 22
    start_sshd: bool = True


class WorkerContract(BaseModel):
    """What one worker receives."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    env: dict[str, str]
    """The platform's variables (they win over the job's, except the comm-device ones a job sets)."""
    job_env: dict[str, str]
    """The job's own variables that the platform does not set."""
    files: dict[str, str]
    """File name (inside `RuntimeFacts.files_dir`) → content."""
    ports: dict[str, int]
    """Name → port the worker listens on."""


def authorized_keys_text(lines: tuple[str, ...] | list[str]) -> str:
    """The `authorized_keys` file for these (validated) public key lines."""
    return "".join(f"{line}\n" for line in lines)


def _script(text: str) -> str:
    return text if text.endswith("\n") else text + "\n"


def comm_device_env(job_env: Mapping[str, str], device: str) -> dict[str, str]:
    """The communication-device variables the platform sets: those the job's env does not.

    A job's own `RLINF_COMM_NET_DEVICES` is what `GLOO_SOCKET_IFNAME`/`NCCL_SOCKET_IFNAME` then match.
    """
    chosen = job_env.get("RLINF_COMM_NET_DEVICES", device)
    return {name: chosen for name in COMM_DEVICE_VARIABLES if name not in job_env}


def with_resume_dir(config: str, resume_dir: str) -> str:
    """The inline RLinf config with `runner.resume_dir` set to the checkpoint the attempt resumes from (ADR
    0015); unchanged when it starts fresh. The scheduler wrote the config from a validated mapping, so it
    loads as one; its Hydra interpolations are strings and survive the round trip."""
    if not resume_dir:
        return config
    data = yaml.safe_load(config)
    if not isinstance(data, dict):
        return config
    runner = data.get("runner")
    data["runner"] = {**(runner if isinstance(runner, dict) else {}), "resume_dir": resume_dir}
    return yaml.safe_dump(data, sort_keys=False, allow_unicode=True)


def worker_files(spec: WorkerSpec) -> dict[str, str]:
    """The files the bootstrap reads (name → content): `authorized_keys`, and the scripts it has."""
    files = {KEYS_FILE: authorized_keys_text(spec.ssh_public_keys)}
    if spec.prepare_script:
        files[PREPARE_FILE] = _script(spec.prepare_script)
    if spec.run_script:
        files[RUN_FILE] = _script(spec.run_script)
    if spec.rlinf_config:
        files[RLINF_CONFIG_FILE] = _script(with_resume_dir(spec.rlinf_config, spec.resume_dir))
    return dict(sorted(files.items()))


def worker_secret_files(spec: WorkerSpec) -> tuple[str, ...]:
    """The names of the files in the worker's secrets directory (what a recorded spec still knows): the Ray
    token's when Ray authenticates, and one per named secret."""
    return ((RAY_TOKEN_FILE,) if spec.ray_authenticated else ()) + spec.secrets


def worker_secrets(spec: WorkerSpec) -> dict[str, str]:
    """The files only the worker may read (name → content, in `RuntimeFacts.secrets_dir`): the attempt's Ray
    token and the named secrets' values the spec carries. Each runtime keeps them where nobody else reads them
    and never logs them."""
    files = {RAY_TOKEN_FILE: spec.ray_token.get_secret_value()} if spec.ray_token is not None else {}
    files.update({name: value.get_secret_value() for name, value in spec.secret_values.items()})
    return files


def worker_contract(spec: WorkerSpec, facts: RuntimeFacts) -> WorkerContract:
    """What the worker of `spec` receives on a runtime with these `facts` (see the module docstring)."""
    files = worker_files(spec)
    files_dir = facts.files_dir.rstrip("/")
    env = {
        "HOME": facts.home_dir,
        "RLARK_CLUSTER": spec.cluster,
        "RLARK_JOB_ID": spec.job_id,
        "RLARK_WORKER_ID": spec.worker_id,
        "RLARK_ROLE": spec.role,
        "RLARK_WORKER_INDEX": str(spec.index),
        "RLARK_NODE_RANK": str(spec.rank),
        "RLARK_NUM_NODES": str(spec.num_nodes),
        "RLARK_IS_HEADER": "1" if spec.is_header else "0",
        "RLARK_NODE_NAME": spec.node_name,
        "RLARK_GPUS": str(spec.gpus),
        "RLARK_EXPECTED_GPUS": str(spec.total_gpus),
        "RLARK_JOIN_DEADLINE_S": str(max(1, round(spec.join_deadline_s))),
        "RLARK_AUTHORIZED_KEYS_FILE": f"{files_dir}/{KEYS_FILE}",
        "RLARK_OUTPUTS": ":".join(spec.outputs),
        "RLARK_TENSORBOARD_DIR": spec.tensorboard_dir,
        "RLARK_WORKDIR": facts.workdir,
        "RLARK_RAY_TEMP_DIR": facts.ray_temp_dir,
        "RLARK_START_SSHD": "1" if facts.start_sshd else "0",
        "RLARK_SSH_PORT": str(facts.ssh_port),
        **facts.ports.as_env(facts.gcs_port),
    }
    if PREPARE_FILE in files:
        env["RLARK_PREPARE_SCRIPT"] = f"{files_dir}/{PREPARE_FILE}"
    if RUN_FILE in files:
        env["RLARK_RUN_SCRIPT"] = f"{files_dir}/{RUN_FILE}"
    if RLINF_CONFIG_FILE in files:
        env["RLARK_RLINF_CONFIG"] = f"{files_dir}/{RLINF_CONFIG_FILE}"
    if spec.resume_dir:
        env["RLARK_RESUME_DIR"] = spec.resume_dir
    if spec.ray_authenticated or spec.secrets:
        env["RLARK_SECRETS_DIR"] = facts.secrets_dir.rstrip("/")
    if spec.secrets:
        env["RLARK_SECRETS"] = ",".join(spec.secrets)  # the files there: one per named secret
    if spec.secret_env:
        # The bootstrap exports each variable from its secret's file before the prepare script (ADR 0025): the
        # environment names files, never values.
        env["RLARK_SECRET_ENV"] = ",".join(f"{var}={name}" for var, name in sorted(spec.secret_env.items()))
    if spec.ray_authenticated:
        # Ray's own variables (ADR 0022): every Ray process of the worker — its head or node, the Header's
        # readiness checks, RLinf's driver — presents the attempt's token; the head refuses calls without it.
        env["RAY_AUTH_MODE"] = "token"
        env["RAY_AUTH_TOKEN_PATH"] = f"{facts.secrets_dir.rstrip('/')}/{RAY_TOKEN_FILE}"
    if spec.is_header and spec.progress_deadline_s > 0:
        # The bootstrap reads new TensorBoard steps a few times per deadline (`tensorboard-steps`).
        env["RLARK_PROGRESS_DEADLINE_S"] = str(spec.progress_deadline_s)
        env["RLARK_PROGRESS_POLL_S"] = str(min(30, max(2, spec.progress_deadline_s // 10)))
    if spec.is_header and spec.termination_grace_s > 0:
        env["RLARK_TERMINATION_GRACE_S"] = str(spec.termination_grace_s)
    if spec.virtual_ip is not None:
        env["RLARK_VIRTUAL_IP"] = str(spec.virtual_ip)
        if RAY_HEALTH_CHECK_THRESHOLD not in spec.env:
            env[RAY_HEALTH_CHECK_THRESHOLD] = str(
                -(-DOMAIN_OUTAGE_TOLERANCE_S * 1000 // RAY_HEALTH_CHECK_PERIOD_MS)
            )
    if facts.tun_device is not None and spec.virtual_ip is not None:
        # On the domain network: Ray binds the virtual IP and joins the Header's (the scheduler's address).
        node_ip: str | None = str(spec.virtual_ip)
        header_address, device = spec.header_address, facts.tun_device
    else:
        node_ip, header_address, device = facts.node_ip, facts.header_address, facts.comm_device
    if node_ip is not None:
        env["RLARK_NODE_IP"] = node_ip
    if not spec.is_header:
        env["RLARK_HEADER_ADDRESS"] = header_address
    env.update(comm_device_env(spec.env, device))
    ports = {"ssh": facts.ssh_port}
    if spec.is_header:
        ports["ray-gcs"] = facts.gcs_port
        ports["ray-dashboard"] = facts.ports.dashboard_port
    return WorkerContract(
        env=dict(sorted(env.items())),
        job_env={k: v for k, v in sorted(spec.env.items()) if k not in env},
        files=files,
        ports=dict(sorted(ports.items())),
    )


def compose_env(
    contract: WorkerContract,
    runtime: str,
    *,
    defaults: Mapping[str, str] | None = None,
    own: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The worker's whole environment: a runtime's `defaults`, the job's env, the contract's, its `own`.

    Raises ValueError when a runtime adds a variable `RUNTIME_PRIVATE` does not list for it, or one the
    contract already sets: a platform variable is set here, once, for every runtime.
    """
    private = RUNTIME_PRIVATE[runtime]
    defaults, own = dict(defaults or {}), dict(own or {})
    for names, allowed, kind in ((defaults, private.defaults, "default"), (own, private.own, "own")):
        unlisted = sorted(set(names) - allowed)
        if unlisted:
            raise ValueError(f"{runtime} runtime: {', '.join(unlisted)} not listed as its {kind} variables")
    shadowed = sorted((set(defaults) | set(own)) & set(contract.env))
    if shadowed:
        raise ValueError(f"{runtime} runtime: {', '.join(shadowed)} are the contract's variables")
    job = {k: v for k, v in contract.job_env.items() if k not in own}
    return {**defaults, **job, **contract.env, **own}
