"""A job's tools through the platform (issue 15.4, ADR 0010 and 0012): a local-runtime job writes scalars with
tensorboardX; the first request to the gateway's tools origin makes the cluster's agent start TensorBoard over
the job's `tensorboardDir` as the job's unprivileged uid; its page and its scalars API answer there (never on
the main origin); the Header's Ray dashboard answers its API there while the job runs; `rlark jobs tensorboard`
and `rlark jobs dashboard` print the URLs that open them; Chromium, logged in to the console, follows the
TensorBoard URL through a one-time ticket to the tools origin and renders the scalars (screenshot in
docs/screenshots/)."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import httpx
import pytest
from agents import local_agent, nodes, write_cluster_file
from jobs import document, role, submit, wait_placeable, wait_status
from playwright.async_api import async_playwright
from rlark_contracts.relay import TENSORBOARD_PATH
from rlark_devinfra.screenshots import launch_chromium
from stack import Stack, eventually

pytestmark = pytest.mark.e2e

SCREENSHOT = Path(__file__).resolve().parents[2] / "docs" / "screenshots" / "tensorboard.en.png"

RUN = """set -e
python - <<'PY'
import os
from tensorboardX import SummaryWriter
writer = SummaryWriter(os.path.join(os.environ["RLARK_TENSORBOARD_DIR"], "run-a"))
for step in range(1, 51):
    writer.add_scalar("train/loss", 1.0 / step, step)
    writer.add_scalar("train/reward", step / 50.0, step)
writer.close()
PY
echo written > /outputs/scalars-written
sleep 600
"""


async def test_tensorboard_of_a_job_through_the_gateway(stack: Stack, tmp_path: Path) -> None:
    token, session = await _user(stack)
    _, stranger = await stack.new_user()
    credential = await stack.register_cluster("lab")
    cluster_file = write_cluster_file(tmp_path / "lab.yaml", "lab", nodes("lab", 1))
    async with local_agent(stack.url, credential, cluster_file, tmp_path / "agent") as agent:
        await eventually(lambda: _linked(agent), timeout_s=30, what="the agent's control link")
        doc = document("tb", [role("actor", 1)], RUN, outputs=["/outputs"], tensorboardDir="/outputs/tb")
        await wait_placeable(stack, doc, token=token)
        job_id = (await submit(stack, doc, token=token))["id"]
        running = await wait_status(stack, job_id, {"Running"})
        worker = running["workers"][0]["id"]

        async def written() -> bool:
            async with stack.client(token) as client:
                listing = (await client.get(f"/api/v1/jobs/{job_id}/outputs")).json()
            return any(f["path"] == "/outputs/scalars-written" for f in listing.get("files", []))

        await eventually(written, timeout_s=120, interval_s=1, what="the job's scalars written")

        shown = await stack.cli("jobs", "tensorboard", job_id, token=token)
        assert shown.returncode == 0, shown.stderr
        url = f"{stack.url}/api/v1/jobs/{job_id}/tools/tensorboard/"
        assert shown.stdout.strip() == url
        dashboard = await stack.cli("jobs", "dashboard", job_id, token=token)
        assert dashboard.returncode == 0, dashboard.stderr
        assert dashboard.stdout.strip() == f"{stack.url}/api/v1/jobs/{job_id}/tools/ray-dashboard/"

        base = f"/jobs/{job_id}/tensorboard"
        async with stack.client(token) as main:
            console = await main.get(f"{base}/")
            assert (
                "tf-tensorboard" not in console.text
            )  # the main origin: the console's page, never the job's
            detail = (await main.get(f"/api/v1/jobs/{job_id}")).json()
        assert detail["tensorboard_url"] == f"/api/v1/jobs/{job_id}/tools/tensorboard/"
        assert detail["ray_dashboard_url"] == f"/api/v1/jobs/{job_id}/tools/ray-dashboard/"

        async with _tools(stack, token) as client:
            page = await client.get(f"{base}/", timeout=90)
            assert page.status_code == 200, page.text
            assert "<tf-tensorboard" in page.text or "tensorboard" in page.text.lower()

            async def tags() -> dict | None:  # type: ignore[type-arg]
                answer = await client.get(f"{base}/data/plugin/scalars/tags")
                found = answer.json() if answer.status_code == 200 else {}
                return found if "train/loss" in found.get("run-a", {}) else None

            await eventually(tags, timeout_s=60, interval_s=1, what="the scalars' tags")
            scalars = await client.get(
                f"{base}/data/plugin/scalars/scalars", params={"run": "run-a", "tag": "train/loss"}
            )
            assert scalars.status_code == 200, scalars.text
            points = scalars.json()
            assert len(points) == 50
            assert points[-1][1:] == [50, pytest.approx(1.0 / 50)]

            # The Header's Ray dashboard, proxied the same way while the job runs.
            version = await client.get(f"/jobs/{job_id}/ray-dashboard/api/version", timeout=60)
            assert version.status_code == 200, version.text
            assert version.json().get("ray_version")

        # The server runs as the job's unprivileged uid (ADR 0007), not as the agent's root.
        assert worker in agent.tensorboards.running()
        uids = _tensorboard_uids(job_id)
        record = agent.driver.record(worker)  # type: ignore[attr-defined]
        assert uids == {record.uid}
        assert 0 not in uids

        async with _tools(stack, stranger) as client:
            hidden = await client.get(f"{base}/")
        assert hidden.status_code == 404

        async with async_playwright() as playwright:
            browser = await launch_chromium(playwright)
            try:
                # Logged in to the console (its session cookie only): the printed URL takes a ticket to the
                # tools origin, which answers its own cookie for this job's TensorBoard.
                context = await browser.new_context(viewport={"width": 1440, "height": 900})
                await context.add_cookies([{"name": "rlark_session", "value": session, "url": stack.url}])
                tab = await context.new_page()
                await tab.goto(url, timeout=90_000)
                await tab.wait_for_url(f"{stack.tools_url}{base}/**", timeout=90_000)
                await tab.goto(f"{stack.tools_url}{base}/#timeseries", timeout=90_000)
                await tab.get_by_text("train/loss").first.wait_for(timeout=90_000)
                await tab.wait_for_timeout(3000)  # let the charts draw before the picture
                SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
                await tab.screenshot(path=str(SCREENSHOT))
            finally:
                await browser.close()


def _tensorboard_uids(job_id: str) -> set[int]:
    """The uids of the TensorBoard servers running for ``job_id`` (by their ``--path_prefix``)."""
    uids = set()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                argv = fh.read().split(b"\0")
            if b"tensorboard.main" in argv and TENSORBOARD_PATH.format(job_id=job_id).encode() in argv:
                uids.add(os.stat(f"/proc/{pid}").st_uid)
        except OSError:
            continue
    return uids


def _tools(stack: Stack, token: str) -> httpx.AsyncClient:
    """A client of the gateway's tools origin with ``token``."""
    return httpx.AsyncClient(
        base_url=stack.tools_url, headers={"Authorization": f"Bearer {token}"}, timeout=30
    )


async def _user(stack: Stack) -> tuple[str, str]:
    """A new user's API token and console session."""
    username, password = f"u{uuid.uuid4().hex[:8]}", f"pw-{uuid.uuid4().hex}"
    async with stack.client() as admin:
        made = await admin.post("/api/v1/users", json={"username": username, "password": password})
        assert made.status_code == 201, made.text
    async with httpx.AsyncClient(base_url=stack.url, timeout=30) as anon:
        login = await anon.post("/api/v1/auth/login", json={"username": username, "password": password})
        assert login.status_code == 200, login.text
    return await stack.token_for(username, password), str(login.cookies["rlark_session"])


async def _linked(agent: object) -> bool:
    link = getattr(agent, "ssh_link", None)
    return link is not None and link.connected.is_set()
