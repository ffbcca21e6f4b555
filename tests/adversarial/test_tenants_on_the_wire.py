"""Issue 31, item 1 and 2 (ADR 0022): one user's job reaches nothing of another user's job, nor the host, and
a job's Ray refuses whoever lacks its attempt's token — on the local runtime, through the real platform.

Alice's job holds its Header up with Ray's head (dashboard and Jobs API on 8265, GCS on 6379, the client
server on 10001), its sshd on 22 and a server of her own on 9000. Mallory's job then does what a hostile run
script did before this change: connect to each of those ports at Alice's worker address and POST a job to
Alice's Jobs API, and connect to a server this test listens with on every address of the host — through the
bridge's gateway address and the host's own. Before: every connection opened and Alice's Jobs API ran the
entrypoint as Alice's uid. Now every one is dropped on the bridge (nftables, ``runtime/local/firewall.py``).

From the host — where the platform's own relays run — Alice's Ray answers, but only with her attempt's token:
401 without one, 403 with Mallory's, 200 with hers. And the credentials route answers an attempt's token
only to the agent of the worker's cluster, for a live attempt.
"""

from __future__ import annotations

import contextlib
import json
import re
import socket
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from agents import local_agent, nodes, write_cluster_file
from jobs import document, job, logs, role, submit, wait_placeable, wait_status
from rlark_devinfra.testing import TEST_SECRET
from rlark_platform.identity import ray_token
from stack import Stack, eventually

pytestmark = [pytest.mark.e2e, pytest.mark.netns]

CLUSTER = "lab"
HOLD = 'while [ ! -e "$HOME/go" ]; do sleep 0.2; done\n'
ALICE_PORTS = {"ssh": 22, "ray-gcs": 6379, "ray-dashboard": 8265, "ray-client": 10001, "own-server": 9000}

PROBE = r"""
import json, socket, sys, urllib.request
targets = json.loads(sys.argv[1])
seen = {}
for name, (host, port) in targets.items():
    s = socket.socket()
    s.settimeout(3)
    try:
        s.connect((host, port))
        seen[name] = "open"
    except socket.timeout:
        seen[name] = "timeout"
    except OSError as exc:
        seen[name] = f"refused:{exc.errno}"
    finally:
        s.close()
try:
    body = json.dumps({"entrypoint": "id -u > /tmp/pwned"}).encode()
    req = urllib.request.Request(sys.argv[2], data=body, headers={"Content-Type": "application/json"})
    seen["jobs-api-post"] = f"answered:{urllib.request.urlopen(req, timeout=3).status}"
except urllib.error.HTTPError as exc:
    seen["jobs-api-post"] = f"answered:{exc.code}"
except Exception as exc:
    seen["jobs-api-post"] = f"unreachable:{type(exc).__name__}"
print("PROBE " + json.dumps(seen, sort_keys=True))
"""


@contextlib.contextmanager
def host_listener() -> Iterator[int]:
    """A TCP server on every address of the host (what any service bound to 0.0.0.0 is), answering 'host'."""
    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("0.0.0.0", 0))  # noqa: S104 - on purpose: a host service on every address
    server.listen()
    server.settimeout(0.5)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                continue
            with conn:
                conn.sendall(b"host\n")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield server.getsockname()[1]
    finally:
        stop.set()
        thread.join(5)
        server.close()


def host_address() -> str:
    found = subprocess.run(["hostname", "-I"], capture_output=True, text=True, check=True).stdout.split()
    return found[0]


async def running_header(stack: Stack, job_id: str, line: str, token: str) -> dict[str, Any]:
    async def seen() -> bool:
        return any(line in entry["line"] for entry in await logs(stack, job_id))

    await eventually(seen, timeout_s=180, interval_s=0.5, what=f"{line!r} in the logs of {job_id}")
    [worker] = (await job(stack, job_id, token=token))["workers"]
    return worker  # type: ignore[no-any-return]


async def credentials(stack: Stack, worker_id: str, bearer: str) -> httpx.Response:
    async with stack.client(bearer) as client:
        return await client.post(f"/api/v1/agent/workers/{worker_id}/credentials")


async def test_another_users_job_reaches_none_of_a_jobs_ports_nor_the_host_and_ray_wants_its_attempts_token(
    stack: Stack, tmp_path: Path
) -> None:
    credential = await stack.register_cluster(CLUSTER)
    other_credential = await stack.register_cluster("elsewhere")
    cluster_file = write_cluster_file(tmp_path / "lab.yaml", CLUSTER, nodes(CLUSTER, 2))
    _, alice = await stack.new_user()
    _, mallory = await stack.new_user()

    with host_listener() as host_port:
        async with local_agent(stack.url, credential, cluster_file, tmp_path / "agent") as agent:
            victim = document(
                "victim",
                [role("header", 1, CLUSTER)],
                'python -m http.server 9000 --bind 0.0.0.0 >/dev/null 2>&1 &\necho "VICTIM UP"\n' + HOLD,
            )
            await wait_placeable(stack, victim, token=alice)
            alice_job = (await submit(stack, victim, token=alice))["id"]
            header = await running_header(stack, alice_job, "VICTIM UP", alice)
            address = header["address"]

            # From the host, where the platform's relays run: Alice's Ray answers her attempt's token only.
            jobs_api = f"http://{address}:{ALICE_PORTS['ray-dashboard']}/api/jobs/"
            alice_token = ray_token(TEST_SECRET, alice_job, 1)
            async with httpx.AsyncClient(timeout=10, trust_env=False) as plain:
                assert (await plain.get(jobs_api)).status_code == 401
                forged = {"Authorization": f"Bearer {ray_token(TEST_SECRET, 'job-mallory', 1)}"}
                assert (await plain.get(jobs_api, headers=forged)).status_code == 403
                own = {"Authorization": f"Bearer {alice_token}"}
                assert (await plain.get(jobs_api, headers=own)).status_code == 200

            gateway = str(agent.driver.subnet.network_address + 1)  # type: ignore[attr-defined]
            targets = {name: (address, port) for name, port in ALICE_PORTS.items()}
            targets["host-via-bridge"] = (gateway, host_port)
            targets["host-address"] = (host_address(), host_port)
            hostile = document(
                "hostile",
                [role("header", 1, CLUSTER)],
                f"python - {json.dumps(json.dumps(targets))} {jobs_api} <<'EOF'\n{PROBE}\nEOF\n",
            )
            mallory_job = (await submit(stack, hostile, token=mallory))["id"]
            await wait_status(stack, mallory_job, {"Succeeded"}, timeout_s=240)
            text = "\n".join(entry["line"] for entry in await logs(stack, mallory_job))
            found = re.search(r"^PROBE (\{.*\})$", text, re.MULTILINE)
            assert found is not None, text[-3000:]
            seen = json.loads(found.group(1))
            assert set(seen) == {*targets, "jobs-api-post"}
            opened = {
                name: state for name, state in seen.items() if state == "open" or state.startswith("answered")
            }
            assert opened == {}, f"reached from another user's job: {opened}"

            # The credentials route: only the agent of the worker's cluster, only for a live attempt.
            agent_token = agent.reports.session.token
            answer = await credentials(stack, header["id"], agent_token)
            assert answer.status_code == 200, answer.text
            assert answer.json()["ray_token"] == alice_token
            assert answer.headers["cache-control"] == "no-store"
            assert (await credentials(stack, header["id"], alice)).status_code == 401
            async with stack.client() as client:
                other = await client.post(
                    "/api/v1/agent/session", headers={"Authorization": f"Bearer {other_credential}"}
                )
            other_token = other.json()["token"]
            refused = await credentials(stack, header["id"], other_token)
            assert (refused.status_code, refused.json()["error"]["code"]) == (404, "worker_not_found")
            assert alice_token not in refused.text

            async with stack.client(alice) as client:
                assert (await client.post(f"/api/v1/jobs/{alice_job}:cancel")).status_code == 200
            await wait_status(stack, alice_job, {"Cancelled"}, timeout_s=120)
            ended = await credentials(stack, header["id"], agent_token)
            assert (ended.status_code, ended.json()["error"]["code"]) == (409, "worker_ended")
