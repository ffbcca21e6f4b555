"""The language the CLI says the server's sentences in (ADR 0011).

``--lang`` (``zh-CN`` or ``en``) wins; otherwise the locale, as POSIX orders it: ``LC_ALL``, then
``LC_MESSAGES``, then ``LANG`` (``zh*`` → zh-CN, anything else → English). The server sends each
sentence as its English ``message`` plus ``message_key`` and ``params`` (or clauses, ``parts``);
English prints the server's message, Chinese renders the key from the contracts' catalogue and falls
back to the message for a key this CLI does not know.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import Any

from rlark_contracts.messages import Language, catalogue, language_of, placeholders, render

_SEPARATOR: dict[Language, str] = {"en": "; ", "zh-CN": "；"}
# The CLI's own framing around the server's sentences (theirs come from the contracts' catalogue).
_OWN: dict[Language, dict[str, str]] = {
    "en": {
        "error": "error:",
        "field": " (field: {field})",
        "log_in": "log in with: rlark login",
        "unreachable": "cannot reach the gateway at {url}: {why}",
        "placement": "placement now:",
        "would_wait": "it would wait now:",
    },
    "zh-CN": {
        "error": "错误：",
        "field": "（字段：{field}）",
        "log_in": "请先登录：rlark login",
        "unreachable": "无法连接网关 {url}：{why}",
        "placement": "当前放置：",
        "would_wait": "当前会等待：",
    },
}
_chosen: Language | None = None


def choose(tag: str | None) -> None:
    """Use ``tag`` (``--lang``) from now on; None goes back to the locale."""
    global _chosen
    if tag is None:
        _chosen = None
        return
    if tag.strip().lower() not in ("en", "zh", "zh-cn", "zh_cn"):
        raise ValueError(f"--lang must be zh-CN or en, not {tag!r}")
    _chosen = language_of(tag)


def current() -> Language:
    if _chosen is not None:
        return _chosen
    for name in ("LC_ALL", "LC_MESSAGES", "LANG"):
        value = os.environ.get(name)
        if value:
            return language_of(value)
    return "en"


def own(key: str, **params: object) -> str:
    """One of the CLI's own framing phrases (``error:``, the field, how to log in) in the language."""
    return _OWN[current()][key].format(**params)


def say(said: Mapping[str, Any] | None, fallback: str = "") -> str:
    """One server sentence (an error, a validation problem, a timeline row's ``said``) in the language."""
    if not said:
        return fallback
    message = str(said.get("message") or fallback)
    lang = current()
    key = said.get("message_key") or said.get("code")
    if (lang == "en" and message) or not key:
        return message
    params = said.get("params") or {}
    return render(str(key), params, lang, message or None) if _complete(str(key), params, lang) else message


def say_all(parts: Iterable[Mapping[str, Any]] | None, fallback: str = "") -> str:
    """Clauses (a pending reason's ``parts``) joined the language's way; ``fallback`` in English."""
    listed = list(parts or [])
    if not listed or (current() == "en" and fallback):
        return fallback
    return _SEPARATOR[current()].join(say(part) for part in listed)


def event_text(event: Mapping[str, Any]) -> str:
    """A timeline row's reason: its pending clauses, or the sentence it kept, or the reason as stored."""
    reason = str(event.get("reason") or "")
    details = event.get("details") or {}
    if details.get("parts"):
        return say_all(details["parts"], reason)
    if details.get("said"):
        return say({**details["said"], "message": reason}, reason)
    return reason


def reason_of(job: Mapping[str, Any]) -> str:
    """A job's (or worker's) reason: its ``reason_said`` sentence or clauses, else the reason as stored."""
    reason = str(job.get("reason") or "")
    said = job.get("reason_said")
    if not said:
        return reason
    if said.get("parts"):
        return say_all(said["parts"], reason)
    return say({**said, "message": reason}, reason)


def _complete(key: str, params: Mapping[str, Any], lang: Language) -> bool:
    """Does the key exist, with a value for each of its placeholders? (else the message is safer)"""
    template = catalogue(lang).get(key) or catalogue("en").get(key)
    return template is not None and placeholders(template) <= set(params)
