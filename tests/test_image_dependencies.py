"""The service image installs no dev dependency: no test server, test bed, browser or test library ships.

The Dockerfile installs the workspace with ``uv sync --frozen --no-dev``: the root project's own
dependencies as locked in ``uv.lock``, without its dependency groups. This walks that locked set the way
uv does (each package's dependencies, and the optional dependencies of any extra asked for; platform
markers are not evaluated, so the set is, if anything, too large) and checks what it holds.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
DEV_ONLY = {"rlark-devinfra", "playwright", "testcontainers", "pytest", "hypothesis", "schemathesis"}

pytestmark = pytest.mark.unit


def installed(lock: dict[str, Any], groups: tuple[str, ...] = (), root: str = "rlark") -> set[str]:
    """Names of every package ``uv sync`` installs for ``root`` from this lock with these of its
    dependency groups (none: ``--no-dev``)."""
    packages = {p["name"]: p for p in lock["package"]}
    top = [*packages[root].get("dependencies", [])]
    for group in groups:
        top += packages[root]["dev-dependencies"][group]
    seen: set[str] = set()
    todo: list[tuple[str, tuple[str, ...]]] = [(dep["name"], tuple(dep.get("extra", ()))) for dep in top]
    while todo:
        name, extras = todo.pop()
        key = f"{name}[{','.join(sorted(extras))}]"
        if key in seen:
            continue
        seen.add(key)
        deps = [*packages[name].get("dependencies", [])]
        for extra in extras:
            deps += packages[name].get("optional-dependencies", {}).get(extra, [])
        todo += [(dep["name"], tuple(dep.get("extra", ()))) for dep in deps]
    return {key.partition("[")[0] for key in seen}


def the_image_sync_commands() -> list[str]:
    """Every ``uv sync`` of the Dockerfile: the locked third-party packages first, then the workspace's."""
    commands = re.findall(r"^RUN (uv sync[^&\n]*)", (ROOT / "Dockerfile").read_text(), re.MULTILINE)
    assert commands, "the Dockerfile runs no uv sync"
    return [command.strip() for command in commands]


def test_the_image_installs_the_locked_project_without_any_dependency_group() -> None:
    commands = the_image_sync_commands()
    assert "--no-install-workspace" not in commands[-1].split(), "the last sync installs RLark's own packages"
    for command in commands:
        assert "--no-dev" in command.split()
        assert "--frozen" in command.split()
        assert not {"--group", "--all-groups", "--dev", "--extra", "--all-extras", "--all-packages"} & set(
            word.partition("=")[0] for word in command.split()
        ), command


def test_the_locked_set_the_image_installs_holds_no_dev_dependency() -> None:
    lock = tomllib.loads((ROOT / "uv.lock").read_text())
    in_image = installed(lock)
    assert in_image >= {"rlark-gateway", "rlark-scheduler", "rlark-tunnel-agent", "fastapi", "asyncpg"}
    assert not in_image & DEV_ONLY, sorted(in_image & DEV_ONLY)


def test_the_dev_tooling_is_reached_only_through_the_dev_group() -> None:
    """The walk finds them once the dev group is followed: the check above is not vacuous."""
    lock = tomllib.loads((ROOT / "uv.lock").read_text())
    assert {"rlark-devinfra", "playwright", "testcontainers", "pytest"} <= installed(lock, ("dev",))
