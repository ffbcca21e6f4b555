"""Parsing a job document: YAML or JSON text, or an already decoded mapping, into a :class:`JobDocument`.

Field paths in errors look like ``spec.tasks[1].image``; keys that are not identifiers are quoted:
``spec.tasks[0].nodeSelector["rlark.io/gpu-model"]`` (see :func:`child_path`).

Parse error codes (raised together in one :class:`SpecParseError`): ``yaml_syntax`` (with line and
column), ``duplicate_key``, ``yaml_alias_refused``, ``yaml_key_invalid``, ``yaml_tag_refused``,
``yaml_value_invalid`` (a value YAML cannot build, such as 2024-13-45), ``document_empty``,
``document_not_mapping``, ``document_too_large``, ``document_too_deep``, ``encoding_invalid``,
``field_required``, ``field_unknown``, ``field_invalid`` (a key that is not a string is named as written:
``spec.restartPolicy.true``, ``env["1"]``).
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from types import UnionType
from typing import Any, Union, get_args, get_origin

from pydantic import BaseModel, ValidationError
from rlark_contracts import messages

from rlark_scheduler.domain.document.errors import SpecError, SpecParseError
from rlark_scheduler.domain.document.fields import child_path
from rlark_scheduler.domain.document.model import JobDocument
from rlark_scheduler.domain.document.reader import load_text
from rlark_scheduler.domain.document.source import SourceInfo


def parse_job_document(source: str | bytes | Mapping[str, Any]) -> JobDocument:
    """Read a job document from YAML or JSON text, or from an already decoded mapping.

    Raises :class:`SpecParseError` listing every problem: syntax errors with line and column,
    unknown or duplicate keys, missing required fields, wrong types.
    """
    info: SourceInfo | None = None
    if isinstance(source, bytes):
        try:
            source = source.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise SpecParseError(
                [SpecError("encoding_invalid", messages.text("encoding_invalid"), "")]
            ) from exc
    if isinstance(source, str):
        data, info = load_text(source)
    else:
        data = dict(source)
    if not isinstance(data, dict):
        raise SpecParseError(
            [SpecError("document_not_mapping", messages.text("document_not_mapping"), "", 1)]
        )
    try:
        doc = JobDocument.model_validate(data)
    except ValidationError as exc:
        raise SpecParseError(_pydantic_errors(exc, info, data)) from None
    return doc.with_source(info)


def _error_path(loc: tuple[int | str, ...], data: Any) -> str:
    """The field path of a pydantic error location, read along the validated input.

    Pydantic writes a mapping's key as it coerced it (``True`` as 1), which :func:`child_path` alone would
    render as a list index (``restartPolicy[1]``); walking the input tells a key from an index, and a key
    that is not a string is named as YAML spells it (``restartPolicy.true``, ``env["1"]``), as the
    source spans name it."""
    path = ""
    node: Any = data
    for part in loc:
        if part == "[key]":
            continue
        if isinstance(node, Mapping):
            key = next((k for k in node if k == part), part)
            path = child_path(path, key if isinstance(key, str) else _key_text(key))
            node = node.get(key)
        elif isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node):
            path = child_path(path, part)
            node = node[part]
        else:
            path = child_path(path, part)
            node = None
    return path


def _key_text(key: object) -> str:
    """How YAML writes a scalar key that is not a string."""
    if isinstance(key, bool):
        return "true" if key else "false"
    return "null" if key is None else str(key)


def _pydantic_errors(exc: ValidationError, info: SourceInfo | None, data: Any) -> list[SpecError]:
    errors: list[SpecError] = []
    for error in exc.errors(include_url=False, include_input=False):
        path = _error_path(error["loc"], data)
        kind = error["type"]
        message: str
        if kind == "missing":
            code, message = "field_required", messages.text("field_required", field=path)
        elif kind == "invalid_key" or error["loc"][-1:] == ("[key]",):
            code, message = "field_invalid", messages.text("field_key_invalid", field=path)
        elif kind == "extra_forbidden":
            code = "field_unknown"
            near = _known_near(error["loc"])
            message = (
                messages.text("field_unknown.near", field=path, near=near)
                if near
                else messages.text("field_unknown", field=path)
            )
        else:
            code, message = (
                "field_invalid",
                messages.validation_text(path, error) or f"{path}: {error['msg']}",
            )
        errors.append(SpecError(code, message, path, info.line_of(path) if info else None))
    return errors


def _known_near(loc: tuple[int | str, ...]) -> str | None:
    """The field of the same object whose name is closest to the unknown last part of ``loc`` (a typo's
    intended field), if one is close enough."""
    annotation: Any = JobDocument
    for part in loc[:-1]:
        annotation = _inner(annotation)
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            fields = {field.alias or name: field for name, field in annotation.model_fields.items()}
            field = fields.get(str(part))
            if field is None:
                return None
            annotation = field.annotation
        elif get_origin(annotation) in (list, dict):
            annotation = get_args(annotation)[-1]  # an item, or a value
        else:
            return None
    model = _inner(annotation)
    if not (isinstance(model, type) and issubclass(model, BaseModel)):
        return None
    names = [field.alias or name for name, field in model.model_fields.items()]
    near = difflib.get_close_matches(str(loc[-1]), names, n=1, cutoff=0.6)
    return near[0] if near else None


def _inner(annotation: Any) -> Any:
    """``X`` of ``X | None``."""
    if get_origin(annotation) in (Union, UnionType):
        kept = [arg for arg in get_args(annotation) if arg is not type(None)]
        return kept[0] if len(kept) == 1 else annotation
    return annotation
