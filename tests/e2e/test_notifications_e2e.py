"""Job notifications end to end (issue 19 item 3): a real job on the local runtime, the real scheduler's
events through Kafka to the notifier, and a real HTTP receiver in this process.

A job's lifecycle arrives in order with valid signatures; a receiver answering 500 twice gets the event on
the third try (and the delivery log says so); a user cannot register for another user's job, nor see or
touch another user's endpoints and delivery logs."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from pathlib import Path
from urllib.parse import parse_qs

import pytest
from agents import local_agent, write_cluster_file
from jobs import document, role, submit, wait_placeable, wait_status
from rlark_devinfra.webhook_receiver import Received, webhook_receiver
from stack import Stack

pytestmark = pytest.mark.e2e

NODES = [{"name": "cpu-0", "labels": {"rlark.io/node-category": "cloud"}, "cpu": 2, "memory": "4Gi"}]
ENDPOINTS = "/api/v1/notifications/endpoints"
SECRET = "alice-webhook-signing-secret"


def signed(request: Received) -> bool:
    """The receiver's own check, as the README tells one to write it."""
    timestamp = request.headers["x-rlark-timestamp"]
    mac = hmac.new(SECRET.encode(), f"{timestamp}.".encode() + request.body, hashlib.sha256).hexdigest()
    return hmac.compare_digest(request.headers["x-rlark-signature"], f"sha256={mac}")


async def test_a_jobs_lifecycle_reaches_its_owners_webhooks_in_order_signed_and_retried(
    stack: Stack, tmp_path: Path
) -> None:
    _, alice = await stack.new_user()
    _, bob = await stack.new_user()
    credential = await stack.register_cluster("lab")
    cluster_file = write_cluster_file(tmp_path / "lab.yaml", "lab", NODES)
    async with (
        webhook_receiver() as receiver,
        local_agent(stack.url, credential, cluster_file, tmp_path / "agent"),
    ):
        receiver.fail("/flaky", 500, times=2)
        async with stack.client(alice) as client:
            every = await client.post(
                ENDPOINTS,
                json={"name": "all", "kind": "json", "url": receiver.url("/alice"), "secret": SECRET},
            )
            assert every.status_code == 201, every.text
            assert every.json()["has_secret"] is True
            assert SECRET not in every.text
            flaky = await client.post(
                ENDPOINTS,
                json={"name": "flaky", "kind": "json", "url": receiver.url("/flaky"), "states": ["Running"]},
            )
            assert flaky.status_code == 201, flaky.text
        async with stack.client(bob) as client:
            mine = await client.post(
                ENDPOINTS, json={"name": "b", "kind": "slack", "url": receiver.url("/bob")}
            )
            assert mine.status_code == 201, mine.text

        doc = document("notified", [role("actor", 1)], "echo trained")
        await wait_placeable(stack, doc, token=alice)
        job = await submit(stack, doc, token=alice)
        final = await wait_status(stack, job["id"], {"Succeeded"})
        timeline = [e["to_status"] for e in final["timeline"] if e["kind"] == "status"]

        await receiver.wait_for(
            lambda: any(json.loads(r.body)["to_status"] == "Succeeded" for r in receiver.to("/alice")),
            timeout_s=60,
            what="the job's end at alice's endpoint",
        )
        bodies = [json.loads(r.body) for r in receiver.to("/alice")]
        statuses = [b["to_status"] for b in bodies]
        assert statuses == ["Pending", "Scheduled", "Starting", "Running", "Succeeded"], statuses
        assert statuses == timeline
        assert {b["job_id"] for b in bodies} == {job["id"]}
        assert [b["from_status"] for b in bodies[1:]] == statuses[:-1]
        assert all(signed(r) for r in receiver.to("/alice"))
        assert len({r.headers["x-rlark-delivery"] for r in receiver.to("/alice")}) == len(bodies)

        await receiver.wait_for(
            lambda: any(r.status == 200 for r in receiver.to("/flaky")), timeout_s=60, what="the third try"
        )
        assert [r.status for r in receiver.to("/flaky")] == [500, 500, 200]
        assert {json.loads(r.body)["to_status"] for r in receiver.to("/flaky")} == {"Running"}
        async with stack.client(alice) as client:
            log = await client.get(f"{ENDPOINTS}/{flaky.json()['id']}/deliveries")
        assert log.status_code == 200, log.text
        [delivery] = log.json()["items"]
        assert (delivery["status"], delivery["attempts"]) == ("delivered", 3)
        assert [a["status_code"] for a in delivery["log"]] == [500, 500, 200]

        # The CLI: list, a DingTalk robot added with its secret from standard input, a test, the log.
        listed = await stack.cli("notify", "list", "-o", "json", token=alice)
        assert listed.returncode == 0, listed.stderr
        assert {e["name"]: e["has_secret"] for e in json.loads(listed.stdout)["items"]} == {
            "all": True,
            "flaky": False,
        }
        added = await stack.cli(
            "notify", "add", receiver.url("/robot?access_token=t0k"), "--name", "robot", "--kind", "dingtalk",
            "--secret-from", "-", "--language", "zh-CN", token=alice, stdin="SECrobot\n",
        )  # fmt: skip
        assert added.returncode == 0, added.stderr
        assert "signed" in added.stdout
        tested = await stack.cli("notify", "test", "robot", token=alice)
        assert tested.returncode == 0, tested.stderr
        await receiver.wait_for(lambda: bool(receiver.to("/robot")), timeout_s=30, what="the test message")
        [robot] = receiver.to("/robot")
        query = parse_qs(robot.query)
        assert query["access_token"] == ["t0k"]
        digest = hmac.new(b"SECrobot", f"{query['timestamp'][0]}\nSECrobot".encode(), hashlib.sha256).digest()
        assert query["sign"] == [base64.b64encode(digest).decode()]
        assert json.loads(robot.body)["msgtype"] == "text"
        shown = await stack.cli("notify", "deliveries", "flaky", "-o", "json", token=alice)
        assert shown.returncode == 0, shown.stderr
        assert [d["attempts"] for d in json.loads(shown.stdout)["items"]] == [3]
        removed = await stack.cli("notify", "remove", "robot", token=alice)
        assert removed.returncode == 0, removed.stderr

        # Bob: his endpoint hears nothing of alice's job, and nothing of hers is his to register or read.
        assert receiver.to("/bob") == []
        async with stack.client(bob) as client:
            stolen = await client.post(
                ENDPOINTS,
                json={"name": "spy", "kind": "json", "url": receiver.url("/spy"), "job_ids": [job["id"]]},
            )
            assert stolen.status_code == 404, stolen.text
            assert (stolen.json()["error"]["code"], stolen.json()["error"]["field"]) == (
                "job_not_found",
                "job_ids[0]",
            )
            everyone = await client.post(
                ENDPOINTS, json={"name": "spy", "kind": "json", "url": receiver.url("/spy"), "scope": "all"}
            )
            assert everyone.status_code == 403, everyone.text
            assert (await client.get(ENDPOINTS, params={"all": "true"})).status_code == 403
            for path in (f"{ENDPOINTS}/{flaky.json()['id']}", f"{ENDPOINTS}/{flaky.json()['id']}/deliveries"):
                assert (await client.get(path)).status_code == 404
            assert (await client.delete(f"{ENDPOINTS}/{flaky.json()['id']}")).status_code == 404
            assert [e["name"] for e in (await client.get(ENDPOINTS)).json()["items"]] == ["b"]
        assert receiver.to("/spy") == []
