"""The broker's ACLs, planned from the topic registry (ADR 0004): each principal writes only what it owns
and reads only what it consumes."""

from __future__ import annotations

import pytest
from rlark_contracts import TOPICS, TopicNames
from rlark_platform.messaging.access import (
    KafkaAccess,
    agent_principal,
    derive_agent_password,
    derive_password,
)
from rlark_platform.messaging.acls import (
    Acl,
    Operation,
    PatternType,
    ResourceType,
    agent_acls,
    platform_acls,
    service_acls,
    services,
)

NAMES = TopicNames("t1.")


def topics_with(acls: list[Acl], operation: Operation) -> set[str]:
    """Topic names allowed for ``operation``; a PREFIXED pattern shows as ``<prefix>*``."""
    return {
        a.resource + ("*" if a.pattern is PatternType.PREFIXED else "")
        for a in acls
        if a.resource_type is ResourceType.TOPIC and a.operation is operation
    }


def physical(name: str) -> str:
    """A registered topic as the ACLs name it: per-cluster families by their prefix pattern."""
    return f"t1.{name}.*" if TOPICS[name].per_cluster else f"t1.{name}"


def allowed(acls: list[Acl], principal: str, topic: str, operation: Operation) -> bool:
    """What the StandardAuthorizer decides for a topic, given only ALLOW rules."""
    return any(
        a.principal == principal
        and a.resource_type is ResourceType.TOPIC
        and a.operation is operation
        and (topic == a.resource if a.pattern is PatternType.LITERAL else topic.startswith(a.resource))
        for a in acls
    )


def test_every_service_writes_exactly_the_topics_it_produces() -> None:
    for service in services():
        owned = {physical(t.name) for t in TOPICS.values() if t.producer == service}
        consumed_dlqs = {f"t1.{t.dlq}" for t in TOPICS.values() if service in t.consumers}
        assert topics_with(service_acls(NAMES, service), Operation.WRITE) == owned | consumed_dlqs


def test_every_service_reads_exactly_the_topics_it_consumes() -> None:
    for service in services():
        consumed = {physical(t.name) for t in TOPICS.values() if service in t.consumers}
        assert topics_with(service_acls(NAMES, service), Operation.READ) == consumed


def test_nobody_but_keys_may_write_the_keys_topic_and_nobody_but_the_scheduler_placements() -> None:
    writers: dict[str, set[str]] = {}
    for acl in platform_acls(NAMES):
        if acl.operation is Operation.WRITE:
            writers.setdefault(acl.resource, set()).add(acl.principal)
    assert writers["t1.keys.keys"] == {"t1.keys"}
    assert writers["t1.scheduler.placements."] == {"t1.scheduler"}


def test_the_readers_of_agents_reports_read_every_clusters_topic_and_write_the_one_dlq() -> None:
    for service in ("inventory", "scheduler", "netdomain"):
        acls = service_acls(NAMES, service)
        principal = f"t1.{service}"
        assert allowed(acls, principal, "t1.agent.reports.any-new-cluster", Operation.READ)
        assert allowed(acls, principal, "t1.agent.reports.dlq", Operation.WRITE)
        assert not allowed(acls, principal, "t1.agent.reports.lab", Operation.WRITE)
    assert not allowed(service_acls(NAMES, "gateway"), "t1.gateway", "t1.agent.reports.lab", Operation.READ)


def test_only_inventory_may_change_principals_and_acls() -> None:
    on_cluster = [a for a in platform_acls(NAMES) if a.resource_type is ResourceType.CLUSTER]
    assert [(a.principal, a.operation) for a in on_cluster] == [("t1.inventory", Operation.ALTER)]


def test_a_services_groups_are_its_own_prefix() -> None:
    groups = [a for a in service_acls(NAMES, "scheduler") if a.resource_type is ResourceType.GROUP]
    assert groups == [
        Acl("t1.scheduler", ResourceType.GROUP, PatternType.PREFIXED, "t1.scheduler-", Operation.READ)
    ]


def test_an_agent_writes_only_its_own_clusters_reports_and_reads_only_what_agents_consume() -> None:
    acls = agent_acls(NAMES, "lab")
    assert {a.principal for a in acls} == {agent_principal("t1.", "lab")}
    assert topics_with(acls, Operation.WRITE) == {"t1.agent.reports.lab"}
    assert not allowed(acls, agent_principal("t1.", "lab"), "t1.agent.reports.other", Operation.WRITE)
    assert not allowed(acls, agent_principal("t1.", "lab"), "t1.agent.reports.dlq", Operation.WRITE)
    assert topics_with(acls, Operation.READ) == {
        "t1.scheduler.placements.lab",
        "t1.inventory.commands.lab",
        "t1.netdomain.allocations",
        "t1.netdomain.tunnels",
    }
    assert "t1.keys.keys" not in topics_with(acls, Operation.READ)
    groups = [a for a in acls if a.resource_type is ResourceType.GROUP]
    assert [(g.pattern, g.resource) for g in groups] == [(PatternType.LITERAL, "t1.agent-lab")]


def test_every_resource_lies_under_the_deployments_prefix() -> None:
    acls = platform_acls(NAMES) + agent_acls(NAMES, "lab")
    assert all(a.resource.startswith("t1.") for a in acls if a.resource_type is not ResourceType.CLUSTER)
    assert all(a.principal.startswith("t1.") for a in acls)


def test_passwords_are_derived_per_principal_and_need_the_secret() -> None:
    one = derive_password("secret", "t1.keys")
    assert one == derive_password("secret", "t1.keys")
    assert one != derive_password("secret", "t1.scheduler")
    assert one != derive_password("other", "t1.keys")
    with pytest.raises(ValueError, match="internal_secret"):
        derive_password("", "t1.keys")


def test_an_agents_password_changes_with_its_credentials_epoch_and_is_stable_otherwise() -> None:
    """A rotation (a new epoch) gives the agent principal a new password; a renewal (same epoch) the same."""
    principal = agent_principal("t1.", "lab")
    one = derive_agent_password("secret", principal, "epoch-1")
    assert one == derive_agent_password("secret", principal, "epoch-1")
    assert one != derive_agent_password("secret", principal, "epoch-2")
    assert one != derive_agent_password("secret", agent_principal("t1.", "other"), "epoch-1")
    assert one != derive_agent_password("other", principal, "epoch-1")
    assert one != derive_password("secret", principal)  # never the epoch-less (service) password
    # The parts are separated, not concatenated: moving a character across the boundary changes it.
    assert derive_agent_password("secret", "t1.agent.ab", "c") != derive_agent_password(
        "secret", "t1.agent.a", "bc"
    )
    with pytest.raises(ValueError, match="epoch"):
        derive_agent_password("secret", principal, "")
    with pytest.raises(ValueError, match="internal_secret"):
        derive_agent_password("", principal, "epoch-1")


def test_kafka_access_needs_credentials_and_hides_the_password() -> None:
    access = KafkaAccess("127.0.0.1:9092", "t1.keys", "pw-123")
    assert access.client_options()["sasl_mechanism"] == "SCRAM-SHA-512"
    assert "pw-123" not in repr(access)
    with pytest.raises(ValueError, match="credentials"):
        KafkaAccess("127.0.0.1:9092", "", "")


def test_an_agent_reads_its_own_clusters_placements_and_commands_and_no_other_clusters() -> None:
    acls = platform_acls(NAMES) + agent_acls(NAMES, "lab") + agent_acls(NAMES, "other")
    lab = agent_principal("t1.", "lab")
    for family in ("scheduler.placements", "inventory.commands"):
        assert allowed(acls, lab, NAMES.for_cluster(family, "lab"), Operation.READ)
        assert not allowed(acls, lab, NAMES.for_cluster(family, "other"), Operation.READ)
        assert not allowed(acls, lab, NAMES.for_cluster(family, "lab"), Operation.WRITE)
    assert allowed(acls, "t1.scheduler", NAMES.for_cluster("scheduler.placements", "any"), Operation.WRITE)
    assert not allowed(acls, "t1.inventory", NAMES.for_cluster("scheduler.placements", "x"), Operation.WRITE)
    # inventory creates a new cluster's topics when its agent opens a session
    assert allowed(acls, "t1.inventory", NAMES.for_cluster("scheduler.placements", "x"), Operation.CREATE)
