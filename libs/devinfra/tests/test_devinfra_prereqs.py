"""Heavy prerequisites are built before the tests, never inside one: on a machine without them, fixtures
and helpers fail at once naming the command that builds them (a cold kube-apiserver build once ran into
pytest-timeout's 300 s on a new CI machine)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest
from rlark_devinfra import kafka, paths, prereqs, versitygw, web
from rlark_devinfra.k8s import build, testbed

pytestmark = pytest.mark.unit


@pytest.fixture
def empty_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A brand-new machine's cache: nothing built, nothing downloaded."""
    cache = tmp_path / "cache"
    monkeypatch.setenv("RLARK_CACHE_DIR", str(cache))
    monkeypatch.setenv("RLARK_STATE_DIR", str(tmp_path / "state"))
    return cache


def test_the_cache_directory_follows_rlark_cache_dir(empty_cache: Path) -> None:
    assert paths.cache_dir() == empty_cache
    assert build.root().parent == empty_cache


def test_starting_the_test_bed_without_binaries_fails_at_once_naming_the_build_command(
    empty_cache: Path,
) -> None:
    assert build.missing() == [
        "etcd",
        "kwok",
        "kube-apiserver",
        "kubelet",
        "kube-controller-manager",
        "kube-scheduler",
        "kubectl",
    ]
    with pytest.raises(build.NotBuilt, match=r"make prereqs") as refused:
        testbed.up(clusters=1)
    assert "kube-apiserver" in str(refused.value)
    assert not (build.root() / "src-kubernetes").exists()  # no Go module was even started


def test_the_console_is_never_built_inside_a_test(empty_cache: Path) -> None:
    with pytest.raises(web.WebBuildError, match=r"make prereqs"):
        web.build_web(build_missing=False)
    assert not any(empty_cache.glob("web-*"))


def test_the_s3_server_is_never_built_inside_a_test(empty_cache: Path) -> None:
    assert not versitygw.is_built()
    with pytest.raises(paths.NotBuilt, match=r"make prereqs"):
        versitygw.start()
    assert not (versitygw.root() / "src").exists()  # no Go module was even started


def test_kafka_jars_are_missing_in_an_empty_cache_and_maven_would_use_it(empty_cache: Path) -> None:
    assert not kafka.jars_ready()


def test_prereqs_check_lists_what_is_missing_and_builds_nothing(empty_cache: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "rlark_devinfra.prereqs", "--check"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 1, result.stderr
    assert result.stderr.count("MISSING") >= 2  # Kafka jars and the Kubernetes test bed
    assert "Kubernetes test bed" in result.stderr
    assert not (empty_cache / kafka.CACHE_KEY / "libs").exists()
    assert not (empty_cache / build.CACHE_KEY / "bin" / "kube-apiserver").exists()


def test_every_step_names_its_cold_cost() -> None:
    assert all(s.cold.startswith("~") for s in prereqs.STEPS)
    names = " | ".join(s.name for s in prereqs.STEPS)
    for heavy in (
        "Kafka",
        "Kubernetes test bed",
        "real-node images",
        "rlark-tunnel-dp",
        "versitygw",
        "web console",
        "RLinf",
    ):
        assert heavy in names


BUILDERS = {"build_web", "ensure_built", "libs_dir", "ensure_node_modules", "ensure_all"}
"""Calls that may download or build. Tests and fixtures use the require/ready forms instead."""


def _test_sources() -> list[Path]:
    root = paths.repo_root()
    found = [p for p in root.glob("tests/**/*.py")]
    for top in ("libs", "services", "cli"):
        found += [p for p in root.glob(f"{top}/*/tests/**/*.py")]
    return found


def test_no_test_or_fixture_calls_a_builder_without_build_missing_false() -> None:
    offenders = []
    for path in _test_sources():
        if path.name == Path(__file__).name:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Call):
                continue
            name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            if name == "build" and isinstance(node.func, ast.Attribute):
                owner = node.func.value
                if isinstance(owner, ast.Name) and owner.id in {"build", "k8s_build", "build_mod"}:
                    offenders.append(f"{path}:{node.lineno} {owner.id}.build()")
            if name in BUILDERS and not any(
                k.arg == "build_missing" and isinstance(k.value, ast.Constant) and k.value.value is False
                for k in node.keywords
            ):
                offenders.append(f"{path}:{node.lineno} {name}()")
    assert offenders == []
