"""Kubernetes label syntax and the equality selectors (``k=v,k2=v2``) users write against node labels.

A selector here is a conjunction of ``key=value`` pairs, so "does node N match" is exactly "its labels
contain these pairs" — which the repository answers with jsonb ``@>`` on a GIN index. Set-based
operators (``in``, ``!=``, existence) are refused rather than half-supported.
"""

from __future__ import annotations

import re

from rlark_inventory.domain.errors import InvalidInput

_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")

MAX_SELECTOR_TERMS = 20


def label_key_problem(key: str) -> str | None:
    """Why ``key`` is not a valid label key (``[prefix/]name``), or None when it is."""
    prefix, slash, name = key.rpartition("/")
    if slash and (not prefix or len(prefix) > 253 or not _DNS_SUBDOMAIN.match(prefix)):
        return f"label key {key!r}: the prefix must be a DNS subdomain (e.g. rlark.io)"
    if not _NAME.match(name):
        return (
            f"label key {key!r}: the name must be 1-63 characters of letters, digits, '-', '_' or '.', "
            "starting and ending with a letter or digit"
        )
    return None


def label_value_problem(value: str) -> str | None:
    """Why ``value`` is not a valid label value (may be empty), or None when it is."""
    if value and not _NAME.match(value):
        return (
            f"label value {value!r}: must be at most 63 characters of letters, digits, '-', '_' or '.', "
            "starting and ending with a letter or digit"
        )
    return None


def validate_labels(labels: dict[str, str], field: str = "labels") -> dict[str, str]:
    """Return ``labels`` when every key and value is valid; raise ``InvalidInput`` naming the entry."""
    for key, value in labels.items():
        problem = label_key_problem(key) or label_value_problem(value)
        if problem:
            raise InvalidInput("invalid_label", problem, f"{field}.{key}")
    return labels


def parse_selector(text: str | None, field: str = "selector") -> dict[str, str]:
    """``"k=v,k2=v2"`` → ``{"k": "v", "k2": "v2"}``; empty or None → ``{}`` (matches every node).

    ``==`` is accepted as ``=``. Raises ``InvalidInput`` naming ``field`` for anything else.
    """
    if text is None or not text.strip():
        return {}
    terms = [t.strip() for t in text.split(",")]
    if len(terms) > MAX_SELECTOR_TERMS:
        raise InvalidInput("invalid_selector", f"a selector has at most {MAX_SELECTOR_TERMS} terms", field)
    out: dict[str, str] = {}
    for term in terms:
        if not term:
            raise InvalidInput("invalid_selector", f"empty term in selector {text!r}", field)
        if "!=" in term or "=" not in term:
            raise InvalidInput(
                "invalid_selector",
                f"selector term {term!r} is not key=value (only equality terms are supported)",
                field,
            )
        key, _, value = term.replace("==", "=", 1).partition("=")
        key, value = key.strip(), value.strip()
        problem = label_key_problem(key) or label_value_problem(value)
        if problem:
            raise InvalidInput("invalid_selector", problem, field)
        if key in out and out[key] != value:
            raise InvalidInput(
                "invalid_selector", f"selector asks {key!r} to be both {out[key]!r} and {value!r}", field
            )
        out[key] = value
    return out


def format_selector(selector: dict[str, str]) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(selector.items()))
