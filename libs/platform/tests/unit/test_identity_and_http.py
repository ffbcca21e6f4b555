"""Gateway-signed identities, agent tokens and the uniform HTTP error shape."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import uuid
from datetime import UTC, datetime, timedelta

import httpx
import pytest
from fastapi import FastAPI
from pydantic import BaseModel, ConfigDict
from rlark_devinfra.testing import GatewaySigned
from rlark_platform.errors import invalid
from rlark_platform.http import AdminDep, CallerDep, create_app, declared_field
from rlark_platform.identity import (
    SIGNATURE_LIFETIME_S,
    Caller,
    IdentityError,
    ReplayGuard,
    ReplayRefused,
    Role,
    SignedRequest,
    VerifiedCaller,
    _key,
    agent_token_claims,
    issue_agent_token,
    sign_caller,
    verify_agent_token,
    verify_caller,
)

SECRET = "s3cr3t-for-tests"
ALICE = Caller("alice", Role.USER)
ROTATED = datetime(2026, 12, 1, 9, 30, 15, 123456, tzinfo=UTC)
CREATE_KEY = SignedRequest("keys", "POST", "/api/v1/keys?x=1", b'{"name": "k"}')


def test_signed_caller_round_trips_and_tampering_is_refused() -> None:
    headers = sign_caller(SECRET, ALICE, CREATE_KEY, now=1000)
    assert verify_caller(SECRET, headers, CREATE_KEY, now=1010).caller == ALICE
    with pytest.raises(IdentityError, match="invalid"):
        verify_caller(SECRET, {**headers, "X-RLark-Role": "admin"}, CREATE_KEY, now=1010)
    with pytest.raises(IdentityError, match="invalid"):
        verify_caller(SECRET, {**headers, "X-RLark-Nonce": "0" * 32}, CREATE_KEY, now=1010)
    with pytest.raises(IdentityError, match="gateway"):
        verify_caller(SECRET, {}, CREATE_KEY, now=1000)
    with pytest.raises(IdentityError, match="invalid"):
        verify_caller("other-secret", headers, CREATE_KEY, now=1000)


def test_a_signature_is_short_lived() -> None:
    headers = sign_caller(SECRET, ALICE, CREATE_KEY, now=1000)
    assert verify_caller(SECRET, headers, CREATE_KEY, now=1000 + SIGNATURE_LIFETIME_S).caller == ALICE
    with pytest.raises(IdentityError, match="expired"):
        verify_caller(SECRET, headers, CREATE_KEY, now=1000 + SIGNATURE_LIFETIME_S + 1)
    with pytest.raises(IdentityError, match="expired"):
        verify_caller(SECRET, headers, CREATE_KEY, now=1000 - SIGNATURE_LIFETIME_S - 1)
    assert SIGNATURE_LIFETIME_S <= 30


@pytest.mark.parametrize(
    "other",
    [
        SignedRequest("scheduler", "POST", "/api/v1/keys?x=1", b'{"name": "k"}'),
        SignedRequest("keys", "DELETE", "/api/v1/keys?x=1", b'{"name": "k"}'),
        SignedRequest("keys", "POST", "/api/v1/keys/k1?x=1", b'{"name": "k"}'),
        SignedRequest("keys", "POST", "/api/v1/keys?all=true", b'{"name": "k"}'),
        SignedRequest("keys", "POST", "/api/v1/keys?x=1", b'{"name": "evil"}'),
    ],
    ids=["service", "method", "path", "query", "body"],
)
def test_a_signature_covers_service_method_target_and_body(other: SignedRequest) -> None:
    headers = sign_caller(SECRET, ALICE, CREATE_KEY, now=1000)
    with pytest.raises(IdentityError, match="invalid"):
        verify_caller(SECRET, headers, other, now=1000)


def test_the_body_digest_header_must_match_the_body_received() -> None:
    headers = sign_caller(SECRET, ALICE, CREATE_KEY, now=1000)
    with pytest.raises(IdentityError, match="invalid"):
        verify_caller(SECRET, {**headers, "X-RLark-Content-SHA256": "0" * 64}, CREATE_KEY, now=1000)


def test_the_replay_guard_accepts_a_nonce_once_and_forgets_it_after_expiry() -> None:
    guard = ReplayGuard(lifetime_s=30)
    first = verify_caller(SECRET, sign_caller(SECRET, ALICE, CREATE_KEY, now=1000), CREATE_KEY, now=1000)
    guard.check(first, now=1000)
    with pytest.raises(ReplayRefused, match="replay"):
        guard.check(first, now=1001)
    second = verify_caller(SECRET, sign_caller(SECRET, ALICE, CREATE_KEY, now=1000), CREATE_KEY, now=1000)
    guard.check(second, now=1001)
    assert len(guard) == 2
    late = verify_caller(SECRET, sign_caller(SECRET, ALICE, CREATE_KEY, now=1040), CREATE_KEY, now=1040)
    guard.check(late, now=1040)
    assert len(guard) == 1  # the two expired nonces are gone: their signatures are refused as expired


def _accepted(guard: ReplayGuard, caller: Caller, at: int) -> VerifiedCaller:
    verified = verify_caller(SECRET, sign_caller(SECRET, caller, CREATE_KEY, now=at), CREATE_KEY, now=at)
    guard.check(verified, now=at)
    return verified


def test_a_caller_filling_its_share_of_the_replay_guard_is_refused_and_no_one_else() -> None:
    guard = ReplayGuard(max_entries=10, lifetime_s=30, max_per_caller=3)
    for _ in range(3):
        _accepted(guard, ALICE, 1000)
    one_more = verify_caller(SECRET, sign_caller(SECRET, ALICE, CREATE_KEY, now=1000), CREATE_KEY, now=1000)
    with pytest.raises(ReplayRefused, match="too many signed requests of alice"):
        guard.check(one_more, now=1000)
    for user in ("bob", "carol", "dave"):
        _accepted(guard, Caller(user, Role.USER), 1000)  # others are unaffected
    guard.check(one_more, now=1031)  # alice's nonces expired meanwhile


def test_a_full_replay_guard_forgets_the_largest_callers_oldest_nonces_and_refuses_their_age() -> None:
    guard = ReplayGuard(max_entries=4, lifetime_s=30, max_per_caller=3)
    oldest = _accepted(guard, ALICE, 1000)
    _accepted(guard, ALICE, 1001)
    _accepted(guard, ALICE, 1002)
    _accepted(guard, Caller("bob", Role.USER), 1002)
    assert len(guard) == 4
    carol = Caller("carol", Role.USER)
    _accepted(guard, carol, 1003)  # full: alice, holding the most, gives up her oldest nonce
    assert len(guard) == 4
    assert (guard.held("alice"), guard.held("bob"), guard.held("carol")) == (2, 1, 1)
    with pytest.raises(ReplayRefused):  # the forgotten nonce cannot be replayed
        guard.check(oldest, now=1004)
    stale = verify_caller(SECRET, sign_caller(SECRET, ALICE, CREATE_KEY, now=1000), CREATE_KEY, now=1004)
    with pytest.raises(ReplayRefused, match="alice"):  # nor anything of alice's as old
        guard.check(stale, now=1004)
    _accepted(guard, Caller("bob", Role.USER), 1004)  # bob and carol go on
    _accepted(guard, carol, 1004)


def test_expired_nonces_are_dropped_with_their_callers() -> None:
    guard = ReplayGuard(max_entries=100, lifetime_s=30, max_per_caller=10)
    for i in range(5):
        _accepted(guard, Caller(f"user{i}", Role.USER), 1000)
    _accepted(guard, ALICE, 1040)
    assert len(guard) == 6  # the others are pruned when needed, at the latest when the guard is full
    for _ in range(94):
        _accepted(guard, Caller(f"u{uuid.uuid4().hex[:6]}", Role.USER), 1040)
    _accepted(guard, ALICE, 1040)
    assert len(guard) == 96
    assert guard.held("user0") == 0


def test_agent_token_names_its_cluster_and_cannot_be_forged_or_reused_late() -> None:
    token = issue_agent_token(SECRET, "gpu-a", ROTATED, ttl_s=60, now=1000)
    assert verify_agent_token(SECRET, token, now=1030) == "gpu-a"
    with pytest.raises(IdentityError, match="expired"):
        verify_agent_token(SECRET, token, now=1061)
    forged = issue_agent_token("attacker", "gpu-a", ROTATED, now=1000)
    with pytest.raises(IdentityError):
        verify_agent_token(SECRET, forged, now=1000)
    with pytest.raises(IdentityError, match="malformed"):
        verify_agent_token(SECRET, "garbage", now=1000)


def test_agent_token_is_bound_to_the_credential_it_was_issued_under() -> None:
    claims = agent_token_claims(SECRET, issue_agent_token(SECRET, "gpu-a", ROTATED, now=1000), now=1001)
    assert claims.issued_under(ROTATED)
    assert not claims.issued_under(ROTATED + timedelta(microseconds=1))  # a rotation a moment later
    assert not claims.issued_under(ROTATED - timedelta(seconds=1))
    # A token of the form before the claim existed is refused, not taken as bound to anything.
    body = base64.urlsafe_b64encode(json.dumps({"c": "gpu-a", "exp": 2000}).encode()).decode().rstrip("=")
    signature = hmac.new(_key(SECRET, "agent"), body.encode(), hashlib.sha256).digest()
    old = f"{body}.{base64.urlsafe_b64encode(signature).decode().rstrip('=')}"
    with pytest.raises(IdentityError, match="malformed"):
        agent_token_claims(SECRET, old, now=1000)
    with pytest.raises(ValueError, match="timezone"):
        issue_agent_token(SECRET, "gpu-a", datetime(2026, 1, 1))


def test_missing_internal_secret_is_a_clear_error() -> None:
    with pytest.raises(IdentityError, match="RLARK_INTERNAL_SECRET"):
        sign_caller("", Caller("a", Role.USER), CREATE_KEY)


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


async def call(
    method: str, path: str, caller: Caller | None = None, app: FastAPI | None = None, **kw: object
) -> httpx.Response:
    transport = httpx.ASGITransport(app=app or build())
    auth = GatewaySigned(caller, "test", SECRET) if caller is not None else None
    async with httpx.AsyncClient(transport=transport, base_url="http://t", auth=auth) as client:
        return await client.request(method, path, **kw)  # type: ignore[arg-type]


async def test_internal_routes_refuse_calls_that_bypass_the_gateway() -> None:
    response = await call("POST", "/things", json={"name": "x"})
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "unauthenticated"


async def test_user_cannot_call_admin_routes() -> None:
    response = await call("DELETE", "/things", Caller("bob", Role.USER))
    assert response.status_code == 403
    ok = await call("DELETE", "/things", Caller("root", Role.ADMIN))
    assert ok.json() == {"by": "root"}


async def test_a_captured_identity_is_refused_on_another_route_another_service_or_a_second_time() -> None:
    app = build()
    captured: dict[str, str] = {}

    async def capture(request: httpx.Request) -> None:
        captured.update({k: v for k, v in request.headers.items() if k.startswith("x-rlark-")})

    transport = httpx.ASGITransport(app=app)
    auth = GatewaySigned(Caller("root", Role.ADMIN), "test", SECRET)
    async with httpx.AsyncClient(
        transport=transport, base_url="http://t", auth=auth, event_hooks={"request": [capture]}
    ) as admin:
        assert (await admin.delete("/things")).status_code == 200
    async with httpx.AsyncClient(transport=transport, base_url="http://t", headers=captured) as replay:
        again = await replay.delete("/things")
        assert (again.status_code, again.json()["error"]["code"]) == (401, "unauthenticated")
        assert "replay" in again.json()["error"]["message"]
        elsewhere = await replay.post("/things", json={"name": "x"})
        assert elsewhere.status_code == 401
    other_service = create_app("other", internal_secret=SECRET)

    @other_service.delete("/things")
    async def wipe(caller: AdminDep) -> dict[str, str]:
        return {"by": caller.user}

    other = httpx.ASGITransport(app=other_service)
    async with httpx.AsyncClient(transport=other, base_url="http://t", headers=captured) as replay:
        assert (await replay.delete("/things")).status_code == 401


async def test_bad_input_gets_a_4xx_naming_the_field_never_a_500() -> None:
    extra = await call("POST", "/things", ALICE, json={"name": "x", "surprise": 1})
    assert extra.status_code == 422
    assert extra.json()["error"]["field"] == "surprise"
    missing = await call("POST", "/things", ALICE, json={})
    assert missing.json()["error"] == {**missing.json()["error"], "code": "invalid_request", "field": "name"}
    garbage = await call(
        "POST",
        "/things",
        ALICE,
        content=b"{nope",
    )
    assert garbage.status_code == 422
    taken = await call("POST", "/things", ALICE, json={"name": "taken"})
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


async def test_a_public_app_serves_metrics_only_with_its_token() -> None:
    off = create_app("gw", internal_secret=SECRET, public=True)
    assert (await call("GET", "/metrics", app=off)).status_code == 404
    guarded = create_app("gw", internal_secret=SECRET, public=True, metrics_token="m-token")
    assert (await call("GET", "/metrics", app=guarded)).status_code == 401
    wrong = await call("GET", "/metrics", app=guarded, headers={"Authorization": "Bearer nope"})
    assert wrong.status_code == 401
    right = await call("GET", "/metrics", app=guarded, headers={"Authorization": "Bearer m-token"})
    assert b"rlark_http_requests_total" in right.content


def test_an_app_that_declares_its_fields_names_only_those_in_a_422_and_every_other_as_the_body() -> None:
    known = frozenset({"name", "endpoints"})
    assert declared_field(("body", "name"), known) == "name"
    assert declared_field(("body", "endpoints", 2, "url"), known) == "endpoints[2].url"
    assert declared_field(("body", "pasted-secret-value"), known) == "body"
    assert declared_field(("body", 0), known) == "body"
    assert declared_field(("body",), known) == ""
    # Without a declaration any field is named, made safe to print.
    assert declared_field(("body", "extra"), None) == "extra"
    assert declared_field(("body", "x" * 100), None) == "<unexpected field>"
