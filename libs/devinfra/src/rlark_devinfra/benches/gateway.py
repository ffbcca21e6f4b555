"""Forwarded calls through the real gateway (issue 18 item 6): ``wrk`` against the gateway and the services
behind it, each ``python -m rlark_<service> all`` in its own process as ``make run`` starts them, on fresh
databases and a topic prefix of their own.

Measured in one run, 50 connections, one ``wrk`` thread, ``seconds`` each: the gateway's own authenticated
``GET /api/v1/auth/me`` (the reference: one token lookup, no forwarding), then the list calls it forwards —
``/api/v1/nodes`` (inventory), ``/api/v1/jobs`` (scheduler) and ``/api/v1/keys`` (keys) — each with a
user's API token. The lists hold what a small lab has: one cluster, a few keys, no jobs running (their
sizes are reported). Requests per second, p50 and p99 latency, non-2xx answers.

``wrk`` shares the two cores with the gateway, the services, PostgreSQL and Kafka, so the numbers are this
machine's; the ratio to ``auth/me`` in the same run is the steadier figure.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
from rlark_contracts.services import SERVICES as PLATFORM_SERVICES

SERVICES = {service.name: service.package for service in PLATFORM_SERVICES}
FORWARDED = ("nodes", "jobs", "keys")
_UNIT_S = {"us": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0}


def _seconds(value: str) -> float:
    match = re.fullmatch(r"([\d.]+)(us|ms|s|m)", value.strip())
    if match is None:
        raise ValueError(f"not a wrk duration: {value!r}")
    return float(match.group(1)) * _UNIT_S[match.group(2)]


def parse_wrk(output: str) -> dict[str, float]:
    """Requests/s, p50 and p99 (seconds) and non-2xx answers from ``wrk --latency`` output."""
    rate = re.search(r"Requests/sec:\s+([\d.]+)", output)
    p50 = re.search(r"^\s+50%\s+(\S+)", output, re.MULTILINE)
    p99 = re.search(r"^\s+99%\s+(\S+)", output, re.MULTILINE)
    if rate is None or p50 is None or p99 is None:
        raise ValueError(f"wrk printed no rate or latency distribution:\n{output[-2000:]}")
    bad = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", output)
    errors = re.search(r"Socket errors:.*", output)
    return {
        "rps": float(rate.group(1)),
        "p50_s": _seconds(p50.group(1)),
        "p99_s": _seconds(p99.group(1)),
        "non_2xx": float(bad.group(1)) if bad else 0.0,
        "socket_errors": 1.0 if errors else 0.0,
    }


def run_wrk(url: str, token: str, *, connections: int, seconds: int) -> dict[str, float]:
    done = subprocess.run(
        [
            "wrk",
            "-t1",
            f"-c{connections}",
            f"-d{seconds}s",
            "--latency",
            "-H",
            f"Authorization: Bearer {token}",
            url,
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=seconds + 60,
    )
    return parse_wrk(done.stdout)


def _environment(
    name: str, database_url: str, kafka: Any, prefix: str, ports: dict[str, int], secret: str
) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RLARK_")}
    env.update(
        {
            "RLARK_DATABASE_URL": database_url,
            "RLARK_DATABASE_NAME": database_url.rsplit("/", 1)[1],
            "RLARK_KAFKA_BOOTSTRAP": kafka.bootstrap,
            "RLARK_TOPIC_PREFIX": prefix,
            "RLARK_TOPIC_PARTITIONS": "1",
            "RLARK_INTERNAL_SECRET": secret,
            "RLARK_HTTP_PORT": str(ports[name]),
            "RLARK_LOG_JSON": "true",
        }
    )
    if name == "gateway":
        for other in (n for n in SERVICES if n != "gateway"):
            env[f"RLARK_{other.upper()}_URL"] = f"http://127.0.0.1:{ports[other]}"
    return env


@contextlib.contextmanager
def _processes(databases: dict[str, str], kafka: Any, prefix: str, logs: Path) -> Iterator[str]:
    """Migrate and start every service as its own process; yield the gateway's URL; stop them all."""
    from rlark_devinfra.process import stop_process_group
    from rlark_devinfra.testing import TEST_SECRET, free_port

    ports = {name: free_port() for name in SERVICES}
    running: list[subprocess.Popen[bytes]] = []
    try:
        for name, module in SERVICES.items():
            env = _environment(name, databases[name], kafka, prefix, ports, TEST_SECRET)
            if name == "gateway":
                env["RLARK_BOOTSTRAP_ADMIN_USERNAME"] = _ADMIN
                env["RLARK_BOOTSTRAP_ADMIN_PASSWORD"] = _PASSWORD
            subprocess.run(
                [sys.executable, "-m", module, "migrate"], env=env, check=True, capture_output=True
            )
            with (logs / f"{name}.log").open("wb") as log:
                running.append(
                    subprocess.Popen(
                        [sys.executable, "-m", module, "all"],
                        env=env,
                        stdout=log,
                        stderr=subprocess.STDOUT,
                        start_new_session=True,
                    )
                )
        for name in SERVICES:
            _wait_ready(f"http://127.0.0.1:{ports[name]}", name, logs / f"{name}.log")
        yield f"http://127.0.0.1:{ports['gateway']}"
    finally:
        for proc in running:
            stop_process_group(proc.pid, grace_s=15)


def _wait_ready(url: str, name: str, log: Path, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"{url}/readyz", timeout=5).status_code == 200:
                return
        time.sleep(0.5)
    tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
    raise TimeoutError(f"{name} not ready within {timeout_s:g} s:\n{tail}")


_ADMIN, _PASSWORD = "root", "bench-" + uuid.uuid4().hex


def _seed(gateway: str) -> tuple[str, dict[str, int]]:
    """A user's API token, one cluster and a few keys; returns the token and each list's size."""
    from rlark_devinfra.bench_platform import local_cluster

    with httpx.Client(base_url=gateway, timeout=30) as admin:
        admin.post("/api/v1/auth/login", json={"username": _ADMIN, "password": _PASSWORD}).raise_for_status()
        admin.post(
            "/api/v1/users", json={"username": "bench", "password": _PASSWORD, "role": "user"}
        ).raise_for_status()
        admin.post("/api/v1/clusters", json=local_cluster("bench-a")).raise_for_status()
    with httpx.Client(base_url=gateway, timeout=30) as user:
        user.post("/api/v1/auth/login", json={"username": "bench", "password": _PASSWORD}).raise_for_status()
        token = user.post("/api/v1/auth/tokens", json={"name": "bench"}).raise_for_status().json()["token"]
        for i in range(3):
            user.post("/api/v1/keys", json={"name": f"key-{i}", "public_key": _key(i)}).raise_for_status()
        sizes = {}
        for path in FORWARDED:
            body = user.get(f"/api/v1/{path}").raise_for_status().json()
            sizes[path] = len(body.get("items", [])) if isinstance(body, dict) else len(body)
    return token, sizes


def _key(i: int) -> str:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    public = Ed25519PrivateKey.generate().public_key()
    raw = public.public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
    return f"{raw.decode()} bench-{i}@lab"


def forwarded_calls(
    databases: dict[str, str], kafka: Any, prefix: str, *, connections: int = 50, seconds: int = 8
) -> dict[str, Any]:
    """Start the platform as processes, seed it, and time ``auth/me`` and each forwarded list with wrk."""
    if shutil.which("wrk") is None:
        raise FileNotFoundError("wrk is not installed (apt-get install wrk; `make setup` installs it)")
    logs = Path(tempfile.mkdtemp(prefix="rlark-bench-gateway-"))
    with _processes(databases, kafka, prefix, logs) as gateway:
        token, sizes = _seed(gateway)
        run_wrk(f"{gateway}/api/v1/auth/me", token, connections=connections, seconds=2)  # warm every path
        results = {
            "auth/me": run_wrk(f"{gateway}/api/v1/auth/me", token, connections=connections, seconds=seconds)
        }
        for path in FORWARDED:
            run_wrk(f"{gateway}/api/v1/{path}", token, connections=connections, seconds=1)
            results[path] = run_wrk(
                f"{gateway}/api/v1/{path}", token, connections=connections, seconds=seconds
            )
    return {"connections": connections, "seconds": seconds, "sizes": sizes, "results": results}


def services() -> list[str]:
    """The services the benchmark starts, each on a database of its own."""
    return list(SERVICES)
