"""The problems found in a job document: :class:`SpecError` (one problem, an error or a warning) and
:class:`SpecParseError` (the document could not be read at all: every why)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum

from rlark_contracts.messages import Text


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
