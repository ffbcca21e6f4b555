"""Reports from this agent to the control plane, on its cluster's own topic `agent.reports.<cluster>`.

Only this agent's Kafka principal may write that topic (ADR 0004): the topic itself says which cluster
reported, and every event names it again (`source` `agent/<cluster>`, data `cluster`). Log lines are batched per worker
and stream (at most `flush_interval_s` old, at most `max_lines` per event) so a chatty worker costs a few
events per second, not one per line. Every report carries the agent's cluster lease epoch (ADR 0018), so
the control plane refuses what a deposed agent still sends. A worker's status is published only after the log lines read before
it (`status` flushes first): the control plane keeps a failed worker's last lines when it applies the
failure, so those lines must already be there.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import defaultdict
from collections.abc import Sequence
from datetime import UTC, datetime

import structlog
from aiokafka import AIOKafkaProducer
from pydantic import BaseModel
from rlark_contracts import TopicNames, encode, new_envelope
from rlark_contracts.events.agent import (
    AgentReport,
    HeartbeatSent,
    NodeObservation,
    NodesObserved,
    OutputFile,
    WorkerLogsEmitted,
    WorkerOutputsListed,
    WorkerStatusChanged,
)
from rlark_contracts.messages import Text

from rlark_tunnel_agent.agent.metrics import PUBLISHED
from rlark_tunnel_agent.agent.session import Session
from rlark_tunnel_agent.runtime import driver

log = structlog.get_logger(__name__)


def with_cordons(nodes: list[NodeObservation], cordoned: set[str]) -> list[NodeObservation]:
    """``nodes`` with the ones cordoned through this agent (the local runtime's cordons) unschedulable."""
    return [n.model_copy(update={"schedulable": False}) if n.name in cordoned else n for n in nodes]


class ReportPublisher:
    def __init__(
        self,
        producer: AIOKafkaProducer,
        session: Session,
        *,
        flush_interval_s: float = 0.2,
        max_lines: int = 500,
        lease_epoch: int | None = None,
    ) -> None:
        self._producer = producer
        self.session = session
        self.lease_epoch = lease_epoch
        """The epoch of the cluster lease this agent holds (ADR 0018), stamped on every report."""
        self._names = TopicNames(session.topic_prefix)
        self._flush_interval_s = flush_interval_s
        self._max_lines = max_lines
        self._pending: dict[tuple[str, str, str], list[tuple[int, str]]] = defaultdict(list)
        self._stopping = asyncio.Event()
        self._flushing = asyncio.Lock()
        """One flush at a time, so a status published after a flush follows every earlier line."""

    @property
    def cluster(self) -> str:
        return self.session.cluster

    async def publish(self, data: BaseModel) -> None:
        if isinstance(data, AgentReport) and self.lease_epoch is not None:
            data = data.model_copy(update={"lease_epoch": self.lease_epoch})
        envelope = new_envelope(data, source=f"agent/{self.cluster}", subject=self.cluster)
        await self._producer.send_and_wait(
            self._names.for_cluster("agent.reports", self.cluster),
            encode(envelope),
            key=self.cluster.encode(),
        )
        PUBLISHED.labels(self.cluster, envelope.type).inc()

    async def heartbeat(
        self, runtime: str, version: str, not_enforced: Sequence[str] = (), unmountable: Sequence[str] = ()
    ) -> None:
        await self.publish(
            HeartbeatSent(
                cluster=self.cluster,
                agent_version=version,
                runtime=runtime,
                sent_at=datetime.now(UTC),
                not_enforced=list(not_enforced),
                unmountable=list(unmountable),
            )
        )

    async def nodes(self, nodes: list[NodeObservation], service_cidrs: Sequence[str] = ()) -> None:
        """A complete snapshot of the cluster's nodes, as the driver observed them (`with_cordons`), with the
        cluster's service networks."""
        await self.publish(
            NodesObserved(
                cluster=self.cluster,
                nodes=nodes,
                complete=True,
                observed_at=datetime.now(UTC),
                service_cidrs=list(service_cidrs),
            )
        )

    async def status(self, status: driver.WorkerStatus, job_id: str, node: str) -> None:
        await self.flush_logs()
        await self.publish(
            WorkerStatusChanged(
                cluster=self.cluster,
                job_id=status.job_id or job_id,
                worker_id=status.worker_id,
                phase=status.phase.value,
                reason=status.reason,
                # A reason the agent wrote from the catalogue (a Text: model_copy keeps it) travels keyed.
                reason_key=status.reason.key if isinstance(status.reason, Text) else "",
                reason_params=dict(status.reason.params) if isinstance(status.reason, Text) else {},
                exit_code=status.exit_code,
                ray_nodes_joined=status.ray_nodes_joined,
                ray_nodes_expected=status.ray_nodes_expected,
                address=status.address,
                node=node,
                at=datetime.now(UTC),
            )
        )

    async def outputs(
        self, job_id: str, worker_id: str, files: list[dict[str, object]], truncated: bool
    ) -> None:
        listed = [OutputFile(path=str(f.get("path", "")), size=int(str(f.get("size", 0)))) for f in files]
        await self.publish(
            WorkerOutputsListed(
                cluster=self.cluster, job_id=job_id, worker_id=worker_id, files=listed, truncated=truncated
            )
        )

    def add_log(self, job_id: str, line: driver.WorkerLogLine) -> None:
        self._pending[(job_id, line.worker_id, line.stream.value)].append((line.seq, line.text))

    async def flush_logs(self) -> None:
        async with self._flushing:
            await self._flush_pending()

    async def _flush_pending(self) -> None:
        pending, self._pending = self._pending, defaultdict(list)
        for (job_id, worker_id, stream), lines in pending.items():
            lines.sort()
            for start in range(0, len(lines), self._max_lines):
                chunk = lines[start : start + self._max_lines]
                # A gap in seq (dropped lines) starts a new event so numbering stays exact.
                runs: list[list[tuple[int, str]]] = [[chunk[0]]]
                for item in chunk[1:]:
                    if item[0] == runs[-1][-1][0] + 1:
                        runs[-1].append(item)
                    else:
                        runs.append([item])
                for run in runs:
                    await self.publish(
                        WorkerLogsEmitted(
                            cluster=self.cluster,
                            job_id=job_id,
                            worker_id=worker_id,
                            first_seq=run[0][0],
                            lines=[t for _, t in run],
                            stream=stream,
                        )
                    )

    async def run_log_flusher(self) -> None:
        while not self._stopping.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), self._flush_interval_s)
            await self.flush_logs()

    def stop(self) -> None:
        self._stopping.set()
