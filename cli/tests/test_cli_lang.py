"""``--lang`` and the locale choose the language of the server's sentences (ADR 0011): Chinese is
rendered from the message key and params, English is the server's own message, an unknown key falls
back to it. The gateway's answers stand in through httpx's mock transport."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
from rlark_cli import client as cli_client
from rlark_cli import lang
from rlark_cli.main import app
from typer.testing import CliRunner

EXISTS = {
    "error": {
        "code": "domain_exists",
        "message": "a network domain named 'train' already exists",
        "field": "name",
        "message_key": "domain_exists",
        "params": {"name": "'train'"},
    }
}
UNKNOWN_KEY = {
    "error": {"code": "brand_new", "message": "a sentence this CLI has no template for", "field": None}
}


@pytest.fixture
def gateway(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> dict[str, Any]:
    """A fake gateway refusing ``rlark domains create`` with ``answer["body"]``."""
    monkeypatch.setenv("RLARK_CONFIG_DIR", str(tmp_path))
    monkeypatch.setenv("RLARK_URL", "http://gateway.test")
    for name in ("LC_ALL", "LC_MESSAGES", "LANG"):
        monkeypatch.delenv(name, raising=False)
    answer: dict[str, Any] = {"body": EXISTS}
    real_client = httpx.Client

    def fake_client(**kwargs: Any) -> httpx.Client:
        return real_client(
            transport=httpx.MockTransport(lambda _: httpx.Response(409, json=answer["body"])), **kwargs
        )

    monkeypatch.setattr(cli_client.httpx, "Client", fake_client)
    yield answer
    lang.choose(None)


def create(*options: str, env: dict[str, str] | None = None) -> str:
    result = CliRunner().invoke(
        app, [*options, "domains", "create", "--name", "train", "--cidr", "10.200.0.0/16"], env=env
    )
    assert result.exit_code == 1, result.output
    return " ".join(result.output.split())


def test_a_chinese_locale_gets_the_servers_sentence_in_chinese(gateway: dict[str, Any]) -> None:
    assert "已存在名为 'train' 的网络域" in create(env={"LANG": "zh_CN.UTF-8"})


def test_the_clis_own_words_around_the_sentence_follow_the_language_too(gateway: dict[str, Any]) -> None:
    said = create("--lang", "zh-CN")
    assert said.startswith("错误： 已存在名为 'train' 的网络域（字段：name）")
    assert "error" not in said
    assert "field" not in said
    said = create("--lang", "en")
    assert said.startswith("error: a network domain named 'train' already exists (field: name)")


def test_lc_all_wins_over_lang(gateway: dict[str, Any]) -> None:
    assert "a network domain named 'train' already exists" in create(
        env={"LANG": "zh_CN.UTF-8", "LC_ALL": "C"}
    )
    assert "已存在名为 'train' 的网络域" in create(env={"LANG": "en_US.UTF-8", "LC_ALL": "zh_CN.UTF-8"})


def test_lang_option_wins_over_the_locale(gateway: dict[str, Any]) -> None:
    assert "a network domain named 'train' already exists" in create(
        "--lang", "en", env={"LANG": "zh_CN.UTF-8"}
    )
    assert "已存在名为 'train' 的网络域" in create("--lang", "zh-CN", env={"LANG": "en_US.UTF-8"})


def test_a_sentence_without_a_template_is_printed_as_the_server_wrote_it(gateway: dict[str, Any]) -> None:
    gateway["body"] = UNKNOWN_KEY
    assert "a sentence this CLI has no template for" in create("--lang", "zh-CN")


def test_an_unknown_language_is_a_usage_error(gateway: dict[str, Any]) -> None:
    result = CliRunner().invoke(app, ["--lang", "fr", "domains", "list"])
    assert result.exit_code == 2
    assert "zh-CN or en" in result.output


def test_a_pending_timeline_row_is_said_clause_by_clause() -> None:
    row = {
        "reason": "submitted",
        "details": {
            "parts": [{"message_key": "job.submitted", "params": {}}, {"message_key": "job.keys_updated"}]
        },
    }
    lang.choose("zh-CN")
    try:
        assert lang.event_text(row) == "已提交；SSH 密钥已更新"
        assert lang.event_text({"reason": "as stored", "details": {}}) == "as stored"
    finally:
        lang.choose("en")
    assert lang.event_text(row) == "submitted"
    lang.choose(None)


JOB = {
    "id": "job-1",
    "name": "sft",
    "owner": "alice",
    "status": "Failed",
    "reason": "prepare script exited with 3",
    "reason_said": {"message_key": "worker.prepare_failed", "params": {"code": 3}},
    "exit_code": 3,
    "network_domain": None,
    "ray_nodes": None,
    "ssh_command": None,
    "pending": None,
    "workers": [],
    "outputs": [],
    "timeline": [
        {
            "at": "2026-12-01T10:00:00Z",
            "to_status": "Pending",
            "reason": "submitted",
            "details": {"said": {"message_key": "job.submitted", "params": {}}},
        }
    ],
}


def test_jobs_show_says_the_reason_and_the_timeline_in_the_chosen_language(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("RLARK_CONFIG_DIR", str(tmp_path))
    monkeypatch.setenv("RLARK_URL", "http://gateway.test")
    real_client = httpx.Client

    def fake_client(**kwargs: Any) -> httpx.Client:
        return real_client(transport=httpx.MockTransport(lambda _: httpx.Response(200, json=JOB)), **kwargs)

    monkeypatch.setattr(cli_client.httpx, "Client", fake_client)
    try:
        chinese = CliRunner().invoke(
            app, ["--lang", "zh-CN", "jobs", "show", "job-1"], env={"COLUMNS": "200"}
        )
        english = CliRunner().invoke(app, ["--lang", "en", "jobs", "show", "job-1"], env={"COLUMNS": "200"})
    finally:
        lang.choose(None)
    assert chinese.exit_code == 0, chinese.output
    assert "准备脚本退出，退出码 3" in chinese.output
    assert "已提交" in chinese.output
    assert "prepare script exited with 3" in english.output
    assert "submitted" in english.output
