"""The document's own fields: ``apiVersion``, ``kind``, ``metadata`` and the job-wide fields of ``spec``
(template, priority, run script, SSH keys, network domain, the Header role)."""

from __future__ import annotations

from rlark_contracts.messages import text

from rlark_scheduler.domain.document.check import CONTROL, Check
from rlark_scheduler.domain.document.fields import child_path
from rlark_scheduler.domain.document.model import API_VERSION, KIND, JobType
from rlark_scheduler.domain.templates import TEMPLATES

MAX_NAME_LENGTH = 128
PRIORITY_RANGE = (-100, 100)


def check_identity(check: Check) -> None:
    """``apiVersion``, ``kind``, ``metadata.name``, ``spec.template`` and ``spec.priority``."""
    doc, spec = check.doc, check.spec
    if doc.api_version != API_VERSION:
        check.add(
            "api_version_unsupported",
            text("api_version_unsupported", expected=API_VERSION),
            "apiVersion",
        )
    if doc.kind != KIND:
        check.add("kind_unsupported", text("kind_unsupported", expected=KIND), "kind")
    name = doc.metadata.name.strip()
    if not 1 <= len(name) <= MAX_NAME_LENGTH:
        check.add(
            "name_length",
            text("name_length", max=MAX_NAME_LENGTH, length=len(name)),
            "metadata.name",
        )
    elif CONTROL.search(name):
        check.add(
            "name_invalid",
            text("name_invalid"),
            "metadata.name",
        )
    if spec.type is JobType.TEMPLATE:
        if not spec.template:
            check.add(
                "template_missing",
                text("template_missing"),
                "spec.template",
            )
        elif spec.template not in TEMPLATES:
            check.add(
                "template_unknown",
                text("template_unknown", template=spec.template, templates=", ".join(TEMPLATES)),
                "spec.template",
            )
    low, high = PRIORITY_RANGE
    if not low <= spec.priority <= high:
        check.add(
            "priority_out_of_range",
            text("priority_out_of_range", min=low, max=high),
            "spec.priority",
        )


def check_run_script(check: Check) -> None:
    """``spec.runScript``: the Header runs it once every Ray node joined, so there must be one."""
    spec = check.spec
    if not (spec.run_script or "").strip():
        check.add(
            "run_script_missing",
            text("run_script_missing"),
            "spec.runScript",
        )


def check_ssh_keys(check: Check) -> None:
    """Every key named is one of the submitting user's."""
    spec = check.spec
    for key_index, key in enumerate(spec.ssh_keys):
        if key not in check.ctx.ssh_key_names:
            check.add(
                "ssh_key_unknown",
                text("ssh_key_unknown", index=key_index, name=key),
                child_path("spec.sshKeys", key_index),
            )


def check_network_domain(check: Check) -> None:
    """``spec.networkDomain``: a known domain, or one is needed when the roles name several clusters."""
    spec = check.spec
    # Only clusters that exist: a misspelt one is cluster_unknown, not a second cluster needing a domain.
    # A role whose cluster the scheduler chooses needs no domain here: it spans only through one (ADR 0026).
    clusters = {
        role.cluster for role in spec.tasks if role.cluster is not None and check.ctx.knows(role.cluster)
    }
    if spec.joined_domain is not None:
        if spec.joined_domain not in check.ctx.network_domains:
            check.add(
                "network_domain_unknown",
                text("network_domain_unknown", name=spec.network_domain or ""),
                "spec.networkDomain",
            )
    elif len(clusters) > 1:
        check.add(
            "network_domain_missing",
            text("network_domain_missing", clusters=len(clusters)),
            "spec.networkDomain",
        )


def check_header_role(check: Check) -> None:
    """``spec.header``: names a role of one worker."""
    spec = check.spec
    if not (spec.header or "").strip():
        check.add(
            "header_missing",
            text("header_missing"),
            "spec.header",
        )
        return
    role = spec.role(spec.header)
    if role is None:
        check.add(
            "header_unknown_role",
            text("header_unknown_role", header=spec.header or ""),
            "spec.header",
        )
    elif role.replicas != 1:
        index = spec.tasks.index(role)
        check.add(
            "header_replicas",
            text("header_replicas", role=role.name, replicas=role.replicas),
            f"spec.tasks[{index}].replicas",
        )
