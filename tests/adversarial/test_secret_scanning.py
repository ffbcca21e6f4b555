"""Issue 14, item 5: a secret wrapped to slip past the scanner is still refused, through the real gateway.

A user submits jobs whose run script or env carries a token base64-, hex- or URL-encoded, or split across
two lines; adds an SSH key whose comment holds a token; sends a token as the ``Idempotency-Key``. Each is
a 422 naming the field (``spec.runScript``, ``spec.tasks[0].env.<NAME>``, ``public_key.comment``,
``Idempotency-Key``), the answer never holds the secret in any of its forms, and nothing is stored.
Before the fix every wrapped secret passed the scanner and the key and the idempotency key were kept.
"""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from jobs import document, make_public_key, role
from stack import Stack

pytestmark = pytest.mark.e2e

# Fake but well-formed: shapes the scanner knows, random bodies no service ever issued.
GITHUB_TOKEN = "ghp_" + "Qx7vN2pL5xR7tY1wK4mB9cD3aE6fG0hJ2kM4"
HF_TOKEN = "hf_" + "AbCdEfGhIjKlMnOpQrStUvWxYzAbCdEfGh"

WRAPPED_IN_SCRIPT: dict[str, tuple[str, str]] = {
    # case: (the line in the run script, how the secret appears on it)
    "base64": ("export GIT_AUTH={}\n", base64.b64encode(GITHUB_TOKEN.encode()).decode()),
    "base64url": ("export CFG={}\n", base64.urlsafe_b64encode(f"HF_TOKEN={HF_TOKEN}".encode()).decode()),
    "hex": ("echo {} | xxd -r -p > ~/.token\n", GITHUB_TOKEN.encode().hex()),
    "url-encoded": ("git clone {}\n", quote(f"https://bot:{GITHUB_TOKEN}@github.com/lab/rl.git", safe="")),
    "split": ("export GH={}\n", f"{GITHUB_TOKEN[:20]}\n    {GITHUB_TOKEN[20:]}"),
    "continued": ("export HF_TOKEN={}\n", f"{HF_TOKEN[:15]}\\\n  {HF_TOKEN[15:]}"),
}


def _job(run_script: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    return document("wrapped", [role("header", 1, "lab", env=env or {})], run_script)


def _secret_errors(body: dict[str, Any]) -> list[dict[str, Any]]:
    return [e for e in body["error"]["details"]["errors"] if e["code"] == "secret_detected"]


def _assert_never_shown(text: str, *secrets: str) -> None:
    for secret in secrets:
        for part in (secret[:12], secret[-12:]):
            assert part not in text, "the answer shows the secret"


async def _no_jobs(stack: Stack, token: str) -> None:
    async with stack.client(token) as user:
        listed = await user.get("/api/v1/jobs")
    assert listed.status_code == 200, listed.text
    assert listed.json()["total"] == 0


async def test_a_wrapped_secret_in_a_job_is_refused_naming_the_field(stack: Stack) -> None:
    _, token = await stack.new_user()
    async with stack.client(token) as user:
        for case, (line, wrapped) in WRAPPED_IN_SCRIPT.items():
            script = "set -e\n" + line.format(wrapped) + "python train.py\n"
            response = await user.post("/api/v1/jobs", json=_job(script))
            assert response.status_code == 422, f"{case}: {response.status_code} {response.text[:300]}"
            errors = _secret_errors(response.json())
            assert [e["field"] for e in errors] == ["spec.runScript"], f"{case}: {response.text[:500]}"
            _assert_never_shown(response.text, GITHUB_TOKEN, HF_TOKEN, wrapped)
        encoded_env = {
            "HF_HOME": "/data/hf",
            "TRAINER_ARGS": base64.b64encode(f"--token {HF_TOKEN}".encode()).decode(),
        }
        response = await user.post("/api/v1/jobs", json=_job("python train.py\n", encoded_env))
        assert response.status_code == 422, response.text
        assert [e["field"] for e in _secret_errors(response.json())] == ["spec.tasks[0].env.TRAINER_ARGS"]
        assert "base64-encoded" in _secret_errors(response.json())[0]["message"]
    await _no_jobs(stack, token)


async def test_a_token_as_idempotency_key_is_refused_and_not_kept(stack: Stack) -> None:
    _, token = await stack.new_user()
    for key in (GITHUB_TOKEN, base64.b64encode(GITHUB_TOKEN.encode()).decode()):
        async with stack.client(token) as user:
            response = await user.post(
                "/api/v1/jobs", json=_job("python train.py\n"), headers={"Idempotency-Key": key}
            )
        assert response.status_code == 422, response.text
        error = response.json()["error"]
        assert (error["code"], error["field"]) == ("idempotency_key_invalid", "Idempotency-Key")
        assert "GitHub token" in error["message"]
        _assert_never_shown(response.text, GITHUB_TOKEN, key)
    await _no_jobs(stack, token)


async def test_an_ssh_key_whose_comment_holds_a_token_is_refused(stack: Stack, tmp_path: Path) -> None:
    _, token = await stack.new_user()
    key_type, blob = make_public_key(tmp_path, "laptop").split()[:2]
    comments = [f"laptop {GITHUB_TOKEN}", "laptop " + base64.b64encode(GITHUB_TOKEN.encode()).decode()]
    async with stack.client(token) as user:
        for comment in comments:
            response = await user.post(
                "/api/v1/keys", json={"name": "laptop", "public_key": f"{key_type} {blob} {comment}"}
            )
            assert response.status_code == 422, response.text
            error = response.json()["error"]
            assert (error["code"], error["field"]) == ("secret_in_comment", "public_key.comment")
            _assert_never_shown(response.text, GITHUB_TOKEN, comment.removeprefix("laptop "))
        kept = await user.post(
            "/api/v1/keys", json={"name": "laptop", "public_key": f"{key_type} {blob} alice@laptop"}
        )
        assert kept.status_code == 201, kept.text
        listed = await user.get("/api/v1/keys")
    assert [k["comment"] for k in listed.json()["items"]] == ["alice@laptop"]
