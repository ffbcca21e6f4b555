"""True GPU accounting end to end (issue 13, item 6): a 16-GPU job on the local cluster of
`deploy/local-cluster.example.yaml` (two 8-GPU A100 nodes and a 4-GPU L40 node, virtual GPUs) changes the
GPU numbers of its nodes, its cluster and the overview — in the gateway API, the `rlark` CLI and the console
in Chromium — while it runs, makes a second such job wait with a reason naming who uses the GPUs, and the
numbers come back when the jobs end.

The job's run script sleeps: the test ends it by cancelling, as a user would.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
from agents import local_agent
from jobs import document, job, role, submit, wait_placeable, wait_status
from playwright.async_api import async_playwright, expect
from rlark_devinfra.screenshots import TIMEOUT_MS, by_test_id, launch_chromium, log_in, new_context
from rlark_devinfra.web import build_web
from stack import ADMIN, ADMIN_PASSWORD, Stack, eventually

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]

REPO = Path(__file__).resolve().parents[2]
CLUSTER_FILE = REPO / "deploy" / "local-cluster.example.yaml"
CLUSTER = "local"
A100 = {"rlark.io/gpu-model": "A100"}
HOLD = "echo 'holding 16 GPUs until cancelled'\nsleep 3600\n"

IDLE = {
    "nodes": {"local-a100-0": (0, 8), "local-a100-1": (0, 8), "local-edge-0": (0, 4)},
    "cluster": (0, 20),
    "totals": (0, 20),
    "a100_nodes_with_8_free": 2,
}
"""(allocated, free) GPUs: nothing runs."""
BUSY = {
    "nodes": {"local-a100-0": (8, 0), "local-a100-1": (8, 0), "local-edge-0": (0, 4)},
    "cluster": (16, 4),
    "totals": (16, 4),
    "a100_nodes_with_8_free": 0,
}
"""(allocated, free) GPUs while the 16-GPU job runs: both A100 nodes full, the L40 node untouched."""


@pytest.fixture(scope="module")
def web_dist() -> Path:
    """The console built from these sources (by `make prereqs`; never inside a test's timeout)."""
    return build_web(build_missing=False)


def sixteen_gpu_job(name: str) -> dict[str, Any]:
    """Two workers of 8 GPUs, one per A100 node (the Header is one of them)."""
    return document(
        name,
        [
            role("actor", 1, CLUSTER, gpusPerWorker=8, nodeSelector=A100),
            role("rollout", 1, CLUSTER, gpusPerWorker=8, nodeSelector=A100),
        ],
        HOLD,
    )


async def gpu_numbers(stack: Stack) -> dict[str, Any]:
    """What the gateway API says: per node, for the cluster, for every cluster, and the wizard's match."""
    async with stack.client() as client:
        nodes = (await client.get("/api/v1/nodes", params={"cluster": CLUSTER})).json()["items"]
        cluster = (await client.get(f"/api/v1/clusters/{CLUSTER}")).json()["summary"]
        totals = (await client.get("/api/v1/clusters")).json()["totals"]
        match = (
            await client.get(
                f"/api/v1/clusters/{CLUSTER}/match", params={"selector": "rlark.io/gpu-model=A100", "gpus": 8}
            )
        ).json()
    return {
        "nodes": {n["name"]: (n["gpu_allocated"], n["gpu_free"]) for n in nodes},
        "cluster": (cluster["gpus_allocated"], cluster["gpus_free"]),
        "totals": (totals["gpus_allocated"], totals["gpus_free"]),
        "a100_nodes_with_8_free": match["with_free_gpus"],
    }


async def numbers_become(stack: Stack, expected: dict[str, Any], what: str) -> None:
    async def reached() -> bool:
        return await gpu_numbers(stack) == expected

    try:
        await eventually(reached, timeout_s=60, interval_s=0.5, what=what)
    except AssertionError as exc:
        raise AssertionError(f"{exc}; the API says {await gpu_numbers(stack)}") from None


async def cli_shows(
    stack: Stack, free_a100: str, cluster_gpus: tuple[str, str], overview: str, match: str
) -> None:
    """The `rlark` CLI prints the same numbers (tables at 200 columns)."""
    nodes = await stack.cli("nodes", "list", "--cluster", CLUSTER)
    assert nodes.returncode == 0, nodes.stderr
    assert nodes.stdout.count(free_a100) == 2, nodes.stdout
    assert "4/4 L40" in nodes.stdout, nodes.stdout
    clusters = await stack.cli("clusters", "list")
    assert clusters.returncode == 0, clusters.stderr
    flat = " ".join(clusters.stdout.split())
    row = next(line for line in clusters.stdout.splitlines() if f"│ {CLUSTER} " in line)
    cells = [cell.strip() for cell in row.strip("│ ").split("│")]
    assert (cells[6], cells[7]) == cluster_gpus, clusters.stdout  # GPUS FREE, GPUS IN USE
    assert overview in flat, clusters.stdout
    matched = await stack.cli("nodes", "match", CLUSTER, "-l", "rlark.io/gpu-model=A100", "--gpus", "8")
    assert matched.returncode == 0, matched.stderr
    assert match in matched.stdout, matched.stdout


async def console_shows(
    stack: Stack, shots: Path, moment: str, free: str, in_use: str, node: str
) -> list[Path]:
    """The console in Chromium (English) shows the same numbers on the overview, the cluster list, the
    cluster and a node; one screenshot of each page."""
    taken = []
    async with async_playwright() as playwright:
        browser = await launch_chromium(playwright)
        try:
            context = await new_context(browser, stack.url, "en")
            page = await context.new_page()
            await log_in(page, ADMIN, ADMIN_PASSWORD)
            pages = [
                ("/", "stat-gpus", free, "overview-gpus-in-use", in_use),
                ("/clusters", f"cluster-gpus-{CLUSTER}", free, f"cluster-gpus-in-use-{CLUSTER}", in_use),
                (f"/clusters/{CLUSTER}", "cluster-stat-gpus", free, "cluster-stat-gpus", in_use),
                (f"/clusters/{CLUSTER}/nodes/local-a100-0", "node-gpus", node, "node-gpus", node),
            ]
            for index, (path, free_id, free_text, use_id, use_text) in enumerate(pages):
                await page.goto(path)
                await by_test_id(page, free_id).first.wait_for(state="visible")
                # expect(), not wait_for_function: the gateway's CSP forbids the eval that one needs.
                await expect(by_test_id(page, free_id).first).to_have_text(
                    re.compile(free_text), timeout=TIMEOUT_MS
                )
                text = await by_test_id(page, use_id).first.text_content() or ""
                assert re.search(use_text, text), (path, text)
                shot = shots / f"gpu-accounting-{moment}-{index}.en.png"
                await page.screenshot(path=str(shot), full_page=True, animations="disabled")
                taken.append(shot)
            await context.close()
        finally:
            await browser.close()
    return taken


async def cancel(stack: Stack, job_id: str) -> None:
    async with stack.client() as client:
        response = await client.post(f"/api/v1/jobs/{job_id}:cancel")
        assert response.status_code in (200, 202), response.text
    await wait_status(stack, job_id, {"Cancelled"})


async def test_a_16_gpu_job_takes_its_nodes_gpus_everywhere_while_it_runs_and_gives_them_back(
    stack: Stack, tmp_path: Path, web_dist: Path
) -> None:
    assert (web_dist / "index.html").is_file()
    shots = tmp_path / "shots"
    shots.mkdir()
    credential = await stack.register_cluster(CLUSTER)
    # Virtual GPUs even on a machine with real ones: the file's 20 GPUs are the cluster's.
    async with local_agent(stack.url, credential, CLUSTER_FILE, tmp_path / "agent", detect_gpus=False):
        await numbers_become(stack, IDLE, "the idle cluster's 20 free GPUs")

        await wait_placeable(stack, sixteen_gpu_job("sixteen GPUs"))  # the scheduler knows the nodes
        first = await submit(stack, sixteen_gpu_job("sixteen GPUs"))
        running = await wait_status(stack, first["id"], {"Running"})
        assert sorted(w["node"] for w in running["workers"]) == ["local-a100-0", "local-a100-1"]
        await numbers_become(stack, BUSY, "16 GPUs in use while the job runs")
        await cli_shows(
            stack,
            free_a100="0/8 A100",
            cluster_gpus=("4/20", "16"),
            overview="GPUs 4 free of 20, 16 in use",
            match="→ 0 with ≥ 8 free GPUs",
        )
        taken = await console_shows(stack, shots, "running", r"4\s*/\s*20", "16 in use", r"8\s*/\s*8")

        # A second 16-GPU job cannot fit now, and says whose GPUs are in use.
        second = await submit(stack, sixteen_gpu_job("sixteen more GPUs"))

        async def explained() -> dict[str, Any] | None:
            current = await job(stack, second["id"])
            return current if "GPUs in use" in (current["reason"] or "") else None

        waiting = await eventually(
            explained, timeout_s=60, what="the second job waiting with the GPUs in use"
        )
        assert waiting["status"] == "Pending"
        assert "GPUs in use on those 2 schedulable nodes: 16 of 16 (16 by RLark jobs)" in waiting["reason"]

        await cancel(stack, second["id"])
        await cancel(stack, first["id"])
        await numbers_become(stack, IDLE, "the 16 GPUs back once the job ended")
        await cli_shows(
            stack,
            free_a100="8/8 A100",
            cluster_gpus=("20/20", "0"),
            overview="GPUs 20 free of 20, 0 in use",
            match="→ 2 with ≥ 8 free GPUs",
        )
        taken += await console_shows(stack, shots, "ended", r"20\s*/\s*20", "0 in use", r"0\s*/\s*8")

    for path in taken:
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", path
    if target := os.environ.get("RLARK_SCREENSHOTS_DIR"):
        for path in taken:
            shutil.copy2(path, Path(target) / path.name)
