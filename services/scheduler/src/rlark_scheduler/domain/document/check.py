"""The state one validation run shares between the section checks, and the small rules several of them use."""

from __future__ import annotations

import posixpath
import re

from rlark_contracts.messages import Text

from rlark_scheduler.domain.document.context import ValidationContext
from rlark_scheduler.domain.document.errors import Severity, SpecError
from rlark_scheduler.domain.document.model import JobDocument
from rlark_scheduler.domain.document.source import SourceInfo

DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def under(path: str, mount: str) -> bool:
    """Whether ``path`` is ``mount`` or lies below it."""
    path, mount = posixpath.normpath(path), posixpath.normpath(mount)
    return path == mount or path.startswith(mount.rstrip("/") + "/")


class Check:
    """One validation run: the document, what it is judged against, and the issues found so far (in the order
    the section checks report them). Each section check is a function of it."""

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
