"""Secrets written into a document: every string is scanned (``libs/secretscan``: plain,
base64/hex/URL-encoded, split across lines), in the decoded data and in the submitted text, and a finding
is a ``secret_detected`` error naming its field and line, never its text. Whatever a response shows from
the document then goes through :func:`redact`."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from typing import Any

from rlark_contracts.messages import Text, text
from rlark_contracts.secrets import is_secret_name
from rlark_secretscan import SecretFinding, scan_assignment, scan_text

from rlark_scheduler.domain.document.check import Check
from rlark_scheduler.domain.document.errors import SpecError
from rlark_scheduler.domain.document.fields import child_path


def check_secrets(check: Check) -> None:
    """Every secret written into the document, in its decoded strings and then in its text, once per line."""
    reported: set[int] = set()
    data = check.doc.model_dump(mode="json")
    for finding, scanned in _scan_tree(data, ""):
        check.found.add(scanned[finding.span[0] : finding.span[1]])
        line = None
        if check.source is not None:
            line = check.source.line_in_value(finding.field, finding.line)
        if line is not None:
            if line in reported:
                continue
            reported.add(line)
        _add_secret(check, finding, line, in_value=line is None)
    if check.source is None:
        return
    # The names the document gives its secret references (``secret: hf-token``, ``secretRef: s3``): text that
    # is one of them is a reference, not a value, when the name is a secret's name (a pasted token is not).
    references = {
        name for role in check.doc.spec.tasks for name in role.secret_names() if is_secret_name(name)
    }
    for finding in scan_text(check.source.text, ""):
        found_text = check.source.text[finding.span[0] : finding.span[1]]
        field_path = check.source.field_at_line(finding.line)
        if found_text.strip().strip("'\"") in references:
            continue  # the name after `secret:` / `secretRef:` (a one-line JSON document names no field)
        check.found.add(found_text)
        if finding.line in reported:
            continue
        reported.add(finding.line)
        located = SecretFinding(
            finding.kind, field_path, finding.line, finding.column, finding.wrapping, finding.span
        )
        _add_secret(check, located, finding.line)


def _add_secret(check: Check, finding: SecretFinding, line: int | None, *, in_value: bool = False) -> None:
    """``line`` is the document's line, or with ``in_value`` unknown (the finding's line within
    its string value is named instead)."""
    shown = finding.line if in_value else line
    if not finding.field:
        said = text("secret_detected.document", what=finding.what, line=shown or 0)
    elif in_value:
        said = text("secret_detected.in_value", what=finding.what, target=finding.field, line=shown or 0)
    else:
        said = text("secret_detected", what=finding.what, target=finding.field, line=shown or 0)
    check.add("secret_detected", said, finding.field, line=line)


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
