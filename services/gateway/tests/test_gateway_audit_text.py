"""A change whose path holds NUL or an invalid escape is still audited, with the text escaped."""

from __future__ import annotations

from conftest import Stack
from rlark_gateway.domain.audit_text import MAX_AUDIT_TEXT, storable


def test_nul_and_unpaired_surrogates_are_escaped_and_length_bounded() -> None:
    assert storable("/api/v1/keys/\x00") == "/api/v1/keys/\\x00"
    assert storable("/api/v1/keys/\udc80x") == "/api/v1/keys/\\udc80x"
    assert storable("plain/ü/路径") == "plain/ü/路径"
    long = storable("k" * (MAX_AUDIT_TEXT + 10))
    assert len(long) == MAX_AUDIT_TEXT
    assert long.endswith("…")


async def test_a_change_with_nul_in_its_path_is_audited(stack: Stack) -> None:
    async with await stack.admin() as admin:
        refused = await admin.delete("/api/v1/users/%00")
        assert refused.status_code in (404, 422)
        entries = (await admin.get("/api/v1/audit", params={"action": "users."})).json()["items"]
    assert any(e["path"] == "/api/v1/users/\\x00" and e["status"] == refused.status_code for e in entries)
