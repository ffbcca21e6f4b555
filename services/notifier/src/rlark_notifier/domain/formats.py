"""One notification as the HTTP request each kind of receiver expects, and what its answer means. Pure.

- ``json``: the body is ``{"type": "rlark.job.status_changed", ...Notification.to_json()}`` (compact JSON,
  keys sorted), with ``X-RLark-Event``, ``X-RLark-Delivery`` (the event id: receivers dedupe on it, since
  delivery is at-least-once) and, with a secret, ``X-RLark-Timestamp`` and ``X-RLark-Signature``.
- ``slack``: an incoming webhook's ``{"text": ...}``.
- ``feishu``: a custom bot's ``{"msg_type": "text", "content": {"text": ...}}``, plus ``timestamp`` and
  ``sign`` with a secret.
- ``dingtalk``: a robot's ``{"msgtype": "text", "text": {"content": ...}}``; with a secret, ``timestamp``
  and ``sign`` are added to the URL's query.

Answers: 2xx is delivered — except Feishu's and DingTalk's, which answer 200 with a non-zero ``code`` /
``errcode`` when they refuse (a bad signature, a rate limit), a failure worth retrying. 408, 425, 429 and
5xx are retried; any other 4xx is final (the endpoint is wrong: retrying will not fix it).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from rlark_notifier.domain.model import Kind, Language, Notification
from rlark_notifier.domain.signing import (
    DELIVERY_HEADER,
    EVENT_HEADER,
    SIGNATURE_HEADER,
    TIMESTAMP_HEADER,
    dingtalk_sign,
    feishu_sign,
    json_signature,
)

JSON_TYPE = "rlark.job.status_changed"
TEST_TYPE = "rlark.endpoint.test"
MAX_ERROR_CHARS = 500
"""Longest error text kept per attempt (a receiver's answer is cut to this)."""

_STATE_ZH = {
    "Pending": "排队中",
    "Scheduled": "已调度",
    "Starting": "启动中",
    "Running": "运行中",
    "Succeeded": "已成功",
    "Failed": "已失败",
    "Cancelled": "已取消",
    "Lost": "已失联",
}


@dataclass(frozen=True, slots=True)
class OutgoingRequest:
    url: str
    headers: dict[str, str]
    body: bytes


@dataclass(frozen=True, slots=True)
class Outcome:
    delivered: bool
    retry: bool
    error: str = ""


def message_text(notification: Notification, language: Language) -> str:
    """The one-line message chat receivers show."""
    n = notification
    name = n.job_name or n.job_id
    if language is Language.ZH_CN:
        if n.is_test:
            return f"[RLark] 测试通知：端点配置正确（作业 {name}）"
        before = _STATE_ZH.get(n.from_status, n.from_status) or "（新）"
        after = _STATE_ZH.get(n.to_status, n.to_status)
        return f"[RLark] 作业 {name}（{n.job_id}，{n.owner}）：{before} → {after}。原因：{n.reason}"
    if n.is_test:
        return f"[RLark] Test notification: this endpoint works (job {name})"
    before = n.from_status or "(new)"
    return f"[RLark] Job {name} ({n.job_id}, {n.owner}): {before} → {n.to_status}. Reason: {n.reason}"


def _compact(data: object) -> bytes:
    return json.dumps(data, separators=(",", ":"), sort_keys=True, ensure_ascii=False).encode()


def _with_query(url: str, extra: dict[str, str]) -> str:
    parts = urlsplit(url)
    query = [*parse_qsl(parts.query, keep_blank_values=True), *extra.items()]
    return urlunsplit(parts._replace(query=urlencode(query)))


def render(
    kind: Kind,
    url: str,
    notification: Notification,
    *,
    secret: str | None,
    now: datetime,
    language: Language = Language.EN,
) -> OutgoingRequest:
    """The request for one attempt; ``now`` is the attempt's time (signatures carry it)."""
    seconds = int(now.timestamp())
    headers = {"Content-Type": "application/json; charset=utf-8", "User-Agent": "RLark-Notifier/1"}
    if kind is Kind.JSON:
        event_type = TEST_TYPE if notification.is_test else JSON_TYPE
        body = _compact({"type": event_type, **notification.to_json()})
        headers |= {EVENT_HEADER: event_type, DELIVERY_HEADER: notification.event_id}
        if secret:
            headers |= {
                TIMESTAMP_HEADER: str(seconds),
                SIGNATURE_HEADER: json_signature(secret, seconds, body),
            }
        return OutgoingRequest(url, headers, body)
    text = message_text(notification, language)
    if kind is Kind.SLACK:
        return OutgoingRequest(url, headers, _compact({"text": text}))
    if kind is Kind.FEISHU:
        payload: dict[str, object] = {"msg_type": "text", "content": {"text": text}}
        if secret:
            payload |= {"timestamp": str(seconds), "sign": feishu_sign(secret, seconds)}
        return OutgoingRequest(url, headers, _compact(payload))
    body = _compact({"msgtype": "text", "text": {"content": text}})
    if secret:
        millis = int(now.timestamp() * 1000)
        url = _with_query(url, {"timestamp": str(millis), "sign": dingtalk_sign(secret, millis)})
    return OutgoingRequest(url, headers, body)


def _app_code(kind: Kind, body: str) -> tuple[int, str] | None:
    """Feishu's ``code`` (or ``StatusCode``) / DingTalk's ``errcode`` and message, when the body has one."""
    try:
        data = json.loads(body)
    except ValueError:
        return None
    if not isinstance(data, dict):
        return None
    keys = ("code", "StatusCode") if kind is Kind.FEISHU else ("errcode",)
    for key in keys:
        if isinstance(data.get(key), int):
            message = data.get("msg") or data.get("errmsg") or data.get("StatusMessage") or ""
            return int(data[key]), str(message)
    return None


def outcome(kind: Kind, status: int, body: str) -> Outcome:
    """What a receiver's answer means for the delivery."""
    if 200 <= status < 300:
        if kind in (Kind.FEISHU, Kind.DINGTALK):
            code = _app_code(kind, body)
            if code is not None and code[0] != 0:
                return Outcome(False, True, truncate(f"HTTP {status}, code {code[0]}: {code[1]}"))
        return Outcome(True, False)
    error = truncate(f"HTTP {status}: {body.strip()}" if body.strip() else f"HTTP {status}")
    retry = status in (408, 425, 429) or status >= 500
    return Outcome(False, retry, error)


def truncate(text: str) -> str:
    return text if len(text) <= MAX_ERROR_CHARS else text[: MAX_ERROR_CHARS - 1] + "…"
