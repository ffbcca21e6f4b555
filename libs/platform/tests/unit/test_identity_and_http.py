"""Gateway-signed identities, agent tokens and the uniform HTTP error shape."""

from __future__ import annotations

import httpx
import pytest
from fastapi import FastAPI
from pydantic import BaseModel, ConfigDict
from rlark_platform.errors import invalid
from rlark_platform.http import AdminDep, CallerDep, create_app
from rlark_platform.identity import (
    Caller,
    IdentityError,
    Role,
    issue_agent_token,
    sign_caller,
    verify_agent_token,
    verify_caller,
)

SECRET = "s3cr3t-for-tests"


def test_signed_caller_round_trips_and_tampering_is_refused() -> None:
    headers = sign_caller(SECRET, Caller("alice", Role.USER), now=1000)
    assert verify_caller(SECRET, headers, now=1010) == Caller("alice", Role.USER)
    with pytest.raises(IdentityError, match="invalid"):
        verify_caller(SECRET, {**headers, "X-RLark-Role": "admin"}, now=1010)
    with pytest.raises(IdentityError, match="expired"):
        verify_caller(SECRET, headers, now=1000 + 301)
    with pytest.raises(IdentityError, match="gateway"):
        verify_caller(SECRET, {}, now=1000)
    with pytest.raises(IdentityError, match="invalid"):
        verify_caller("other-secret", headers, now=1000)


def test_agent_token_names_its_cluster_and_cannot_be_forged_or_reused_late() -> None:
    token = issue_agent_token(SECRET, "gpu-a", ttl_s=60, now=1000)
    assert verify_agent_token(SECRET, token, now=1030) == "gpu-a"
    with pytest.raises(IdentityError, match="expired"):
        verify_agent_token(SECRET, token, now=1061)
    forged = issue_agent_token("attacker", "gpu-a", now=1000)
    with pytest.raises(IdentityError):
        verify_agent_token(SECRET, forged, now=1000)
    with pytest.raises(IdentityError, match="malformed"):
        verify_agent_token(SECRET, "garbage", now=1000)


def test_missing_internal_secret_is_a_clear_error() -> None:
    with pytest.raises(IdentityError, match="RLARK_INTERNAL_SECRET"):
        sign_caller("", Caller("a", Role.USER))


class Body(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str


def build() -> FastAPI:
    app = create_app("test", internal_secret=SECRET)

    @app.post("/things")
    async def create(body: Body, caller: CallerDep) -> dict[str, str]:
        if body.name == "taken":
            raise invalid("name_taken", "name 'taken' is already used", "name")
        return {"owner": caller.user}

    @app.delete("/things")
    async def wipe(caller: AdminDep) -> dict[str, str]:
        return {"by": caller.user}

    return app


async def call(method: str, path: str, headers: dict[str, str] | None = None, **kw: object) -> httpx.Response:
    transport = httpx.ASGITransport(app=build())
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
        return await client.request(method, path, headers=headers, **kw)  # type: ignore[arg-type]


async def test_internal_routes_refuse_calls_that_bypass_the_gateway() -> None:
    response = await call("POST", "/things", json={"name": "x"})
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "unauthenticated"


async def test_user_cannot_call_admin_routes() -> None:
    response = await call("DELETE", "/things", headers=sign_caller(SECRET, Caller("bob", Role.USER)))
    assert response.status_code == 403
    ok = await call("DELETE", "/things", headers=sign_caller(SECRET, Caller("root", Role.ADMIN)))
    assert ok.json() == {"by": "root"}


async def test_bad_input_gets_a_4xx_naming_the_field_never_a_500() -> None:
    headers = sign_caller(SECRET, Caller("alice", Role.USER))
    extra = await call("POST", "/things", headers=headers, json={"name": "x", "surprise": 1})
    assert extra.status_code == 422
    assert extra.json()["error"]["field"] == "surprise"
    missing = await call("POST", "/things", headers=headers, json={})
    assert missing.json()["error"] == {**missing.json()["error"], "code": "invalid_request", "field": "name"}
    garbage = await call(
        "POST",
        "/things",
        headers=headers,
        content=b"{nope",
    )
    assert garbage.status_code == 422
    taken = await call("POST", "/things", headers=headers, json={"name": "taken"})
    assert taken.status_code == 422
    assert taken.json()["error"] == {
        "code": "name_taken",
        "message": "name 'taken' is already used",
        "field": "name",
    }


async def test_health_and_metrics_answer_without_identity() -> None:
    assert (await call("GET", "/healthz")).json() == {"status": "ok"}
    assert (await call("GET", "/readyz")).status_code == 200
    assert b"rlark_http_requests_total" in (await call("GET", "/metrics")).content
