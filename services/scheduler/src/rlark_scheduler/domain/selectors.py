"""Node selectors: equality-only label selectors, as a role's "node selection" field.

Role: the one place that says what a selector is, how its text form is parsed and when it matches
a node's labels. A selector is a plain mapping of label key to value; a node matches when it has
every key with exactly that value (AND of equalities). Set-based operators (``in``, ``!=``,
existence) are refused on purpose: the user guide only speaks of ``key=value`` pairs, and an
equality selector is what lets the capacity model answer "which nodes match" by intersecting
per-label indexes instead of scanning every node.

Keys and values follow Kubernetes label syntax, because the selector ends up as a Pod
``nodeSelector`` on a real cluster: a key is an optional DNS-subdomain prefix and ``/`` and a name
of at most 63 characters; a value is empty or at most 63 characters of the same alphabet.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import TypeAlias

LabelSelector: TypeAlias = Mapping[str, str]
"""Label key → required value; every pair must hold (AND). The empty selector matches all."""

SelectorKey: TypeAlias = tuple[tuple[str, str], ...]
"""A selector in canonical, hashable form (pairs sorted by key), used as a cache key."""

_NAME = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_MAX_NAME = 63
_MAX_PREFIX = 253


class SelectorError(ValueError):
    """A selector text or pair that is not valid; ``part`` is the offending piece as written."""

    def __init__(self, part: str, problem: str) -> None:
        super().__init__(f'invalid node selector part "{part}": {problem}')
        self.part = part
        self.problem = problem


def label_key_problem(key: str) -> str | None:
    """Why ``key`` is not a valid label key, or None when it is."""
    prefix, slash, name = key.rpartition("/")
    if slash:
        if not prefix:
            return "the prefix before '/' is empty"
        if len(prefix) > _MAX_PREFIX:
            return f"the prefix is longer than {_MAX_PREFIX} characters"
        if not all(_DNS_LABEL.fullmatch(label) for label in prefix.split(".")):
            return "the prefix must be a DNS subdomain (lower-case letters, digits, '-' and '.')"
    if not name:
        return "the key name is empty"
    if len(name) > _MAX_NAME:
        return f"the key name is longer than {_MAX_NAME} characters"
    if not _NAME.fullmatch(name):
        return (
            "the key name must start and end with a letter or digit and contain only "
            "letters, digits, '-', '_' and '.'"
        )
    return None


def label_value_problem(value: str) -> str | None:
    """Why ``value`` is not a valid label value, or None when it is (the empty value is valid)."""
    if not value:
        return None
    if len(value) > _MAX_NAME:
        return f"the value is longer than {_MAX_NAME} characters"
    if not _NAME.fullmatch(value):
        return (
            "the value must start and end with a letter or digit and contain only "
            "letters, digits, '-', '_' and '.'"
        )
    return None


def parse_selector(text: str) -> dict[str, str]:
    """Parse ``"k=v,k2=v2"`` into a selector; the empty (or blank) text is the empty selector.

    Strict: empty parts, missing ``=``, operators other than ``=``/``==``, invalid keys or values
    and a key given twice all raise :class:`SelectorError` naming the bad part. Spaces around
    parts, keys and values are ignored.
    """
    selector: dict[str, str] = {}
    if not text.strip():
        return selector
    for raw in text.split(","):
        part = raw.strip()
        if not part:
            raise SelectorError(raw, "empty part (stray comma?)")
        if "!=" in part:
            raise SelectorError(part, "only equality (key=value) is supported")
        key, eq, value = part.partition("=")
        if not eq:
            raise SelectorError(part, "expected key=value")
        if value.startswith("="):  # the "==" spelling kubectl also accepts
            value = value[1:]
        key, value = key.strip(), value.strip()
        if "=" in value:
            raise SelectorError(part, "more than one '=' in one part")
        problem = label_key_problem(key) or label_value_problem(value)
        if problem:
            raise SelectorError(part, problem)
        if key in selector:
            raise SelectorError(part, f'the key "{key}" is given more than once')
        selector[key] = value
    return selector


def validate_selector(selector: LabelSelector) -> None:
    """Raise :class:`SelectorError` when a selector given as a mapping holds an invalid pair."""
    for key, value in selector.items():
        problem = label_key_problem(key) or label_value_problem(value)
        if problem:
            raise SelectorError(f"{key}={value}", problem)


def matches(selector: LabelSelector, labels: Mapping[str, str]) -> bool:
    """True when ``labels`` carries every pair of ``selector``."""
    return all(labels.get(key) == value for key, value in selector.items())


def selector_key(selector: LabelSelector) -> SelectorKey:
    """Canonical hashable form of a selector (pairs sorted by key)."""
    return tuple(sorted(selector.items()))


def format_selector(selector: LabelSelector) -> str:
    """Text form, pairs sorted by key: ``parse_selector(format_selector(s)) == s``."""
    return ",".join(f"{key}={value}" for key, value in sorted(selector.items()))
