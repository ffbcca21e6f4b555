"""Login, sessions, API tokens, roles and the audit log, against a real gateway and PostgreSQL."""

from __future__ import annotations

import asyncio

import pytest
from conftest import ADMIN, Stack
from rlark_gateway.domain.accounts import digest

pytestmark = pytest.mark.integration

# Every route of the public API with a method, for the "unauthenticated → 401" sweep.
AUTHENTICATED_ROUTES = [
    ("POST", "/api/v1/auth/logout"),
    ("GET", "/api/v1/auth/me"),
    ("POST", "/api/v1/auth/password"),
    ("GET", "/api/v1/auth/tokens"),
    ("POST", "/api/v1/auth/tokens"),
    ("DELETE", "/api/v1/auth/tokens/tok_1"),
    ("GET", "/api/v1/users"),
    ("POST", "/api/v1/users"),
    ("GET", "/api/v1/users/alice"),
    ("PATCH", "/api/v1/users/alice"),
    ("DELETE", "/api/v1/users/alice"),
    ("GET", "/api/v1/audit"),
    ("GET", "/api/v1/events"),
    ("GET", "/api/v1/clusters"),
    ("POST", "/api/v1/clusters"),
    ("GET", "/api/v1/clusters/a"),
    ("PATCH", "/api/v1/clusters/a"),
    ("DELETE", "/api/v1/clusters/a"),
    ("POST", "/api/v1/clusters/a/credential"),
    ("GET", "/api/v1/nodes"),
    ("GET", "/api/v1/clusters/a/nodes/n"),
    ("POST", "/api/v1/clusters/a/nodes/n/cordon"),
    ("POST", "/api/v1/clusters/a/nodes/n/uncordon"),
    ("GET", "/api/v1/labels"),
    ("GET", "/api/v1/clusters/a/match"),
    ("GET", "/api/v1/keys"),
    ("POST", "/api/v1/keys"),
    ("GET", "/api/v1/keys/k1"),
    ("PATCH", "/api/v1/keys/k1"),
    ("DELETE", "/api/v1/keys/k1"),
    ("GET", "/api/v1/domains"),
    ("POST", "/api/v1/domains"),
    ("GET", "/api/v1/domains/lab"),
    ("DELETE", "/api/v1/domains/lab"),
    ("POST", "/api/v1/domains:check"),
    ("GET", "/api/v1/templates"),
    ("POST", "/api/v1/jobs:preview"),
    ("POST", "/api/v1/jobs"),
    ("GET", "/api/v1/jobs"),
    ("GET", "/api/v1/jobs/j1"),
    ("POST", "/api/v1/jobs/j1:cancel"),
    ("PUT", "/api/v1/jobs/j1/ssh-keys"),
    ("GET", "/api/v1/jobs/j1/logs"),
    ("GET", "/api/v1/jobs/j1/events"),
    ("GET", "/api/v1/agent/other"),
    ("GET", "/api/v1/no-such-thing"),
]

ADMIN_ONLY_ROUTES = [
    ("POST", "/api/v1/clusters", {"name": "x"}),
    ("PATCH", "/api/v1/clusters/a", {"display_name": "x"}),
    ("DELETE", "/api/v1/clusters/a", None),
    ("POST", "/api/v1/clusters/a/credential", None),
    ("POST", "/api/v1/clusters/a/nodes/n/cordon", None),
    ("POST", "/api/v1/domains", {"name": "lab", "cidr": "10.100.0.0/16"}),
    ("DELETE", "/api/v1/domains/lab", None),
    ("GET", "/api/v1/users", None),
    ("POST", "/api/v1/users", {"username": "mallory", "password": "whatever-123", "role": "admin"}),
    ("PATCH", "/api/v1/users/root", {"role": "user"}),
    ("DELETE", "/api/v1/users/root", None),
    ("GET", "/api/v1/audit", None),
]


@pytest.mark.parametrize(("method", "path"), AUTHENTICATED_ROUTES)
async def test_every_api_route_refuses_unauthenticated_callers(stack: Stack, method: str, path: str) -> None:
    async with stack.client() as client:
        response = await client.request(method, path, json={} if method != "GET" else None)
    assert response.status_code == 401, response.text
    assert response.json()["error"]["code"] == "unauthenticated"


async def test_forged_or_malformed_credentials_are_refused(stack: Stack) -> None:
    async with stack.client() as client:
        client.cookies.set("rlark_session", "made-up")
        forged_cookie = await client.get("/api/v1/auth/me")
        client.cookies.clear()
        assert forged_cookie.status_code == 401
        assert forged_cookie.json()["error"]["code"] == "session_expired"
        forged_token = await client.get("/api/v1/auth/me", headers={"Authorization": "Bearer rlk_made_up"})
        assert forged_token.json()["error"]["code"] == "invalid_token"
        basic = await client.get("/api/v1/auth/me", headers={"Authorization": "Basic cm9vdDpyb290"})
        assert basic.status_code == 401
        identity = await client.get(
            "/api/v1/auth/me", headers={"X-RLark-User": ADMIN, "X-RLark-Role": "admin"}
        )
        assert identity.status_code == 401


async def test_login_sets_an_httponly_lax_cookie_and_stores_only_its_hash(stack: Stack) -> None:
    username, password = await stack.new_user()
    async with stack.client() as client:
        response = await client.post("/api/v1/auth/login", json={"username": username, "password": password})
        assert response.status_code == 200
        assert response.json()["user"] == {"username": username, "role": "user"}
        cookie_header = response.headers["set-cookie"]
        assert cookie_header.startswith("rlark_session=")
        assert "HttpOnly" in cookie_header
        assert "SameSite=lax" in cookie_header or "SameSite=Lax" in cookie_header
        assert f"Max-Age={stack.settings.session_ttl_s}" in cookie_header
        assert "Path=/" in cookie_header
        session_id = client.cookies["rlark_session"]
        me = await client.get("/api/v1/auth/me")
        assert me.json() == {"username": username, "role": "user"}
    rows = await stack.fetch("SELECT id_hash, expires_at FROM sessions WHERE username = $1", username)
    assert [r["id_hash"] for r in rows] == [digest(session_id)]
    assert session_id not in str(await stack.fetch("SELECT * FROM sessions"))


async def test_logout_ends_the_session_and_clears_the_cookie(stack: Stack) -> None:
    username, password = await stack.new_user()
    client = await stack.login(username, password)
    async with client:
        session_id = client.cookies["rlark_session"]
        out = await client.post("/api/v1/auth/logout")
        assert out.status_code == 204
        assert 'rlark_session=""' in out.headers["set-cookie"] or "Max-Age=0" in out.headers["set-cookie"]
        # Even a client that kept the old cookie is out.
        client.cookies.set("rlark_session", session_id)
        again = await client.get("/api/v1/auth/me")
        assert again.status_code == 401
    assert await stack.fetch("SELECT 1 FROM sessions WHERE username = $1", username) == []


async def test_expired_sessions_are_refused(stack: Stack) -> None:
    username, password = await stack.new_user()
    async with await stack.login(username, password) as client:
        await stack.fetch(
            "UPDATE sessions SET expires_at = now() - interval '1 second' WHERE username = $1", username
        )
        response = await client.get("/api/v1/auth/me")
        assert response.status_code == 401
        assert response.json()["error"]["code"] == "session_expired"


async def test_wrong_password_and_unknown_user_get_the_same_401(stack: Stack) -> None:
    username, _ = await stack.new_user()
    async with stack.client() as client:
        wrong = await client.post(
            "/api/v1/auth/login", json={"username": username, "password": "not-it-at-all"}
        )
        unknown = await client.post(
            "/api/v1/auth/login", json={"username": "nobody-here", "password": "not-it-at-all"}
        )
    assert wrong.status_code == unknown.status_code == 401
    assert wrong.json() == unknown.json()
    assert wrong.json()["error"]["code"] == "invalid_credentials"
    assert (wrong.json()["error"]["message_key"], wrong.json()["error"]["params"]) == (
        "invalid_credentials",
        {},
    )
    assert "set-cookie" not in wrong.headers


async def test_repeated_failed_logins_are_throttled_per_username(stack: Stack) -> None:
    username, password = await stack.new_user()
    other, other_password = await stack.new_user()
    async with stack.client() as client:
        for _ in range(stack.settings.login_max_failures):
            bad = await client.post(
                "/api/v1/auth/login", json={"username": username, "password": "guess-guess"}
            )
            assert bad.status_code == 401
        blocked = await client.post("/api/v1/auth/login", json={"username": username, "password": password})
        assert blocked.status_code == 429
        assert blocked.json()["error"]["code"] == "too_many_attempts"
        fine = await client.post("/api/v1/auth/login", json={"username": other, "password": other_password})
        assert fine.status_code == 200


async def test_login_input_is_validated_without_a_500(stack: Stack) -> None:
    async with stack.client() as client:
        for body in (
            {},
            {"username": "a"},
            {"username": "a", "password": "b", "extra": 1},
            {"username": 1, "password": []},
        ):
            response = await client.post("/api/v1/auth/login", json=body)
            assert response.status_code == 422, body
            assert response.json()["error"]["code"] == "invalid_request"
        garbage = await client.post(
            "/api/v1/auth/login", content=b"{not json", headers={"content-type": "application/json"}
        )
        assert garbage.status_code == 422


async def test_api_token_is_shown_once_works_as_bearer_and_can_be_revoked(stack: Stack) -> None:
    username, password = await stack.new_user()
    async with await stack.login(username, password) as session:
        created = await session.post("/api/v1/auth/tokens", json={"name": "laptop"})
        assert created.status_code == 201
        token, token_id = created.json()["token"], created.json()["id"]
        listed = (await session.get("/api/v1/auth/tokens")).json()
        assert listed["total"] == 1
        assert listed["items"][0]["id"] == token_id
        assert "token" not in listed["items"][0]
        async with stack.client(headers={"Authorization": f"Bearer {token}"}) as cli:
            assert (await cli.get("/api/v1/auth/me")).json() == {"username": username, "role": "user"}
            revoked = await session.delete(f"/api/v1/auth/tokens/{token_id}")
            assert revoked.status_code == 204
            refused = await cli.get("/api/v1/auth/me")
            assert refused.status_code == 401
            assert refused.json()["error"]["code"] == "invalid_token"
        assert (await session.delete(f"/api/v1/auth/tokens/{token_id}")).status_code == 404
    stored = await stack.fetch("SELECT token_hash, last_used_at FROM api_tokens WHERE id = $1", token_id)
    assert stored[0]["token_hash"] == digest(token)
    assert stored[0]["last_used_at"] is not None
    assert token not in str(await stack.fetch("SELECT * FROM api_tokens"))


async def test_users_cannot_revoke_other_users_tokens(stack: Stack) -> None:
    _, alice = await stack.user_client()
    _, bob = await stack.user_client()
    async with alice, bob:
        token_id = (await alice.post("/api/v1/auth/tokens", json={"name": "ci"})).json()["id"]
        assert (await bob.delete(f"/api/v1/auth/tokens/{token_id}")).status_code == 404
        assert (await alice.get("/api/v1/auth/tokens")).json()["total"] == 1


async def test_logout_with_a_bearer_token_revokes_that_token(stack: Stack) -> None:
    _, session = await stack.user_client()
    async with session:
        token = (await session.post("/api/v1/auth/tokens", json={"name": "cli"})).json()["token"]
        async with stack.client(headers={"Authorization": f"Bearer {token}"}) as cli:
            assert (await cli.post("/api/v1/auth/logout")).status_code == 204
            assert (await cli.get("/api/v1/auth/me")).status_code == 401
        # The console session is another credential and stays valid.
        assert (await session.get("/api/v1/auth/me")).status_code == 200


@pytest.mark.parametrize(("method", "path", "body"), ADMIN_ONLY_ROUTES)
async def test_users_get_403_on_admin_routes(stack: Stack, method: str, path: str, body: object) -> None:
    _, client = await stack.user_client()
    async with client:
        response = await client.request(method, path, json=body)
    assert response.status_code == 403, response.text
    assert response.json()["error"]["code"] == "forbidden"


async def test_admin_manages_users_and_a_new_user_can_log_in(stack: Stack) -> None:
    async with await stack.admin() as admin:
        created = await admin.post("/api/v1/users", json={"username": "carol", "password": "carol-pass-1"})
        assert created.status_code == 201
        assert created.json()["role"] == "user"
        assert created.json()["created_by"] == ADMIN
        duplicate = await admin.post("/api/v1/users", json={"username": "carol", "password": "carol-pass-1"})
        assert (duplicate.status_code, duplicate.json()["error"]["code"]) == (409, "user_exists")
        bad_name = await admin.post("/api/v1/users", json={"username": "Carol!", "password": "carol-pass-1"})
        assert (bad_name.status_code, bad_name.json()["error"]["field"]) == (422, "username")
        weak = await admin.post("/api/v1/users", json={"username": "dave", "password": "short"})
        assert (weak.status_code, weak.json()["error"]["code"]) == (422, "weak_password")
        bad_role = await admin.post(
            "/api/v1/users", json={"username": "dave", "password": "dave-pass-1", "role": "god"}
        )
        assert (bad_role.status_code, bad_role.json()["error"]["field"]) == (422, "role")
        listed = (await admin.get("/api/v1/users", params={"q": "carol"})).json()
        assert [u["username"] for u in listed["items"]] == ["carol"]
        assert "password_hash" not in listed["items"][0]

        carol = await stack.login("carol", "carol-pass-1")
        async with carol:
            promoted = await admin.patch("/api/v1/users/carol", json={"role": "admin"})
            assert promoted.json()["role"] == "admin"
            # The role is read on every request: no new login needed.
            assert (await carol.get("/api/v1/auth/me")).json()["role"] == "admin"
            reset = await admin.patch("/api/v1/users/carol", json={"password": "carol-pass-2"})
            assert reset.status_code == 200
            # A new password ends the user's sessions.
            assert (await carol.get("/api/v1/auth/me")).status_code == 401
        await (await stack.login("carol", "carol-pass-2")).aclose()
        assert (await admin.patch("/api/v1/users/carol", json={})).status_code == 422
        assert (await admin.patch("/api/v1/users/nobody", json={"role": "user"})).status_code == 404
        assert (await admin.delete("/api/v1/users/carol")).status_code == 204
        assert (await admin.get("/api/v1/users/carol")).status_code == 404
        assert (await admin.delete("/api/v1/users/carol")).status_code == 404


async def _leave_only_root_as_admin(stack: Stack) -> None:
    async with await stack.admin() as admin:
        users = (await admin.get("/api/v1/users", params={"page_size": 500})).json()["items"]
        for other in users:
            if other["role"] == "admin" and other["username"] != ADMIN:
                assert (
                    await admin.patch(f"/api/v1/users/{other['username']}", json={"role": "user"})
                ).status_code == 200


async def test_the_last_admin_can_be_neither_demoted_nor_deleted(stack: Stack) -> None:
    await _leave_only_root_as_admin(stack)
    async with await stack.admin() as admin:
        demote = await admin.patch(f"/api/v1/users/{ADMIN}", json={"role": "user"})
        assert (demote.status_code, demote.json()["error"]["code"]) == (409, "last_admin")
        self_delete = await admin.delete(f"/api/v1/users/{ADMIN}")
        assert (self_delete.status_code, self_delete.json()["error"]["code"]) == (409, "cannot_delete_self")
        # With a second admin, either may step down: the rule is about the last one.
        second, _ = await stack.new_user(role="admin")
        assert (await admin.patch(f"/api/v1/users/{second}", json={"role": "user"})).status_code == 200
        assert (await admin.patch(f"/api/v1/users/{ADMIN}", json={"role": "user"})).status_code == 409
    assert [r["username"] for r in await stack.fetch("SELECT username FROM users WHERE role = 'admin'")] == [
        ADMIN
    ]


async def test_concurrent_demotions_keep_at_least_one_admin(stack: Stack) -> None:
    await _leave_only_root_as_admin(stack)
    a, a_password = await stack.new_user(role="admin")
    b, b_password = await stack.new_user(role="admin")
    async with await stack.login(a, a_password) as client_a, await stack.login(b, b_password) as client_b:
        assert (await client_a.patch(f"/api/v1/users/{ADMIN}", json={"role": "user"})).status_code == 200
        try:
            # a and b are the last two admins; each demotes the other at the same time.
            results = await asyncio.gather(
                client_a.patch(f"/api/v1/users/{b}", json={"role": "user"}),
                client_b.patch(f"/api/v1/users/{a}", json={"role": "user"}),
            )
            statuses = sorted(r.status_code for r in results)
            assert statuses in ([200, 403], [200, 409]), statuses
            admins = await stack.fetch("SELECT username FROM users WHERE role = 'admin'")
            assert len(admins) == 1
        finally:
            survivor = (await stack.fetch("SELECT username FROM users WHERE role = 'admin' LIMIT 1"))[0][
                "username"
            ]
            password = a_password if survivor == a else b_password
            async with await stack.login(survivor, password) as admin:
                assert (
                    await admin.patch(f"/api/v1/users/{ADMIN}", json={"role": "admin"})
                ).status_code == 200


async def test_own_password_change_checks_the_current_one_and_ends_other_sessions(stack: Stack) -> None:
    username, password = await stack.new_user()
    first = await stack.login(username, password)
    second = await stack.login(username, password)
    async with first, second:
        wrong = await first.post(
            "/api/v1/auth/password", json={"current_password": "nope-nope", "new_password": "brand-new-1"}
        )
        assert (wrong.status_code, wrong.json()["error"]["field"]) == (403, "current_password")
        weak = await first.post(
            "/api/v1/auth/password", json={"current_password": password, "new_password": "x"}
        )
        assert (weak.status_code, weak.json()["error"]["field"]) == (422, "new_password")
        ok = await first.post(
            "/api/v1/auth/password", json={"current_password": password, "new_password": "brand-new-1"}
        )
        assert ok.status_code == 204
        assert (await first.get("/api/v1/auth/me")).status_code == 200
        assert (await second.get("/api/v1/auth/me")).status_code == 401
    await (await stack.login(username, "brand-new-1")).aclose()


async def test_every_change_is_audited_with_who_what_target_and_status(stack: Stack) -> None:
    username, password = await stack.new_user()
    async with await stack.login(username, password) as user, await stack.admin() as admin:
        await user.post("/api/v1/auth/tokens", json={"name": "audit-me"})
        await user.post("/api/v1/clusters", json={"name": "nope"})  # 403
        await user.post("/api/v1/keys", json={"name": "laptop", "public_key": "ssh-ed25519 AAAA"})
        await admin.patch(f"/api/v1/users/{username}", json={"role": "user"})
        await user.get("/api/v1/auth/me")  # reads are not audited
        mine = (await admin.get("/api/v1/audit", params={"actor": username})).json()
        entries = {(e["action"], e["target"], e["status"]) for e in mine["items"]}
        assert ("auth.login", f"users/{username}", 200) in entries
        assert ("clusters.create", "clusters", 403) in entries
        assert ("keys.create", "keys/laptop", 200) in entries
        assert any(a == "tokens.create" and t.startswith("tokens/tok_") and s == 201 for a, t, s in entries)
        assert all(e["method"] != "GET" for e in mine["items"])
        assert all(e["role"] == "user" and e["request_id"] for e in mine["items"])
        by_admin = (await admin.get("/api/v1/audit", params={"actor": ADMIN, "action": "users."})).json()
        assert any(
            e["action"] == "users.update" and e["target"] == f"users/{username}" for e in by_admin["items"]
        )
        times = [e["at"] for e in mine["items"]]
        assert times == sorted(times, reverse=True)
        since = (await admin.get("/api/v1/audit", params={"since": "2999-01-01T00:00:00"})).json()
        assert since["total"] == 0
        bad = await admin.get("/api/v1/audit", params={"since": "yesterday"})
        assert (bad.status_code, bad.json()["error"]["field"]) == (422, "since")


async def test_failed_logins_are_audited_without_recording_what_was_typed(stack: Stack) -> None:
    username, _ = await stack.new_user()
    typed = ["Secret Typed In The Name Field", "hunter2-lowercase-secret"]
    async with stack.client() as client:
        for name in typed:
            await client.post("/api/v1/auth/login", json={"username": name, "password": "pw-pw-pw-pw"})
        await client.post("/api/v1/auth/login", json={"username": username, "password": "pw-pw-pw-pw"})
    async with await stack.admin() as admin:
        entries = (
            await admin.get("/api/v1/audit", params={"action": "auth.login", "actor": "anonymous"})
        ).json()
    failed = [(e["target"], e["status"]) for e in entries["items"]]
    assert (f"users/{username}", 401) in failed
    assert ("users", 401) in failed
    stored = str(await stack.fetch("SELECT * FROM audit_log"))
    for name in typed:
        assert name not in stored
