"""Idempotent submission: the ``Idempotency-Key`` a client sends with ``POST /api/v1/jobs``.

Role: let a client retry a submission whose answer it never saw (the connection broke, the gateway or
the scheduler died mid-request) without creating a second job. The scheduler keeps the key with the job,
unique per owner; a repeat carrying the same key and the same document gets the job stored the first
time, the same key with another document is a conflict.

Contract:
- A key is 1–128 printable ASCII characters (space to ``~``) holding no secret (the scanner of job
  documents, :func:`rlark_secretscan.scan_text`, finds none: a key is stored with the job, so a token
  pasted there would be kept); anything else is refused by :func:`check_key` with
  :class:`IdempotencyKeyInvalid`, whose message never quotes the key.
- "The same document" means the same parsed document (:func:`document_fingerprint` of its canonical
  form), so re-encoding the same spec (YAML or JSON, other key order or spacing) is still a repeat;
  text that does not parse is compared by its bytes. The fingerprint is taken before defaults such as
  the network domain are filled in, so a repeat stays a repeat when the defaults changed meanwhile.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from rlark_secretscan import scan_text

HEADER = "Idempotency-Key"
MAX_KEY_LENGTH = 128


class IdempotencyKeyInvalid(ValueError):
    """The header's value is not a usable key; the message says why."""


def check_key(value: str) -> str:
    """``value`` when it is a valid key; raises :class:`IdempotencyKeyInvalid` otherwise."""
    if not value:
        raise IdempotencyKeyInvalid(f"{HEADER} must not be empty")
    if len(value) > MAX_KEY_LENGTH:
        raise IdempotencyKeyInvalid(f"{HEADER} is {len(value)} characters long; at most {MAX_KEY_LENGTH}")
    if any(not " " <= ch <= "~" for ch in value):
        raise IdempotencyKeyInvalid(f"{HEADER} may hold printable ASCII characters only")
    findings = scan_text(value, HEADER)
    if findings:
        raise IdempotencyKeyInvalid(
            f"{HEADER} holds {findings[0].what}; an idempotency key is stored with the job, so use a "
            "random id (a UUID) instead"
        )
    return value


def document_fingerprint(canonical: dict[str, Any] | None, raw: bytes | str) -> str:
    """A digest naming the submitted document: of its canonical form when it parsed, else of its text."""
    if canonical is not None:
        text = json.dumps(canonical, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        return "doc:" + hashlib.sha256(text.encode()).hexdigest()
    data = raw.encode() if isinstance(raw, str) else raw
    return "raw:" + hashlib.sha256(data).hexdigest()
