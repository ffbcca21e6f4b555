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
  caller (``facts.fill_network_domain_default``) beforehand.

The rules live with the section of the document they judge, each a function of one :class:`~.check.Check`
run, called here in the order their problems are reported:
- :mod:`.metadata`: ``apiVersion``, ``kind``, ``metadata.name``, template, priority, run script, SSH keys,
  network domain, the Header role;
- :mod:`.lifecycle`: restart policy, progress deadline, termination grace, resume;
- :mod:`.roles`: ``spec.tasks`` (names, clusters, counts, selectors, images) and ``spec.placement``;
  :mod:`.mounts` (mounts, output paths) and :mod:`.env` (variables, named secrets) for each role;
- :mod:`.feasibility`: whether each role's workers fit the clusters' nodes (ever, now);
- :mod:`.rlinf`: an inline RLinf config against the job's workers;
- :mod:`.redaction`: secrets written into the document, and their redaction from every issue.

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
resume_dir_not_on_mount (warning), placement_role_unknown, cluster_choice_conflict, cluster_choice_empty,
cluster_choice_mounts, secret_name_invalid, secret_unknown, and the ``rlinf_*`` codes of :mod:`.rlinf`.
"""

from __future__ import annotations

from collections.abc import Callable

from rlark_scheduler.domain.document.check import Check
from rlark_scheduler.domain.document.context import ValidationContext, ValidationReport
from rlark_scheduler.domain.document.errors import Severity, SpecError
from rlark_scheduler.domain.document.facts import rank_ranges
from rlark_scheduler.domain.document.feasibility import check_capacity
from rlark_scheduler.domain.document.images import ImageRef, image_problem, parse_image
from rlark_scheduler.domain.document.lifecycle import check_restart_policy, check_resume, check_run_limits
from rlark_scheduler.domain.document.metadata import (
    check_header_role,
    check_identity,
    check_network_domain,
    check_run_script,
    check_ssh_keys,
)
from rlark_scheduler.domain.document.model import MAX_REPLICAS, JobDocument
from rlark_scheduler.domain.document.mounts import check_output_paths, hostpath_refusals, mount_type_refusals
from rlark_scheduler.domain.document.redaction import check_secrets, redact_issue
from rlark_scheduler.domain.document.rlinf import check_rlinf_config
from rlark_scheduler.domain.document.roles import check_placement_policy, check_roles, selector_matches

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


def check_rlinf(check: Check) -> None:
    """``spec.rlinfConfig`` against the job's workers in rank order (:mod:`.rlinf`)."""
    config = check.spec.rlinf_config
    if config is None:
        return
    if any(not 1 <= role.replicas <= MAX_REPLICAS for role in check.spec.tasks):
        return  # node ranks are meaningless until replicas are valid
    rank_gpus: list[int] = []
    for rank_range in rank_ranges(check.spec):
        rank_gpus.extend([rank_range.gpus_per_worker] * rank_range.count)
    for issue in check_rlinf_config(config, rank_gpus):
        check.add(
            issue.code,
            issue.message,
            issue.field,
            warning=issue.severity is Severity.WARNING,
        )


SECTIONS: tuple[Callable[[Check], None], ...] = (
    check_identity,
    check_restart_policy,
    check_run_limits,
    check_resume,
    check_placement_policy,
    check_run_script,
    check_ssh_keys,
    check_network_domain,
    check_roles,
    check_header_role,
    check_output_paths,
    check_capacity,
    check_rlinf,
    check_secrets,
)
"""The section checks in the order their problems are reported (the order is part of the contract: the API's
error is the first one)."""


def validate_job(doc: JobDocument, ctx: ValidationContext) -> ValidationReport:
    """Every error and warning for ``doc`` in ``ctx``; see the module docstring for the rules."""
    check = Check(doc, ctx)
    for section in SECTIONS:
        section(check)
    secrets = frozenset(check.found)
    issues = [redact_issue(issue, secrets) for issue in check.issues]
    errors = tuple(i for i in issues if i.severity is Severity.ERROR)
    warnings = tuple(i for i in issues if i.severity is Severity.WARNING)
    return ValidationReport(errors, warnings, secrets)
