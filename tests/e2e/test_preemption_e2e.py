"""Projects, quotas and preemption end to end (issue 20's must-show) on the local runtime with real Ray: two
projects share one 2-GPU node. Alice's project may only borrow; her job borrows the idle GPUs. Bob's job fits
inside his project's quota, so the borrower is preempted: its run script gets SIGTERM and its grace to save a
checkpoint, Bob's job runs, and when it ends Alice's job resumes from the checkpoint. The queue (API,
`rlark queue` and the console's Queue page, in English and Chinese) says where each waiting job stands and why
at each step, without naming the other's job; Alice's job page says she was preempted. Screenshots of both
pages in both languages (``RLARK_SCREENSHOTS_DIR`` set: copied there as ``preemption-*.png``)."""

from __future__ import annotations

import os
import shutil
import uuid
from pathlib import Path
from typing import Any

import pytest
from agents import local_agent, write_cluster_file
from jobs import document, role, submit, wait_placeable, wait_status
from playwright.async_api import Browser, Page, async_playwright, expect
from rlark_contracts.messages import catalogue
from rlark_devinfra.screenshots import TIMEOUT_MS, by_test_id, launch_chromium, log_in, new_context
from rlark_devinfra.web import build_web
from stack import Stack, eventually
from test_jobs_failures_e2e import GPU_NODES
from test_jobs_requeue_e2e import RUN
from test_jobs_restart_e2e import attempt_logs, events

pytestmark = [pytest.mark.e2e, pytest.mark.heavy]

LANGUAGES = ("en", "zh-CN")


@pytest.fixture(scope="module")
def web_dist() -> Path:
    """The console built from these sources (by `make prereqs`; never inside a test's timeout)."""
    return build_web(build_missing=False)


async def console_for(browser: Browser, stack: Stack, username: str, password: str, language: str) -> Page:
    context = await new_context(browser, stack.url, language)
    page = await context.new_page()
    await log_in(page, username, password)
    return page


async def shows(page: Page, path: str, test_id: str, text: str, shot: Path) -> Path:
    """``path`` on the console shows ``text`` in ``test_id``; a screenshot of the page at that moment."""
    await page.goto(path)
    await expect(by_test_id(page, test_id).first).to_contain_text(text, timeout=TIMEOUT_MS)
    await page.screenshot(path=str(shot), full_page=True, animations="disabled")
    return shot


async def create_project(stack: Stack, name: str, member: str, **quota: Any) -> None:
    async with stack.client() as admin:
        created = await admin.post(
            "/api/v1/projects", json={"name": name, "members": [member], "quota": quota}
        )
    assert created.status_code == 201, created.text


async def queue(stack: Stack, token: str, job_id: str | None = None) -> dict[str, Any]:
    async with stack.client(token) as client:
        answer = await client.get(f"/api/v1/queue/{job_id}" if job_id else "/api/v1/queue")
    assert answer.status_code == 200, answer.text
    return answer.json()  # type: ignore[no-any-return]


async def test_an_inside_quota_job_preempts_a_borrower_that_checkpoints_and_resumes(
    stack: Stack, tmp_path: Path, web_dist: Path
) -> None:
    assert (web_dist / "index.html").is_file()
    credential = await stack.register_cluster("lab", hostpath_allow=[str(tmp_path / "ckpt")])
    cluster_file = write_cluster_file(tmp_path / "lab.yaml", "lab", GPU_NODES[:1])
    shared = tmp_path / "ckpt"
    shared.mkdir()
    shared.chmod(0o1777)
    alice, alice_password = f"alice{uuid.uuid4().hex[:6]}", f"pw-{uuid.uuid4().hex}"
    async with stack.client() as admin:
        made = await admin.post("/api/v1/users", json={"username": alice, "password": alice_password})
        assert made.status_code == 201, made.text
    alice_token = await stack.token_for(alice, alice_password)
    bob, bob_token = await stack.new_user()
    await create_project(stack, "speech", alice, gpus=0, borrowing_limit=2)
    await create_project(stack, "vision", bob, gpus=2)
    mounts = [{"name": "ckpt", "type": "hostPath", "source": str(shared), "path": "/ckpt"}]
    borrower = document(
        "borrower",
        [role("actor", 1, mounts=mounts, gpusPerWorker=2)],
        RUN,
        outputs=["/ckpt"],
        resume={"from": "latestCheckpoint", "dir": "run/checkpoints"},
        terminationGracePeriodSeconds=30,
        project="speech",
    )
    # Long enough for the console to show the borrower waiting while it runs.
    inside = document("inside", [role("actor", 1, gpusPerWorker=2)], "sleep 20", project="vision")
    shots: list[Path] = []

    async with (
        local_agent(stack.url, credential, cluster_file, tmp_path / "agent", detect_gpus=False),
        async_playwright() as playwright,
    ):
        browser = await launch_chromium(playwright)
        consoles = {
            lang: await console_for(browser, stack, alice, alice_password, lang) for lang in LANGUAGES
        }
        await wait_placeable(stack, borrower, alice_token)
        borrowing = (await submit(stack, borrower, alice_token))["id"]
        await wait_status(stack, borrowing, {"Running"})

        async def trained() -> bool:
            return "trained step 3" in await attempt_logs(stack, borrowing)

        await eventually(trained, timeout_s=120, what="the borrower training")

        waiting = (await submit(stack, inside, bob_token))["id"]

        async def preempted() -> dict[str, Any] | None:
            async with stack.client(alice_token) as client:
                current = (await client.get(f"/api/v1/jobs/{borrowing}")).json()
            return current if current["attempt"] == 2 else None

        stopped = await eventually(preempted, timeout_s=60, what="the borrower preempted")
        assert stopped["status"] == "Pending"
        assert stopped["reason"].startswith(
            "preempted: a job of higher priority, or one inside its project's quota"
        )
        assert stopped["restarts"] == 0

        # Bob's job runs once the borrower saved its checkpoint and stopped; then Alice's waits in the queue.
        await wait_status(stack, waiting, {"Running"}, timeout_s=120)
        in_queue = await queue(stack, alice_token)
        mine = next(item for item in in_queue["items"] if item["mine"])
        assert (mine["job_id"], mine["position"], mine["project"]) == (borrowing, 1, "speech")
        assert mine["waits_for"] in ("capacity", "hold")
        listed = await stack.cli("queue", token=alice_token)
        assert listed.returncode == 0, listed.stderr
        assert f"borrower ({borrowing})" in listed.stdout
        assert "1 job(s) waiting" in listed.stdout
        for lang, page in consoles.items():
            shot = tmp_path / f"preemption-queue.{lang}.png"
            shots.append(await shows(page, "/queue", "queue-table", "borrower", shot))

        final = await wait_status(stack, borrowing, {"Succeeded", "Failed"}, timeout_s=240)
        assert final["status"] == "Succeeded", final["reason"]
        assert (final["attempt"], final["restarts"]) == (2, 0)
        first = "\n".join(await attempt_logs(stack, borrowing, 1))
        saved = [line for line in first.splitlines() if line.startswith("saved step ")]
        assert len(saved) == 1, first[-2000:]
        step = int(saved[0].split()[2])
        assert f"resumed from step {step}" in await attempt_logs(stack, borrowing)
        assert (await wait_status(stack, waiting, {"Succeeded"}))["status"] == "Succeeded"

        # Both timelines say what happened, neither names the other side.
        mine_events = await events(stack, borrowing)
        restart = next(
            e for e in mine_events if e["kind"] == "status" and e["details"].get("failed_attempt") == 1
        )
        assert restart["details"]["said"]["message_key"] == "job.preempted"
        theirs = await events(stack, waiting)
        said = [
            e for e in theirs if (e["details"] or {}).get("said", {}).get("message_key") == "job.preempting"
        ]
        assert len(said) == 1
        assert borrowing not in str(theirs)
        assert waiting not in str(mine_events)

        # Alice's job page says she was preempted, in her language.
        for lang, page in consoles.items():
            said = catalogue(lang)["job.preempted"].split("{")[0][:30]
            shot = tmp_path / f"preemption-job.{lang}.png"
            shots.append(await shows(page, f"/jobs/{borrowing}", "job-timeline", said, shot))
        await browser.close()

    for shot in shots:
        assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", shot
    if target := os.environ.get("RLARK_SCREENSHOTS_DIR"):
        for shot in shots:
            shutil.copy2(shot, Path(target) / shot.name)
