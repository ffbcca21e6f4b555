"""The Go data path's own unit tests (``go test`` in ``services/tunnel_agent/dataplane``), run by CI.

The Go toolchain is on every machine that builds the data path (``make prereqs``); the module cache
it fills there is what ``go test`` reads, so this needs no network once the binary was built.
"""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest
from rlark_devinfra import tunnel_dp

pytestmark = pytest.mark.unit


def test_go_unit_tests_of_the_data_path_pass() -> None:
    go = shutil.which("go")
    assert go is not None, "the Go toolchain (go) builds the tunnel data path and runs its tests"
    env = {**os.environ, "CGO_ENABLED": "0", "GOWORK": "off", "GOFLAGS": "-mod=readonly -buildvcs=false"}
    result = subprocess.run(
        [go, "test", "-count=1", "./..."],
        cwd=tunnel_dp.source_dir(),
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert result.returncode == 0, f"go test failed:\n{result.stdout[-4000:]}\n{result.stderr[-4000:]}"
    assert "ok" in result.stdout
