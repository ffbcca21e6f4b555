"""Where each field of a document sits in the text it was read from.

The reader (:mod:`.reader`) records a :class:`SourceSpan` for every field path while it reads YAML or JSON
text; :class:`SourceInfo` answers the line of a field (a parse error's, a validation issue's) and the field
at a line (a secret found in the raw text).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from rlark_scheduler.domain.document.fields import parent_path


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
