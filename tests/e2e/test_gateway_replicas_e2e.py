"""Issue 32, ADR 0028: two gateway replicas behind one address, as a Kubernetes Service puts them. The real
local agent keeps its one control link to whichever replica the balancer gave it, and dials back through the
balancer to either; users' calls go round-robin too. `ssh` with real OpenSSH (through `rlark ssh-config`'s
ProxyCommand), output listings and downloads all work, ten calls each — before ADR 0028 about one in two
failed (`no control link to the gateway`, `did not connect back within 10 s`).

The platform is ``stack.platform``'s (every service in this process, real PostgreSQL and Kafka), with a
second gateway on the same database and a ``Balancer`` in front of both."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from agents import local_agent, nodes, write_cluster_file
from balancer import Balancer
from jobs import add_key, document, make_public_key, role, submit, wait_placeable, wait_status
from rlark_devinfra.testing import free_port, running_service
from stack import (
    ADMIN,
    ADMIN_PASSWORD,
    QUICK_OVERRIDES,
    Stack,
    create_databases,
    definitions,
    eventually,
    platform_settings,
    provision_platform_prefix,
    remove_platform,
    side_by_side,
)
from test_ssh_e2e import openssh

pytestmark = pytest.mark.e2e

ROUNDS = 10
RUN = """set -e
mkdir -p /outputs
head -c 3000000 /dev/urandom > /outputs/model.bin
sha256sum /outputs/model.bin | cut -d' ' -f1 > /outputs/.model.sha256
mv /outputs/.model.sha256 /outputs/model.sha256
sleep 600
"""


@contextlib.asynccontextmanager
async def two_gateways(
    server_url: str, kafka_bootstrap: str, tmp: Path
) -> AsyncIterator[tuple[Stack, Balancer]]:
    """``stack.platform`` with two gateway replicas (one database) behind a round-robin balancer."""
    prefix = f"e{uuid.uuid4().hex[:8]}."
    defs = definitions()
    databases = await create_databases(server_url, list(defs))
    balancer = Balancer(free_port())
    try:
        await provision_platform_prefix(kafka_bootstrap, prefix)
        settings = platform_settings(databases, kafka_bootstrap, prefix, QUICK_OVERRIDES)
        first = settings["gateway"]
        second = first.model_copy(update={"http_port": free_port(), "tools_port": free_port()})
        async with contextlib.AsyncExitStack() as stack:
            await stack.enter_async_context(
                side_by_side([running_service(d, settings[n]) for n, d in defs.items() if n != "gateway"])
            )
            await stack.enter_async_context(running_service(defs["gateway"], first))
            await stack.enter_async_context(running_service(defs["gateway"], second))
            balancer.backends = [first.http_port, second.http_port]
            await balancer.start()
            running = Stack(balancer.url, kafka_bootstrap, prefix, databases, tmp=tmp)
            running.admin_token = await running.token_for(ADMIN, ADMIN_PASSWORD)
            yield running, balancer
    finally:
        await balancer.stop()
        await remove_platform(server_url, kafka_bootstrap, prefix, databases)


async def test_ssh_listings_and_downloads_work_through_either_of_two_gateway_replicas(
    postgres_server_url: str, kafka_bootstrap: str, tmp_path: Path
) -> None:
    async with two_gateways(postgres_server_url, kafka_bootstrap, tmp_path) as (stack, balancer):
        owner, token = await stack.new_user()
        credential = await stack.register_cluster("lab")
        cluster_file = write_cluster_file(tmp_path / "lab.yaml", "lab", nodes("lab", 1))
        await add_key(stack, "laptop", make_public_key(tmp_path, "laptop"), token=token)
        async with local_agent(stack.url, credential, cluster_file, tmp_path / "agent") as agent:
            await asyncio.wait_for(agent.ssh_link.connected.wait(), 30)
            doc = document("replicas", [role("actor", 1)], RUN, sshKeys=["laptop"], outputs=["/outputs"])
            await wait_placeable(stack, doc, token=token)
            job_id = (await submit(stack, doc, token=token))["id"]
            worker = (await wait_status(stack, job_id, {"Running"}))["workers"][0]
            made = await stack.cli("ssh-config", job_id, "-i", str(tmp_path / "laptop"), token=token)
            assert made.returncode == 0, made.stderr
            (tmp_path / "ssh_config").write_text(made.stdout)

            # No kept-alive connection: every call is a new connection, balanced to the next replica.
            async with stack.client(token, limits=httpx.Limits(max_keepalive_connections=0)) as client:

                async def written() -> str | None:
                    listing = await client.get(f"/api/v1/jobs/{job_id}/outputs")
                    paths = {f["path"] for f in listing.json().get("files", [])}
                    return "ok" if "/outputs/model.sha256" in paths else None

                await eventually(written, timeout_s=120, interval_s=1, what="the job's outputs written")
                want = (
                    await client.get(
                        f"/api/v1/jobs/{job_id}/outputs/download", params={"path": "/outputs/model.sha256"}
                    )
                ).text.strip()
                assert len(want) == 64, f"model.sha256 holds {want!r}, not a SHA-256"
                before = dict(balancer.connections)
                failures: list[str] = []
                for i in range(ROUNDS):
                    done = await openssh(stack, tmp_path, token, worker["id"], f"echo round-{i}")
                    if done.returncode != 0 or done.stdout.strip() != f"round-{i}":
                        failures.append(f"ssh {i}: {done.returncode} {done.stderr.strip()[-300:]}")
                for i in range(ROUNDS):
                    listing = await client.get(f"/api/v1/jobs/{job_id}/outputs")
                    sources = [w["source"] for w in listing.json().get("workers", [])]
                    if listing.status_code != 200 or sources != ["agent"]:
                        failures.append(f"listing {i}: {listing.status_code} {listing.text[:300]}")
                for i in range(ROUNDS):
                    got = await client.get(
                        f"/api/v1/jobs/{job_id}/outputs/download", params={"path": "/outputs/model.bin"}
                    )
                    digest = hashlib.sha256(got.content).hexdigest()
                    if got.status_code != 200 or digest != want:
                        failures.append(f"download {i}: {got.status_code} sha256 {digest}, want {want}")
                assert failures == []
                # Both replicas took users' calls and dial-backs (the balancer alternates).
                used = {port: balancer.connections[port] - before.get(port, 0) for port in balancer.backends}
                assert all(count >= ROUNDS for count in used.values()), used
                print(f"connections per replica during the rounds: {used}; owner {owner}")
