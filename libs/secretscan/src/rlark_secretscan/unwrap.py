"""Views of a text in which a wrapped secret shows its shape: decoded runs and joined lines.

Role: the scanner's rules match a secret as it is usually written. People (and tools) also wrap
one — ``base64`` of a token in a Kubernetes-style value, ``xxd -p`` hex, ``%``-escapes from a URL,
a token broken over two lines of a script. This module finds such wrapped runs and gives back
their plain text, so :mod:`rlark_secretscan.scanner` can scan it and report the secret at the
position of the run.

Contract:
- :func:`encoded_runs` yields every run of ``text`` that decodes (standard or URL-safe base64, hex,
  URL ``%``-escapes) to *printable text* different from the run; decoded binary (digests, key blobs,
  random ids) is never yielded, which is what keeps hashes and UUIDs from being scanned as text.
- Bounded: runs shorter than :data:`MIN_ENCODED_CHARS` or longer than :data:`MAX_RUN_CHARS` are
  skipped, and a :class:`Budget` caps the characters decoded by one scan (all depths together);
  the scanner caps the nesting depth (:data:`MAX_DEPTH`).
- :func:`join_split_lines` removes the line breaks that split a value: shell continuations
  (``\\`` at the end of a line) and a break between a run of token characters at the end of one
  line and a run at the start of the next (indentation dropped). It returns the joined text,
  where each join happened, and a map from joined offsets back to the original text.

Pure: no I/O, deterministic.
"""

from __future__ import annotations

import base64
import binascii
import bisect
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Final
from urllib.parse import unquote

#: Shortest run tried as base64 or hex (12 bytes of base64, 8 of hex): shorter runs are words.
MIN_ENCODED_CHARS: Final = 16
#: Longest single run decoded; a wrapped credential file is far below this.
MAX_RUN_CHARS: Final = 64 * 1024
#: Characters one scan may decode in total, at every depth together.
MAX_DECODED_CHARS: Final = 1024 * 1024
#: Wrappings undone inside each other at most (``base64(hex(token))`` is depth 2).
MAX_DEPTH: Final = 3
#: A line's trailing (and the next line's leading) token run must be this long to be joined.
MIN_JOIN_RUN: Final = 8

_BASE64_RUN = re.compile(r"(?<![A-Za-z0-9+/_-])[A-Za-z0-9+/_-]{16,}={0,2}")
_HEX = re.compile(r"(?:[0-9A-Fa-f]{2})+")
_WORD = re.compile(r"[^\s\"'`<>]+")  # a URL-escaped run is one of these holding a %XX escape
_URL_ESCAPE = re.compile(r"%[0-9A-Fa-f]{2}")
_TOKEN_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/_-")
# The next line's leading run must end the fragment (space, quote, closing punctuation or the line's
# end): ``SECRET_KEY=...`` starts an assignment, not the rest of a value.
_TOKEN_HEAD = re.compile(rf"[ \t]*([A-Za-z0-9+/_-]{{{MIN_JOIN_RUN},}}={{0,2}})(?=[\s\"',;)\]}}]|$)")
_CONTINUATION = re.compile(r"\\\r?\n[ \t]*")


@dataclass(slots=True)
class Budget:
    """Characters left to decode in one scan; shared by every depth of it."""

    left: int = MAX_DECODED_CHARS

    def take(self, n: int) -> bool:
        if n > self.left:
            return False
        self.left -= n
        return True


@dataclass(frozen=True, slots=True)
class EncodedRun:
    """``text[start:end]`` decodes (by ``encoding``) to the printable ``decoded``."""

    start: int
    end: int
    encoding: str
    decoded: str


def _is_printable(text: str) -> bool:
    return bool(text.strip()) and text.replace("\n", "").replace("\r", "").replace("\t", "").isprintable()


def _printable_text(data: bytes) -> str | None:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return None
    return text if _is_printable(text) else None


def _base64_decodings(run: str) -> Iterator[tuple[str, bytes]]:
    body = run.rstrip("=")
    if len(body) % 4 == 1:
        return
    padded = body + "=" * (-len(body) % 4)
    url_safe = any(c in run for c in "-_")
    if url_safe and any(c in run for c in "+/"):
        return  # two alphabets mixed: not base64 of anything
    try:
        if url_safe:
            yield "base64url", base64.urlsafe_b64decode(padded)
        else:  # also URL-safe base64 that happens to hold neither "-" nor "_": the same bytes
            yield "base64", base64.b64decode(padded, validate=True)
    except binascii.Error:
        return


def encoded_runs(text: str, budget: Budget) -> Iterator[EncodedRun]:
    """Every run of ``text`` that decodes to printable text; see the module docstring."""
    for match in _BASE64_RUN.finditer(text):
        run = match.group()
        if len(run) > MAX_RUN_CHARS:
            continue
        candidates: list[tuple[str, bytes]] = []
        if _HEX.fullmatch(run):
            candidates.append(("hex", bytes.fromhex(run)))
        candidates.extend(_base64_decodings(run))
        for encoding, data in candidates:
            decoded = _printable_text(data)
            if decoded is not None and budget.take(len(decoded)):
                yield EncodedRun(match.start(), match.end(), encoding, decoded)
    for match in _WORD.finditer(text):
        run, start = match.group(), match.start()
        if "%" not in run or not _URL_ESCAPE.search(run):
            continue
        # NAME=%68%66... : the run is the escaped value; a name written plainly is judged as written.
        cut = run.rfind("=", 0, run.index("%")) + 1
        run, start = run[cut:], start + cut
        if len(run) > MAX_RUN_CHARS:
            continue
        try:
            decoded = unquote(run, errors="strict")
        except UnicodeDecodeError:
            continue
        if decoded != run and _is_printable(decoded) and budget.take(len(decoded)):
            yield EncodedRun(start, match.end(), "url-encoded", decoded)


@dataclass(slots=True)
class JoinedText:
    """``text`` with split values joined; ``joins`` are offsets in ``text`` where a break was removed."""

    text: str
    joins: list[int] = field(default_factory=list)
    _segments: list[tuple[int, int]] = field(default_factory=list)  # (joined offset, original offset)

    def original(self, offset: int) -> int:
        """The offset in the original text of the character at ``offset`` of the joined text."""
        at = bisect.bisect_right(self._segments, (offset, 1 << 62)) - 1
        joined_start, original_start = self._segments[at]
        return original_start + offset - joined_start

    def spans_join(self, start: int, end: int) -> bool:
        """Whether ``text[start:end]`` contains a place where a break was removed."""
        at = bisect.bisect_right(self.joins, start)
        return at < len(self.joins) and self.joins[at] < end


def _breaks_to_remove(text: str) -> list[tuple[int, int]]:
    """(start, end) of every line break (with the next line's indentation) that splits a value."""
    removed = [(m.start(), m.end()) for m in _CONTINUATION.finditer(text)]
    continued = {start for start, _ in removed}
    position = 0
    while (newline := text.find("\n", position)) >= 0:
        position = newline + 1
        line_end = newline - 1 if newline > 0 and text[newline - 1] == "\r" else newline
        if line_end - 1 in continued:
            continue
        line_start = text.rfind("\n", 0, line_end) + 1
        tail = text[max(line_start, line_end - MIN_JOIN_RUN) : line_end]
        if len(tail) < MIN_JOIN_RUN or not _TOKEN_CHARS.issuperset(tail):
            continue
        head = _TOKEN_HEAD.match(text, position)
        if head is None:
            continue
        removed.append((line_end, head.start(1)))
    return sorted(removed)


def join_split_lines(text: str) -> JoinedText | None:
    """``text`` with the breaks that split a value removed, or None when there is none."""
    removed = _breaks_to_remove(text)
    if not removed:
        return None
    parts: list[str] = []
    joined = JoinedText("")
    original = 0
    length = 0
    for start, end in removed:
        if start < original:
            continue
        joined._segments.append((length, original))
        parts.append(text[original:start])
        length += start - original
        joined.joins.append(length)
        original = end
    joined._segments.append((length, original))
    parts.append(text[original:])
    joined.text = "".join(parts)
    return joined
