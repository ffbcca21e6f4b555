"""Reading a job document's text: YAML or JSON into plain data, with where each field sits (:mod:`.source`).

Reading is strict where a typo would silently change meaning: duplicate keys, YAML anchors/aliases (a
"billion laughs" document would expand exponentially), YAML tags (``!!python/...``: only PyYAML's safe loader
runs, and a job is plain data), nesting deeper than :data:`MAX_NESTING_DEPTH` (refused before it is built)
and more than one YAML document are refused (unknown keys are the model's to refuse, :mod:`.parsing`).
Booleans are YAML 1.2's ``true``/``false`` only, so ``on``, ``off``, ``yes`` and ``no`` are the words written
(``restartPolicy: {on: [...]}`` works as documented).
"""

from __future__ import annotations

import json
import re
from typing import Any

import yaml
from rlark_contracts import messages

from rlark_scheduler.domain.document.errors import SpecError, SpecParseError
from rlark_scheduler.domain.document.fields import child_path
from rlark_scheduler.domain.document.source import SourceInfo, SourceSpan

MAX_DOCUMENT_CHARS = 256_000
"""Documents longer than this are refused before parsing: real jobs, scripts and an inline RLinf
config included, are a few tens of kilobytes, and the YAML reader is pure Python."""
MAX_NESTING_DEPTH = 64
"""Deepest nesting of mappings and lists (brackets or indentation) a document may have: a job is five levels
deep and an inline RLinf config a few more; deeper text is refused before it is read (``document_too_deep``)."""


def load_text(text: str) -> tuple[Any, SourceInfo]:
    """The data of ``text`` (read as JSON when it is plain JSON, else as YAML) and where each field sits in it;
    raises :class:`SpecParseError` with every problem found."""
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
