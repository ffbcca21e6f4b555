"""Issue 14, item 6: schemathesis against the gateway's OpenAPI, through the real gateway, as an admin and
as a user — no 5xx, and every status code returned is one the document declares for that operation.

The document is the one the gateway serves (``/api/openapi.json``); requests go to the whole platform the
``stack`` fixture starts (every service and PostgreSQL and Kafka behind the gateway). Hypothesis
generates ``openapi_fuzz.MAX_EXAMPLES`` cases per operation and role, valid and invalid, so one run stays a few
minutes on two cores. Failures are collected (not raised inside hypothesis, which would shrink each for
minutes) and reported together: operation, role, status, and the request as a curl line.

Left out, with the reason: ``GET /api/v1/events`` is a server-sent event stream that never ends (its
contract is tested in tests/e2e); logging in, out and changing one's password would end or lock the
session the run authenticates with (login's answers are tested in services/gateway/tests).
"""

from __future__ import annotations

import asyncio
import json
import re
import sys
from pathlib import Path

import httpx
import pytest
from stack import Stack

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]

FUZZ = Path(__file__).with_name("openapi_fuzz.py")
"""The fuzzing itself runs in its own interpreter: schemathesis and hypothesis import their modules lazily, and
under pytest (both are pytest plugins, so their modules are assertion-rewritten with ``ast.parse``) a lazy
import in a worker thread while this thread's services import too broke Python 3.11's AST recursion counter,
which is one per interpreter ("SystemError: AST constructor recursion depth mismatch")."""
FUZZ_TIMEOUT_S = 780


async def test_no_server_error_and_every_status_documented_as_admin_and_as_user(stack: Stack) -> None:
    _, user_token = await stack.new_user()
    async with httpx.AsyncClient(base_url=stack.url, timeout=30) as anonymous:
        served = await anonymous.get("/api/openapi.json")
    assert served.status_code == 200, served.text
    request = {
        "document": served.json(),
        "base_url": stack.url,
        "roles": [["admin", stack.admin_token], ["user", user_token]],
    }
    fuzz = await asyncio.create_subprocess_exec(
        sys.executable,
        str(FUZZ),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        out, err = await asyncio.wait_for(fuzz.communicate(json.dumps(request).encode()), FUZZ_TIMEOUT_S)
    finally:
        if fuzz.returncode is None:
            fuzz.kill()
            await fuzz.wait()
    assert fuzz.returncode == 0, err.decode()[-4000:]
    report = json.loads(out)
    assert report["calls"] > 1000, f"only {report['calls']} requests were made"
    assert report["findings"] == [], "\n".join(report["findings"])


HOSTILE_SEGMENTS = ["%00", "a%00b", "%C0", "%ED%A0%80", "x" * 300]
"""Path parameter values hypothesis rarely builds: NUL, invalid UTF-8, an encoded surrogate, a long one."""


async def test_hostile_path_parameters_are_answered_4xx_on_every_operation(stack: Stack) -> None:
    async with httpx.AsyncClient(base_url=stack.url, timeout=30) as anonymous:
        document = (await anonymous.get("/api/openapi.json")).json()
    wrong: list[str] = []
    async with stack.client() as admin:
        for path, item in document["paths"].items():
            if "{" not in path or path.endswith("{rest}"):
                continue
            for method in item.keys() & {"get", "post", "put", "patch", "delete"}:
                for segment in HOSTILE_SEGMENTS:
                    url = re.sub(r"\{[^}]+\}", segment, path)
                    try:
                        response = await admin.request(
                            method.upper(), url, json={} if method != "get" else None, timeout=10
                        )
                    except httpx.TimeoutException:
                        wrong.append(f"{method.upper()} {url} -> no answer in 10 s")
                        continue
                    documented = set(item[method]["responses"])
                    if response.status_code >= 500 or str(response.status_code) not in documented:
                        wrong.append(
                            f"{method.upper()} {url} -> {response.status_code} {response.text[:160]}"
                        )
    assert wrong == [], "\n".join(wrong)
