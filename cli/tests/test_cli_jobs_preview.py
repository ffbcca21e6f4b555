"""`rlark jobs preview` prints each problem the server found, naming its field once, in the CLI's language,
and exits 1 without saying the job can be submitted: a PVC mount on a local cluster (issue 31: such a
refusal used to pass the preview). The gateway's answer stands in through httpx's mock transport."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from rlark_cli import client as cli_client
from rlark_cli import lang
from rlark_cli.client import EXIT_REFUSED
from rlark_cli.main import app
from rlark_contracts.runtimes import LOCAL, mount_refusal
from typer.testing import CliRunner

FIELD = "spec.tasks[0].mounts[0].type"
REFUSED = mount_refusal(FIELD, "local", LOCAL, "pvc")
assert REFUSED is not None


def _preview() -> dict[str, Any]:
    """The scheduler's preview body for such a job (``SpecError.to_dict`` of the refusal)."""
    assert REFUSED is not None
    error = {"code": "mount_type_unsupported", "message": str(REFUSED), **REFUSED.wire(), "field": FIELD}
    return {"errors": [{**error, "line": 9}], "warnings": [], "plan": [], "yaml": ""}


@pytest.fixture(autouse=True)
def gateway(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    monkeypatch.setenv("RLARK_CONFIG_DIR", str(tmp_path))
    monkeypatch.setenv("RLARK_URL", "http://gateway.test")
    real_client = httpx.Client

    def answer(request: httpx.Request) -> httpx.Response:
        assert request.url.path == "/api/v1/jobs:preview"
        return httpx.Response(200, json=_preview())

    def fake_client(**kwargs: Any) -> httpx.Client:
        return real_client(transport=httpx.MockTransport(answer), **kwargs)

    monkeypatch.setattr(cli_client.httpx, "Client", fake_client)
    yield
    lang.choose(None)


def _preview_cli(tmp_path: Path, language: str) -> str:
    job_file = tmp_path / "job.yaml"
    job_file.write_text("spec: {}\n")
    result = CliRunner().invoke(
        app, ["--lang", language, "jobs", "preview", str(job_file)], env={"COLUMNS": "300"}
    )
    assert result.exit_code == EXIT_REFUSED, result.output
    assert "can be submitted" not in result.output
    return " ".join(result.output.split())


def test_the_refusal_names_the_mount_s_type_field_once_and_what_the_cluster_mounts(tmp_path: Path) -> None:
    printed = _preview_cli(tmp_path, "en")
    assert printed == (
        f'error {FIELD} (line 9): cluster "local" runs workers as local processes: it mounts hostPath, '
        "emptyDir, objectStorage only, not pvc. Run this role on a Kubernetes cluster to mount pvc "
        "(mount_type_unsupported)"
    )


def test_the_refusal_is_said_in_chinese_with_lang_zh_cn(tmp_path: Path) -> None:
    printed = _preview_cli(tmp_path, "zh-CN")
    assert printed.startswith(f'error {FIELD} (line 9): 集群 "local" 以本地进程运行工作节点'), printed
    assert "不能挂载 pvc" in printed
    assert printed.count(FIELD) == 1
