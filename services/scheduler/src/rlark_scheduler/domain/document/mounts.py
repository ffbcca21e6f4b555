"""Paths and mounts: ``spec.tasks[*].mounts`` (names, targets, sources: host paths under their cluster's
allow-list — ADR 0006 —, PVC names, object-storage URLs with their ``secretRef``; types the cluster's
runtime can mount), and ``spec.tensorboardDir`` and ``spec.outputs``, which should lie on a mount. The
placement loop asks :func:`hostpath_refusals` and :func:`mount_type_refusals` again before placing a job
accepted earlier."""

from __future__ import annotations

import posixpath
import re
from collections.abc import Mapping, Sequence

from rlark_contracts.hostpaths import source_decision
from rlark_contracts.messages import Text, text
from rlark_contracts.runtimes import mount_refusal

from rlark_scheduler.domain.document.check import CONTROL, DNS_LABEL, Check, under
from rlark_scheduler.domain.document.env import check_secret_ref
from rlark_scheduler.domain.document.fields import child_path
from rlark_scheduler.domain.document.model import JobSpec, MountType, RoleSpec

_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_OBJECT_URL = re.compile(r"[a-z][a-z0-9+.-]*://(?P<bucket>[^/\s@]+)(?P<prefix>/\S*)?")


def check_output_paths(check: Check) -> None:
    """``spec.tensorboardDir`` and ``spec.outputs``: absolute paths, warned when no mount holds them."""
    spec = check.spec
    mount_paths = [mount.path for role in spec.tasks for mount in role.mounts]
    candidates: list[tuple[str, str]] = []
    if spec.tensorboard_dir is not None:
        candidates.append(("spec.tensorboardDir", spec.tensorboard_dir))
    candidates.extend((child_path("spec.outputs", i), path) for i, path in enumerate(spec.outputs))
    for path_field, path in candidates:
        if not absolute_path(check, path, path_field):
            continue
        if not any(under(path, mount) for mount in mount_paths):
            check.add(
                "output_not_on_mount",
                text("output_not_on_mount", field=path_field, path=path),
                path_field,
                warning=True,
            )


def absolute_path(check: Check, path: str, path_field: str) -> bool:
    """Report ``path`` (at ``path_field``) unless it is absolute, printable and without ``..``; True when
    it is."""
    if not path.startswith("/") or CONTROL.search(path):
        check.add(
            "path_not_absolute",
            text("path_not_absolute", field=path_field),
            path_field,
        )
        return False
    if ".." in path.split("/"):
        check.add("path_not_absolute", text("path_not_absolute.dot_dot", field=path_field), path_field)
        return False
    return True


def check_mounts(check: Check, role: RoleSpec, path: str) -> None:
    """Each mount of ``role`` (at ``path``): name, target, source, and what its cluster can mount and
    allows."""
    names: set[str] = set()
    targets: set[str] = set()
    for index, mount in enumerate(role.mounts):
        mount_path = child_path(f"{path}.mounts", index)
        if not DNS_LABEL.fullmatch(mount.name) or len(mount.name) > 63:
            check.add(
                "mount_invalid",
                text("mount_invalid.name", field=f"{mount_path}.name", name=mount.name),
                f"{mount_path}.name",
            )
        elif mount.name in names:
            check.add(
                "mount_invalid",
                text("mount_invalid.name_duplicate", field=f"{mount_path}.name", name=mount.name),
                f"{mount_path}.name",
            )
        names.add(mount.name)
        if absolute_path(check, mount.path, f"{mount_path}.path"):
            normalised = posixpath.normpath(mount.path)
            if normalised == "/":
                check.add(
                    "mount_invalid",
                    text("mount_invalid.root", field=f"{mount_path}.path"),
                    f"{mount_path}.path",
                )
            elif normalised in targets:
                check.add(
                    "mount_invalid",
                    text("mount_invalid.path_duplicate", field=f"{mount_path}.path", path=normalised),
                    f"{mount_path}.path",
                )
            targets.add(normalised)
        _mount_source(check, mount_path, mount.type, mount.source, mount.secret_ref)
        if role.cluster is None:
            continue  # the scheduler chooses among the clusters that can mount it (cluster_choice)
        _mount_type(check, f"{mount_path}.type", mount.type, role.cluster)
        if mount.type is MountType.HOST_PATH:
            _host_path(check, f"{mount_path}.source", mount.source, role.cluster)


def _mount_type(check: Check, type_path: str, kind: MountType, cluster_name: str) -> None:
    """The role's cluster's runtime must be able to mount ``kind`` (a local cluster's workers are
    processes: no PVC, no object storage), or the worker would fail only once placed."""
    runtime = check.ctx.runtimes.get(cluster_name)
    unmountable = check.ctx.unmountable.get(cluster_name, ())
    refusal = None if runtime is None else mount_refusal(type_path, cluster_name, runtime, kind, unmountable)
    if refusal is not None:
        check.add("mount_type_unsupported", refusal, type_path)


def _host_path(check: Check, source_path: str, source: str, cluster_name: str) -> None:
    """A hostPath source must lie under the role's cluster's allow-list (default deny)."""
    allow = check.ctx.clusters.get(cluster_name)
    if allow is None or not source.startswith("/") or ".." in source.split("/"):
        return  # cluster_unknown / path_not_absolute already say what is wrong
    decision = source_decision(source, allow)
    if not decision.allowed:
        check.add(
            "hostpath_not_allowed",
            _hostpath_message(source_path, source, cluster_name, decision.rule),
            source_path,
        )


def _mount_source(
    check: Check, mount_path: str, kind: MountType, source: str, secret_ref: str | None
) -> None:
    source_path = f"{mount_path}.source"
    if kind is MountType.HOST_PATH:
        absolute_path(check, source, source_path)
    elif kind is MountType.PVC:
        if not _DNS_SUBDOMAIN.fullmatch(source) or len(source) > 253:
            check.add(
                "mount_invalid",
                text("mount_invalid.pvc", field=source_path),
                source_path,
            )
    else:
        match = _OBJECT_URL.fullmatch(source)
        if match is None:
            check.add(
                "mount_invalid",
                text("mount_invalid.bucket", field=source_path),
                source_path,
            )
        if not secret_ref:
            check.add(
                "mount_invalid",
                text("mount_invalid.secret_required", field=f"{mount_path}.secretRef"),
                f"{mount_path}.secretRef",
            )
    if secret_ref is not None:
        ref_path = f"{mount_path}.secretRef"
        if kind is not MountType.OBJECT_STORAGE:
            check.add(
                "mount_invalid",
                text("mount_invalid.secret_unused", field=ref_path),
                ref_path,
            )
        else:
            check_secret_ref(check, secret_ref, ref_path)


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
