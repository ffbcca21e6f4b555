"""``rlark clusters``, ``rlark nodes`` and ``rlark labels`` against the real inventory service (real
PostgreSQL and Kafka). The gateway's part — turning the CLI's bearer token into a signed identity — is
played by signing the CLI's requests here; everything else is the real command and the real service."""

from __future__ import annotations

import asyncio
import io
import json
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
import structlog
from rlark_cli import client as cli_client
from rlark_cli.main import app
from rlark_contracts import TopicNames, encode, new_envelope
from rlark_contracts.events.agent import NodeObservation, NodesObserved
from rlark_devinfra.testing import GatewaySigned, RunningService, running_service, settings_for
from rlark_inventory.main import DEFINITION
from rlark_platform.identity import Caller, Role
from rlark_platform.messaging import KafkaAccess, create_producer
from typer.testing import CliRunner

pytestmark = pytest.mark.integration


@pytest.fixture
async def inventory(
    database_url: str, kafka_bootstrap: str, topic_prefix: str
) -> AsyncIterator[RunningService]:
    settings = settings_for(
        DEFINITION, database_url=database_url, kafka_bootstrap=kafka_bootstrap, topic_prefix=topic_prefix
    )
    async with running_service(DEFINITION, settings) as running:
        yield running


@pytest.fixture
def quiet_service() -> Iterator[io.StringIO]:
    """The service runs in this process: send its log lines away from the CLI output under test."""
    saved = structlog.get_config()
    sink = io.StringIO()
    structlog.configure(logger_factory=structlog.PrintLoggerFactory(sink))
    yield sink
    structlog.configure(**saved)


@pytest.fixture
def as_admin(
    quiet_service: io.StringIO, inventory: RunningService, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Point the CLI at the service and sign its requests as the gateway would for an admin."""
    monkeypatch.setenv("RLARK_CONFIG_DIR", str(tmp_path))
    monkeypatch.setenv("RLARK_URL", inventory.url)
    real_client = httpx.Client

    def signed_client(**kwargs: Any) -> httpx.Client:
        return real_client(auth=GatewaySigned(Caller("root", Role.ADMIN), "inventory"), **kwargs)

    monkeypatch.setattr(cli_client.httpx, "Client", signed_client)


async def rlark(*args: str, stdin: str | None = None) -> Any:
    """Run ``rlark ARGS`` in a thread (the service shares this test's event loop)."""
    runner = CliRunner()
    return await asyncio.to_thread(runner.invoke, app, list(args), input=stdin)


async def observe(
    kafka_admin: KafkaAccess, topic_prefix: str, cluster: str, nodes: list[NodeObservation]
) -> None:
    producer = await create_producer(kafka_admin, "cli-test-agent")
    try:
        report = NodesObserved(cluster=cluster, nodes=nodes, observed_at=datetime.now(UTC))
        await producer.send_and_wait(
            TopicNames(topic_prefix).for_cluster("agent.reports", cluster),
            value=encode(new_envelope(report, source=f"agent/{cluster}", subject=cluster)),
            key=cluster.encode(),
        )
    finally:
        await producer.stop()


async def test_register_prints_the_credential_once_with_a_warning_and_refusals_exit_1(as_admin: None) -> None:
    registered = await rlark(
        "clusters", "register", "gpu-a", "--category", "cloud", "--pod-cidr", "10.244.0.0/16",
        "--service-cidr", "10.96.0.0/12", "--label", "rlark.io/tier=gold",
    )  # fmt: skip
    assert registered.exit_code == 0, registered.output
    assert "agent credential" in registered.stdout
    assert "rlark-agent-" in registered.stdout
    assert "shown once" in registered.stderr

    shown = await rlark("clusters", "show", "gpu-a", "-o", "json")
    assert shown.exit_code == 0
    assert json.loads(shown.stdout)["labels"] == {"rlark.io/tier": "gold"}
    assert "rlark-agent-" not in shown.stdout

    again = await rlark("clusters", "register", "gpu-a")
    assert again.exit_code == 1
    assert "already exists" in again.stderr
    overlap = await rlark(
        "clusters", "register", "gpu-b", "--pod-cidr", "10.0.0.0/8", "--service-cidr", "10.96.0.0/12"
    )
    assert overlap.exit_code == 1
    assert "(field: service_cidrs[0])" in overlap.stderr
    bad_label = await rlark("clusters", "register", "gpu-c", "--label", "novalue")
    assert bad_label.exit_code == 2

    rotated = await rlark("clusters", "rotate-credential", "gpu-a", "--yes", "-o", "json")
    assert rotated.exit_code == 0
    assert json.loads(rotated.stdout)["agent_credential"].startswith("rlark-agent-")

    listed = await rlark("clusters", "list")
    assert listed.exit_code == 0
    assert "gpu-a" in listed.stdout
    removed = await rlark("clusters", "rm", "gpu-a", "--yes")
    assert removed.exit_code == 0
    assert (await rlark("clusters", "show", "gpu-a")).exit_code == 1


async def test_nodes_and_labels_commands_show_what_the_agent_reported(
    as_admin: None, kafka_admin: KafkaAccess, topic_prefix: str
) -> None:
    assert (await rlark("clusters", "register", "gpu-a", "--category", "cloud")).exit_code == 0
    gpu = {"gpu_count": 8, "gpu_allocatable": 8, "cpu_allocatable_millis": 62000}
    await observe(
        kafka_admin,
        topic_prefix,
        "gpu-a",
        [
            NodeObservation(name="a1", gpu_model="A100", labels={"rlark.io/gpu-model": "A100"}, **gpu),
            NodeObservation(name="h1", gpu_model="H100", labels={"rlark.io/gpu-model": "H100"}, **gpu),
        ],
    )
    for _ in range(100):
        listed = await rlark("nodes", "list", "-l", "rlark.io/gpu-model=A100", "-o", "json")
        if listed.exit_code == 0 and json.loads(listed.stdout)["total"] == 1:
            break
        await asyncio.sleep(0.1)
    assert [n["name"] for n in json.loads(listed.stdout)["items"]] == ["a1"]

    table = await rlark("nodes", "list", "--cluster", "gpu-a", "-q", "h1")
    assert table.exit_code == 0
    assert "h1" in table.stdout
    assert "8/8 H100" in table.stdout
    assert (await rlark("nodes", "list", "--status", "asleep")).exit_code == 2
    misspelt = await rlark("nodes", "list", "--cluster", "gpu-z")  # not an empty table: the cluster is named
    assert misspelt.exit_code == 1
    assert "gpu-z" in misspelt.stderr
    bad_selector = await rlark("nodes", "list", "-l", "a!=b")
    assert bad_selector.exit_code == 1
    assert "(field: selector)" in bad_selector.stderr

    shown = await rlark("nodes", "show", "gpu-a", "a1")
    assert shown.exit_code == 0
    assert "no workers on this node" in shown.stdout

    labels = await rlark("labels", "--cluster", "gpu-a")
    assert labels.exit_code == 0
    assert "rlark.io/gpu-model=A100" in labels.stdout

    matched = await rlark("nodes", "match", "gpu-a", "-l", "rlark.io/gpu-model=H100", "--gpus", "4")
    assert matched.exit_code == 0
    assert "2 nodes → 1 match → 1 ready → 1 schedulable → 1 with ≥ 4 free GPUs" in matched.stdout

    cordoned = await rlark("nodes", "cordon", "gpu-a", "a1")
    assert cordoned.exit_code == 0
    assert "sent to the cluster's agent" in cordoned.stdout
    pending = await rlark("nodes", "list", "-q", "a1", "-o", "json")
    assert json.loads(pending.stdout)["items"][0]["cordon_requested"] is True
    assert (await rlark("nodes", "cordon", "gpu-a", "nope")).exit_code == 1


async def test_nodes_clusters_and_match_show_the_gpus_in_use_and_give_them_back_when_freed(
    as_admin: None, kafka_admin: KafkaAccess, topic_prefix: str
) -> None:
    assert (await rlark("clusters", "register", "gpu-a")).exit_code == 0
    a100 = {
        "gpu_count": 8,
        "gpu_allocatable": 8,
        "gpu_model": "A100",
        "labels": {"rlark.io/gpu-model": "A100"},
    }

    async def report(allocated: int, foreign: int) -> dict[str, Any]:
        await observe(
            kafka_admin,
            topic_prefix,
            "gpu-a",
            [
                NodeObservation(name="a1", gpu_allocated=allocated, gpu_allocated_foreign=foreign, **a100),
                NodeObservation(name="a2", **a100),
            ],
        )
        for _ in range(100):
            listed = await rlark("nodes", "list", "--cluster", "gpu-a", "-o", "json")
            if listed.exit_code == 0:
                nodes = {n["name"]: n for n in json.loads(listed.stdout)["items"]}
                if "a1" in nodes and nodes["a1"]["gpu_allocated"] == allocated:
                    return nodes
            await asyncio.sleep(0.1)
        raise AssertionError("the observation did not arrive")

    # A job holds all of a1 (8 GPUs, 2 of them by a workload RLark did not place).
    nodes = await report(8, 2)
    assert (nodes["a1"]["gpu_free"], nodes["a1"]["gpu_allocated_foreign"]) == (0, 2)
    table = await rlark("nodes", "list", "--cluster", "gpu-a", "-q", "a1")
    assert "0/8 A100" in table.stdout
    shown = await rlark("nodes", "show", "gpu-a", "a1")
    assert "gpu_allocated_foreign 2" in " ".join(shown.stdout.split())

    clusters = await rlark("clusters", "list")
    assert clusters.exit_code == 0
    assert "all clusters: 0/1 online, 0/2 nodes online, GPUs 0 free of 16, 8 (2 others) in use" in " ".join(
        clusters.stdout.split()
    )  # offline: no heartbeat in this test, so nothing is free to place on
    listing = json.loads((await rlark("clusters", "list", "-o", "json")).stdout)
    summary = listing["items"][0]["summary"]
    assert (summary["gpus_allocatable"], summary["gpus_allocated"], summary["gpus_allocated_foreign"]) == (
        16,
        8,
        2,
    )
    assert listing["totals"]["gpus_allocated"] == 8

    matched = await rlark("nodes", "match", "gpu-a", "--gpus", "8", "-o", "json")
    fits = {
        n["name"]: (n["gpu_free"], n["gpu_allocated"], n["fits"]) for n in json.loads(matched.stdout)["nodes"]
    }
    assert fits == {"a1": (0, 8, False), "a2": (8, 0, True)}
    line = await rlark("nodes", "match", "gpu-a", "--gpus", "8")
    assert "→ 1 with ≥ 8 free GPUs" in line.stdout

    # The job ends: the agent reports the GPUs free again, and every view says so.
    nodes = await report(0, 0)
    assert nodes["a1"]["gpu_free"] == 8
    listing = json.loads((await rlark("clusters", "list", "-o", "json")).stdout)
    assert (listing["items"][0]["summary"]["gpus_allocated"], listing["totals"]["gpus_allocated"]) == (0, 0)
    line = await rlark("nodes", "match", "gpu-a", "--gpus", "8")
    assert "→ 2 with ≥ 8 free GPUs" in line.stdout
