"""Checks of what a user registers besides the URL: name, filters, secret. Pure."""

from __future__ import annotations

import re

from rlark_notifier.domain.errors import NotifierInputError
from rlark_notifier.domain.model import JOB_STATES

MAX_NAME_CHARS = 64
MAX_JOB_FILTERS = 100
MAX_SECRET_CHARS = 512
_JOB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


def validate_name(name: str) -> str:
    clean = name.strip()
    if not 1 <= len(clean) <= MAX_NAME_CHARS or not clean.isprintable():
        raise NotifierInputError("invalid_name", f"name: 1-{MAX_NAME_CHARS} printable characters", "name")
    return clean


def validate_states(states: list[str]) -> list[str]:
    """The job states a filter names, each once, in lifecycle order; empty means every state."""
    for index, state in enumerate(states):
        if state not in JOB_STATES:
            raise NotifierInputError(
                "unknown_state",
                f"states[{index}]: {state!r} is not a job state ({', '.join(JOB_STATES)})",
                f"states[{index}]",
            )
    return [state for state in JOB_STATES if state in states]


def validate_job_ids(job_ids: list[str]) -> list[str]:
    """The jobs a filter names, each once; empty means every job the endpoint's scope covers."""
    if len(job_ids) > MAX_JOB_FILTERS:
        raise NotifierInputError("too_many_jobs", f"job_ids: at most {MAX_JOB_FILTERS} jobs", "job_ids")
    for index, job_id in enumerate(job_ids):
        if not _JOB_ID.match(job_id):
            raise NotifierInputError("invalid_job_id", f"job_ids[{index}]: not a job id", f"job_ids[{index}]")
    return sorted(set(job_ids))


def validate_secret(secret: str | None) -> str | None:
    """The signing secret, or None for none. Never quoted in a message."""
    if secret is None or secret == "":
        return None
    if len(secret) > MAX_SECRET_CHARS or secret != secret.strip() or not secret.isprintable():
        raise NotifierInputError(
            "invalid_secret",
            f"secret: up to {MAX_SECRET_CHARS} printable characters, no spaces around it",
            "secret",
        )
    return secret
