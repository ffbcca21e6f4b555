"""A job's TensorBoard through the platform (issue 15.4, ADR 0010): a local-runtime job writes scalars with
tensorboardX; the first request through the gateway makes the cluster's agent start TensorBoard over the
job's `tensorboardDir` as the job's unprivileged uid; its page and its scalars API answer through the gateway;
`rlark jobs tensorboard` prints the URL; Chromium renders the scalars (screenshot in docs/screenshots/)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from agents import local_agent, nodes, write_cluster_file
from jobs import document, role, submit, wait_placeable, wait_status
from playwright.async_api import async_playwright
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
    _, token = await stack.new_user()
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
        url = f"{stack.url}/api/v1/jobs/{job_id}/tensorboard/"
        assert shown.stdout.strip() == url

        base = f"/api/v1/jobs/{job_id}/tensorboard"
        async with stack.client(token) as client:
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

        # The server runs as the job's unprivileged uid (ADR 0007), not as the agent's root.
        assert worker in agent.tensorboards.running()
        uids = _tensorboard_uids(job_id)
        record = agent.driver.record(worker)  # type: ignore[attr-defined]
        assert uids == {record.uid}
        assert 0 not in uids

        async with stack.client(stranger) as client:
            hidden = await client.get(f"{base}/")
        assert hidden.status_code == 404

        async with async_playwright() as playwright:
            browser = await launch_chromium(playwright)
            try:
                context = await browser.new_context(
                    base_url=stack.url,
                    viewport={"width": 1440, "height": 900},
                    extra_http_headers={"Authorization": f"Bearer {token}"},
                )
                tab = await context.new_page()
                await tab.goto(f"{base}/#timeseries", timeout=90_000)
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
            if b"tensorboard.main" in argv and f"/api/v1/jobs/{job_id}/tensorboard".encode() in argv:
                uids.add(os.stat(f"/proc/{pid}").st_uid)
        except OSError:
            continue
    return uids


async def _linked(agent: object) -> bool:
    link = getattr(agent, "ssh_link", None)
    return link is not None and link.connected.is_set()
