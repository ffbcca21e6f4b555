"""How the CLI prints a refusal with several problems: the first as the message with its field, the rest
one a line, each field named once (most messages already start with theirs)."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
import typer
from rlark_cli.client import EXIT_REFUSED, Gateway

REFUSAL = {
    "error": {
        "code": "invalid_job",
        "message": 'spec.tasks[0].cluster: no cluster is named "nowhere"',
        "field": "spec.tasks[0].cluster",
        "details": {
            "errors": [
                {
                    "field": "spec.tasks[0].cluster",
                    "message": 'spec.tasks[0].cluster: no cluster is named "nowhere"',
                },
                {
                    "field": "spec.tasks[1].image",
                    "message": "spec.tasks[1].image: the image needs an explicit tag",
                },
                {"field": "spec.tasks[1].replicas", "message": "Input should be a valid integer"},
            ]
        },
    }
}


def test_each_further_problem_names_its_field_once(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("RLARK_CONFIG_DIR", str(tmp_path))
    with pytest.raises(typer.Exit) as ended:
        Gateway(url="http://gateway.test")._result(httpx.Response(422, json=REFUSAL))
    assert ended.value.exit_code == EXIT_REFUSED
    printed = " ".join(capsys.readouterr().err.split())
    assert printed.startswith('error: spec.tasks[0].cluster: no cluster is named "nowhere" - ')  # field once
    assert "- spec.tasks[1].image: the image needs an explicit tag" in printed
    assert "spec.tasks[1].image: spec.tasks[1].image" not in printed
    assert "- spec.tasks[1].replicas: Input should be a valid integer" in printed
