"""Issue 31: a hostile user's request bodies and webhook URLs, through the real gateway.

- Job documents that broke the scheduler's parser — a ``!!python/object/apply`` tag, JSON nested 100,000
  deep, YAML nested 50,000 deep — are answered by preview and submit with their errors (``yaml_tag_refused``,
  ``document_too_deep`` naming the limit), never a 500, and an immediate repeat is answered the same way
  (it was a 503 while the first one still burned the scheduler's CPU). The README's
  ``restartPolicy: {maxRestarts: N, on: [...]}`` is read as written, and a token in an image tag is shown
  nowhere in the preview (its plan showed it).
- A body that is not UTF-8, or JSON nested past the decoder's limit, is a 422 in the error envelope naming
  ``body`` on the gateway's own routes and on every service's (it was a bare 400 ``{"detail": ...}``).
- A webhook URL whose host is a loopback or metadata address spelled as ``inet_aton`` reads it (``127.1``,
  ``2130706433``, ``0x7f000001``, ``0177.0.0.1``, full-width digits) is refused at registration by a notifier
  that calls public addresses only (they were registered and only failed at send time).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from jobs import document, role
from stack import QUICK_OVERRIDES, Stack, platform

pytestmark = pytest.mark.e2e

GITHUB_TOKEN = "ghp_" + "Zq8Kp3Lm7Nx2Vb6Tc9Rd4Wf1Hg5Js0Ya8Ue3I"


def _yaml(doc: dict[str, Any]) -> str:
    return yaml.safe_dump(doc, sort_keys=False)


YAML, JSON = {"Content-Type": "application/yaml"}, {"Content-Type": "application/json"}
HOSTILE_DOCUMENTS: dict[str, tuple[str, dict[str, str], str]] = {
    # case: (the body, its type, the error expected first)
    "python tag": (
        "metadata: {name: x}\nspec: !!python/object/apply:os.system [id]\n",
        YAML,
        "yaml_tag_refused",
    ),
    "json 100,000 deep": (
        '{"metadata": {"name": "x"}, "spec": ' + "[" * 100_000 + "]" * 100_000 + "}",
        JSON,
        "document_too_deep",
    ),
    "yaml 50,000 deep": (
        "metadata: {name: x}\nspec: " + "[" * 50_000 + "]" * 50_000 + "\n",
        YAML,
        "document_too_deep",
    ),
}


async def test_hostile_job_documents_are_answered_with_their_errors_never_a_500(stack: Stack) -> None:
    _, token = await stack.new_user()
    async with stack.client(token) as user:
        for case, (body, headers, code) in HOSTILE_DOCUMENTS.items():
            for _ in range(2):  # an immediate repeat gets the same answer
                preview = await user.post("/api/v1/jobs:preview", content=body, headers=headers)
                assert preview.status_code == 200, f"{case}: {preview.status_code} {preview.text[:300]}"
                assert [e["code"] for e in preview.json()["errors"]] == [code], case
                submitted = await user.post("/api/v1/jobs", content=body, headers=headers)
                assert submitted.status_code == 422, f"{case}: {submitted.status_code} {submitted.text[:300]}"
                error = submitted.json()["error"]
                assert error["code"] == code, case
                assert error["message_key"] == code
            if code == "document_too_deep":
                assert "64" in error["message"]

        documented = _yaml(document("restarts", [role("actor", 1)], "python train.py\n"))
        documented += "  restartPolicy:\n    maxRestarts: 2\n    on: [WorkerLost, NodeGone]\n"
        preview = await user.post("/api/v1/jobs:preview", content=documented, headers=YAML)
        assert preview.status_code == 200, preview.text
        assert [e for e in preview.json()["errors"] if e["field"].startswith("spec.restartPolicy")] == []
        assert "- NodeGone" in preview.json()["yaml"]  # the normalised document keeps the policy

        leaky = document(
            "leaky", [role("actor", 1, image=f"registry.example.com/rlinf:{GITHUB_TOKEN}")], "true\n"
        )
        preview = await user.post("/api/v1/jobs:preview", json=leaky)
        refused = await user.post("/api/v1/jobs", json=leaky)
    assert "secret_detected" in {e["code"] for e in preview.json()["errors"]}
    assert refused.status_code == 422
    assert [w["image"] for p in preview.json()["plan"] for w in p["workers"]] == [
        "registry.example.com/rlinf:[redacted]"
    ]
    for answer in (preview.text, refused.text):
        assert GITHUB_TOKEN[:12] not in answer
        assert GITHUB_TOKEN[-12:] not in answer


BODY_ROUTES = [
    ("POST", "/api/v1/auth/tokens"),  # the gateway's own
    ("POST", "/api/v1/users"),  # the gateway's own, admins
    ("POST", "/api/v1/keys"),  # keys
    ("POST", "/api/v1/clusters"),  # inventory
    ("POST", "/api/v1/domains"),  # netdomain
    ("PUT", "/api/v1/jobs/job-000000000000/ssh-keys"),  # scheduler
    ("POST", "/api/v1/notifications/endpoints"),  # notifier
]


async def test_a_body_that_cannot_be_decoded_is_a_422_in_the_error_envelope_on_every_route(
    stack: Stack,
) -> None:
    bodies = {
        "invalid_request.body_not_utf8": b'{"name": "caf\xe9 \xff\xfe"}',
        "invalid_request.body_too_deep": b"[" * 100_000 + b"]" * 100_000,
        "invalid_request.json_invalid": b'{"name": ',
    }
    async with stack.client() as admin:
        for method, path in BODY_ROUTES:
            for key, body in bodies.items():
                answer = await admin.request(
                    method, path, content=body, headers={"Content-Type": "application/json"}
                )
                assert answer.status_code == 422, (
                    f"{method} {path} {key}: {answer.status_code} {answer.text[:300]}"
                )
                assert set(answer.json()) == {"error"}, answer.text
                error = answer.json()["error"]
                assert (error["code"], error["field"], error["message_key"]) == (
                    "invalid_request",
                    "body",
                    key,
                )


@pytest.fixture
async def public_only(postgres_server_url: str, kafka_bootstrap: str, tmp_path: Path) -> AsyncIterator[Stack]:
    """The platform with its notifier as a deployment runs it by default: https to public addresses only."""
    overrides = {
        **QUICK_OVERRIDES,
        "notifier": {"notifier_allow_http": False, "notifier_allow_private": False},
    }
    async with platform(postgres_server_url, kafka_bootstrap, tmp_path, **overrides) as running:
        yield running


async def test_every_spelling_of_a_loopback_or_metadata_address_is_refused_at_webhook_registration(
    public_only: Stack,
) -> None:
    hosts = [
        "127.1",
        "2130706433",
        "0x7f000001",
        "0177.0.0.1",
        "１２７.０.０.１",
        "0xa9fea9fe",
        "169.254.169.254",
    ]
    _, token = await public_only.new_user()
    async with public_only.client(token) as user:
        for host in hosts:
            body = {"name": "hook", "kind": "json", "url": f"https://{host}/hook"}
            answer = await user.post("/api/v1/notifications/endpoints", json=body)
            assert answer.status_code == 422, f"{host}: {answer.status_code} {answer.text[:300]}"
            assert (answer.json()["error"]["code"], answer.json()["error"]["field"]) == (
                "forbidden_address",
                "url",
            )
        listed = await user.get("/api/v1/notifications/endpoints")
    assert listed.json()["total"] == 0
