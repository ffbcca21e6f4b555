"""The service and agent images start: each archive `make prereqs` built from the Dockerfile (ADR 0023) is
loaded by podman into a store of its own and run, as a lab's container runtime would.

Nothing is built here (``product_images.require_built`` names `make prereqs` when an archive is missing for
these sources). podman runs daemonless as root, with no network and cgroupfs; the limits are lowered to at
most the caller's own, since root on these machines has no CAP_SYS_RESOURCE to raise them (podman's
defaults do, and runc then refuses to start).
"""

from __future__ import annotations

import json
import resource
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from rlark_devinfra import product_images
from rlark_devinfra.stack import AGENT, SERVICES

pytestmark = pytest.mark.images

LIBRARIES = ("rlark_contracts", "rlark_platform", "rlark_secretscan", "rlark_cli")
PROBE = """
import importlib, json, os, pathlib, sys
libraries, services = json.loads(sys.argv[1]), json.loads(sys.argv[2])
for name in [*libraries, *services, *(f"{service}.main" for service in services)]:
    importlib.import_module(name)
try:
    importlib.import_module("rlark_devinfra")
    devinfra = True
except ImportError:
    devinfra = False
web = pathlib.Path(os.environ["RLARK_WEB_DIR"])
print(json.dumps({"uid": os.getuid(), "web": str(web), "index": (web / "index.html").is_file(),
                  "scripts": len(list(web.glob("assets/*.js"))), "devinfra": devinfra}))
"""
"""Run in the service image: every package and each service's composition root import; who runs; the console."""


class Podman:
    """podman on a store of its own (under ``folder``, its run root in a short temporary directory); removed by
    :meth:`close`."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        # podman refuses a run root longer than 50 characters (xdist's temporary paths are longer).
        self.short = Path(tempfile.mkdtemp(prefix="rlark-podman-"))
        self.base = [
            "podman",
            f"--root={folder / 'root'}",
            f"--runroot={self.short / 'run'}",
            f"--tmpdir={self.short / 'tmp'}",
            f"--storage-driver={product_images.STORAGE_DRIVER}",
            "--cgroup-manager=cgroupfs",
            "--events-backend=file",
        ]

    def __call__(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*self.base, *args], capture_output=True, text=True, timeout=timeout, check=False
        )

    def load(self, archive: Path) -> str:
        loaded = self("load", "--quiet", f"--input={archive}", timeout=240)
        assert loaded.returncode == 0, loaded.stderr
        return loaded.stdout.strip().removeprefix("Loaded image: ").removeprefix("Loaded image(s): ")

    def run(self, image: str, *args: str, entrypoint: str | None = None) -> subprocess.CompletedProcess[str]:
        limits = []
        for name, which, most in (
            ("nofile", resource.RLIMIT_NOFILE, 8192),
            ("nproc", resource.RLIMIT_NPROC, 4096),
        ):
            hard = resource.getrlimit(which)[1]
            value = most if hard == resource.RLIM_INFINITY else min(hard, most)
            limits.append(f"--ulimit={name}={value}:{value}")
        options = [f"--entrypoint={entrypoint}"] if entrypoint else []
        return self("run", "--rm", "--network=none", *limits, *options, image, *args)

    def inspect(self, image: str) -> dict:  # type: ignore[type-arg]
        found = self("image", "inspect", image)
        assert found.returncode == 0, found.stderr
        document: dict = json.loads(found.stdout)[0]  # type: ignore[type-arg]
        return document

    def close(self) -> None:
        self("rmi", "--all", "--force", timeout=180)
        shutil.rmtree(self.folder, ignore_errors=True)
        shutil.rmtree(self.short, ignore_errors=True)


@pytest.fixture(scope="module")
def built() -> product_images.Images:
    return product_images.require_built()


@pytest.fixture(scope="module")
def podman(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Podman]:
    assert shutil.which("podman"), "podman is missing: make setup installs it"
    store = Podman(tmp_path_factory.mktemp("podman"))
    try:
        yield store
    finally:
        store.close()


def _report(podman: Podman, built: product_images.Images, target: str, ref: str) -> None:
    size = podman.inspect(ref)["Size"]
    archive = built.tar(target).stat().st_size
    build = (
        json.loads((built.root / "build.json").read_text()) if (built.root / "build.json").exists() else {}
    )
    print(
        f"{target} image {ref}: {size / 1e6:.0f} MB unpacked, {archive / 1e6:.0f} MB archive; "
        f"built in {build.get('seconds', {}).get(target, '?')} s"
    )


def test_the_service_image_runs_every_service_as_uid_10001_with_the_console_beside_it(
    built: product_images.Images, podman: Podman
) -> None:
    ref = podman.load(built.service_tar)
    assert ref == built.service_ref
    config = podman.inspect(ref)["Config"]
    assert config["User"] == "10001"
    assert config["Entrypoint"] == ["python", "-m"]

    for service in SERVICES:
        helped = podman.run(ref, service.module, "--help")
        assert helped.returncode == 0, f"{service.module}: {helped.stderr[-2000:]}"
        assert "Usage" in helped.stdout, helped.stdout
        assert "migrate" in helped.stdout, helped.stdout

    services = [s.module for s in [*SERVICES, AGENT]]
    probed = podman.run(ref, "-c", PROBE, json.dumps(LIBRARIES), json.dumps(services), entrypoint="python")
    assert probed.returncode == 0, probed.stderr[-3000:]
    facts = json.loads(probed.stdout.strip().splitlines()[-1])
    assert facts["uid"] == 10001
    assert facts["web"] == "/app/web/dist"
    assert facts["index"], "the console's index.html is not in RLARK_WEB_DIR"
    assert facts["devinfra"] is False, "a dev-only package ships in the image"
    assert facts["scripts"] >= 1
    _report(podman, built, "service", ref)


def test_the_agent_image_runs_the_tunnel_agent_with_its_data_path_ip_and_ssh(
    built: product_images.Images, podman: Podman
) -> None:
    ref = podman.load(built.agent_tar)
    assert ref == built.agent_ref
    config = podman.inspect(ref)["Config"]
    assert config["Entrypoint"] == ["python", "-m", "rlark_tunnel_agent"]
    assert "RLARK_TUNNEL_DATAPLANE=/usr/local/bin/rlark-tunnel-dp" in config["Env"]

    helped = podman.run(ref, "--help")
    assert helped.returncode == 0, helped.stderr[-2000:]
    assert "Usage" in helped.stdout, helped.stdout

    tools = podman.run(
        ref,
        "-c",
        "set -e; id -u; command -v rlark-tunnel-dp; command -v ip; command -v ssh; "
        "rlark-tunnel-dp -h 2>&1 | grep -q control-fd; ip -V; ssh -V 2>&1; "
        "command -v rclone; command -v fusermount3",
        entrypoint="sh",
    )
    assert tools.returncode == 0, tools.stdout + tools.stderr
    lines = tools.stdout.splitlines()
    assert lines[:4] == ["0", "/usr/local/bin/rlark-tunnel-dp", "/usr/sbin/ip", "/usr/bin/ssh"], lines
    assert "iproute2" in tools.stdout
    assert "OpenSSH" in tools.stdout
    # The CSI node plugin's mounter (deploy/agent/csi, ADR 0024).
    assert lines[-2:] == ["/usr/bin/rclone", "/usr/bin/fusermount3"], lines
    _report(podman, built, "agent", ref)
