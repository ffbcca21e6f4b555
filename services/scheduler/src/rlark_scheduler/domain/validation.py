"""Server-side validation of a job document against the platform's rules and its current state.

Role: every rule of ARCHITECTURE §5 and the user guide that can be decided at submission, in one
pure function, :func:`validate_job`. The API turns its report into a 4xx (errors) or an accepted
job with warnings; the console shows the same report live while the user edits.

Contract:
- :func:`validate_job` returns **all** problems, never only the first. Errors refuse the job;
  warnings accept it (typically: it can only run later). Each problem has a stable ``code``, a
  human ``message`` naming the field and never quoting a secret, the ``field`` path
  (``spec.tasks[1].image``) and, when the document came from text, its ``line``.
- The :class:`ValidationContext` is plain data the caller gathers first (the capacity model of
  the job's clusters, the known clusters with their hostPath policies and runtimes, the user's SSH
  key names, the network domain names): no I/O happens here. The default network domain is filled by the
  caller (``spec.fill_network_domain_default``) beforehand.

Capacity rules. One worker of a job per node, so a role needs ``replicas`` distinct nodes of its
cluster matching its selector, each with ``gpusPerWorker`` GPUs; roles of one job in one cluster
whose selectors overlap compete for the same nodes, so feasibility is a bipartite matching
(``placement.match_workers``, exact). Every count comes from the :class:`CapacityModel` the
placement loop decides on (``CapacityModel.survey``), so validation and placement cannot disagree
about what fits. Two tiers are checked:
- *ever* (a hypothetical survey): nodes that exist, match and have enough GPUs in total,
  regardless of readiness, cordons and current usage. Failing this tier is an **error**
  (``selector_matches_too_few``, or ``gpus_exceed_node`` when no matching node is big enough):
  waiting would never help.
- *now*: additionally ready, schedulable, with enough free GPUs, in an online cluster. Failing
  only this tier is a **warning** with the exact counts: the job stays Pending until it fits.

Codes (errors unless marked): api_version_unsupported, kind_unsupported, name_length,
name_invalid, template_missing, template_unknown, priority_out_of_range, tasks_missing,
role_name_invalid, role_name_duplicate, header_missing, header_unknown_role, header_replicas,
run_script_missing, cluster_unknown, cluster_offline (warning), replicas_invalid, gpus_invalid,
gpus_exceed_node, image_invalid, image_tag_required, image_latest_refused, selector_key_invalid,
selector_value_invalid, selector_matches_too_few (error or warning), mount_invalid,
hostpath_not_allowed (a hostPath source outside its cluster's allow-list, ADR 0006),
mount_type_unsupported (a mount type its cluster's runtime cannot mount: ``rlark_contracts.runtimes``),
path_not_absolute, env_name_invalid, env_name_reserved, env_overridden (warning),
output_not_on_mount (warning), ssh_key_unknown, network_domain_unknown, network_domain_missing
(warning), secret_detected, restart_max_out_of_range, restart_backoff_out_of_range,
restart_exit_code_invalid, restart_exit_codes_unused (warning), progress_deadline_out_of_range, termination_grace_out_of_range, resume_dir_invalid, resume_outputs_missing,
resume_dir_not_on_mount (warning), and the ``rlinf_*`` codes of ``rlinf.py``.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any

from rlark_contracts.hostpaths import source_decision
from rlark_contracts.messages import Text, text
from rlark_contracts.runtimes import mount_refusal
from rlark_contracts.secrets import is_secret_name
from rlark_secretscan import SecretFinding, scan_assignment, scan_text

from rlark_scheduler.domain import selectors
from rlark_scheduler.domain.capacity import CapacityModel, Survey
from rlark_scheduler.domain.jobs import role_request
from rlark_scheduler.domain.placement import Demand, match_workers, role_clusters
from rlark_scheduler.domain.rlinf import check_rlinf_config
from rlark_scheduler.domain.spec import (
    API_VERSION,
    KIND,
    MAX_REPLICAS,
    JobDocument,
    JobSpec,
    JobType,
    MountType,
    RestartOn,
    RoleSpec,
    SecretRef,
    Severity,
    SourceInfo,
    SpecError,
    child_path,
    rank_ranges,
)
from rlark_scheduler.domain.templates import TEMPLATES

__all__ = [
    "ImageRef",
    "SpecError",
    "ValidationContext",
    "ValidationReport",
    "hostpath_refusals",
    "image_problem",
    "mount_type_refusals",
    "parse_image",
    "selector_matches",
    "validate_job",
]

MAX_NAME_LENGTH = 128
MAX_ROLE_NAME_LENGTH = 40
MAX_GPUS_PER_WORKER = 64
PRIORITY_RANGE = (-100, 100)
MAX_RESTARTS_RANGE = (0, 100)
BACKOFF_SECONDS_RANGE = (0, 86_400)
PROGRESS_DEADLINE_RANGE = (10, 604_800)
"""``spec.progressDeadlineSeconds``: ten seconds to a week."""
TERMINATION_GRACE_RANGE = (0, 3_600)
"""``spec.terminationGracePeriodSeconds``: up to an hour."""
RESERVED_ENV_NAMES = frozenset({"RLINF_NODE_RANK", "RAY_ADDRESS"})
RESERVED_ENV_PREFIX = "RLARK_"
RLINF_OVERWRITTEN_ENV = frozenset(
    {"RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "CUDA_VISIBLE_DEVICES"}
)

_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_OBJECT_URL = re.compile(r"[a-z][a-z0-9+.-]*://(?P<bucket>[^/\s@]+)(?P<prefix>/\S*)?")


# --------------------------------------------------------------------------------------------
# Context and report


@dataclass(frozen=True)
class ValidationContext:
    """Everything outside the document that validation depends on, gathered by the caller.

    ``capacity`` answers every question about nodes: the :class:`CapacityModel` the placement loop
    decides on, built once per check (the job's clusters: nodes, offline flags, the scheduler's
    allocations). ``clusters`` are the known clusters (registered, or seen through their nodes),
    each with its hostPath policy (normalised prefixes; empty allows none). ``runtimes`` says what
    runs each cluster's workers (``ClusterState.runtime``); a cluster missing from it is not judged.
    ``unmountable`` names the mount types a cluster's agent is not set up for (``ClusterState.unmountable``).
    """

    capacity: CapacityModel = field(default_factory=CapacityModel)
    clusters: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    ssh_key_names: frozenset[str] = frozenset()
    network_domains: frozenset[str] = frozenset()
    runtimes: Mapping[str, str] = field(default_factory=dict)
    unmountable: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    secrets: Mapping[str, tuple[str, str]] | None = None
    """The secrets the job's owner may name: name → (scope, owner) — theirs, then their project's; None: not
    judged (the document alone)."""

    @classmethod
    def build(
        cls,
        capacity: CapacityModel | None = None,
        clusters: Mapping[str, Sequence[str]] | Iterable[str] = (),
        ssh_key_names: Iterable[str] = (),
        network_domains: Iterable[str] = (),
        runtimes: Mapping[str, str] | None = None,
        secrets: Mapping[str, tuple[str, str]] | None = None,
        unmountable: Mapping[str, Sequence[str]] | None = None,
    ) -> ValidationContext:
        """``clusters``: names (allowing no hostPath) or name → hostPath allow-list; ``runtimes``:
        cluster name → its runtime."""
        policies = (
            {name: tuple(allow) for name, allow in clusters.items()}
            if isinstance(clusters, Mapping)
            else dict.fromkeys(clusters, ())
        )
        return cls(
            capacity=capacity if capacity is not None else CapacityModel(),
            clusters=MappingProxyType(policies),
            ssh_key_names=frozenset(ssh_key_names),
            network_domains=frozenset(network_domains),
            runtimes=MappingProxyType(dict(runtimes or {})),
            unmountable=MappingProxyType({name: tuple(types) for name, types in (unmountable or {}).items()}),
            secrets=MappingProxyType(dict(secrets)) if secrets is not None else None,
        )

    def knows(self, cluster: str) -> bool:
        return cluster in self.clusters

    def is_online(self, cluster: str) -> bool:
        """A known cluster whose agent answers (the capacity model's flag)."""
        return cluster in self.clusters and self.capacity.is_online(cluster)


@dataclass(frozen=True)
class ValidationReport:
    """The outcome: the job is acceptable when there are no errors.

    ``secrets`` holds the text of every secret found (as written in the document): the issues here are
    already redacted, and whatever else a response shows from the document (a preview's plan, an issue
    the caller adds) goes through :func:`redact` with it. It is never sent or logged itself."""

    errors: tuple[SpecError, ...]
    warnings: tuple[SpecError, ...]
    secrets: frozenset[str] = frozenset()

    @property
    def ok(self) -> bool:
        return not self.errors

    def codes(self) -> set[str]:
        return {issue.code for issue in (*self.errors, *self.warnings)}

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "errors": [e.to_dict() for e in self.errors],
            "warnings": [w.to_dict() for w in self.warnings],
        }


# --------------------------------------------------------------------------------------------
# Selectors


def selector_matches(selector: Mapping[str, str], labels: Mapping[str, str]) -> bool:
    """True when ``labels`` has every ``key: value`` of ``selector`` (the empty one matches all)."""
    return selectors.matches(selector, labels)


@dataclass(frozen=True, slots=True)
class _RoleFit:
    """One role as the capacity model sees it: ``ever`` (hypothetical) and ``now`` surveys."""

    index: int
    role: RoleSpec
    cluster: str
    ever: Survey
    now: Survey


# --------------------------------------------------------------------------------------------
# Images


@dataclass(frozen=True, slots=True)
class ImageRef:
    """A parsed image reference ``[domain/]path[:tag][@digest]``."""

    domain: str | None
    path: str
    tag: str | None
    digest: str | None


class ImageError(ValueError):
    """An unacceptable image reference: ``code`` and the message ``key`` with its ``params`` (the
    sentence names the field, which the caller supplies)."""

    def __init__(self, code: str, key: str, **params: str) -> None:
        super().__init__(text(key, field="image", **params))
        self.code = code
        self.key = key
        self.params = params


_DOMAIN = re.compile(
    r"(?:[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)*"
    r"|\[[0-9A-Fa-f:.]+\])(?::[0-9]{1,5})?"
)
_PATH_COMPONENT = re.compile(r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*")
_TAG = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")
_DIGEST = re.compile(r"(?P<alg>[a-z0-9]+(?:[.+_-][a-z0-9]+)*):(?P<hex>[0-9a-f]{32,})")
_DIGEST_LENGTHS = {"sha256": 64, "sha384": 96, "sha512": 128}


def parse_image(reference: str) -> ImageRef:
    """Parse an image reference by the OCI distribution grammar; raise :class:`ImageError`.

    ``host:5000/img`` has no tag (the ``:5000`` is the registry port); ``latest`` is refused
    unless a digest pins the image; references without tag and digest are refused.
    """
    if not reference or reference != reference.strip() or any(c.isspace() for c in reference):
        raise ImageError("image_invalid", "image_invalid.empty")
    if len(reference) > 4096:
        raise ImageError("image_invalid", "image_invalid.too_long")
    name_and_tag, at, digest = reference.partition("@")
    if at:
        match = _DIGEST.fullmatch(digest)
        expected = _DIGEST_LENGTHS.get(match.group("alg")) if match else None
        if match is None or (expected is not None and len(match.group("hex")) != expected):
            raise ImageError("image_invalid", "image_invalid.digest", digest=digest)
    slash = name_and_tag.rfind("/")
    colon = name_and_tag.rfind(":")
    tag: str | None = None
    name = name_and_tag
    if colon > slash:
        name, tag = name_and_tag[:colon], name_and_tag[colon + 1 :]
        if not _TAG.fullmatch(tag):
            raise ImageError("image_invalid", "image_invalid.tag", tag=tag)
    components = name.split("/")
    domain: str | None = None
    first = components[0]
    if len(components) > 1 and (
        "." in first
        or ":" in first
        or first == "localhost"
        or first.startswith("[")
        or first != first.lower()
    ):
        domain = first
        components = components[1:]
        if not _DOMAIN.fullmatch(domain):
            raise ImageError("image_invalid", "image_invalid.registry", host=domain)
    for component in components:
        if not _PATH_COMPONENT.fullmatch(component):
            raise ImageError("image_invalid", "image_invalid.component", component=component)
    if len(name) > 255:
        raise ImageError("image_invalid", "image_invalid.repository_too_long")
    if tag is None and not at:
        raise ImageError("image_tag_required", "image_tag_required")
    if tag is not None and tag.lower() == "latest" and not at:
        raise ImageError("image_latest_refused", "image_latest_refused")
    return ImageRef(domain, "/".join(components), tag, digest if at else None)


def image_problem(reference: str, field: str = "image") -> tuple[str, Text] | None:
    """``(code, message)`` when ``reference`` is not acceptable, else None; the message names ``field``."""
    try:
        parse_image(reference)
    except ImageError as exc:
        return exc.code, text(exc.key, field=field, **exc.params)
    return None


# --------------------------------------------------------------------------------------------
# The validator


class _Validator:
    def __init__(self, doc: JobDocument, ctx: ValidationContext) -> None:
        self.doc = doc
        self.spec = doc.spec
        self.ctx = ctx
        self.source: SourceInfo | None = doc.source
        self.issues: list[SpecError] = []
        self.found: set[str] = set()
        """The text of each secret found (``secrets``), to redact from the issues."""

    def add(
        self,
        code: str,
        message: Text | str,
        field_path: str,
        *,
        warning: bool = False,
        line: int | None = None,
    ) -> None:
        if line is None and self.source is not None:
            line = self.source.line_of(field_path)
        severity = Severity.WARNING if warning else Severity.ERROR
        self.issues.append(SpecError(code, message, field_path, line, None, severity))

    # -- document level ------------------------------------------------------------------------

    def header_fields(self) -> None:
        doc, spec = self.doc, self.spec
        if doc.api_version != API_VERSION:
            self.add(
                "api_version_unsupported",
                text("api_version_unsupported", expected=API_VERSION),
                "apiVersion",
            )
        if doc.kind != KIND:
            self.add("kind_unsupported", text("kind_unsupported", expected=KIND), "kind")
        name = doc.metadata.name.strip()
        if not 1 <= len(name) <= MAX_NAME_LENGTH:
            self.add(
                "name_length",
                text("name_length", max=MAX_NAME_LENGTH, length=len(name)),
                "metadata.name",
            )
        elif _CONTROL.search(name):
            self.add(
                "name_invalid",
                text("name_invalid"),
                "metadata.name",
            )
        if spec.type is JobType.TEMPLATE:
            if not spec.template:
                self.add(
                    "template_missing",
                    text("template_missing"),
                    "spec.template",
                )
            elif spec.template not in TEMPLATES:
                self.add(
                    "template_unknown",
                    text("template_unknown", template=spec.template, templates=", ".join(TEMPLATES)),
                    "spec.template",
                )
        low, high = PRIORITY_RANGE
        if not low <= spec.priority <= high:
            self.add(
                "priority_out_of_range",
                text("priority_out_of_range", min=low, max=high),
                "spec.priority",
            )
        self.restart_policy()
        deadline = spec.progress_deadline_seconds
        low, high = PROGRESS_DEADLINE_RANGE
        if deadline is not None and not low <= deadline <= high:
            self.add(
                "progress_deadline_out_of_range",
                text("progress_deadline_out_of_range", min=low, max=high),
                "spec.progressDeadlineSeconds",
            )
        grace = spec.termination_grace_period_seconds
        low, high = TERMINATION_GRACE_RANGE
        if grace is not None and not low <= grace <= high:
            self.add(
                "termination_grace_out_of_range",
                text("termination_grace_out_of_range", min=low, max=high),
                "spec.terminationGracePeriodSeconds",
            )
        self.resume()
        self.placement_policy()
        if not (spec.run_script or "").strip():
            self.add(
                "run_script_missing",
                text("run_script_missing"),
                "spec.runScript",
            )
        for key_index, key in enumerate(spec.ssh_keys):
            if key not in self.ctx.ssh_key_names:
                self.add(
                    "ssh_key_unknown",
                    text("ssh_key_unknown", index=key_index, name=key),
                    child_path("spec.sshKeys", key_index),
                )
        # Only clusters that exist: a misspelt one is cluster_unknown, not a second cluster needing a domain.
        # A role whose cluster the scheduler chooses needs no domain here: it spans only through one (ADR 0026).
        clusters = {
            role.cluster for role in spec.tasks if role.cluster is not None and self.ctx.knows(role.cluster)
        }
        if spec.joined_domain is not None:
            if spec.joined_domain not in self.ctx.network_domains:
                self.add(
                    "network_domain_unknown",
                    text("network_domain_unknown", name=spec.network_domain or ""),
                    "spec.networkDomain",
                )
        elif len(clusters) > 1:
            self.add(
                "network_domain_missing",
                text("network_domain_missing", clusters=len(clusters)),
                "spec.networkDomain",
            )

    def restart_policy(self) -> None:
        """``spec.restartPolicy`` (ADR 0014): the kinds in ``on`` were checked by the parser."""
        policy = self.spec.restart_policy
        if policy is None:
            return
        low, high = MAX_RESTARTS_RANGE
        if not low <= policy.max_restarts <= high:
            self.add(
                "restart_max_out_of_range",
                text("restart_max_out_of_range", min=low, max=high),
                "spec.restartPolicy.maxRestarts",
            )
        low, high = BACKOFF_SECONDS_RANGE
        if not low <= policy.backoff_seconds <= high:
            self.add(
                "restart_backoff_out_of_range",
                text("restart_backoff_out_of_range", min=low, max=high),
                "spec.restartPolicy.backoffSeconds",
            )
        for index, code in enumerate(policy.exit_codes):
            if not 1 <= code <= 255:
                path = child_path("spec.restartPolicy.exitCodes", index)
                self.add(
                    "restart_exit_code_invalid",
                    text("restart_exit_code_invalid", field=path, code=code),
                    path,
                )
        if policy.exit_codes and RestartOn.EXIT_CODE not in policy.on:
            self.add(
                "restart_exit_codes_unused",
                text("restart_exit_codes_unused"),
                "spec.restartPolicy.exitCodes",
                warning=True,
            )

    def resume(self) -> None:
        """``spec.resume`` (ADR 0015): ``from`` was checked by the parser; ``dir`` is a relative path under the
        first output, and checkpoints only outlive an attempt on a volume."""
        resume = self.spec.resume
        if resume is None:
            return
        field_path = "spec.resume.dir"
        parts = resume.dir.split("/")
        if (
            not resume.dir.strip()
            or resume.dir.startswith("/")
            or ".." in parts
            or "\\" in resume.dir
            or _CONTROL.search(resume.dir)
        ):
            self.add("resume_dir_invalid", text("resume_dir_invalid", field=field_path), field_path)
            return
        if not self.spec.outputs:
            self.add("resume_outputs_missing", text("resume_outputs_missing"), field_path)
            return
        searched = resume.checkpoints_dir(self.spec.outputs)
        header = self.spec.role(self.spec.header)
        volumes = [m.path for m in header.mounts if not m.read_only] if header is not None else []
        if self.spec.outputs[0].startswith("/") and not any(_under(searched, v) for v in volumes):
            self.add(
                "resume_dir_not_on_mount",
                text("resume_dir_not_on_mount", field=field_path, path=searched),
                field_path,
                warning=True,
            )

    def placement_policy(self) -> None:
        """``spec.placement`` (ADR 0026): ``spanClusters`` was checked by the parser; ``keepTogether`` names roles."""
        policy = self.spec.placement
        if policy is None:
            return
        names = {role.name for role in self.spec.tasks}
        for index, name in enumerate(policy.keep_together):
            if name not in names:
                field_path = child_path("spec.placement.keepTogether", index)
                said = text("placement_role_unknown", field=field_path, role=name)
                self.add("placement_role_unknown", said, field_path)

    def header_role(self) -> None:
        spec = self.spec
        if not (spec.header or "").strip():
            self.add(
                "header_missing",
                text("header_missing"),
                "spec.header",
            )
            return
        role = spec.role(spec.header)
        if role is None:
            self.add(
                "header_unknown_role",
                text("header_unknown_role", header=spec.header or ""),
                "spec.header",
            )
        elif role.replicas != 1:
            index = spec.tasks.index(role)
            self.add(
                "header_replicas",
                text("header_replicas", role=role.name, replicas=role.replicas),
                f"spec.tasks[{index}].replicas",
            )

    def paths(self) -> None:
        spec = self.spec
        mount_paths = [mount.path for role in spec.tasks for mount in role.mounts]
        candidates: list[tuple[str, str]] = []
        if spec.tensorboard_dir is not None:
            candidates.append(("spec.tensorboardDir", spec.tensorboard_dir))
        candidates.extend((child_path("spec.outputs", i), path) for i, path in enumerate(spec.outputs))
        for path_field, path in candidates:
            if not self.absolute_path(path, path_field):
                continue
            if not any(_under(path, mount) for mount in mount_paths):
                self.add(
                    "output_not_on_mount",
                    text("output_not_on_mount", field=path_field, path=path),
                    path_field,
                    warning=True,
                )

    def absolute_path(self, path: str, path_field: str) -> bool:
        if not path.startswith("/") or _CONTROL.search(path):
            self.add(
                "path_not_absolute",
                text("path_not_absolute", field=path_field),
                path_field,
            )
            return False
        if ".." in path.split("/"):
            self.add("path_not_absolute", text("path_not_absolute.dot_dot", field=path_field), path_field)
            return False
        return True

    # -- roles ---------------------------------------------------------------------------------

    def roles(self) -> None:
        if not self.spec.tasks:
            self.add("tasks_missing", text("tasks_missing"), "spec.tasks")
            return
        seen: set[str] = set()
        for index, role in enumerate(self.spec.tasks):
            path = child_path("spec.tasks", index)
            self.role_name(role, path, seen)
            self.role_fields(role, path)
            self.selector(role, path)
            self.image(role, path)
            self.mounts(role, path)
            self.env(role, path)

    def role_name(self, role: RoleSpec, path: str, seen: set[str]) -> None:
        name_path = f"{path}.name"
        if len(role.name) > MAX_ROLE_NAME_LENGTH or not _DNS_LABEL.fullmatch(role.name):
            self.add(
                "role_name_invalid",
                text("role_name_invalid", field=name_path, name=role.name, max=MAX_ROLE_NAME_LENGTH),
                name_path,
            )
        if role.name in seen:
            self.add(
                "role_name_duplicate",
                text("role_name_duplicate", field=name_path, name=role.name),
                name_path,
            )
        seen.add(role.name)

    def role_fields(self, role: RoleSpec, path: str) -> None:
        if role.cluster is None:
            self.cluster_choice(role, path)
        elif role.clusters or role.cluster_selector:
            field_path = f"{path}.clusters" if role.clusters else f"{path}.clusterSelector"
            self.add("cluster_choice_conflict", text("cluster_choice_conflict", field=field_path), field_path)
        elif not self.ctx.knows(role.cluster):
            self.add(
                "cluster_unknown",
                text("cluster_unknown", field=f"{path}.cluster", cluster=role.cluster),
                f"{path}.cluster",
            )
        elif not self.ctx.is_online(role.cluster):
            self.add(
                "cluster_offline",
                text("cluster_offline", field=f"{path}.cluster", cluster=role.cluster),
                f"{path}.cluster",
                warning=True,
            )
        if not 1 <= role.replicas <= MAX_REPLICAS:
            self.add(
                "replicas_invalid",
                text("replicas_invalid", field=f"{path}.replicas", max=MAX_REPLICAS),
                f"{path}.replicas",
            )
        if not 0 <= role.gpus_per_worker <= MAX_GPUS_PER_WORKER:
            self.add(
                "gpus_invalid",
                text("gpus_invalid", field=f"{path}.gpusPerWorker", max=MAX_GPUS_PER_WORKER),
                f"{path}.gpusPerWorker",
            )

    def cluster_choice(self, role: RoleSpec, path: str) -> None:
        """A role whose cluster the scheduler chooses (ADR 0026): the clusters it lists exist, its cluster
        selector is valid, and some cluster with nodes is one it may use and can mount its mounts — asked of the
        capacity model the placer decides on (``placement.role_clusters``)."""
        valid = True
        for index, name in enumerate(role.clusters):
            if not self.ctx.knows(name):
                field_path = child_path(f"{path}.clusters", index)
                self.add(
                    "cluster_unknown", text("cluster_unknown", field=field_path, cluster=name), field_path
                )
                valid = False
        valid = self.label_pairs(role.cluster_selector, f"{path}.clusterSelector") and valid
        if not valid:
            return
        chosen = role_clusters(self.ctx.capacity, role_request(role))
        if chosen:
            return
        allowed = self.ctx.capacity.clusters_matching(role.clusters, role.cluster_selector)
        field_path = f"{path}.clusterSelector" if role.cluster_selector else f"{path}.clusters"
        if not allowed:
            said = text("cluster_choice_empty", field=field_path, role=role.name)
            self.add("cluster_choice_empty", said, field_path)
        else:
            said = text("cluster_choice_mounts", role=role.name, clusters=", ".join(allowed[:10]))
            self.add("cluster_choice_mounts", said, f"{path}.mounts")

    def selector(self, role: RoleSpec, path: str) -> None:
        self.label_pairs(role.node_selector, f"{path}.nodeSelector")

    def label_pairs(self, pairs: Mapping[str, str], selector_path: str) -> bool:
        """Report every invalid key and value of a node or cluster selector; True when all are valid."""
        valid = True
        for key, value in pairs.items():
            key_path = child_path(selector_path, key)
            key_problem = selectors.label_key_problem(key)
            if key_problem:
                valid = False
                self.add(
                    "selector_key_invalid",
                    text("selector_key_invalid", field=key_path, key=key, problem=key_problem),
                    key_path,
                )
            value_problem = selectors.label_value_problem(value)
            if value_problem:
                valid = False
                self.add(
                    "selector_value_invalid",
                    text("selector_value_invalid", field=key_path, problem=value_problem),
                    key_path,
                )
        return valid

    def image(self, role: RoleSpec, path: str) -> None:
        problem = image_problem(role.image, f"{path}.image")
        if problem:
            self.add(problem[0], problem[1], f"{path}.image")

    def mounts(self, role: RoleSpec, path: str) -> None:
        names: set[str] = set()
        targets: set[str] = set()
        for index, mount in enumerate(role.mounts):
            mount_path = child_path(f"{path}.mounts", index)
            if not _DNS_LABEL.fullmatch(mount.name) or len(mount.name) > 63:
                self.add(
                    "mount_invalid",
                    text("mount_invalid.name", field=f"{mount_path}.name", name=mount.name),
                    f"{mount_path}.name",
                )
            elif mount.name in names:
                self.add(
                    "mount_invalid",
                    text("mount_invalid.name_duplicate", field=f"{mount_path}.name", name=mount.name),
                    f"{mount_path}.name",
                )
            names.add(mount.name)
            if self.absolute_path(mount.path, f"{mount_path}.path"):
                normalised = posixpath.normpath(mount.path)
                if normalised == "/":
                    self.add(
                        "mount_invalid",
                        text("mount_invalid.root", field=f"{mount_path}.path"),
                        f"{mount_path}.path",
                    )
                elif normalised in targets:
                    self.add(
                        "mount_invalid",
                        text("mount_invalid.path_duplicate", field=f"{mount_path}.path", path=normalised),
                        f"{mount_path}.path",
                    )
                targets.add(normalised)
            self.mount_source(mount_path, mount.type, mount.source, mount.secret_ref)
            if role.cluster is None:
                continue  # the scheduler chooses among the clusters that can mount it (cluster_choice)
            self.mount_type(f"{mount_path}.type", mount.type, role.cluster)
            if mount.type is MountType.HOST_PATH:
                self.host_path(f"{mount_path}.source", mount.source, role.cluster)

    def mount_type(self, type_path: str, kind: MountType, cluster_name: str) -> None:
        """The role's cluster's runtime must be able to mount ``kind`` (a local cluster's workers are
        processes: no PVC, no object storage), or the worker would fail only once placed."""
        runtime = self.ctx.runtimes.get(cluster_name)
        unmountable = self.ctx.unmountable.get(cluster_name, ())
        refusal = (
            None if runtime is None else mount_refusal(type_path, cluster_name, runtime, kind, unmountable)
        )
        if refusal is not None:
            self.add("mount_type_unsupported", refusal, type_path)

    def host_path(self, source_path: str, source: str, cluster_name: str) -> None:
        """A hostPath source must lie under the role's cluster's allow-list (default deny)."""
        allow = self.ctx.clusters.get(cluster_name)
        if allow is None or not source.startswith("/") or ".." in source.split("/"):
            return  # cluster_unknown / path_not_absolute already say what is wrong
        decision = source_decision(source, allow)
        if not decision.allowed:
            self.add(
                "hostpath_not_allowed",
                _hostpath_message(source_path, source, cluster_name, decision.rule),
                source_path,
            )

    def mount_source(self, mount_path: str, kind: MountType, source: str, secret_ref: str | None) -> None:
        source_path = f"{mount_path}.source"
        if kind is MountType.HOST_PATH:
            self.absolute_path(source, source_path)
        elif kind is MountType.PVC:
            if not _DNS_SUBDOMAIN.fullmatch(source) or len(source) > 253:
                self.add(
                    "mount_invalid",
                    text("mount_invalid.pvc", field=source_path),
                    source_path,
                )
        else:
            match = _OBJECT_URL.fullmatch(source)
            if match is None:
                self.add(
                    "mount_invalid",
                    text("mount_invalid.bucket", field=source_path),
                    source_path,
                )
            if not secret_ref:
                self.add(
                    "mount_invalid",
                    text("mount_invalid.secret_required", field=f"{mount_path}.secretRef"),
                    f"{mount_path}.secretRef",
                )
        if secret_ref is not None:
            ref_path = f"{mount_path}.secretRef"
            if kind is not MountType.OBJECT_STORAGE:
                self.add(
                    "mount_invalid",
                    text("mount_invalid.secret_unused", field=ref_path),
                    ref_path,
                )
            else:
                self.secret_ref(secret_ref, ref_path)

    def secret_ref(self, name: str, field_path: str) -> None:
        """A named secret the job may use: well formed, and the owner's or the job's project's (ADR 0025)."""
        if not is_secret_name(name):
            self.add("secret_name_invalid", text("secret_name_invalid", field=field_path), field_path)
        elif self.ctx.secrets is not None and name not in self.ctx.secrets:
            self.add("secret_unknown", text("secret_unknown", field=field_path, name=name), field_path)

    def env(self, role: RoleSpec, path: str) -> None:
        for name, value in role.env.items():
            env_path = child_path(f"{path}.env", name)
            if isinstance(value, SecretRef):
                self.secret_ref(value.secret, f"{env_path}.secret")
            if not _ENV_NAME.fullmatch(name):
                self.add(
                    "env_name_invalid",
                    text("env_name_invalid", field=env_path, name=name),
                    env_path,
                )
            elif name in RESERVED_ENV_NAMES or name.startswith(RESERVED_ENV_PREFIX):
                self.add(
                    "env_name_reserved",
                    text("env_name_reserved", field=env_path, name=name),
                    env_path,
                )
            elif name in RLINF_OVERWRITTEN_ENV:
                self.add(
                    "env_overridden",
                    text("env_overridden", field=env_path, name=name),
                    env_path,
                    warning=True,
                )

    # -- capacity ------------------------------------------------------------------------------

    def capacity(self) -> None:
        """The two-tier node checks, asked of the capacity model; roles whose own fields are
        already wrong are skipped."""
        model = self.ctx.capacity
        eligible: list[_RoleFit] = []
        for index, role in enumerate(self.spec.tasks):
            if (
                role.cluster is None  # the job as a whole: reasons.can_ever_fit, asked of the same placer
                or not self.ctx.knows(role.cluster)
                or not 1 <= role.replicas <= MAX_REPLICAS
                or not 0 <= role.gpus_per_worker <= MAX_GPUS_PER_WORKER
                or self.selector_is_invalid(role)
            ):
                continue
            selector, gpus = role.node_selector, role.gpus_per_worker
            fit = _RoleFit(
                index=index,
                role=role,
                cluster=role.cluster,
                ever=model.survey(role.cluster, selector, gpus, hypothetical=True),
                now=model.survey(role.cluster, selector, gpus),
            )
            if self.role_capacity(fit):
                eligible.append(fit)
        by_cluster: dict[str, list[_RoleFit]] = {}
        for fit in eligible:
            by_cluster.setdefault(fit.cluster, []).append(fit)
        for cluster_name, members in sorted(by_cluster.items()):
            if len(members) > 1 and self.shared_nodes(cluster_name, members, ever=True):
                continue
            now_members = [m for m in members if len(m.now.candidates) >= m.role.replicas]
            if len(now_members) > 1:
                self.shared_nodes(cluster_name, now_members, ever=False)

    def selector_is_invalid(self, role: RoleSpec) -> bool:
        return any(
            selectors.label_key_problem(key) or selectors.label_value_problem(value)
            for key, value in role.node_selector.items()
        )

    def role_capacity(self, fit: _RoleFit) -> bool:
        """Report this role alone; True when it can be placed at least some day."""
        role, ever, now = fit.role, fit.ever, fit.now
        path = child_path("spec.tasks", fit.index)
        cluster = fit.cluster
        free_now = len(now.candidates)  # none while the cluster is offline
        if ever.matching == 0:
            self.add(
                "selector_matches_too_few",
                text(
                    "selector_matches_too_few.none",
                    field=f"{path}.nodeSelector",
                    nodes=ever.in_cluster,
                    cluster=cluster,
                ),
                f"{path}.nodeSelector",
            )
            return False
        if ever.largest_gpus < role.gpus_per_worker:
            self.add(
                "gpus_exceed_node",
                text(
                    "gpus_exceed_node",
                    field=f"{path}.gpusPerWorker",
                    gpus=role.gpus_per_worker,
                    cluster=cluster,
                    largest=ever.largest_gpus,
                ),
                f"{path}.gpusPerWorker",
            )
            return False
        if ever.enough < role.replicas:
            self.add(
                "selector_matches_too_few",
                text(
                    "selector_matches_too_few.capable",
                    role=role.name,
                    replicas=role.replicas,
                    capable=ever.enough,
                    cluster=cluster,
                    gpus=role.gpus_per_worker,
                ),
                f"{path}.replicas",
            )
            return False
        if free_now < role.replicas:
            self.add(
                "selector_matches_too_few",
                text(
                    "selector_matches_too_few.now" if now.online else "selector_matches_too_few.now_offline",
                    role=role.name,
                    replicas=role.replicas,
                    free=free_now,
                    cluster=cluster,
                    in_cluster=now.in_cluster,
                    matching=now.matching,
                    ready=now.ready,
                    schedulable=now.schedulable,
                    enough=free_now,
                    gpus=role.gpus_per_worker,
                ),
                f"{path}.nodeSelector",
                warning=True,
            )
        return True

    def shared_nodes(
        self,
        cluster_name: str,
        members: Sequence[_RoleFit],
        *,
        ever: bool,
    ) -> bool:
        """Report roles of one cluster that cannot all get distinct nodes; True when reported."""
        demands = [
            Demand(m.role.replicas, tuple(sorted((m.ever if ever else m.now).candidates))) for m in members
        ]
        matching = match_workers(demands, exhaustive=True)
        if not matching.short:
            return False
        tight = matching.tight or matching.short
        names = [members[i].role.name for i in tight]
        needed = sum(members[i].role.replicas for i in tight)
        union = {name for i in tight for name in demands[i].candidates}
        roles_text = ", ".join(f'"{name}"' for name in names)
        if ever:
            self.add(
                "selector_matches_too_few",
                text(
                    "selector_matches_too_few.shared",
                    roles=roles_text,
                    cluster=cluster_name,
                    needed=needed,
                    nodes=len(union),
                ),
                "spec.tasks",
            )
        else:
            self.add(
                "selector_matches_too_few",
                text(
                    "selector_matches_too_few.shared_now",
                    roles=roles_text,
                    cluster=cluster_name,
                    needed=needed,
                    nodes=len(union),
                ),
                "spec.tasks",
                warning=True,
            )
        return True

    # -- RLinf ---------------------------------------------------------------------------------

    def rlinf(self) -> None:
        config = self.spec.rlinf_config
        if config is None:
            return
        if any(not 1 <= role.replicas <= MAX_REPLICAS for role in self.spec.tasks):
            return  # node ranks are meaningless until replicas are valid
        rank_gpus: list[int] = []
        for rank_range in rank_ranges(self.spec):
            rank_gpus.extend([rank_range.gpus_per_worker] * rank_range.count)
        for issue in check_rlinf_config(config, rank_gpus):
            self.add(
                issue.code,
                issue.message,
                issue.field,
                warning=issue.severity is Severity.WARNING,
            )

    # -- secrets -------------------------------------------------------------------------------

    def secrets(self) -> None:
        reported: set[int] = set()
        data = self.doc.model_dump(mode="json")
        for finding, scanned in _scan_tree(data, ""):
            self.found.add(scanned[finding.span[0] : finding.span[1]])
            line = None
            if self.source is not None:
                line = self.source.line_in_value(finding.field, finding.line)
            if line is not None:
                if line in reported:
                    continue
                reported.add(line)
            self.add_secret(finding, line, in_value=line is None)
        if self.source is None:
            return
        # The names the document gives its secret references (``secret: hf-token``, ``secretRef: s3``): text that
        # is one of them is a reference, not a value, when the name is a secret's name (a pasted token is not).
        references = {
            name for role in self.doc.spec.tasks for name in role.secret_names() if is_secret_name(name)
        }
        for finding in scan_text(self.source.text, ""):
            found_text = self.source.text[finding.span[0] : finding.span[1]]
            field_path = self.source.field_at_line(finding.line)
            if found_text.strip().strip("'\"") in references:
                continue  # the name after `secret:` / `secretRef:` (a one-line JSON document names no field)
            self.found.add(found_text)
            if finding.line in reported:
                continue
            reported.add(finding.line)
            located = SecretFinding(
                finding.kind, field_path, finding.line, finding.column, finding.wrapping, finding.span
            )
            self.add_secret(located, finding.line)

    def add_secret(self, finding: SecretFinding, line: int | None, *, in_value: bool = False) -> None:
        """``line`` is the document's line, or with ``in_value`` unknown (the finding's line within
        its string value is named instead)."""
        shown = finding.line if in_value else line
        if not finding.field:
            said = text("secret_detected.document", what=finding.what, line=shown or 0)
        elif in_value:
            said = text("secret_detected.in_value", what=finding.what, target=finding.field, line=shown or 0)
        else:
            said = text("secret_detected", what=finding.what, target=finding.field, line=shown or 0)
        self.add("secret_detected", said, finding.field, line=line)


def _scan_tree(value: Any, path: str) -> list[tuple[SecretFinding, str]]:
    """Scan every string of a decoded document; mapping entries are judged by key and value. Each finding
    comes with the string it was found in (its ``span`` points into it)."""
    findings: list[tuple[SecretFinding, str]] = []
    if isinstance(value, dict) and set(value) == {"secret"} and isinstance(value["secret"], str):
        # A reference to a named secret (``{secret: hf-token}``): its text is a name, judged by its content only
        # (a token pasted there is still found), never as the value of a key named "secret".
        name = value["secret"]
        return [(finding, name) for finding in scan_text(name, child_path(path, "secret"))]
    if isinstance(value, dict):
        for key, item in value.items():
            item_path = child_path(path, str(key))
            if isinstance(item, str):
                findings.extend((finding, item) for finding in scan_assignment(str(key), item, item_path))
            else:
                findings.extend(_scan_tree(item, item_path))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            item_path = child_path(path, index)
            if isinstance(item, str):
                findings.extend((finding, item) for finding in scan_text(item, item_path))
            else:
                findings.extend(_scan_tree(item, item_path))
    return findings


REDACTED = "[redacted]"
MIN_REDACTED_CHARS = 4
"""Shorter secrets (a 3-letter password) are not cut out of what responses show: replacing every ``abc`` in
field paths and messages would garble them, and no message quotes a whole value that short by chance."""


def redact(shown: str, secrets: Iterable[str]) -> str:
    """``shown`` with every secret in ``secrets`` replaced by :data:`REDACTED` (longest first, so a secret
    that contains another is cut whole)."""
    for secret in sorted(secrets, key=len, reverse=True):
        if len(secret) >= MIN_REDACTED_CHARS and secret in shown:
            shown = shown.replace(secret, REDACTED)
    return shown


def redact_issue(issue: SpecError, secrets: Iterable[str]) -> SpecError:
    """``issue`` quoting none of ``secrets``: its field path (a key may hold one) and its message — for a
    catalogue :class:`Text`, each parameter, so the sentence stays sayable in every language."""
    secrets = tuple(secrets)
    if not secrets:
        return issue
    message: Text | str
    if isinstance(issue.message, Text):
        params = {k: redact(v, secrets) if isinstance(v, str) else v for k, v in issue.message.params.items()}
        message = Text(issue.message.key, params)
    else:
        message = redact(issue.message, secrets)
    return replace(issue, message=message, field=redact(issue.field, secrets))


def _hostpath_message(source_path: str, source: str, cluster: str, rule: str) -> Text:
    return text("hostpath_not_allowed", field=source_path, source=source, cluster=cluster, rule=rule)


def _role_clusters(
    spec: JobSpec, placed: Mapping[str, Sequence[str]] | None
) -> list[tuple[int, RoleSpec, str]]:
    """(task index, role, cluster) for every cluster each role's workers go to: the role's own, or, for a role
    whose cluster the scheduler chose, those ``placed`` (role → clusters) names."""
    found: list[tuple[int, RoleSpec, str]] = []
    for index, role in enumerate(spec.tasks):
        clusters = [role.cluster] if role.cluster is not None else (placed or {}).get(role.name, ())
        found.extend((index, role, cluster) for cluster in clusters)
    return found


def hostpath_refusals(
    spec: JobSpec, policies: Mapping[str, Sequence[str]], placed: Mapping[str, Sequence[str]] | None = None
) -> list[tuple[str, str]]:
    """``(field, message)`` of every hostPath source that its role's cluster's policy (``policies``:
    cluster → allow-list; a cluster missing allows none) refuses now; ``placed`` gives the clusters the
    scheduler chose for the roles that name none. The placement loop asks again before placing a job
    accepted earlier: an admin may have narrowed the policy meanwhile."""
    refusals: list[tuple[str, str]] = []
    for index, role, cluster in _role_clusters(spec, placed):
        for mount_index, mount in enumerate(role.mounts):
            if mount.type is not MountType.HOST_PATH:
                continue
            decision = source_decision(mount.source, policies.get(cluster, ()))
            if not decision.allowed:
                where = f"{child_path(child_path('spec.tasks', index) + '.mounts', mount_index)}.source"
                refusals.append((where, _hostpath_message(where, mount.source, cluster, decision.rule)))
    return refusals


def mount_type_refusals(
    spec: JobSpec,
    runtimes: Mapping[str, str],
    placed: Mapping[str, Sequence[str]] | None = None,
    unmountable: Mapping[str, Sequence[str]] | None = None,
) -> list[tuple[str, str]]:
    """``(field, message)`` of every mount whose type its role's cluster's runtime (``runtimes``: cluster →
    runtime; a cluster missing is not judged) cannot mount; ``placed`` as for :func:`hostpath_refusals`.
    The placement loop asks again before placing a job accepted earlier: its cluster may have been known
    then only through its nodes. ``unmountable``: cluster → the mount types its agent is not set up for."""
    refusals: list[tuple[str, str]] = []
    for index, role, cluster in _role_clusters(spec, placed):
        runtime = runtimes.get(cluster)
        if runtime is None:
            continue
        for mount_index, mount in enumerate(role.mounts):
            where = f"{child_path(child_path('spec.tasks', index) + '.mounts', mount_index)}.type"
            refusal = mount_refusal(where, cluster, runtime, mount.type, (unmountable or {}).get(cluster, ()))
            if refusal is not None:
                refusals.append((where, refusal))
    return refusals


def _under(path: str, mount: str) -> bool:
    path, mount = posixpath.normpath(path), posixpath.normpath(mount)
    return path == mount or path.startswith(mount.rstrip("/") + "/")


def validate_job(doc: JobDocument, ctx: ValidationContext) -> ValidationReport:
    """Every error and warning for ``doc`` in ``ctx``; see the module docstring for the rules."""
    validator = _Validator(doc, ctx)
    validator.header_fields()
    validator.roles()
    validator.header_role()
    validator.paths()
    validator.capacity()
    validator.rlinf()
    validator.secrets()
    secrets = frozenset(validator.found)
    issues = [redact_issue(issue, secrets) for issue in validator.issues]
    errors = tuple(i for i in issues if i.severity is Severity.ERROR)
    warnings = tuple(i for i in issues if i.severity is Severity.WARNING)
    return ValidationReport(errors, warnings, secrets)
