"""Pure rules of the gateway: routing and roles, audit naming, event visibility, account validation, and
which client headers never reach a service (login throttling: ``test_gateway_throttle_rules.py``)."""

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
        ("POST", "/api/v1/agent/lease", Access.PUBLIC),
        ("GET", "/api/v1/agent/lease", Access.ADMIN),
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
        ("GET", "/api/v1/projects", Access.USER),
        ("GET", "/api/v1/projects/p", Access.USER),
        ("POST", "/api/v1/projects", Access.ADMIN),
        ("PUT", "/api/v1/projects/p/quota", Access.ADMIN),
        ("PUT", "/api/v1/projects/p/members", Access.ADMIN),
        ("DELETE", "/api/v1/projects/p", Access.ADMIN),
    ],
)
def test_admins_manage_clusters_domains_and_projects_users_manage_keys_and_jobs(
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
    endpoints = denial(ALICE, "GET", "/api/v1/notifications/endpoints", [("all", "true")])
    assert endpoints is not None
    assert endpoints.field == "all"
    assert denial(ROOT, "GET", "/api/v1/notifications/endpoints", [("all", "true")]) is None
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
