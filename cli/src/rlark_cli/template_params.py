"""``--param key=value`` of ``rlark jobs init``, read by the template's parameter schema.

The value's type comes from the template's JSON schema (``params_schema`` of ``GET /templates``):
a list takes ``a,b,c`` or a JSON list, a mapping takes ``k=v,k2=v2`` or a JSON object, a number
must be one, a string is kept as typed (``cluster=4`` is the cluster named "4"). Pure: no I/O, so
the command only reports the :class:`ParamError` naming the parameter.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any


class ParamError(ValueError):
    """A ``--param`` that cannot be read; the message names the parameter."""


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def _types(prop: Mapping[str, Any]) -> set[str]:
    """The JSON types a property allows (``anyOf`` of an optional field included), less null."""
    found = {prop["type"]} if isinstance(prop.get("type"), str) else set(prop.get("type") or [])
    for option in prop.get("anyOf") or []:
        found |= _types(option)
    return found - {"null"}


def _number(name: str, text: str, kind: str) -> int | float:
    try:
        return int(text) if kind == "integer" else float(text)
    except ValueError:
        what = "a whole number" if kind == "integer" else "a number"
        raise ParamError(f"--param {name}: expected {what}, got {text!r}") from None


def _json(name: str, text: str, expected: type, what: str) -> Any:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ParamError(f"--param {name}: {text!r} is not valid JSON ({exc.msg})") from None
    if not isinstance(value, expected):
        raise ParamError(f"--param {name}: expected {what}, got {text!r}")
    return value


def _list(name: str, text: str, items: Mapping[str, Any]) -> list[Any]:
    if text.startswith("["):
        return list(_json(name, text, list, "a JSON list"))
    values = [part.strip() for part in text.split(",") if part.strip()]
    item_types = _types(items)
    if item_types & {"integer", "number"} and "string" not in item_types:
        kind = "integer" if item_types == {"integer"} else "number"
        return [_number(name, value, kind) for value in values]
    return values


def _mapping(name: str, text: str) -> dict[str, Any]:
    if text.startswith("{"):
        return dict(_json(name, text, dict, "a JSON object"))
    result: dict[str, Any] = {}
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        key, eq, value = part.partition("=")
        if not eq or not key.strip():
            raise ParamError(f"--param {name}: expected key=value[,key=value] or a JSON object, got {part!r}")
        result[key.strip()] = value.strip()
    return result


def param_value(name: str, text: str, schema: Mapping[str, Any]) -> tuple[str, Any]:
    """The parameter's schema name and its value read from ``text`` by its type in ``schema``.

    ``name`` may be camelCase as in the schema or snake_case (``ssh_keys``). Unknown names raise
    :class:`ParamError` listing the template's parameters.
    """
    properties: Mapping[str, Any] = schema.get("properties") or {}
    key = name if name in properties else _camel(name)
    if key not in properties:
        known = ", ".join(properties) or "none"
        raise ParamError(f"--param {name}: this template has no such parameter (it takes: {known})")
    prop = properties[key]
    types = _types(prop)
    if "array" in types:
        return key, _list(name, text, prop.get("items") or {})
    if "object" in types:
        return key, _mapping(name, text)
    if "string" in types:
        return key, text
    if "integer" in types or "number" in types:
        return key, _number(name, text, "integer" if "number" not in types else "number")
    if "boolean" in types:
        lowered = text.lower()
        if lowered in {"true", "yes", "1"}:
            return key, True
        if lowered in {"false", "no", "0"}:
            return key, False
        raise ParamError(f"--param {name}: expected true or false, got {text!r}")
    # A type the CLI does not know: JSON if it reads as JSON, text otherwise; the server decides.
    try:
        return key, json.loads(text)
    except ValueError:
        return key, text


def params_from(items: list[str], schema: Mapping[str, Any]) -> dict[str, Any]:
    """``key=value`` arguments as the render request's ``params``."""
    values: dict[str, Any] = {}
    for item in items:
        name, eq, text = item.partition("=")
        if not eq or not name.strip():
            raise ParamError(f"--param {item!r} is not key=value")
        key, value = param_value(name.strip(), text.strip(), schema)
        values[key] = value
    return values
