"""The bench runner reports every benchmark: a broken, absent or hung one never hides the others."""

from __future__ import annotations

import json
import signal
import sys
from pathlib import Path

import pytest
from rlark_devinfra import bench

pytestmark = pytest.mark.unit


async def _broken(ctx: bench.Context) -> bench.Outcome:
    raise RuntimeError("the broker went away")


async def _absent(ctx: bench.Context) -> bench.Outcome:
    bench._load("rlark_devinfra.no_such_bench_module", "run")
    raise AssertionError("unreachable")


async def _fine(ctx: bench.Context) -> bench.Outcome:
    return bench.Outcome([bench.Row("answer", "42 ms", "≤ 50 ms", bench.PASS)], {"ms": 42})


def _register(monkeypatch: pytest.MonkeyPatch, name: str, runner: bench.Runner) -> bench.Bench:
    fake = bench.Bench(name, "a stand-in", "≈ 0 s", lambda o: 5, False, runner)
    monkeypatch.setattr(bench, "BENCHES", [*bench.BENCHES, fake])
    return fake


def _child_result(tmp_path: Path, name: str) -> dict[str, object]:
    result_file = tmp_path / "result.json"
    assert bench._child(name, bench.Options(), result_file) == 0
    return json.loads(result_file.read_text())  # type: ignore[no-any-return]


def test_a_crashing_benchmark_is_reported_failed_with_its_error(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _register(monkeypatch, "broken", _broken)
    result = _child_result(tmp_path, "broken")
    assert result["status"] == "failed"
    assert result["rows"] == [
        {
            "measure": "error",
            "value": "RuntimeError: the broker went away",
            "against": "",
            "verdict": "FAILED",
        }
    ]


def test_a_benchmark_whose_module_does_not_exist_yet_is_not_available(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _register(monkeypatch, "absent", _absent)
    result = _child_result(tmp_path, "absent")
    assert result["status"] == "not_available"
    rows = result["rows"]
    assert isinstance(rows, list)
    assert rows[0]["verdict"] == bench.NA
    assert "no_such_bench_module does not exist yet" in rows[0]["value"]


def test_a_missing_entry_point_in_an_existing_module_is_not_available() -> None:
    with pytest.raises(bench.NotAvailable, match="no_such_function"):
        bench._load("rlark_devinfra.paths", "no_such_function")


def test_a_finished_benchmark_keeps_its_rows_and_raw_numbers(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _register(monkeypatch, "fine", _fine)
    result = _child_result(tmp_path, "fine")
    assert result == {
        "status": "ok",
        "rows": [{"measure": "answer", "value": "42 ms", "against": "≤ 50 ms", "verdict": "PASS"}],
        "raw": {"ms": 42},
    }


def test_a_hung_benchmark_is_stopped_at_its_timeout_and_reported_failed(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(bench, "_bench_dir", lambda: tmp_path)
    pid_file, cleaned = tmp_path / "child.pid", tmp_path / "cleaned"
    script = (
        f"import os, pathlib, time; pathlib.Path({str(pid_file)!r}).write_text(str(os.getpid()))\n"
        f"try:\n    time.sleep(600)\nfinally:\n    pathlib.Path({str(cleaned)!r}).touch()"
    )
    monkeypatch.setattr(bench, "_child_argv", lambda *_: [sys.executable, "-c", script])
    hung = bench.Bench("hung", "sleeps", "≈ 600 s", lambda o: 1, False, _fine)
    # As under CI, where `make` runs in a background job: SIGINT ignored, and children inherit that.
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        result = bench._run_one(hung, bench.Options())
    finally:
        signal.signal(signal.SIGINT, previous)
    assert cleaned.exists()  # interrupted: its clean-up ran, rather than being killed after the grace
    assert result["status"] == "failed"
    assert result["rows"][0]["verdict"] == bench.FAILED
    assert "timed out after 1 s" in result["rows"][0]["value"]
    # Stopped, not waited for: the child that would sleep 600 s is gone when _run_one returns (no wall-clock
    # bound here — those flake on a loaded machine).
    pid = int(pid_file.read_text())
    assert not Path(f"/proc/{pid}").exists() or "zombie" in Path(f"/proc/{pid}/status").read_text()


def test_unknown_benchmark_names_are_refused() -> None:
    with pytest.raises(SystemExit):
        bench._parse(["no-such-bench"])


def test_tunnel_sizes_given_on_the_command_line_reach_the_child() -> None:
    options = bench.Options(tunnel_packets=1_000, tunnel_ray_tasks=7)
    argv = bench._child_argv("tunnel-packets", options, Path("/tmp/result.json"))
    child = bench._parse(argv[argv.index("rlark_devinfra.bench") + 1 :])
    assert (child.tunnel_packets, child.tunnel_ray_tasks) == (1_000, 7)
    assert bench._parse(["tunnel-packets", "--packets", "500"]).tunnel_packets == 500
    assert bench._parse([]).tunnel_packets == 10_000_000


def test_the_flood_may_run_long_enough_for_its_packets_at_ten_thousand_a_second() -> None:
    flood = next(b for b in bench.BENCHES if b.name == "tunnel-packets")
    assert bench.flood_seconds(10_000_000) >= 1_000
    assert flood.timeout_s(bench.Options()) > bench.flood_seconds(10_000_000)


def test_every_benchmark_entry_point_the_runner_loads_exists() -> None:
    """The runner finds its benchmarks by module path (``_load``): each one names a callable."""
    import ast
    import importlib

    tree = ast.parse(Path(bench.__file__).read_text())
    targets = {
        (call.args[0].value, call.args[1].value)
        for call in ast.walk(tree)
        if isinstance(call, ast.Call)
        and isinstance(call.func, ast.Name)
        and call.func.id == "_load"
        and all(isinstance(a, ast.Constant) for a in call.args)
    }
    assert len(targets) >= 14
    for module, function in sorted(targets):
        assert callable(getattr(importlib.import_module(module), function)), f"{module}.{function}"
