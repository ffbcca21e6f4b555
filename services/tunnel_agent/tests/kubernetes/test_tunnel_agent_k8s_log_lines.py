"""A Kubernetes worker's log as the driver numbers it (issue 31 item 4): a run script's last output without its
newline has the bootstrap's next marker glued to it; the driver ships the text and the marker as two lines —
followed (shipped to the control plane, read for status) and streamed alike, numbered the same way — so the
text is shown as output and the marker is read and hidden like any other. The container's log stands in
through a fake ``Kube``."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
from rlark_tunnel_agent.runtime.driver import WorkerLogLine, WorkerMarkerSeen, WorkerSpec
from rlark_tunnel_agent.runtime.kubernetes import names
from rlark_tunnel_agent.runtime.kubernetes.config import KubernetesDriverConfig
from rlark_tunnel_agent.runtime.kubernetes.driver import KubernetesDriver
from rlark_tunnel_agent.runtime.markers import RunExited

pytestmark = pytest.mark.unit

WORKER = "job-7f3c-actor-0"
LOG = ["step 1", 'last output##rlark {"event":"run_exited","exit_code":0}', '##rlark {"event":"stopping"}']
SHIPPED = [
    (1, "step 1"),
    (2, "last output"),
    (3, '##rlark {"event":"run_exited","exit_code":0}'),
    (4, '##rlark {"event":"stopping"}'),
]


class LogKube:
    """The one Kube call reading logs: the worker container's lines, as the API streams them."""

    def pod_log_lines(self, namespace: str, name: str, container: str, follow: bool) -> Iterator[str]:
        assert name == names.pod_name(WORKER)
        return iter(LOG)


def _driver() -> KubernetesDriver:
    driver = KubernetesDriver(KubernetesDriverConfig(), kube=LogKube())  # type: ignore[arg-type]
    driver._specs[WORKER] = WorkerSpec(
        job_id="job-7f3c", worker_id=WORKER, role="actor", index=0, rank=0, num_nodes=1, is_header=True,
        node_name="", run_script="printf 'last output'", header_address="", join_deadline_s=60,
    )  # fmt: skip
    return driver


async def test_the_followed_log_ships_the_text_and_the_glued_marker_as_two_numbered_lines() -> None:
    driver = _driver()
    driver._loop = asyncio.get_running_loop()
    # One pass over the container's log (the worker has no pod any more: the follower then returns).
    await asyncio.to_thread(driver._follow_logs, WORKER, "ns", names.pod_name(WORKER))
    await asyncio.sleep(0)  # the lines were handed to the event loop
    events = []
    while not driver._events.empty():
        events.append(driver._events.get_nowait())
    assert [(e.seq, e.text) for e in events if isinstance(e, WorkerLogLine)] == SHIPPED
    markers = [e.marker for e in events if isinstance(e, WorkerMarkerSeen)]
    assert RunExited(event="run_exited", exit_code=0) in markers


async def test_a_streamed_log_numbers_its_lines_as_the_followed_one() -> None:
    streamed = [(line.seq, line.text) async for line in _driver().stream_logs(WORKER, follow=False)]
    assert streamed == SHIPPED
