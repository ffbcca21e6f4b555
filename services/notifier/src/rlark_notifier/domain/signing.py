"""Signatures, as each receiver checks them. Pure; every function takes the timestamp it signs.

- Generic JSON (RLark's own): ``X-RLark-Signature: sha256=<hex HMAC-SHA256(secret, f"{timestamp}.{body}")>``
  with ``X-RLark-Timestamp: <unix seconds>``; a receiver recomputes it over the raw body and refuses old
  timestamps (replays).
- Feishu custom bot: ``sign = base64(HMAC-SHA256(key=f"{timestamp}\\n{secret}", msg=b""))`` with
  ``timestamp`` in seconds, both in the JSON body (open.feishu.cn, "custom bot" security settings).
- DingTalk robot: ``sign = urlencode(base64(HMAC-SHA256(key=secret, msg=f"{timestamp}\\n{secret}")))``
  with ``timestamp`` in milliseconds, both as query parameters of the webhook URL (open.dingtalk.com).
"""

from __future__ import annotations

import base64
import hashlib
import hmac

SIGNATURE_HEADER = "X-RLark-Signature"
TIMESTAMP_HEADER = "X-RLark-Timestamp"
EVENT_HEADER = "X-RLark-Event"
DELIVERY_HEADER = "X-RLark-Delivery"


def json_signature(secret: str, timestamp: int, body: bytes) -> str:
    """The ``X-RLark-Signature`` value of ``body`` sent at ``timestamp`` (unix seconds)."""
    message = str(timestamp).encode() + b"." + body
    return "sha256=" + hmac.new(secret.encode(), message, hashlib.sha256).hexdigest()


def verify_json_signature(
    secret: str, timestamp: str, body: bytes, signature: str, *, now: int, tolerance_s: int = 300
) -> bool:
    """What a receiver of generic JSON notifications does: a well-formed, recent timestamp and a
    signature equal (in constant time) to the one recomputed over the raw body."""
    if not timestamp.isdigit() or abs(now - int(timestamp)) > tolerance_s:
        return False
    return hmac.compare_digest(json_signature(secret, int(timestamp), body), signature)


def feishu_sign(secret: str, timestamp: int) -> str:
    """Feishu's ``sign`` for ``timestamp`` (unix seconds)."""
    key = f"{timestamp}\n{secret}".encode()
    return base64.b64encode(hmac.new(key, b"", hashlib.sha256).digest()).decode()


def dingtalk_sign(secret: str, timestamp_ms: int) -> str:
    """DingTalk's ``sign`` for ``timestamp_ms`` (unix milliseconds), before URL encoding."""
    message = f"{timestamp_ms}\n{secret}".encode()
    return base64.b64encode(hmac.new(secret.encode(), message, hashlib.sha256).digest()).decode()
