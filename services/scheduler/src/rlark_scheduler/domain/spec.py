"""The job spec: one YAML/JSON document used by the API, the CLI and the console.

Role: the typed shape of a job as users write it, its parsing from text or a mapping (with line
numbers kept for error messages), and the small facts derived from it that every other module
needs (rank order, worker slots). Semantic rules live in ``validation.py``; this module only says
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

Parsing is strict where a typo would silently change meaning: unknown keys, duplicate keys, YAML
anchors/aliases (a "billion laughs" document would expand exponentially), YAML tags (``!!python/...``:
only PyYAML's safe loader runs, and a job is plain data), nesting deeper than :data:`MAX_NESTING_DEPTH`
(refused before it is built) and more than one YAML document are refused. It is lenient where YAML's
typing gets in the way: env values, node-selector values and the display name may be written as numbers
or booleans and become strings (``true`` → ``"true"``). Booleans are YAML 1.2's ``true``/``false`` only, so
``on``, ``off``, ``yes`` and ``no`` are the words written (``restartPolicy: {on: [...]}`` works as
documented). Keys may be written in camelCase (canonical) or snake_case.

Field paths in errors look like ``spec.tasks[1].image``; keys that are not identifiers are quoted:
``spec.tasks[0].nodeSelector["rlark.io/gpu-model"]`` (see :func:`child_path`).

Parse error codes (raised together in one :class:`SpecParseError`): ``yaml_syntax`` (with line and
column), ``duplicate_key``, ``yaml_alias_refused``, ``yaml_key_invalid``, ``yaml_tag_refused``,
``yaml_value_invalid`` (a value YAML cannot build, such as 2024-13-45), ``document_empty``,
``document_not_mapping``, ``document_too_large``, ``document_too_deep``, ``encoding_invalid``,
``field_required``, ``field_unknown``, ``field_invalid`` (a key that is not a string is named as written:
``spec.restartPolicy.true``, ``env["1"]``).
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from types import UnionType
from typing import Annotated, Any, Final, Union, get_args, get_origin

import yaml
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PrivateAttr,
    StrictInt,
    ValidationError,
)
from pydantic.alias_generators import to_camel
from rlark_contracts import messages
from rlark_contracts.messages import Text

API_VERSION = "rlark.io/v1"
KIND = "Job"
MAX_DOCUMENT_CHARS = 256_000
"""Documents longer than this are refused before parsing: real jobs, scripts and an inline RLinf
config included, are a few tens of kilobytes, and the YAML reader is pure Python."""
MAX_NESTING_DEPTH = 64
"""Deepest nesting of mappings and lists (brackets or indentation) a document may have: a job is five levels
deep and an inline RLinf config a few more; deeper text is refused before it is read (``document_too_deep``)."""
MAX_REPLICAS = 1024
"""Upper bound of ``replicas`` per role; validation refuses more."""


# --------------------------------------------------------------------------------------------
# Field paths


_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*")


def child_path(parent: str, key: str | int) -> str:
    """The path of ``key`` under ``parent``: ``a.b``, ``a[3]`` or ``a["x/y"]``."""
    if isinstance(key, int):
        return f"{parent}[{key}]"
    if _IDENTIFIER.fullmatch(key):
        return f"{parent}.{key}" if parent else key
    return f"{parent}[{json.dumps(key)}]"


def parent_path(path: str) -> str:
    """Inverse of :func:`child_path` for the last segment; the root's parent is the root."""
    if path.endswith('"]'):
        start = path.rfind('["')
        while start > 0:
            try:
                json.loads(path[start + 1 : -1])
            except ValueError:
                start = path.rfind('["', 0, start)
                continue
            return path[:start]
        return path[: max(start, 0)]
    if path.endswith("]"):
        return path[: path.rfind("[")]
    cut = max(path.rfind("."), path.rfind("]"))
    if cut < 0:
        return ""
    return path[:cut] if path[cut] == "." else path[: cut + 1]


# --------------------------------------------------------------------------------------------
# Errors


class Severity(StrEnum):
    ERROR = "error"
    WARNING = "warning"


@dataclass(frozen=True, slots=True)
class SpecError:
    """One problem with a job document, machine-readable (``code``) and human (``message``).

    ``field`` is a path such as ``spec.tasks[1].image`` (empty for the document as a whole);
    ``line``/``column`` are 1-based positions in the submitted text when it was text. Messages
    never quote secret values; a message that is a catalogue :class:`Text` (ADR 0011) also travels
    as ``message_key`` and ``params``.
    """

    code: str
    message: str
    field: str
    line: int | None = None
    column: int | None = None
    severity: Severity = Severity.ERROR

    def to_dict(self) -> dict[str, object]:
        said = self.message.wire() if isinstance(self.message, Text) else {}
        return {
            "code": self.code,
            "message": str(self.message),
            **said,
            "field": self.field,
            "line": self.line,
            "column": self.column,
            "severity": self.severity.value,
        }


class SpecParseError(ValueError):
    """The document could not be read into a :class:`JobDocument`; ``errors`` says every why."""

    def __init__(self, errors: Iterable[SpecError]) -> None:
        self.errors: tuple[SpecError, ...] = tuple(errors)
        super().__init__("; ".join(e.message for e in self.errors) or "invalid job document")


# --------------------------------------------------------------------------------------------
# Source positions


@dataclass(frozen=True, slots=True)
class SourceSpan:
    """Where one value sits in the submitted text (1-based lines)."""

    key_line: int
    start_line: int
    end_line: int
    block_scalar: bool


@dataclass(frozen=True)
class SourceInfo:
    """The submitted text and where each field path sits in it."""

    text: str
    spans: Mapping[str, SourceSpan]

    def line_of(self, path: str) -> int | None:
        """Line of ``path``'s key, or of its nearest ancestor present in the text."""
        while True:
            span = self.spans.get(path)
            if span is not None:
                return span.key_line
            if not path:
                return None
            path = parent_path(path)

    def line_in_value(self, path: str, content_line: int) -> int | None:
        """Document line of line ``content_line`` (1-based) of the string value at ``path``."""
        span = self.spans.get(path)
        if span is None:
            return self.line_of(path)
        offset = content_line if span.block_scalar else content_line - 1
        return min(span.start_line + offset, max(span.end_line, span.start_line))

    def field_at_line(self, line: int) -> str:
        """The most specific field path whose text covers ``line`` ("" when none does).

        A comment line belongs to no field (YAML extends a block to the comments after it),
        unless it sits inside a block scalar, where it is part of the string.
        """
        lines = self.text.splitlines()
        is_comment = 0 < line <= len(lines) and lines[line - 1].lstrip().startswith("#")
        best: tuple[int, int, str] | None = None
        for path, span in self.spans.items():
            if is_comment and not (span.block_scalar and span.start_line < line <= span.end_line):
                continue
            if span.key_line <= line <= max(span.end_line, span.key_line):
                rank = (span.end_line - span.key_line, -len(path), path)
                if best is None or rank < best:
                    best = rank
        return best[2] if best else ""


# --------------------------------------------------------------------------------------------
# The models


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


# --------------------------------------------------------------------------------------------
# Derived facts


@dataclass(frozen=True, slots=True)
class RankRange:
    """The contiguous ranks of one role's workers."""

    task_index: int
    role: str
    first_rank: int
    count: int
    gpus_per_worker: int


def rank_ranges(spec: JobSpec) -> list[RankRange]:
    """Rank ranges of every role: the Header's worker is rank 0, then roles in spec order.

    Roles with ``replicas < 1`` contribute no ranks. The same numbering becomes each worker's
    ``RLINF_NODE_RANK``, so it is what RLinf's ``node_ranks`` refer to.
    """
    ranges: list[RankRange] = []
    next_rank = 0
    for index, role in spec.rank_order():
        count = max(role.replicas, 0)
        ranges.append(RankRange(index, role.name, next_rank, count, role.gpus_per_worker))
        next_rank += count
    return ranges


@dataclass(frozen=True, slots=True)
class WorkerSlot:
    """One worker a job will have, before any node is chosen."""

    role: str
    index: int
    rank: int
    cluster: str
    """The role's cluster; "" when the scheduler chooses it."""
    gpus: int
    image: str
    is_header: bool


def worker_slots(spec: JobSpec) -> tuple[WorkerSlot, ...]:
    """Every worker of the job in rank order. Requires 1 <= replicas <= MAX_REPLICAS per role."""
    slots: list[WorkerSlot] = []
    for rank_range in rank_ranges(spec):
        role = spec.tasks[rank_range.task_index]
        if not 1 <= role.replicas <= MAX_REPLICAS:
            raise ValueError(f'role "{role.name}": replicas {role.replicas} is out of range')
        for index in range(role.replicas):
            slots.append(
                WorkerSlot(
                    role=role.name,
                    index=index,
                    rank=rank_range.first_rank + index,
                    cluster=role.cluster or "",
                    gpus=role.gpus_per_worker,
                    image=role.image,
                    is_header=role.name == spec.header,
                )
            )
    return tuple(slots)


def fill_network_domain_default(doc: JobDocument, domain_names: Iterable[str]) -> JobDocument:
    """Set ``spec.networkDomain`` to the first domain by name when the user left it out.

    With no domain configured the field stays absent (the user guide's rule). ``networkDomain: none``
    (:data:`NO_NETWORK_DOMAIN`, a name no domain may take) stays as written, so the normalised document
    keeps it; :attr:`JobSpec.joined_domain` is then ``None``. A job whose roles leave a cluster to the
    scheduler keeps the field absent: it may then span through any domain that joins the clusters chosen,
    and joins one only when it spans (ADR 0026).
    """
    if doc.spec.network_domain is not None or doc.spec.chooses_clusters:
        return doc
    names = sorted(domain_names)
    if not names:
        return doc
    spec = doc.spec.model_copy(update={"network_domain": names[0]})
    return doc.model_copy(update={"spec": spec}).with_source(doc.source)


def fill_project_default(doc: JobDocument, member_of: Sequence[str]) -> JobDocument:
    """Set ``spec.project`` to the owner's one project when the user left it out (ADR 0020): a member of a
    project cannot step outside its quota by naming none. With several projects the user must choose
    (``submission.check`` refuses with ``project_required``); with none the field stays absent."""
    if doc.spec.project is not None or len(member_of) != 1:
        return doc
    spec = doc.spec.model_copy(update={"project": member_of[0]})
    return doc.model_copy(update={"spec": spec}).with_source(doc.source)


# --------------------------------------------------------------------------------------------
# Parsing


def parse_job_document(source: str | bytes | Mapping[str, Any]) -> JobDocument:
    """Read a job document from YAML or JSON text, or from an already decoded mapping.

    Raises :class:`SpecParseError` listing every problem: syntax errors with line and column,
    unknown or duplicate keys, missing required fields, wrong types.
    """
    info: SourceInfo | None = None
    if isinstance(source, bytes):
        try:
            source = source.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise SpecParseError(
                [SpecError("encoding_invalid", messages.text("encoding_invalid"), "")]
            ) from exc
    if isinstance(source, str):
        data, info = _load_text(source)
    else:
        data = dict(source)
    if not isinstance(data, dict):
        raise SpecParseError(
            [SpecError("document_not_mapping", messages.text("document_not_mapping"), "", 1)]
        )
    try:
        doc = JobDocument.model_validate(data)
    except ValidationError as exc:
        raise SpecParseError(_pydantic_errors(exc, info, data)) from None
    return doc.with_source(info)


def _load_text(text: str) -> tuple[Any, SourceInfo]:
    if len(text) > MAX_DOCUMENT_CHARS:
        raise SpecParseError(
            [
                SpecError(
                    "document_too_large",
                    messages.text("document_too_large.chars", max=MAX_DOCUMENT_CHARS),
                    "",
                )
            ]
        )
    if not text.strip():
        raise SpecParseError([SpecError("document_empty", messages.text("document_empty"), "")])
    check_nesting(text)
    if text.lstrip().startswith("{"):
        data = _load_json(text)
        if data is not None:
            try:
                _, spans = _read_yaml(text, construct=False)
            except SpecParseError:
                spans = {}
            return data, SourceInfo(text, spans)
    data, spans = _read_yaml(text, construct=True)
    return data, SourceInfo(text, spans)


_FLOW_TOKEN = re.compile(r'"(?:[^"\\\n]|\\.)*(?:"|\\?$)|[\[\]{}]', re.MULTILINE)
"""A double-quoted string up to its end or its line's end (JSON's strings hold no newline), or a bracket."""


def _too_deep(line: int) -> SpecParseError:
    said = messages.text("document_too_deep", max=MAX_NESTING_DEPTH, line=line)
    return SpecParseError([SpecError("document_too_deep", said, "", line)])


def check_nesting(text: str) -> None:
    """Refuse ``text`` whose brackets nest deeper than :data:`MAX_NESTING_DEPTH`, before any reader runs.

    A scan of the text at regular-expression speed: JSON's nesting is all brackets (its strings are
    skipped), as is YAML's flow style, whose pure-Python scanner spends quadratic time on an opening
    bracket run. Brackets in YAML's plain or single-quoted text count too: a refusal would need 65 of them
    unclosed at once, which no job's script writes. Block-style nesting (indentation, ``- - -``) is bounded
    by the YAML reader itself (``_Loader``)."""
    depth = 0
    for token in _FLOW_TOKEN.finditer(text):
        mark = token.group()
        if mark in ("[", "{"):
            depth += 1
            if depth > MAX_NESTING_DEPTH:
                raise _too_deep(text.count("\n", 0, token.start()) + 1)
        elif mark in ("]", "}"):
            depth = max(depth - 1, 0)


def _load_json(text: str) -> Any:
    """The decoded JSON, or None when ``text`` is not plain JSON.

    None also for JSON with a repeated key (the YAML reader then reports it with its line) and for a
    number Python will not read (over 4,300 digits: the YAML reader names its line). ``check_nesting``
    ran first, so the decoder's recursion stays shallow.
    """

    def no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        result = dict(pairs)
        if len(result) != len(pairs):
            raise ValueError("duplicate key")
        return result

    try:
        return json.loads(text, object_pairs_hook=no_duplicates)
    except ValueError:
        return None


_BOOL_TAG = "tag:yaml.org,2002:bool"


class _Loader(yaml.SafeLoader):
    """PyYAML's safe loader, bounded, with YAML 1.2's booleans and no tags.

    - Booleans are ``true``/``false`` only (YAML 1.2's core schema): YAML 1.1 also reads ``on``, ``off``,
      ``yes`` and ``no`` as booleans, which turned ``restartPolicy: {on: [...]}`` into a key ``true``;
      those words now stay strings, as keys and as values.
    - Nesting deeper than :data:`MAX_NESTING_DEPTH` collections is refused while composing, before the
      recursion that builds it (the composer recurses once per level: 50,000 levels were a RecursionError).
    - An explicit tag (``!!python/object/apply:...``, ``!!binary``, ``!custom``) is remembered and refused by
      ``_walk`` with its field: a job document is plain data, and the constructors of tagged values raise
      whatever their input makes them raise.
    - A value its constructor cannot build (an integer over 4,300 digits, a date such as 2024-13-45) is a
      ``ConstructorError`` at its position, never a bare ``ValueError``.
    """

    yaml_implicit_resolvers = {
        first: [(tag, regexp) for tag, regexp in resolvers if tag != _BOOL_TAG]
        for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
    }

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self.depth = 0
        self.tagged: set[int] = set()

    def compose_node(self, parent: yaml.Node | None, index: int) -> yaml.Node | None:
        event: yaml.Event = self.peek_event()  # type: ignore[no-untyped-call]  # untyped in the stubs
        collection = isinstance(event, yaml.SequenceStartEvent | yaml.MappingStartEvent)
        if collection:
            if self.depth == MAX_NESTING_DEPTH:
                mark = event.start_mark
                raise _too_deep(mark.line + 1 if mark else 0)
            self.depth += 1
        explicit = getattr(event, "tag", None) not in (None, "!")
        try:
            node = super().compose_node(parent, index)
        finally:
            if collection:
                self.depth -= 1
        if explicit and node is not None:
            self.tagged.add(id(node))
        return node

    def construct_object(self, node: yaml.Node, deep: bool = False) -> Any:
        try:
            return super().construct_object(node, deep)
        except ValueError as exc:
            raise yaml.constructor.ConstructorError(None, None, str(exc), node.start_mark) from None


_Loader.add_implicit_resolver(_BOOL_TAG, re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF"))


def _yaml_error(exc: yaml.YAMLError, key: str) -> SpecError:
    if isinstance(exc, yaml.MarkedYAMLError):
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark else None
        column = mark.column + 1 if mark else None
        problem = " ".join(part for part in (exc.context, exc.problem) if part) or "invalid YAML"
        if line:
            return SpecError(
                key, messages.text(key, line=line, column=column or 0, problem=problem), "", line, column
            )
        return SpecError(key, f"YAML syntax error: {problem}", "")
    return SpecError(key, f"YAML error: {exc}", "")


def _read_yaml(text: str, *, construct: bool) -> tuple[Any, dict[str, SourceSpan]]:
    """The data of the one YAML document in ``text`` (None unless ``construct``) and where each field sits.

    Composed once: the nodes give the spans and are checked (keys, aliases, tags) before any value is built.
    """
    loader = _Loader(text)
    try:
        try:
            root = loader.get_single_node()
        except yaml.YAMLError as exc:
            raise SpecParseError([_yaml_error(exc, "yaml_syntax")]) from None
        if root is None:
            raise SpecParseError([SpecError("document_empty", messages.text("document_empty"), "")])
        spans: dict[str, SourceSpan] = {}
        errors: list[SpecError] = []
        _walk(root, "", root.start_mark.line + 1, spans, errors, set(), loader.tagged)
        if errors:
            raise SpecParseError(errors)
        if not construct:
            return None, spans
        try:
            data = loader.construct_document(root)
        except yaml.YAMLError as exc:
            error = _yaml_error(exc, "yaml_value_invalid")
            field = SourceInfo(text, spans).field_at_line(error.line) if error.line else ""
            raise SpecParseError(
                [SpecError(error.code, error.message, field, error.line, error.column)]
            ) from None
        return data, spans
    finally:
        loader.dispose()


def _walk(
    node: yaml.Node,
    path: str,
    key_line: int,
    spans: dict[str, SourceSpan],
    errors: list[SpecError],
    seen: set[int],
    tagged: set[int],
) -> None:
    start = node.start_mark.line + 1
    if id(node) in tagged:
        errors.append(SpecError("yaml_tag_refused", messages.text("yaml_tag_refused"), path, start))
        return
    if id(node) in seen:  # the composer hands back the anchored node for every alias
        errors.append(
            SpecError(
                "yaml_alias_refused",
                messages.text("yaml_alias_refused"),
                path,
                key_line,
            )
        )
        return
    seen.add(id(node))
    end = node.end_mark.line + (1 if node.end_mark.column > 0 else 0)
    block = isinstance(node, yaml.ScalarNode) and node.style in ("|", ">")
    spans[path] = SourceSpan(key_line, start, max(end, start), block)
    if isinstance(node, yaml.MappingNode):
        keys: set[str] = set()
        for key_node, value_node in node.value:
            if id(key_node) in tagged:
                errors.append(
                    SpecError(
                        "yaml_tag_refused",
                        messages.text("yaml_tag_refused"),
                        path,
                        key_node.start_mark.line + 1,
                    )
                )
                continue
            if not isinstance(key_node, yaml.ScalarNode):
                errors.append(
                    SpecError(
                        "yaml_key_invalid",
                        messages.text("yaml_key_invalid"),
                        path,
                        key_node.start_mark.line + 1,
                    )
                )
                continue
            key = str(key_node.value)
            child = child_path(path, key)
            if key in keys:
                errors.append(
                    SpecError(
                        "duplicate_key",
                        messages.text("duplicate_key", key=str(key)),
                        child,
                        key_node.start_mark.line + 1,
                    )
                )
                continue
            keys.add(key)
            _walk(value_node, child, key_node.start_mark.line + 1, spans, errors, seen, tagged)
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            _walk(item, child_path(path, index), item.start_mark.line + 1, spans, errors, seen, tagged)


def _error_path(loc: tuple[int | str, ...], data: Any) -> str:
    """The field path of a pydantic error location, read along the validated input.

    Pydantic writes a mapping's key as it coerced it (``True`` as 1), which :func:`child_path` alone would
    render as a list index (``restartPolicy[1]``); walking the input tells a key from an index, and a key
    that is not a string is named as YAML spells it (``restartPolicy.true``, ``env["1"]``), as the
    source spans name it."""
    path = ""
    node: Any = data
    for part in loc:
        if part == "[key]":
            continue
        if isinstance(node, Mapping):
            key = next((k for k in node if k == part), part)
            path = child_path(path, key if isinstance(key, str) else _key_text(key))
            node = node.get(key)
        elif isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node):
            path = child_path(path, part)
            node = node[part]
        else:
            path = child_path(path, part)
            node = None
    return path


def _key_text(key: object) -> str:
    """How YAML writes a scalar key that is not a string."""
    if isinstance(key, bool):
        return "true" if key else "false"
    return "null" if key is None else str(key)


def _pydantic_errors(exc: ValidationError, info: SourceInfo | None, data: Any) -> list[SpecError]:
    errors: list[SpecError] = []
    for error in exc.errors(include_url=False, include_input=False):
        path = _error_path(error["loc"], data)
        kind = error["type"]
        message: str
        if kind == "missing":
            code, message = "field_required", messages.text("field_required", field=path)
        elif kind == "invalid_key" or error["loc"][-1:] == ("[key]",):
            code, message = "field_invalid", messages.text("field_key_invalid", field=path)
        elif kind == "extra_forbidden":
            code = "field_unknown"
            near = _known_near(error["loc"])
            message = (
                messages.text("field_unknown.near", field=path, near=near)
                if near
                else messages.text("field_unknown", field=path)
            )
        else:
            code, message = (
                "field_invalid",
                messages.validation_text(path, error) or f"{path}: {error['msg']}",
            )
        errors.append(SpecError(code, message, path, info.line_of(path) if info else None))
    return errors


def _known_near(loc: tuple[int | str, ...]) -> str | None:
    """The field of the same object whose name is closest to the unknown last part of ``loc`` (a typo's
    intended field), if one is close enough."""
    annotation: Any = JobDocument
    for part in loc[:-1]:
        annotation = _inner(annotation)
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            fields = {field.alias or name: field for name, field in annotation.model_fields.items()}
            field = fields.get(str(part))
            if field is None:
                return None
            annotation = field.annotation
        elif get_origin(annotation) in (list, dict):
            annotation = get_args(annotation)[-1]  # an item, or a value
        else:
            return None
    model = _inner(annotation)
    if not (isinstance(model, type) and issubclass(model, BaseModel)):
        return None
    names = [field.alias or name for name, field in model.model_fields.items()]
    near = difflib.get_close_matches(str(loc[-1]), names, n=1, cutoff=0.6)
    return near[0] if near else None


def _inner(annotation: Any) -> Any:
    """``X`` of ``X | None``."""
    if get_origin(annotation) in (Union, UnionType):
        kept = [arg for arg in get_args(annotation) if arg is not type(None)]
        return kept[0] if len(kept) == 1 else annotation
    return annotation
