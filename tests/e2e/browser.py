"""The console's end-to-end helpers: a platform seeded with realistic data, and a browser to look at it.

``seeded_console`` runs the whole platform (real PostgreSQL, Kafka, every service in this event loop) with a
registered local cluster and its real agent (plus a registered cluster whose agent never came), and fills it
as a team would: users, SSH keys, secrets, a finished Ray job with its logs and outputs, a job still running
(a third of a core busy, its usage sampled every 2 s), a failed and a cancelled job, a job held Pending with
its reason, a network domain.
The console tests and ``make screenshots`` use it.
Browser driving (Chromium launch, Ant Design inputs, texts of both languages) lives in
``rlark_devinfra.screenshots``.
"""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agents import local_agent, write_cluster_file
from jobs import add_key, document, job, role, submit, wait_placeable, wait_status
from rlark_devinfra.screenshots import Seed
from stack import ADMIN, ADMIN_PASSWORD, QUICK_OVERRIDES, Stack, eventually, platform

CLUSTER = "gpu-lab"
POD_CIDR, SERVICE_CIDR = "10.244.0.0/16", "10.96.0.0/16"
IMAGE = "python:3.11-slim"


def _node(name: str, pool: str, category: str = "cloud", **fields: Any) -> dict[str, Any]:
    labels = {"rlark.io/node-category": category, "rlark.io/pool": pool}
    if fields.get("gpu_model"):
        labels["rlark.io/gpu-model"] = fields["gpu_model"]
    return {"name": name, "labels": labels, **fields}


NODES = [
    _node("a100-0", "train", gpus=8, gpu_model="A100", cpu=64, memory="512Gi"),
    _node("a100-1", "train", gpus=8, gpu_model="A100", cpu=64, memory="512Gi"),
    _node(
        "a100-maint-0", "maintenance", gpus=8, gpu_model="A100", cpu=64, memory="512Gi", unschedulable=True
    ),
    _node("cpu-0", "cpu", "edge", cpu=16, memory="64Gi"),
    _node("cpu-1", "cpu", "edge", cpu=16, memory="64Gi"),
    _node("cpu-2", "cpu", "edge", cpu=16, memory="64Gi"),
]
CPU_SELECTOR = {"rlark.io/pool": "cpu"}
MAINTENANCE_SELECTOR = {"rlark.io/pool": "maintenance"}

BUSY_RUN = """
python - <<'PY'
import time
held = [bytearray(64 << 20) for _ in range(4)]  # 256 MiB, touched
print("rollout: generating", flush=True)
end = time.monotonic() + 3600
while time.monotonic() < end:  # busy a second in three: a line that moves, and cores left for the other tests
    busy_until = time.monotonic() + 1
    while time.monotonic() < busy_until:
        sum(range(10_000))
    time.sleep(2)
PY
"""
"""The running job's script: a third of a core busy and 256 MiB held until its workers are stopped."""

SMOKE_RUN = """
python - <<'PY'
import os, pathlib, ray
ray.init(address=os.environ["RAY_ADDRESS"])
alive = [n for n in ray.nodes() if n["Alive"]]
print(f"ray cluster: {len(alive)} nodes alive", flush=True)
for step in range(1, 4):
    print(f"step {step}/3 reward {0.2 * step:.2f} loss {1.0 / step:.3f}", flush=True)
out = pathlib.Path(os.environ["RLARK_OUTPUTS"].split(":")[0]) / "checkpoints" / "global_step_3"
out.mkdir(parents=True, exist_ok=True)
(out / "actor.pt").write_text("weights")
print(f"saved checkpoint global_step_3", flush=True)
PY
"""
PREPARE = 'echo "prepare: rank $RLINF_NODE_RANK role $RLARK_ROLE of $RLARK_NUM_NODES nodes"\n'
FAILING_PREPARE = 'echo "ERROR: no matching distribution found for rlinf==9.9" >&2\nexit 3\n'


@dataclass
class Console:
    """A running, seeded platform: its gateway URL, the admin's login and what was seeded."""

    stack: Stack
    seed: Seed
    tmp: Path
    admin: tuple[str, str] = (ADMIN, ADMIN_PASSWORD)

    @property
    def url(self) -> str:
        return self.stack.url


async def create_user(stack: Stack, role: str = "user", username: str = "") -> tuple[str, str]:
    """A new console user through the admin API; its username and password (for the login form)."""
    username, password = username or f"u{uuid.uuid4().hex[:8]}", f"pw-{uuid.uuid4().hex}"
    async with stack.client() as admin:
        response = await admin.post(
            "/api/v1/users", json={"username": username, "password": password, "role": role}
        )
        assert response.status_code == 201, response.text
    return username, password


def public_key(tmp: Path, name: str, comment: str) -> str:
    """A fresh ed25519 public key line with ``comment`` (its private half stays in ``tmp``)."""
    path = tmp / name
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)], check=True
    )
    return Path(f"{path}.pub").read_text().strip()


async def _seed(stack: Stack, tmp: Path) -> Seed:
    for username in ("zhangwei", "lina"):
        await create_user(stack, username=username)
    for name, comment in (("laptop", "root@thinkpad"), ("workstation", "root@gpu-dev-01")):
        await add_key(stack, name, await asyncio.to_thread(public_key, tmp, name, comment))

    async def nodes_known() -> bool:
        async with stack.client() as admin:
            response = await admin.get("/api/v1/nodes", params={"cluster": CLUSTER})
            return len(response.json()["items"]) == len(NODES)

    await eventually(nodes_known, timeout_s=60, what=f"{len(NODES)} nodes of {CLUSTER}")

    outputs = tmp / "outputs"
    outputs.mkdir()
    outputs.chmod(0o1777)  # written by the job's unprivileged workers
    mounts = [{"name": "outputs", "type": "hostPath", "source": str(outputs), "path": "/outputs"}]
    cpu_role = {"nodeSelector": CPU_SELECTOR, "prepareScript": PREPARE, "image": IMAGE, "mounts": mounts}
    smoke = document(
        "ray smoke test",
        [role("trainer", 1, CLUSTER, **cpu_role), role("rollout", 1, CLUSTER, **cpu_role)],
        SMOKE_RUN,
        sshKeys=["laptop"],
        tensorboardDir="/outputs/tb",
        outputs=["/outputs"],
    )
    await wait_placeable(stack, smoke)
    finished = await submit(stack, smoke)
    await wait_status(stack, finished["id"], {"Succeeded"})

    async def outputs_listed() -> bool:
        return bool((await job(stack, finished["id"]))["outputs"])

    await eventually(outputs_listed, timeout_s=60, what="the finished job's output manifest")

    # After the smoke job (two Ray starts at once on two shared cores are slow enough), before the rest, so its
    # Usage tab has a minute or more of samples when the tour reaches it.
    running = await submit(
        stack,
        document(
            "grpo rollout (running)",
            [role("trainer", 1, CLUSTER, nodeSelector=CPU_SELECTOR, image=IMAGE)],
            BUSY_RUN,
            sshKeys=["laptop"],
        ),
    )

    pending = await submit(
        stack,
        document(
            "grpo math 7B",
            [
                role("actor", 1, CLUSTER, gpusPerWorker=8, nodeSelector=MAINTENANCE_SELECTOR, image=IMAGE),
                role(
                    "rollout",
                    2,
                    CLUSTER,
                    gpusPerWorker=8,
                    nodeSelector={"rlark.io/pool": "train"},
                    image=IMAGE,
                ),
            ],
            "python -m rlinf.run --config-name grpo_math_7b\n",
            sshKeys=["laptop", "workstation"],
        ),
    )

    failed = await submit(
        stack,
        document(
            "sft warmup",
            [
                role(
                    "trainer",
                    1,
                    CLUSTER,
                    nodeSelector=CPU_SELECTOR,
                    image=IMAGE,
                    prepareScript=FAILING_PREPARE,
                )
            ],
            "python -m rlinf.run --config-name sft_warmup\n",
        ),
    )
    await wait_status(stack, failed["id"], {"Failed"})
    cancelled = await submit(
        stack,
        document(
            "ppo math (cancelled)",
            [role("actor", 1, CLUSTER, gpusPerWorker=8, nodeSelector=MAINTENANCE_SELECTOR, image=IMAGE)],
            "python -m rlinf.run --config-name ppo_math\n",
        ),
    )
    async with stack.client() as admin:
        response = await admin.post(f"/api/v1/jobs/{cancelled['id']}:cancel")
        assert response.status_code in (200, 202), response.text
    await wait_status(stack, cancelled["id"], {"Cancelled"})

    async def explained() -> bool:
        detail = await job(stack, pending["id"])
        return detail["status"] == "Pending" and bool((detail.get("pending") or {}).get("roles"))

    await eventually(explained, timeout_s=60, what="the pending job's explanation")
    await wait_status(stack, running["id"], {"Running"})

    async with stack.client() as admin:
        created = await admin.post(
            "/api/v1/domains",
            json={"name": "train-net", "cidr": "10.100.0.0/16", "description": "RL training across clusters"},
        )
        assert created.status_code == 201, created.text
        project = {  # the console's own user (an admin) stays outside it: the tour's jobs are not charged
            "name": "rl-lab",
            "description": "RL training of the lab",
            "members": ["alice", "bob"],
            "quota": {"gpus": 16, "clusters": {CLUSTER: 16}, "models": {}, "borrowing_limit": 8},
        }
        created = await admin.post("/api/v1/projects", json=project)
        assert created.status_code == 201, created.text
        # The console user's secrets (the Secrets page): one rotated once, so it is at version 2.
        for name in ("hf-token", "s3-datasets"):
            created = await admin.post("/api/v1/secrets", json={"name": name, "value": uuid.uuid4().hex})
            assert created.status_code == 201, created.text
        rotated = await admin.put("/api/v1/secrets/hf-token", json={"value": uuid.uuid4().hex})
        assert rotated.status_code == 200, rotated.text
    return Seed(
        cluster=CLUSTER,
        node="a100-0",
        finished_job=finished["id"],
        failed_job=failed["id"],
        pending_job=pending["id"],
        running_job=running["id"],
        wizard_cluster=CLUSTER,
        wizard_selector="rlark.io/pool=cpu",
        image=IMAGE,
    )


@contextlib.asynccontextmanager
async def seeded_console(server_url: str, kafka_bootstrap: str, tmp: Path) -> AsyncIterator[Console]:
    """The platform with cluster ``gpu-lab`` (6 virtual nodes, one cordoned) and its agent, seeded."""
    async with platform(server_url, kafka_bootstrap, tmp, inventory=QUICK_OVERRIDES["inventory"]) as stack:
        credential = await stack.register_cluster(
            CLUSTER,
            display_name="GPU Lab",
            region="cn-north-1",
            pod_cidrs=[POD_CIDR],
            service_cidrs=[SERVICE_CIDR],
            hostpath_allow=[str(tmp / "outputs")],  # the smoke test's output volume (_seed)
        )
        # A second cluster whose agent never connected: shows as offline, and its CIDRs count too.
        await stack.register_cluster(
            "gpu-b",
            display_name="GPU B",
            category="cloud",
            region="cn-east-2",
            runtime="kubernetes",
            pod_cidrs=["10.245.0.0/16"],
            service_cidrs=["10.97.0.0/16"],
        )
        cluster_file = write_cluster_file(tmp / f"{CLUSTER}.yaml", CLUSTER, NODES)
        # Usage sampled every 2 s, so the running job's Usage tab fills within the seed and the tour.
        async with local_agent(stack.url, credential, cluster_file, tmp / "agent", usage_interval_s=2.0):
            yield Console(stack, await _seed(stack, tmp), tmp)
