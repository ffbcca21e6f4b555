"""The job spec: one YAML/JSON document used by the API, the CLI and the console.

Role: the typed shape of a job as users write it. Reading it from text or a mapping (with line numbers kept
for error messages) is :mod:`.parsing`'s; the small facts derived from it that every other module needs (rank
order, worker slots) live in :mod:`.facts`, and semantic rules in :mod:`.validation`. This module only says
what is *well-formed*.

The document (``apiVersion`` and ``kind`` default to the values below when left out)::

    apiVersion: rlark.io/v1
    kind: Job
    metadata:
      name: "grpo math 7B"        # display name, 1-128 characters after strip, may repeat
    spec:
      type: custom                # custom | template (then spec.template: <template id>)
      header: actor               # the Header role: starts the Ray head, runs runScript
      networkDomain: dom-a        # optional; the service fills the default before validation
      sshKeys: [my-workstation]   # names of the submitting user's SSH public keys
      runScript: |                # run on the Header once all Ray nodes joined
        python train.py
      tensorboardDir: /data/outputs/tb   # optional absolute path
      outputs: [/data/outputs]    # absolute paths listed in the output manifest at the end
      priority: 0                 # -100..100, higher first
      project: vision-lab         # optional: a project you belong to (the job counts against its GPU quota, ADR 0020)
      restartPolicy:              # optional; default: a failure ends the job (ADR 0014)
        maxRestarts: 2            # 0..100 new attempts after the first
        on: [WorkerLost, NodeGone] # failure kinds that restart (default: all but ExitCode)
        exitCodes: [137]          # with ExitCode in on: only these codes (empty: any non-zero)
        backoffSeconds: 30        # 0..86400 wait before the next attempt is placed
      progressDeadlineSeconds: 1800  # optional, 10..604800: once the run script runs, the Header must print a
                                  # line or write a new TensorBoard step this often, else it fails as Stalled
      terminationGracePeriodSeconds: 120  # optional, 0..3600: when the job is stopped (cancel, restart,
                                  # requeue) the Header's run script gets SIGTERM and this long to checkpoint
      resume:                     # optional; each attempt resumes from the newest complete checkpoint (ADR 0015)
        from: latestCheckpoint    # the only source so far
        dir: rlinf/checkpoints    # relative to spec.outputs[0]: where the global_step_N directories are
      rlinfConfig: {...}          # optional inline RLinf Hydra config, for cross-checks
      placement:                  # optional: how the scheduler chooses clusters for roles that name none (ADR 0026)
        spanClusters: whenNeeded  # never | whenNeeded (default): span clusters through a network domain only
                                  # when no single cluster fits the whole job
        keepTogether: [rollout]   # roles kept in the Header's cluster when the job spans (default: the roles
                                  # with GPUs)
      tasks:                      # one entry per role
        - name: actor             # DNS label (<= 40 characters), unique within the job
          cluster: gpu-a          # optional: left out, the scheduler chooses (ADR 0026), among
          # clusters: [gpu-a, gpu-b]             only these clusters, and/or
          # clusterSelector: {rlark.io/region: north}   clusters whose labels match
          nodeSelector: {rlark.io/gpu-model: A100}
          replicas: 1             # selected node count = workers of this role (one per node)
          gpusPerWorker: 8        # 0..64
          image: registry.example.com/rlinf:v0.3.0-cuda12.4   # explicit tag or @sha256 digest
          prepareScript: |        # optional, runs before Ray starts
            source /opt/venv/rlinf/bin/activate
          mounts:                 # hostPath | pvc | objectStorage (objectStorage needs secretRef)
            - {name: data, type: hostPath, source: /mnt/data, path: /data, readOnly: false}
          env: {NCCL_DEBUG: INFO} # names [A-Za-z_][A-Za-z0-9_]*, values strings

Lenient where YAML's typing gets in the way: env values, node-selector values and the display name may be
written as numbers or booleans and become strings (``true`` → ``"true"``, :data:`ScalarText`). Keys may be
written in camelCase (canonical) or snake_case.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any, Final

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, PrivateAttr, StrictInt
from pydantic.alias_generators import to_camel

from rlark_scheduler.domain.document.source import SourceInfo

API_VERSION = "rlark.io/v1"
KIND = "Job"
MAX_REPLICAS = 1024
"""Upper bound of ``replicas`` per role; validation refuses more."""


def _scalar_to_text(value: object) -> object:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    return value


ScalarText = Annotated[str, BeforeValidator(_scalar_to_text)]
"""A string that may be written as a YAML number or boolean."""


class _Model(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
        alias_generator=to_camel,
        validate_by_name=True,
        validate_by_alias=True,
        serialize_by_alias=True,
        frozen=True,
    )


class MountType(StrEnum):
    HOST_PATH = "hostPath"
    PVC = "pvc"
    OBJECT_STORAGE = "objectStorage"


class Mount(_Model):
    """A volume in a worker: a host directory, a PVC or an object-storage prefix.

    ``source`` is a host path, a PVC name or ``s3://bucket/prefix``-style URL; object storage
    credentials come only from ``secretRef``: the name of one of the owner's (or the job's project's) secrets
    (ADR 0025), never the credentials themselves.
    """

    name: str
    type: MountType
    source: str
    path: str
    read_only: bool = False
    secret_ref: str | None = None


class SecretRef(_Model):
    """An environment variable's value taken from a named secret (``HF_TOKEN: {secret: hf-token}``, ADR 0025):
    the document names the secret, the value never enters it."""

    secret: str


def _env_list_to_mapping(value: object) -> object:
    """The list form (``[{name: HF_TOKEN, secret: hf-token}, {name: LEVEL, value: info}]``, as Kubernetes writes
    env) as the mapping form; anything else unchanged, for the model to judge."""
    if not isinstance(value, list):
        return value
    mapping: dict[object, object] = {}
    for entry in value:
        if not isinstance(entry, dict) or "name" not in entry or len(entry) != 2:
            return value  # the mapping's own type error names the entry
        name = entry["name"]
        if "secret" in entry:
            mapping[name] = {"secret": entry["secret"]}
        elif "value" in entry:
            mapping[name] = entry["value"]
        else:
            return value
    return mapping


EnvValue = ScalarText | SecretRef


class RoleSpec(_Model):
    """One role: ``replicas`` workers, one per node, with the same image and settings.

    ``cluster`` names where its workers run; left out, the scheduler chooses (ADR 0026) among the clusters
    ``clusters`` lists (every cluster when empty) whose labels match ``cluster_selector``."""

    name: str
    cluster: str | None = None
    clusters: list[str] = Field(default_factory=list)
    cluster_selector: dict[str, ScalarText] = Field(default_factory=dict)
    node_selector: dict[str, ScalarText] = Field(default_factory=dict)
    replicas: StrictInt = 1
    gpus_per_worker: StrictInt = 0
    image: str
    prepare_script: str | None = None
    mounts: list[Mount] = Field(default_factory=list)
    env: Annotated[dict[str, EnvValue], BeforeValidator(_env_list_to_mapping)] = Field(default_factory=dict)

    @property
    def chooses_cluster(self) -> bool:
        """Whether the scheduler chooses this role's cluster (the document names none)."""
        return self.cluster is None

    def plain_env(self) -> dict[str, str]:
        """The variables the document gives values for."""
        return {name: value for name, value in self.env.items() if isinstance(value, str)}

    def secret_env(self) -> dict[str, str]:
        """The variables taken from named secrets: variable → secret name."""
        return {name: value.secret for name, value in self.env.items() if isinstance(value, SecretRef)}

    def secret_names(self) -> list[str]:
        """Every secret a worker of this role gets, once each, in the order the document names them: its
        variables' and its objectStorage mounts' (``secretRef``)."""
        named = [*self.secret_env().values(), *(m.secret_ref for m in self.mounts if m.secret_ref)]
        return list(dict.fromkeys(n for n in named if n))


class RestartOn(StrEnum):
    """The kinds of failure a restart policy may name (``domain.restarts`` classifies failures)."""

    WORKER_LOST = "WorkerLost"
    NODE_GONE = "NodeGone"
    EVICTED = "Evicted"
    OOM_KILLED = "OOMKilled"
    TUNNEL_DOWN = "TunnelDown"
    STALLED = "Stalled"
    EXIT_CODE = "ExitCode"


DEFAULT_RESTART_ON: Final[tuple[RestartOn, ...]] = tuple(k for k in RestartOn if k is not RestartOn.EXIT_CODE)
"""``restartPolicy.on`` when left out: every infrastructure failure, not a script's own exit code."""


class RestartPolicy(_Model):
    """``spec.restartPolicy``: how many new attempts a failure of the kinds in ``on`` may start."""

    max_restarts: StrictInt = 0
    on: list[RestartOn] = Field(default_factory=lambda: list(DEFAULT_RESTART_ON))
    exit_codes: list[StrictInt] = Field(default_factory=list)
    backoff_seconds: StrictInt = 0


class ResumeFrom(StrEnum):
    """Where an attempt resumes from (``spec.resume.from``)."""

    LATEST_CHECKPOINT = "latestCheckpoint"


class Resume(_Model):
    """``spec.resume`` (ADR 0015): before each attempt the newest complete RLinf checkpoint under
    ``dir`` (relative to the job's first output) is handed to the run script and the inline config."""

    from_: ResumeFrom = Field(alias="from")
    dir: str

    def checkpoints_dir(self, outputs: list[str]) -> str:
        """The container path searched: ``dir`` under the first output ("" without outputs)."""
        if not outputs:
            return ""
        return f"{outputs[0].rstrip('/')}/{self.dir.strip('/')}".rstrip("/")


class SpanClusters(StrEnum):
    """``spec.placement.spanClusters``: may the scheduler span clusters for a job whose roles name none?"""

    NEVER = "never"
    """Only one cluster that fits the whole job: the job waits until one does."""
    WHEN_NEEDED = "whenNeeded"
    """One cluster when one fits the whole job, else the fewest clusters a network domain of the job joins."""


DEFAULT_SPAN_CLUSTERS: Final = SpanClusters.WHEN_NEEDED
"""``spanClusters`` left out (ADR 0026): a job that says what it needs runs as soon as the clusters a domain
joins can hold it, rather than waiting for one cluster to free up; a job that must not span says ``never``."""


class PlacementPolicy(_Model):
    """``spec.placement`` (ADR 0026): how the scheduler chooses clusters for roles that name none."""

    span_clusters: SpanClusters = DEFAULT_SPAN_CLUSTERS
    keep_together: list[str] = Field(default_factory=list)
    """Roles kept in the Header's cluster when the job spans clusters (the Header's role always is); empty:
    every role with GPUs (``placement.header_group``)."""


class JobType(StrEnum):
    CUSTOM = "custom"
    TEMPLATE = "template"


NO_NETWORK_DOMAIN: Final = "none"
"""``spec.networkDomain: none`` opts a single-cluster job out of the default domain (netdomain reserves it)."""


class JobSpec(_Model):
    """Everything about a job except its display name."""

    type: JobType = JobType.CUSTOM
    template: str | None = None
    header: str | None = None
    network_domain: str | None = None
    ssh_keys: list[str] = Field(default_factory=list)
    run_script: str | None = None
    tensorboard_dir: str | None = None
    outputs: list[str] = Field(default_factory=list)
    priority: StrictInt = 0
    project: str | None = None
    """The project the job is charged to (``rlark projects``): one the owner belongs to; checked at submit
    (``submission.check``). Stored with the job; admission keeps its project within its quota (ADR 0020)."""
    restart_policy: RestartPolicy | None = None
    progress_deadline_seconds: StrictInt | None = None
    termination_grace_period_seconds: StrictInt | None = None
    """How long the Header's run script has, after SIGTERM, to save a checkpoint and exit when the job's
    workers are stopped (cancel, restart, requeue; ADR 0014); None: the runtime's short default."""
    """Stall detection (ADR 0014): the Header's agent fails it as ``Stalled`` after this long without a new
    output line or TensorBoard step while its run script runs; None: never."""
    resume: Resume | None = None
    placement: PlacementPolicy | None = None
    rlinf_config: dict[str, Any] | None = None

    @property
    def span_clusters(self) -> SpanClusters:
        """``placement.spanClusters`` with its default."""
        return self.placement.span_clusters if self.placement is not None else DEFAULT_SPAN_CLUSTERS

    @property
    def chooses_clusters(self) -> bool:
        """Whether the scheduler chooses the cluster of at least one role (ADR 0026)."""
        return any(role.chooses_cluster for role in self.tasks)

    @property
    def joined_domain(self) -> str | None:
        """The network domain the job's workers join: ``None`` when absent or ``none``."""
        return None if self.network_domain == NO_NETWORK_DOMAIN else self.network_domain

    tasks: list[RoleSpec] = Field(default_factory=list)

    def role(self, name: str | None) -> RoleSpec | None:
        """The first role called ``name``."""
        return next((role for role in self.tasks if role.name == name), None)

    def rank_order(self) -> list[tuple[int, RoleSpec]]:
        """``(task index, role)`` in rank order: the header role first, then spec order."""
        header = next((i for i, role in enumerate(self.tasks) if role.name == self.header), None)
        first = [] if header is None else [(header, self.tasks[header])]
        return first + [(i, role) for i, role in enumerate(self.tasks) if i != header]


class Metadata(_Model):
    name: ScalarText


class JobDocument(_Model):
    """A whole job document. ``source`` keeps the submitted text when it was parsed from text."""

    api_version: str = API_VERSION
    kind: str = KIND
    metadata: Metadata
    spec: JobSpec

    _source: SourceInfo | None = PrivateAttr(default=None)

    @property
    def source(self) -> SourceInfo | None:
        return self._source

    def __eq__(self, other: object) -> bool:
        """Equal when the content is; where the document came from does not matter."""
        if not isinstance(other, JobDocument):
            return NotImplemented
        return self.model_dump() == other.model_dump()

    __hash__ = None  # type: ignore[assignment]  # holds dicts: not hashable

    def with_source(self, source: SourceInfo | None) -> JobDocument:
        """This document with ``source`` attached (used by the parser and by copies)."""
        copy = self.model_copy()
        copy._source = source
        return copy
