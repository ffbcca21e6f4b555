"""Sentences the server writes for people, as a stable key and its parameters (ADR 0011).

Role: the one catalogue of those sentences per language — ``en.json`` and ``zh-CN.json`` beside this
module, flat ``{key: template}`` objects with ``{name}`` placeholders (no ICU syntax) — and the one
renderer every service, the CLI and (through its synced copy under ``web/src/i18n/server/``) the
console use.

Contract:
- A service never formats a sentence for people itself: it builds a :class:`Text` (a ``str``, the
  English, carrying ``key`` and a flat ``params`` object of the values the sentence interpolates) and
  sends it as ``message`` next to ``message_key`` and ``params``. API clients and logs keep reading ``message``.
- A key is an error code (``domain_exists``) or, when one code covers several sentences, the code and a
  variant (``invalid_key_name.too_long``). Every key has an entry in every language with exactly the
  placeholders of the English entry (``tests/test_messages.py``).
- :func:`render` falls back to English, then to the caller's fallback, for an unknown key or language;
  a missing parameter is left as ``{name}`` rather than failing a request.

Pure, standard library only; the catalogues are read once per process.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from functools import cache
from importlib.resources import files
from types import MappingProxyType
from typing import Any, Literal

Language = Literal["en", "zh-CN"]
LANGUAGES: tuple[Language, ...] = ("en", "zh-CN")
ParamValue = str | int
Params = Mapping[str, ParamValue]

_PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")


@cache
def catalogue(lang: Language) -> Mapping[str, str]:
    """The templates of ``lang``, keyed by message key."""
    raw = files(__package__).joinpath(f"{lang}.json").read_text(encoding="utf-8")
    data: dict[str, str] = json.loads(raw)
    return MappingProxyType(data)


def placeholders(template: str) -> frozenset[str]:
    """The parameter names ``template`` interpolates."""
    return frozenset(_PLACEHOLDER.findall(template))


def fill(template: str, params: Mapping[str, Any]) -> str:
    """``template`` with each ``{name}`` replaced by ``params[name]`` (left as is when absent)."""

    def value(match: re.Match[str]) -> str:
        name = match.group(1)
        return str(params[name]) if name in params else match.group(0)

    return _PLACEHOLDER.sub(value, template)


def render(key: str, params: Mapping[str, Any], lang: Language, fallback: str | None = None) -> str:
    """The sentence ``key`` in ``lang``; English when ``lang`` lacks it, else ``fallback``, else the key."""
    template = catalogue(lang).get(key) or catalogue("en").get(key)
    if template is None:
        return fallback if fallback is not None else key
    return fill(template, params)


def language_of(tag: str | None) -> Language:
    """``zh-CN`` for a Chinese locale or language tag (``zh_CN.UTF-8``, ``zh-TW``, ``zh``), else ``en``."""
    return "zh-CN" if (tag or "").strip().lower().startswith("zh") else "en"


class Text(str):
    """One sentence for people: the English string itself, plus its catalogue ``key`` and ``params``.

    A ``str`` so that it travels unchanged through code written for plain messages (an exception's
    ``message``, ``SpecError.message``) and ``ApiError`` still finds its key and parameters. Building
    one with a key the English catalogue lacks raises ``KeyError``: a sentence cannot reach a user
    without a template, and a test exercising the path fails.
    """

    key: str
    params: Mapping[str, ParamValue]

    def __new__(cls, key: str, params: Mapping[str, ParamValue] | None = None) -> Text:
        template = catalogue("en").get(key)
        if template is None:
            raise KeyError(f"message key {key!r} is not in rlark_contracts/messages/en.json")
        frozen = MappingProxyType(dict(params or {}))
        self = super().__new__(cls, fill(template, frozen))
        self.key = key
        self.params = frozen
        return self

    @property
    def english(self) -> str:
        return str.__str__(self)

    def render(self, lang: Language) -> str:
        return render(self.key, self.params, lang)

    def wire(self) -> dict[str, Any]:
        """``{"message_key", "params"}``: what travels next to ``message`` in an API body."""
        return {"message_key": self.key, "params": dict(self.params)}


def said(message: str) -> dict[str, Any]:
    """``{"message_key", "params"}`` of ``message`` when it is a :class:`Text`, else ``{}``: spread it
    next to ``message`` in an API body."""
    return message.wire() if isinstance(message, Text) else {}


def text(key: str, /, **params: ParamValue) -> Text:
    """``Text(key, params)``, the short form services use."""
    return Text(key, params)


_PYDANTIC_KEYS = frozenset(
    {
        "missing",
        "extra_forbidden",
        "string_type",
        "string_too_long",
        "string_too_short",
        "int_type",
        "int_parsing",
        "bool_type",
        "bool_parsing",
        "list_type",
        "dict_type",
        "greater_than_equal",
        "less_than_equal",
        "json_invalid",
    }
)


def validation_text(field: str, error: Mapping[str, Any]) -> Text | None:
    """The catalogue sentence for one of pydantic's common errors (``invalid_request.<type>``; ``error`` is
    one of ``ValidationError.errors()``), or None when the error is of another type or its English would
    differ from pydantic's own message (it is then shown as pydantic wrote it)."""
    kind = error.get("type")
    if kind not in _PYDANTIC_KEYS:
        return None
    context = {k: v for k, v in (error.get("ctx") or {}).items() if isinstance(v, str | int)}
    said = Text(f"invalid_request.{kind}", {"field": field, **context})
    return said if said.english == f"{field}: {error.get('msg')}" else None


__all__ = [
    "LANGUAGES",
    "Language",
    "ParamValue",
    "Params",
    "Text",
    "catalogue",
    "fill",
    "language_of",
    "placeholders",
    "render",
    "said",
    "text",
    "validation_text",
]
