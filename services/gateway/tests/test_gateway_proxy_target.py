"""The request target the proxy sends upstream, and signs."""

from __future__ import annotations

from rlark_gateway.proxy import upstream_target


def test_the_upstream_target_is_the_clients_with_only_non_ascii_bytes_escaped() -> None:
    assert upstream_target(b"/api/v1/jobs/a%2Fb", b"q=a+b&x=%00") == "/api/v1/jobs/a%2Fb?q=a+b&x=%00"
    assert upstream_target(b"/api/v1/nodes/n\xc3\xa9", b"") == "/api/v1/nodes/n%C3%A9"
    assert upstream_target(b"/api/v1/keys", b"name=\xff") == "/api/v1/keys?name=%FF"
