"""Each receiver's request shape and signature, checked against vectors computed the way the receivers'
own documentation computes them (Feishu's and DingTalk's Python samples) and fixed values."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from datetime import UTC, datetime
from urllib.parse import parse_qs, quote_plus, urlsplit

import pytest
from rlark_notifier.domain import Kind, Language, Notification, outcome, render
from rlark_notifier.domain.signing import (
    dingtalk_sign,
    feishu_sign,
    json_signature,
    verify_json_signature,
)

NOW = datetime.fromtimestamp(1700000000.123, UTC)
SECRET = "SECtest-secret"


def note(**changes: object) -> Notification:
    base: dict[str, object] = {
        "event_id": "ev-1",
        "job_id": "j-abc",
        "job_name": "train",
        "owner": "alice",
        "from_status": "Running",
        "to_status": "Succeeded",
        "reason": "header exited 0",
        "at": datetime(2026, 12, 2, 1, 0, tzinfo=UTC),
    }
    return Notification(**{**base, **changes})  # type: ignore[arg-type]


def test_feishu_sign_matches_the_documented_vector() -> None:
    assert feishu_sign(SECRET, 1700000000) == "w45RjJ/JLSmtVNrVDMFrFhYJls6HgrtlxG/UFs43++0="


def test_dingtalk_sign_matches_the_documented_vector() -> None:
    assert (
        quote_plus(dingtalk_sign(SECRET, 1700000000123)) == "y0pgYANLUSMjMfpcgR3VXhLNFtynW99C0SWp4U5wOwg%3D"
    )


def test_json_signature_is_hmac_of_timestamp_dot_body() -> None:
    assert json_signature("whsec", 1700000000, b'{"a":1}') == (
        "sha256=8ad37ba156048ae0e0a5533c75cdf26fee88b07f93cb57ee4c80adb053012032"
    )


def test_json_request_is_signed_over_its_exact_body() -> None:
    request = render(Kind.JSON, "https://example.com/hook", note(), secret="whsec", now=NOW)
    body = json.loads(request.body)
    assert body["type"] == "rlark.job.status_changed"
    assert (body["job_id"], body["from_status"], body["to_status"]) == ("j-abc", "Running", "Succeeded")
    assert request.headers["X-RLark-Timestamp"] == "1700000000"
    assert request.headers["X-RLark-Delivery"] == "ev-1"
    expected = hmac.new(b"whsec", b"1700000000." + request.body, hashlib.sha256).hexdigest()
    assert request.headers["X-RLark-Signature"] == f"sha256={expected}"
    assert verify_json_signature(
        "whsec", "1700000000", request.body, request.headers["X-RLark-Signature"], now=1700000010
    )


def test_a_changed_body_old_timestamp_or_other_secret_fails_verification() -> None:
    request = render(Kind.JSON, "https://example.com/hook", note(), secret="whsec", now=NOW)
    signature = request.headers["X-RLark-Signature"]
    assert not verify_json_signature("whsec", "1700000000", request.body + b" ", signature, now=1700000000)
    assert not verify_json_signature("other", "1700000000", request.body, signature, now=1700000000)
    assert not verify_json_signature("whsec", "1700000000", request.body, signature, now=1700009999)


def test_json_without_a_secret_carries_no_signature() -> None:
    request = render(Kind.JSON, "https://example.com/hook", note(), secret=None, now=NOW)
    assert "X-RLark-Signature" not in request.headers


def test_slack_gets_text() -> None:
    request = render(Kind.SLACK, "https://hooks.slack.com/services/T/B/x", note(), secret=None, now=NOW)
    text = json.loads(request.body)["text"]
    assert "train" in text
    assert "Running → Succeeded" in text
    assert "header exited 0" in text


def test_feishu_body_carries_timestamp_and_sign() -> None:
    request = render(
        Kind.FEISHU, "https://open.feishu.cn/open-apis/bot/v2/hook/x", note(), secret=SECRET, now=NOW
    )
    body = json.loads(request.body)
    assert body["msg_type"] == "text"
    assert "Succeeded" in body["content"]["text"]
    key = f"{body['timestamp']}\n{SECRET}".encode()  # Feishu's documented sample, verbatim in effect
    assert body["sign"] == base64.b64encode(hmac.new(key, b"", hashlib.sha256).digest()).decode()
    assert body["timestamp"] == "1700000000"


def test_dingtalk_signs_in_the_query_and_keeps_the_access_token() -> None:
    url = "https://oapi.dingtalk.com/robot/send?access_token=abc"
    request = render(Kind.DINGTALK, url, note(), secret=SECRET, now=NOW, language=Language.ZH_CN)
    query = parse_qs(urlsplit(request.url).query)
    assert query["access_token"] == ["abc"]
    assert query["timestamp"] == ["1700000000123"]
    string_to_sign = f"1700000000123\n{SECRET}".encode()
    digest = hmac.new(SECRET.encode(), string_to_sign, hashlib.sha256).digest()
    assert query["sign"] == [base64.b64encode(digest).decode()]
    body = json.loads(request.body)
    assert body["msgtype"] == "text"
    assert "已成功" in body["text"]["content"]


@pytest.mark.parametrize(
    ("kind", "status", "body", "delivered", "retry"),
    [
        (Kind.JSON, 200, "", True, False),
        (Kind.JSON, 204, "", True, False),
        (Kind.JSON, 500, "boom", False, True),
        (Kind.JSON, 429, "", False, True),
        (Kind.JSON, 404, "no such hook", False, False),
        (Kind.FEISHU, 200, '{"code":0,"msg":"success"}', True, False),
        (Kind.FEISHU, 200, '{"code":19021,"msg":"sign match fail"}', False, True),
        (Kind.DINGTALK, 200, '{"errcode":0,"errmsg":"ok"}', True, False),
        (Kind.DINGTALK, 200, '{"errcode":310000,"errmsg":"sign not match"}', False, True),
    ],
)
def test_answers_decide_delivered_retry_or_give_up(
    kind: Kind, status: int, body: str, delivered: bool, retry: bool
) -> None:
    result = outcome(kind, status, body)
    assert (result.delivered, result.retry) == (delivered, retry)
    if not delivered:
        assert str(status) in result.error


def test_error_text_is_truncated() -> None:
    assert len(outcome(Kind.JSON, 500, "x" * 10_000).error) == 500
