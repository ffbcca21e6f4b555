"""The check's output: one line per check on stdout, and the JSON report under `$OUT`, rewritten after each
check (a run cut short still leaves what it found). Also the sizes the device tool limits."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

Verdict = Literal["PASS", "FAIL", "SKIP"]
ROOT = Path(__file__).resolve().parents[2]
"""The checkout (carried to the device machine as a copy of the working tree)."""
WHEELS_DIR = ROOT / ".whl"
"""The Python 3.12 wheels `make gpu-check-wheels` fetches (an ignored folder the device call carries)."""
CARRY_LIMIT_BYTES = 64 * 1024 * 1024
OUT_FILE_LIMIT_BYTES = 16 * 1024 * 1024
REPORT_NAME = "gpu-check.json"
LINES_NAME = "gpu-check.txt"
SCRIPT_FILES = ("scripts/gpu-check", "scripts/gpu_check")


@dataclass
class Check:
    """One line of the check: its name, verdict, a sentence saying what was seen, and the figures behind it."""

    name: str
    verdict: Verdict
    summary: str
    data: dict[str, Any] = field(default_factory=dict)

    def line(self) -> str:
        return f"{self.verdict:<4} {self.name:<26} {self.summary}"


def _size(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and "__pycache__" not in p.parts)


def _tree_files(root: Path) -> list[Path]:
    """The checkout's files as the device tool carries them: tracked and untracked files git does not ignore
    (every file when this copy has no git, as on the device machine)."""
    if (root / ".git").exists() and shutil.which("git"):
        listed = subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            cwd=root,
            capture_output=True,
            check=True,
        ).stdout
        return [root / name for name in listed.decode().split("\0") if name]
    skip = {".git", "__pycache__", ".whl"}
    return [p for p in root.rglob("*") if p.is_file() and not skip & set(p.relative_to(root).parts)]


def sizes(root: Path = ROOT) -> dict[str, int]:
    """Bytes of the script, of the working tree the device call copies and of the carried wheels."""
    tree = sum(p.stat().st_size for p in _tree_files(root) if p.is_file() and not p.is_symlink())
    wheels = _size(WHEELS_DIR) if WHEELS_DIR.exists() else 0
    return {
        "script_bytes": sum(_size(root / name) for name in SCRIPT_FILES),
        "tree_bytes": tree,
        "wheels_bytes": wheels,
        "carried_bytes": tree + wheels,
        "carry_limit_bytes": CARRY_LIMIT_BYTES,
    }


def mib(n: int) -> str:
    return f"{n / 1024 / 1024:.1f} MiB"


class Report:
    """The checks so far and the facts around them; `add` prints a check's line and rewrites the files."""

    def __init__(self, out: Path, expected: tuple[str, ...]) -> None:
        self.out = out
        self.expected = expected
        self.checks: list[Check] = []
        self.facts: dict[str, Any] = {}
        self.workers: dict[str, Any] = {}
        self.started = datetime.now(UTC)
        out.mkdir(parents=True, exist_ok=True)

    def add(self, check: Check) -> None:
        self.checks.append(check)
        print(check.line(), flush=True)
        self.write()

    def missing(self) -> list[str]:
        done = {c.name for c in self.checks}
        return [name for name in self.expected if name not in done]

    def not_reached(self, why: str) -> None:
        """Every check not yet decided fails with ``why``: a check that did not run did not pass."""
        for name in self.missing():
            self.add(Check(name, "FAIL", f"not reached: {why}"))

    def counts(self) -> dict[str, int]:
        return {v: sum(1 for c in self.checks if c.verdict == v) for v in ("PASS", "FAIL", "SKIP")}

    def document(self) -> dict[str, Any]:
        return {
            "tool": "scripts/gpu-check",
            "format": 1,
            "started_at": self.started.isoformat(),
            "written_at": datetime.now(UTC).isoformat(),
            "argv": sys.argv[1:],
            "summary": self.counts(),
            "checks": [asdict(c) for c in self.checks],
            "facts": self.facts,
            "workers": self.workers,
        }

    def write(self) -> None:
        text = json.dumps(self.document(), indent=2, default=str)
        if (
            len(text) > OUT_FILE_LIMIT_BYTES
        ):  # the device tool returns files up to 16 MiB: drop the logs first
            self.workers = {
                wid: {**w, "log_tail": w.get("log_tail", [])[-50:]} for wid, w in self.workers.items()
            }
            text = json.dumps(self.document(), indent=2, default=str)
        _write(self.out / REPORT_NAME, text)
        _write(self.out / LINES_NAME, "".join(c.line() + "\n" for c in self.checks))


def _write(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)
