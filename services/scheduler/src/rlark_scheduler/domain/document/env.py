"""``spec.tasks[*].env``: variable names (not the platform's own, warned when RLinf overwrites them) and
named secrets (ADR 0025) — a variable's ``secret`` and an objectStorage mount's ``secretRef`` name one of
the owner's or the job's project's secrets, never its value."""

from __future__ import annotations

import re

from rlark_contracts.messages import text
from rlark_contracts.secrets import is_secret_name

from rlark_scheduler.domain.document.check import Check
from rlark_scheduler.domain.document.fields import child_path
from rlark_scheduler.domain.document.model import RoleSpec, SecretRef

RESERVED_ENV_NAMES = frozenset({"RLINF_NODE_RANK", "RAY_ADDRESS"})
RESERVED_ENV_PREFIX = "RLARK_"
RLINF_OVERWRITTEN_ENV = frozenset(
    {"RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "CUDA_VISIBLE_DEVICES"}
)


_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def check_env(check: Check, role: RoleSpec, path: str) -> None:
    """Each variable of ``role`` (at ``path``): a valid name the platform does not set itself, and the secret
    it names, if any."""
    for name, value in role.env.items():
        env_path = child_path(f"{path}.env", name)
        if isinstance(value, SecretRef):
            check_secret_ref(check, value.secret, f"{env_path}.secret")
        if not _ENV_NAME.fullmatch(name):
            check.add(
                "env_name_invalid",
                text("env_name_invalid", field=env_path, name=name),
                env_path,
            )
        elif name in RESERVED_ENV_NAMES or name.startswith(RESERVED_ENV_PREFIX):
            check.add(
                "env_name_reserved",
                text("env_name_reserved", field=env_path, name=name),
                env_path,
            )
        elif name in RLINF_OVERWRITTEN_ENV:
            check.add(
                "env_overridden",
                text("env_overridden", field=env_path, name=name),
                env_path,
                warning=True,
            )


def check_secret_ref(check: Check, name: str, field_path: str) -> None:
    """A named secret the job may use: well formed, and the owner's or the job's project's (ADR 0025)."""
    if not is_secret_name(name):
        check.add("secret_name_invalid", text("secret_name_invalid", field=field_path), field_path)
    elif check.ctx.secrets is not None and name not in check.ctx.secrets:
        check.add("secret_unknown", text("secret_unknown", field=field_path, name=name), field_path)
