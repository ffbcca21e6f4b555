"""A reason the agent writes itself is a catalogue sentence (ADR 0011): the report carries its key and
params, so the console and the CLI say "准备脚本退出，退出码 3" in Chinese."""

from __future__ import annotations

from rlark_contracts.messages import Text
from rlark_tunnel_agent.runtime.driver import WorkerPhase, WorkerStatus
from rlark_tunnel_agent.runtime.markers import PrepareFailed, RunExited, apply_marker


def created() -> WorkerStatus:
    return WorkerStatus(worker_id="j-header-0", job_id="j", phase=WorkerPhase.CREATED)


def test_a_failed_prepare_script_is_a_keyed_sentence_with_its_exit_code() -> None:
    status = apply_marker(created(), PrepareFailed(event="prepare_failed", exit_code=3))
    assert status.reason == "prepare script exited with 3"
    assert isinstance(status.reason, Text)
    assert (status.reason.key, dict(status.reason.params)) == ("worker.prepare_failed", {"code": 3})
    assert status.reason.render("zh-CN") == "准备脚本退出，退出码 3"


def test_a_failed_run_script_is_keyed_and_a_clean_exit_says_nothing() -> None:
    running = created().model_copy(update={"phase": WorkerPhase.RUNNING})
    failed = apply_marker(running, RunExited(event="run_exited", exit_code=2))
    assert isinstance(failed.reason, Text)
    assert failed.reason.key == "worker.run_failed"
    assert apply_marker(running, RunExited(event="run_exited", exit_code=0)).reason == ""
