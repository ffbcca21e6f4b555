"""The `rlark jobs` commands end to end, as a user types them: the real CLI (a subprocess) against the
whole platform, a local-runtime agent and real Ray. ``submit --follow`` shows the job's progress and
exits with its outcome; ``logs`` and ``show`` read what the job left behind."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml
from agents import local_agent, write_cluster_file
from jobs import add_key, document, make_public_key, role, wait_placeable
from stack import Stack

pytestmark = pytest.mark.e2e

NODES = [
    {"name": f"cpu-{i}", "labels": {"rlark.io/node-category": "cloud"}, "cpu": 2, "memory": "4Gi"}
    for i in range(3)
]

RUN = """
python - <<'PY'
import os, ray
ray.init(address=os.environ["RAY_ADDRESS"])
print(f"cli-e2e: {len([n for n in ray.nodes() if n['Alive']])} Ray nodes alive", flush=True)
PY
echo "cli-e2e: training finished"
"""


def job_file(tmp_path: Path, name: str, **spec: object) -> Path:
    doc = document(name, [role("actor", 1), role("rollout", 2)], RUN, sshKeys=["laptop"], **spec)
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


@pytest.mark.heavy
async def test_submit_follow_shows_progress_and_exits_with_the_jobs_outcome(
    stack: Stack, tmp_path: Path
) -> None:
    credential = await stack.register_cluster("lab")
    cluster_file = write_cluster_file(tmp_path / "lab.yaml", "lab", NODES)
    await add_key(stack, "laptop", make_public_key(tmp_path, "laptop"))
    async with local_agent(stack.url, credential, cluster_file, tmp_path / "agent"):
        good = job_file(tmp_path, "cli-good")
        await wait_placeable(stack, yaml.safe_load(good.read_text()))

        done = await stack.cli("jobs", "submit", str(good), "--follow")
        assert done.returncode == 0, done.stdout + done.stderr
        out = done.stdout
        job_id = re.search(r"submitted (job-[0-9a-f]+) \(cli-good\)", out)
        assert job_id, out
        # Progress in order: queued → placed → Ray nodes joined i/3 → running → exit code.
        steps = [
            out.index("queued"),
            out.index("placed: placed 3 workers on lab"),
            out.index("Ray nodes joined 3/3"),
            out.index("running: all 3 Ray nodes joined; the run script started"),
            out.index("Succeeded (exit code 0)"),
        ]
        assert steps == sorted(steps), out
        joined = [int(i) for i in re.findall(r"Ray nodes joined (\d)/3", out)]
        assert joined == sorted(joined), out
        assert joined[-1] == 3

        bad = tmp_path / "cli-bad.yaml"
        bad_doc = document(
            "cli-bad", [role("actor", 1, prepareScript="echo 'no such dataset' >&2\nexit 7")], RUN
        )
        bad.write_text(yaml.safe_dump(bad_doc, sort_keys=False))
        failed = await stack.cli("jobs", "submit", str(bad), "--follow")
        assert failed.returncode == 5, failed.stdout + failed.stderr
        assert "Failed (exit code 7): prepare script exited with 7" in failed.stderr
        assert "Succeeded" not in failed.stdout

    logs = await stack.cli("jobs", "logs", job_id.group(1))
    assert logs.returncode == 0, logs.stderr
    header = f"{job_id.group(1)}-actor-0"
    assert f"[{header}] cli-e2e: 3 Ray nodes alive" in logs.stdout
    assert f"[{header}] cli-e2e: training finished" in logs.stdout

    # role-index, as `jobs show` lists workers (the full id works too)
    only_header = await stack.cli("jobs", "logs", job_id.group(1), "--worker", "actor-0")
    assert only_header.returncode == 0, only_header.stderr
    assert "cli-e2e: training finished" in only_header.stdout.splitlines()
    assert "[" + header not in only_header.stdout

    show = await stack.cli("jobs", "show", job_id.group(1))
    assert show.returncode == 0, show.stderr
    text = show.stdout
    assert re.search(r"status\s+Succeeded \(exit code 0\): run script exited with 0", text), text
    assert "ray nodes  3/3 joined" in text
    for index, worker in enumerate(["actor-0", "rollout-0", "rollout-1"]):
        assert re.search(rf"│ {worker}\s+│", text), text  # role-index under the job's id
        assert f"cpu-{index}" in text
    for status in ("Pending", "Scheduled", "Starting", "Running", "Succeeded"):
        assert status in text

    missing = await stack.cli("jobs", "show", "job-000000000000")
    assert missing.returncode == 1
    assert "no such job" in missing.stderr


REPO = Path(__file__).resolve().parents[2]


async def test_make_run_demo_job_passes_the_preview_on_the_example_local_cluster(
    stack: Stack, tmp_path: Path
) -> None:
    # What `make run` sets up before it submits examples/ray-cpu-training.yaml: the cluster "local"
    # from deploy/local-cluster.example.yaml with its agent, an SSH key named "demo", and a hostPath
    # policy allowing the example's outputs source (make run points it at its own outputs directory,
    # which its policy allows: rlark_devinfra.demo.demo_hostpaths).
    credential = await stack.register_cluster("local", hostpath_allow=["/tmp/rlark-demo-outputs"])
    await add_key(stack, "demo", make_public_key(tmp_path, "demo"))
    example = REPO / "examples" / "ray-cpu-training.yaml"
    async with local_agent(
        stack.url, credential, REPO / "deploy" / "local-cluster.example.yaml", tmp_path / "agent"
    ):
        await wait_placeable(stack, yaml.safe_load(example.read_text()))
        checked = await stack.cli("jobs", "preview", str(example), "--output", "json")

    assert checked.returncode == 0, checked.stdout + checked.stderr
    result = json.loads(checked.stdout)
    assert result["errors"] == []
    assert result["warnings"] == []
    workers = [w for plan in result["plan"] for w in plan["workers"]]
    assert [(w["role"], w["rank"], w["is_header"]) for w in workers] == [
        ("trainer", 0, True),
        ("rollout", 1, False),
        ("rollout", 2, False),
    ]
    assert {plan["cluster"] for plan in result["plan"]} == {"local"}
