"""Topic layout settings: partitions per family and replication, parsed and checked naming the setting."""

from __future__ import annotations

import pytest
from pydantic import ValidationError
from rlark_platform.messaging.layout import TopicLayout
from rlark_platform.settings import ServiceSettings


def test_families_get_their_own_partitions_and_three_replicas_need_two_in_sync(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("RLARK_TOPIC_PARTITIONS", "6")
    monkeypatch.setenv("RLARK_TOPIC_PARTITIONS_BY_FAMILY", "scheduler.jobs=12, agent.reports=24")
    monkeypatch.setenv("RLARK_TOPIC_REPLICATION_FACTOR", "3")
    layout = ServiceSettings().topic_layout()
    assert (layout.partitions_of("scheduler.jobs"), layout.partitions_of("agent.reports")) == (12, 24)
    assert layout.partitions_of("keys.keys") == 6
    jobs = layout.topic("p.scheduler.jobs", "scheduler.jobs", compacted=True)
    assert (jobs.num_partitions, jobs.replication_factor) == (12, 3)
    assert jobs.topic_configs == {"cleanup.policy": "compact", "min.insync.replicas": "2"}
    dlq = layout.dead_letters("p.scheduler.jobs.dlq")
    assert (dlq.num_partitions, dlq.replication_factor) == (1, 3)


def test_one_broker_layout_asks_nothing_of_replicas() -> None:
    assert TopicLayout().configs() == {}
    assert TopicLayout(replication_factor=2).configs(compacted=True) == {"cleanup.policy": "compact"}


def test_a_json_object_works_too(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RLARK_TOPIC_PARTITIONS_BY_FAMILY", '{"inventory.nodes": 9}')
    assert ServiceSettings().topic_layout().partitions_of("inventory.nodes") == 9


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ("schedular.jobs=3", "unknown topic families ['schedular.jobs']"),
        ("scheduler.jobs=0", "scheduler.jobs: partitions must be a whole number from 1 to 256"),
        ("scheduler.jobs=many", "scheduler.jobs: partitions must be a whole number from 1 to 256"),
        ("scheduler.jobs", "write family=partitions pairs separated by commas"),
    ],
)
def test_a_wrong_family_setting_is_refused_naming_it(
    monkeypatch: pytest.MonkeyPatch, value: str, says: str
) -> None:
    monkeypatch.setenv("RLARK_TOPIC_PARTITIONS_BY_FAMILY", value)
    with pytest.raises(ValidationError) as refused:
        ServiceSettings()
    assert "topic_partitions_by_family" in str(refused.value)
    assert says in str(refused.value)


def test_the_kubernetes_deployments_layout_is_valid(monkeypatch: pytest.MonkeyPatch) -> None:
    """deploy/kubernetes/config.yaml's topic settings parse (a misspelt family would stop every service)."""
    import yaml
    from rlark_devinfra import paths

    config = yaml.safe_load((paths.repo_root() / "deploy/kubernetes/config.yaml").read_text())["data"]
    for key, value in config.items():
        if key.startswith("RLARK_TOPIC_"):
            monkeypatch.setenv(key, value)
    layout = ServiceSettings().topic_layout()
    assert layout.replication_factor == 3
    assert layout.topic("x", "scheduler.jobs").topic_configs == {"min.insync.replicas": "2"}
    assert layout.partitions_of("agent.reports") > layout.partitions_of("keys.keys")
