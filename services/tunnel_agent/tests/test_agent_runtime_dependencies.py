"""The agent serves jobs' TensorBoard (local runtime, and the Kubernetes files sidecar built from the same
image): the TensorBoard server is one of the agent package's own dependencies in the lock, so the image's
`uv sync --no-dev` and `make run` (no test groups) install it — not only the test groups that bring it in."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def test_the_agent_package_depends_on_the_tensorboard_server() -> None:
    lock = tomllib.loads((ROOT / "uv.lock").read_text())
    agent = next(p for p in lock["package"] if p["name"] == "rlark-tunnel-agent")
    assert "tensorboard" in {dep["name"] for dep in agent.get("dependencies", [])}
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert "uv sync --frozen --no-dev" in dockerfile
