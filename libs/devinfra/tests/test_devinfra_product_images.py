"""The product images are built from the Dockerfile a lab uses (ADR 0023): its bases are arguments that default
to the public images, the local build fills every one of them, and the build's key follows exactly the
files the Dockerfile copies — a test edit or a checkout's node_modules never rebuilds the images, a source
edit always does."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from rlark_devinfra import paths, product_images

pytestmark = pytest.mark.unit

ROOT = paths.repo_root()
DOCKERFILE = (ROOT / "Dockerfile").read_text()


def test_the_dockerfile_bases_are_arguments_defaulting_to_the_public_images_and_the_local_build_fills_each() -> (
    None
):
    defaults = product_images.dockerfile_base_args(DOCKERFILE)
    assert defaults == {
        "NODE_BASE": "node:20-bookworm-slim",
        "GO_BASE": "golang:1.24-bookworm",
        "PYTHON_BASE": "python:3.11-slim-bookworm",
    }
    assert set(product_images.BUILD_ARGS) == set(defaults)
    froms = [rest.split()[0] for word, rest in product_images._instructions(DOCKERFILE) if word == "FROM"]
    assert {"${NODE_BASE}", "${GO_BASE}", "${PYTHON_BASE}"} <= set(froms)
    assert not [image for image in froms if ":" in image], "a stage names a public image, not an argument"


def test_the_context_is_what_the_dockerfile_copies_less_dockerignore() -> None:
    assert product_images.context_sources(DOCKERFILE) == [
        "web/package.json",
        "web/package-lock.json",
        "web",
        "services/tunnel_agent/dataplane/go.mod",
        "services/tunnel_agent/dataplane/go.sum",
        "services/tunnel_agent/dataplane",
        "pyproject.toml",
        "uv.lock",
        "libs",
        "services",
        "cli",
    ]
    files = product_images.context_files(ROOT)
    assert {"Dockerfile", ".dockerignore", "uv.lock", "web/package-lock.json"} <= set(files)
    assert "services/gateway/src/rlark_gateway/main.py" in files
    assert "services/tunnel_agent/dataplane/main.go" in files
    assert not [f for f in files if "/tests/" in f or "node_modules" in f or f.startswith("web/dist")]
    assert not [f for f in files if "__pycache__" in f or f.endswith(".pyc")]


def test_a_copy_from_another_stage_is_not_context() -> None:
    dockerfile = 'FROM a AS b\nCOPY --from=web /web/dist /app/web/dist\nCOPY ["x.txt", "y/", "/dst/"]\n'
    assert product_images.context_sources(dockerfile) == ["x.txt", "y"]


@pytest.mark.parametrize(
    ("path", "ignored"),
    [
        ("services/gateway/tests/test_api.py", True),
        ("tests/e2e/test_x.py", True),
        ("services/gateway/src/rlark_gateway/tests_helpers.py", False),
        ("web/node_modules/vite/index.js", True),
        ("web/dist/index.html", True),
        ("web/src/dist/chart.ts", False),
        (".venv/bin/python", True),
        ("libs/platform/.venv/bin/python", False),
        ("libs/platform/src/rlark_platform/__pycache__/db.cpython-311.pyc", True),
        ("services/inventory/.ruff_cache/CACHEDIR.TAG", True),
        ("libs/contracts/src/rlark_contracts/envelope.py", False),
    ],
)
def test_dockerignore_patterns_leave_out_what_docker_leaves_out(path: str, ignored: bool) -> None:
    patterns = product_images.dockerignore_patterns((ROOT / ".dockerignore").read_text())
    assert product_images.is_ignored(path, patterns) is ignored


def test_a_dockerignore_exception_is_refused_rather_than_misread() -> None:
    with pytest.raises(ValueError, match="not supported"):
        product_images.dockerignore_patterns("**/tests\n!services/gateway/tests\n")


@pytest.fixture
def checkout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("RLARK_CACHE_DIR", str(tmp_path / "cache"))
    repo = tmp_path / "repo"
    (repo / "libs/x/src").mkdir(parents=True)
    (repo / "libs/x/tests").mkdir(parents=True)
    (repo / "Dockerfile").write_text("ARG PYTHON_BASE=python:3.11\nFROM ${PYTHON_BASE}\nCOPY libs/ libs/\n")
    (repo / ".dockerignore").write_text("**/tests\n**/__pycache__\n")
    (repo / "libs/x/src/a.py").write_text("A = 1\n")
    (repo / "libs/x/tests/test_a.py").write_text("def test_a(): ...\n")
    return repo


def test_the_key_follows_copied_bytes_and_modes_and_nothing_the_context_leaves_out(checkout: Path) -> None:
    first = product_images.cache_key(checkout)
    (checkout / "libs/x/tests/test_a.py").write_text("def test_b(): ...\n")
    (checkout / "libs/x/src/__pycache__").mkdir()
    (checkout / "libs/x/src/__pycache__/a.cpython-311.pyc").write_bytes(b"\0")
    (checkout / "README.md").write_text("not copied\n")
    assert product_images.cache_key(checkout) == first

    (checkout / "libs/x/src/a.py").write_text("A = 2\n")
    second = product_images.cache_key(checkout)
    assert second != first
    os.chmod(checkout / "libs/x/src/a.py", 0o700)  # executable: the image keeps the mode
    assert product_images.cache_key(checkout) not in (first, second)
    (checkout / ".dockerignore").write_text("**/tests\n")
    assert product_images.cache_key(checkout) != second


def test_the_tests_find_no_image_in_an_empty_cache_and_are_told_the_build_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RLARK_CACHE_DIR", str(tmp_path / "cache"))
    assert product_images.missing() == ["service", "agent"]
    with pytest.raises(paths.NotBuilt, match=r"make prereqs"):
        product_images.require_built()
    assert not any((tmp_path / "cache").glob("product-*"))
