"""Pure rules of the gateway: routing and roles, audit naming, event visibility, login throttling,
account validation, and which client headers never reach a service."""

from __future__ import annotations

import pytest
from rlark_gateway.domain.access import (
    Access,
    audit_action,
    denial,
    has_dot_segments,
    proxy_route,
    required_access,
)
from rlark_gateway.domain.accounts import (
    AccountError,
    digest,
    new_api_token,
    validate_password,
    validate_token_name,
    validate_username,
)
from rlark_gateway.domain.events import visible
from rlark_gateway.domain.throttle import LoginGuard, LoginThrottle
from rlark_gateway.proxy import forward_headers
from rlark_platform.identity import Caller, Role

pytestmark = pytest.mark.unit

ALICE = Caller("alice", Role.USER)
ROOT = Caller("root", Role.ADMIN)


@pytest.mark.parametrize(
    ("path", "service"),
    [
        ("/api/v1/clusters", "inventory"),
        ("/api/v1/clusters/gpu-a/nodes/n1/cordon", "inventory"),
        ("/api/v1/nodes", "inventory"),
        ("/api/v1/labels", "inventory"),
        ("/api/v1/agent/session", "inventory"),
        ("/api/v1/keys/k1", "keys"),
        ("/api/v1/domains:check", "netdomain"),
        ("/api/v1/domains/lab", "netdomain"),
        ("/api/v1/jobs:preview", "scheduler"),
        ("/api/v1/jobs/j1/logs", "scheduler"),
        ("/api/v1/templates", "scheduler"),
    ],
)
def test_each_resource_is_routed_to_its_owning_service(path: str, service: str) -> None:
    route = proxy_route(path)
    assert route is not None
    assert route.service == service


@pytest.mark.parametrize("path", ["/api/v1/users", "/api/v1/auth/me", "/api/v1", "/api/v2/jobs", "/jobs"])
def test_gateway_paths_and_foreign_paths_are_not_proxied(path: str) -> None:
    assert proxy_route(path) is None


@pytest.mark.parametrize(
    ("method", "path", "access"),
    [
        ("POST", "/api/v1/agent/session", Access.PUBLIC),
        ("GET", "/api/v1/agent/session", Access.ADMIN),
        ("POST", "/api/v1/agent/other", Access.ADMIN),
        ("GET", "/api/v1/clusters", Access.USER),
        ("POST", "/api/v1/clusters", Access.ADMIN),
        ("PATCH", "/api/v1/clusters/a", Access.ADMIN),
        ("POST", "/api/v1/clusters/a/nodes/n/cordon", Access.ADMIN),
        ("POST", "/api/v1/domains", Access.ADMIN),
        ("DELETE", "/api/v1/domains/lab", Access.ADMIN),
        ("POST", "/api/v1/domains:check", Access.USER),
        ("POST", "/api/v1/keys", Access.USER),
        ("POST", "/api/v1/jobs", Access.USER),
        ("POST", "/api/v1/jobs/j1:cancel", Access.USER),
    ],
)
def test_admins_manage_clusters_and_domains_users_manage_keys_and_jobs(
    method: str, path: str, access: Access
) -> None:
    assert required_access(method, path) is access


def test_users_cannot_widen_lists_to_other_users_data() -> None:
    refused = denial(ALICE, "GET", "/api/v1/keys", [("all", "true")])
    assert refused is not None
    assert refused.field == "all"
    assert denial(ALICE, "GET", "/api/v1/keys", [("all", "false")]) is None
    by_owner = denial(ALICE, "GET", "/api/v1/jobs", [("owner", "bob")])
    assert by_owner is not None
    assert by_owner.field == "owner"
    assert denial(ALICE, "GET", "/api/v1/jobs", [("owner", "alice")]) is None
    assert denial(ROOT, "GET", "/api/v1/keys", [("all", "true")]) is None
    assert denial(ROOT, "POST", "/api/v1/clusters", []) is None
    assert denial(ALICE, "POST", "/api/v1/clusters", []) is not None


def test_dot_segments_are_spotted_so_no_hop_can_resolve_them_elsewhere() -> None:
    assert has_dot_segments("/api/v1/nodes/../clusters")
    assert has_dot_segments("/api/v1/keys/./k1")
    assert not has_dot_segments("/api/v1/jobs/j1..2/logs")
    assert not has_dot_segments("/api/v1/clusters/gpu.a")


@pytest.mark.parametrize(
    ("method", "path", "action", "target"),
    [
        ("POST", "/api/v1/clusters", "clusters.create", "clusters"),
        ("PATCH", "/api/v1/clusters/a", "clusters.update", "clusters/a"),
        ("DELETE", "/api/v1/clusters/a", "clusters.delete", "clusters/a"),
        ("POST", "/api/v1/clusters/a/credential", "clusters.credential", "clusters/a"),
        ("POST", "/api/v1/clusters/a/nodes/n1/cordon", "clusters.cordon", "clusters/a/nodes/n1"),
        ("POST", "/api/v1/jobs/j1:cancel", "jobs.cancel", "jobs/j1"),
        ("POST", "/api/v1/jobs:preview", "jobs.preview", "jobs"),
        ("PUT", "/api/v1/jobs/j1/ssh-keys", "jobs.ssh-keys.replace", "jobs/j1"),
        ("POST", "/api/v1/domains:check", "domains.check", "domains"),
        ("POST", "/api/v1/agent/session", "agent.session", "agent"),
    ],
)
def test_changes_get_readable_audit_names(method: str, path: str, action: str, target: str) -> None:
    assert audit_action(method, path) == (action, target)


JOB_EVENT = "scheduler.job.status_changed.v1"
CLUSTER_EVENT = "inventory.cluster.updated.v1"
NODE_EVENT = "inventory.node.updated.v1"


def test_job_events_reach_only_their_owner_and_admins() -> None:
    event = {"job_id": "j1", "owner": "alice", "to_status": "Running"}
    assert visible("scheduler.jobs", JOB_EVENT, event, ALICE)
    assert visible("scheduler.jobs", JOB_EVENT, event, ROOT)
    assert not visible("scheduler.jobs", JOB_EVENT, event, Caller("bob", Role.USER))
    assert visible("scheduler.jobs", JOB_EVENT, event, ALICE, job_id="j1")
    assert not visible("scheduler.jobs", JOB_EVENT, event, ALICE, job_id="j2")
    # The scheduler's internal requests on the same topic carry no owner: never public.
    assert not visible("scheduler.jobs", JOB_EVENT, {"job_id": "j1", "domain": "lab"}, ROOT)


def test_cluster_and_node_state_reach_everyone_but_not_a_job_filtered_stream() -> None:
    assert visible("inventory.clusters", CLUSTER_EVENT, {"name": "a"}, ALICE)
    assert visible("inventory.nodes", NODE_EVENT, {"cluster": "a", "name": "n"}, ALICE)
    assert not visible("inventory.nodes", NODE_EVENT, {"cluster": "a", "name": "n"}, ALICE, job_id="j1")
    assert not visible(
        "scheduler.placements", "scheduler.worker.placed.v1", {"job_id": "j1", "owner": "alice"}, ROOT
    )
    assert not visible("agent.reports", "agent.heartbeat.sent.v1", {}, ROOT)


def test_event_types_the_contracts_do_not_register_for_the_topic_reach_nobody() -> None:
    owned = {"job_id": "j1", "owner": "alice"}
    assert not visible("scheduler.jobs", "scheduler.job.pwned.v1", owned, ROOT)
    assert not visible("inventory.clusters", "evil.injected", {"name": "a"}, ALICE)
    # A real type on the wrong topic is unknown there.
    assert not visible("inventory.nodes", CLUSTER_EVENT, {"name": "a"}, ALICE)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_login_throttle_blocks_after_max_failures_until_the_window_passes() -> None:
    clock = Clock()
    throttle = LoginThrottle(3, 60, clock=clock)
    key = throttle.key("Alice", "10.0.0.1")
    for _ in range(3):
        assert throttle.retry_after(key) is None
        throttle.failed(key)
        clock.now += 1
    wait = throttle.retry_after(key)
    assert wait is not None
    assert 56 < wait <= 58
    # Another address, or another user, is not affected.
    assert throttle.retry_after(throttle.key("alice", "10.0.0.2")) is None
    assert throttle.retry_after(throttle.key("bob", "10.0.0.1")) is None
    clock.now += 58
    assert throttle.retry_after(key) is None


def test_login_guard_also_counts_one_account_over_every_address() -> None:
    clock = Clock()
    guard = LoginGuard(
        LoginThrottle(3, 60, clock=clock),
        LoginThrottle(5, 60, clock=clock),
        LoginThrottle(50, 60, clock=clock),
    )
    for i in range(5):  # a new address each time: the per-address limit never trips
        assert guard.retry_after("alice", f"10.0.0.{i}") is None
        guard.failed("alice", f"10.0.0.{i}")
    assert guard.retry_after("alice", "10.9.9.9") is not None
    assert guard.retry_after("bob", "10.9.9.9") is None
    clock.now += 61
    assert guard.retry_after("alice", "10.9.9.9") is None


def test_login_throttle_success_clears_and_memory_stays_bounded() -> None:
    clock = Clock()
    throttle = LoginThrottle(2, 60, clock=clock, max_entries=100)
    key = throttle.key("alice", "ip")
    throttle.failed(key)
    throttle.succeeded(key)
    throttle.failed(key)
    assert throttle.retry_after(key) is None
    for i in range(500):
        throttle.failed(throttle.key(f"user{i}", "ip"))
    assert len(throttle) <= 100
    clock.now += 61
    throttle.failed(throttle.key("late", "ip"))
    assert throttle.retry_after(throttle.key("user499", "ip")) is None


def test_one_address_spraying_usernames_is_throttled_for_every_username() -> None:
    clock = Clock()
    guard = LoginGuard(
        LoginThrottle(3, 60, clock=clock),
        LoginThrottle(5, 60, clock=clock),
        LoginThrottle(10, 60, clock=clock),
    )
    for i in range(10):
        assert guard.retry_after(f"user{i}", "10.6.6.6") is None
        guard.failed(f"user{i}", "10.6.6.6")
    assert guard.retry_after("someone-else", "10.6.6.6") is not None
    assert guard.retry_after("someone-else", "10.0.0.1") is None  # other addresses are not affected
    guard.succeeded("attackers-own-account", "10.6.6.6")  # a login of its own buys no more guesses
    assert guard.retry_after("user0", "10.6.6.6") is not None


def test_spraying_new_usernames_never_evicts_a_throttled_account() -> None:
    clock = Clock()
    per_account = LoginThrottle(5, 60, clock=clock, max_entries=20)
    guard = LoginGuard(
        LoginThrottle(3, 60, clock=clock, max_entries=20),
        per_account,
        LoginThrottle(10, 60, clock=clock, max_entries=20, evict_throttled=True),
    )
    for i in range(5):
        guard.failed("victim", f"10.0.0.{i}")
    assert guard.retry_after("victim", "10.9.9.9") is not None
    # Many addresses (each under its own cap) spray new usernames: the tables fill and evict.
    for i in range(400):
        guard.failed(f"spray{i}", f"10.1.{i // 5}.{i % 5}")
    assert len(per_account) <= 20
    assert guard.retry_after("victim", "10.9.9.9") is not None  # still throttled


def test_a_throttle_full_of_throttled_entries_records_nothing_and_the_overflowing_address_waits() -> None:
    clock = Clock()
    guard = LoginGuard(
        LoginThrottle(1, 60, clock=clock, max_entries=3),
        LoginThrottle(1, 60, clock=clock, max_entries=3),
        LoginThrottle(10, 60, clock=clock, evict_throttled=True),
    )
    for i in range(3):  # three accounts throttled (one failure each is the limit here)
        guard.failed(f"victim{i}", f"10.0.0.{i}")
    assert guard.per_account.failed(("nobody", "*")) is False
    assert guard.retry_after("new-name", "10.6.6.6") is None
    guard.failed("new-name", "10.6.6.6")  # cannot be recorded: charged to the address, whole
    assert guard.retry_after("another-name", "10.6.6.6") is not None
    assert guard.retry_after("another-name", "10.7.7.7") is None
    for i in range(3):
        assert guard.retry_after(f"victim{i}", "10.9.9.9") is not None


@pytest.mark.parametrize("name", ["alice", "a", "bob.smith", "ci-bot_2"])
def test_good_usernames_are_accepted(name: str) -> None:
    assert validate_username(name) == name


@pytest.mark.parametrize("name", ["", "Alice", "1abc", "a b", "a/b", "x" * 65, "-lead"])
def test_bad_usernames_are_refused_naming_the_field(name: str) -> None:
    with pytest.raises(AccountError) as caught:
        validate_username(name)
    assert (caught.value.code, caught.value.field) == ("invalid_username", "username")


def test_passwords_must_be_long_not_blank_and_not_the_username() -> None:
    assert validate_password("long-enough", username="alice", min_length=8) == "long-enough"
    for bad, code in [
        ("short", "weak_password"),
        (" " * 10, "weak_password"),
        ("x" * 1025, "invalid_password"),
    ]:
        with pytest.raises(AccountError) as caught:
            validate_password(bad, username="alice", min_length=8)
        assert caught.value.code == code
    with pytest.raises(AccountError):
        validate_password("Alice-User", username="alice-user", min_length=8)


def test_tokens_are_random_and_stored_only_as_digests() -> None:
    (id1, token1), (id2, token2) = new_api_token(), new_api_token()
    assert id1 != id2
    assert token1 != token2
    assert token1.startswith("rlk_")
    assert len(token1) > 40
    assert digest(token1) != token1
    assert len(digest(token1)) == 64
    assert validate_token_name("  laptop ") == "laptop"
    with pytest.raises(AccountError):
        validate_token_name("   ")


def test_forwarded_headers_never_carry_client_identity_cookies_or_hop_by_hop_headers() -> None:
    raw = [
        (b"X-RLark-User", b"root"),
        (b"x-rlark-role", b"admin"),
        (b"X-RLark-Signature", b"forged"),
        (b"Cookie", b"rlark_session=abc"),
        (b"Authorization", b"Bearer rlk_x"),
        (b"Connection", b"keep-alive"),
        (b"Host", b"gateway"),
        (b"Content-Length", b"10"),
        (b"X-Forwarded-For", b"1.2.3.4"),
        (b"Content-Type", b"application/json"),
        (b"Accept", b"*/*"),
    ]
    assert forward_headers(raw, keep_authorization=False) == [
        ("content-type", "application/json"),
        ("accept", "*/*"),
    ]
    assert ("authorization", "Bearer rlk_x") in forward_headers(raw, keep_authorization=True)
