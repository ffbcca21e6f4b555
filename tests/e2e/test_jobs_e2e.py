"""Steps 4 and 5 of the user guide end to end, with real Kafka, PostgreSQL and Ray on the local runtime:
submit through the gateway, gang placement, workers started by the agent, the Header waits for every Ray
node, the run script's exit code decides the job, logs and outputs outlive the workers."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from agents import local_agent, write_cluster_file
from jobs import add_key, document, job, logs, make_public_key, role, submit, wait_placeable, wait_status
from stack import Stack, eventually

pytestmark = pytest.mark.e2e

NODES = [
    {"name": f"cpu-{i}", "labels": {"rlark.io/node-category": "cloud"}, "cpu": 2, "memory": "4Gi"}
    for i in range(3)
]

PREPARE = """
echo "RANK_SEEN=$RLINF_NODE_RANK ROLE=$RLARK_ROLE NUM_NODES=$RLARK_NUM_NODES"
while read -r line; do echo "AUTHKEY:$line"; done < "$HOME/.ssh/authorized_keys"
stat -c 'KEYMODE:%a' "$HOME/.ssh/authorized_keys"
"""

RUN = """
python - <<'PY'
import os, pathlib, ray
ray.init(address=os.environ["RAY_ADDRESS"])
alive = [n for n in ray.nodes() if n["Alive"]]
print(f"ALIVE_NODES={len(alive)}", flush=True)
out = pathlib.Path(os.environ["RLARK_OUTPUTS"].split(":")[0]) / "checkpoints" / "global_step_1" / "actor"
out.mkdir(parents=True, exist_ok=True)
(out / "model.ckpt").write_text("weights")
print("training output: step 1 loss 0.5", flush=True)
PY
"""


async def test_three_worker_job_succeeds_with_every_ray_node_joined(stack: Stack, tmp_path: Path) -> None:
    credential = await stack.register_cluster("lab")
    cluster_file = write_cluster_file(tmp_path / "lab.yaml", "lab", NODES)
    keys = [make_public_key(tmp_path, "laptop"), make_public_key(tmp_path, "desktop")]
    await add_key(stack, "laptop", keys[0])
    await add_key(stack, "desktop", keys[1])
    await add_key(stack, "unused", make_public_key(tmp_path, "unused"))

    async with local_agent(stack.url, credential, cluster_file, tmp_path / "agent"):
        doc = document(
            "three workers",
            [role("actor", 1, prepareScript=PREPARE), role("rollout", 2, prepareScript=PREPARE)],
            RUN,
            sshKeys=["laptop", "desktop"],
            outputs=["/outputs"],
        )
        await wait_placeable(stack, doc)
        submitted = await submit(stack, doc)
        final = await wait_status(stack, submitted["id"], {"Succeeded"})

        async def checkpoint_listed() -> list | None:  # type: ignore[type-arg]
            outputs = (await job(stack, submitted["id"]))["outputs"]
            files = [f["path"] for o in outputs for f in o["files"]]
            return (
                [f for f in files if f == "/outputs/checkpoints/global_step_1/actor/model.ckpt"]
                or files
                or None
            )

        listed = await eventually(
            checkpoint_listed, timeout_s=60, what="the checkpoint in the output manifest"
        )
        assert listed == ["/outputs/checkpoints/global_step_1/actor/model.ckpt"]

    lines = [entry["line"] for entry in await logs(stack, submitted["id"])]
    text = "\n".join(lines)
    assert "ALIVE_NODES=3" in text
    assert "training output: step 1 loss 0.5" in text
    ranks = sorted(int(m) for m in re.findall(r"RANK_SEEN=(\d+)", text))
    assert ranks == [0, 1, 2]
    for worker in final["workers"]:
        worker_lines = [e["line"] for e in await logs(stack, submitted["id"], worker["id"])]
        authorized = {line.removeprefix("AUTHKEY:") for line in worker_lines if line.startswith("AUTHKEY:")}
        assert authorized == set(keys), worker["id"]
        assert "KEYMODE:600" in worker_lines
    assert len(final["workers"]) == 3
    assert {w["node"] for w in final["workers"]} == {"cpu-0", "cpu-1", "cpu-2"}

    statuses = [e["to_status"] for e in final["timeline"] if e["kind"] == "status"]
    assert statuses[-1] == "Succeeded"
    assert {"Pending", "Scheduled", "Running"} <= set(statuses)
    refreshed = await job(stack, submitted["id"])
    assert refreshed["status"] == "Succeeded"
