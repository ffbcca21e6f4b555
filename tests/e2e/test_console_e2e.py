"""The web console in Debian's Chromium against the real platform: PostgreSQL, Kafka, every service, a local
cluster with its real agent, real Ray jobs. The user guide's steps as a person does them in the browser, in
both languages (zh-CN is the default), plus the screenshot tour of every main page.

One seeded platform serves the module (``browser.seeded_console``); each test has a fresh browser profile.
The tour runs first so its pictures show the seed only. ``make screenshots`` runs that test alone with
``RLARK_SCREENSHOTS_DIR`` set to publish them.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import subprocess
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest
from browser import CLUSTER, Console, create_user, seeded_console
from jobs import job, wait_status
from playwright.async_api import Browser, BrowserContext, Page, async_playwright, expect
from rlark_devinfra.screenshots import (
    LANGUAGES,
    WizardInput,
    add_tags,
    by_test_id,
    capture,
    choose,
    fill_wizard_common,
    fill_wizard_roles,
    fill_wizard_workers,
    launch_chromium,
    log_in,
    new_context,
    next_step,
    switch_language,
    t,
    text_problems,
    tour,
)
from rlark_devinfra.web import build_web
from stack import eventually

pytestmark = pytest.mark.e2e

NewPage = Callable[..., Awaitable[Page]]

WIZARD_RUN = """
python - <<'PY'
import os, ray
ray.init(address=os.environ["RAY_ADDRESS"])
print(f"WIZARD_JOB_NODES={len([n for n in ray.nodes() if n['Alive']])}", flush=True)
PY
"""


@pytest.fixture(scope="session")
def web_dist() -> Path:
    """The console built from the current sources into web/dist (cached by source hash), as the gateway
    serves it. Built before the tests by `make prereqs`; never inside a test's timeout."""
    return build_web(build_missing=False)


@pytest.fixture(scope="module")
async def console(
    postgres_server_url: str, kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory, web_dist: Path
) -> AsyncIterator[Console]:
    assert (web_dist / "index.html").is_file()
    async with seeded_console(
        postgres_server_url, kafka_bootstrap, tmp_path_factory.mktemp("console")
    ) as running:
        yield running


@pytest.fixture(scope="module")
async def chromium() -> AsyncIterator[Browser]:
    async with async_playwright() as playwright:
        browser = await launch_chromium(playwright)
        try:
            yield browser
        finally:
            await browser.close()


@pytest.fixture
async def new_page(chromium: Browser, console: Console) -> AsyncIterator[NewPage]:
    """Open a page in a fresh profile (``language=None``: the console's default, zh-CN)."""
    contexts: list[BrowserContext] = []

    async def open_page(language: str | None = None) -> Page:
        context = await new_context(chromium, console.url, language)
        contexts.append(context)
        return await context.new_page()

    yield open_page
    for context in contexts:
        await context.close()


def key_pair(tmp: Path, comment: str) -> tuple[str, str, str]:
    """A fresh ed25519 pair: public line, private key text, and the fingerprint ``ssh-keygen -l`` prints."""
    path = tmp / "id_ed25519"
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)], check=True
    )
    listed = subprocess.run(["ssh-keygen", "-lf", f"{path}.pub"], capture_output=True, text=True, check=True)
    return Path(f"{path}.pub").read_text().strip(), path.read_text(), listed.stdout.split()[1]


def spaced(text: str) -> re.Pattern[str]:
    """``text`` as Ant Design shows it on a button (it puts a space between two Chinese characters)."""
    return re.compile(r"\s*".join(re.escape(c) for c in text.replace(" ", "")))


def _publish(files: list[Path], target: Path) -> None:
    """Replace the PNGs in ``target`` with ``files`` (only after every page was taken)."""
    target.mkdir(parents=True, exist_ok=True)
    for old in target.glob("*.png"):
        old.unlink()
    for path in files:
        shutil.copy2(path, target / path.name)


# ~5 min on the loaded 2-core machine, plus up to 3 min waiting for the running job's usage line.
@pytest.mark.timeout(600)
async def test_every_main_page_renders_in_both_languages_without_untranslated_text(
    console: Console, chromium: Browser, tmp_path: Path
) -> None:
    shots = tour(console.seed, keys=["laptop"])
    files = await capture(chromium, console.url, *console.admin, shots, tmp_path / "shots")

    assert [f.name for f in files] == [f"{s.name}.{lang}.png" for lang in LANGUAGES for s in shots]
    for path in files:
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", path
        assert path.stat().st_size > 10_000, f"{path.name} looks blank"
    if target := os.environ.get("RLARK_SCREENSHOTS_DIR"):
        await asyncio.to_thread(_publish, files, Path(target))


async def test_zh_cn_by_default_a_user_adds_a_key_and_a_pasted_private_key_is_refused(
    console: Console, new_page: NewPage, tmp_path: Path
) -> None:
    username, password = await create_user(console.stack)
    public_key, private_key, fingerprint = await asyncio.to_thread(key_pair, tmp_path, "zhang@lab")
    assert fingerprint.startswith("SHA256:")

    page = await new_page()
    await page.goto("/")
    await expect(by_test_id(page, "login-submit")).to_have_text(spaced(t("zh-CN", "login.submit")))
    await log_in(page, username, password)
    await page.get_by_role("link", name=t("zh-CN", "nav.keys")).click()
    await expect(page.get_by_role("heading", name=t("zh-CN", "keys.title"))).to_be_visible()

    await by_test_id(page, "key-name").fill("zhang-laptop")
    await by_test_id(page, "key-public").fill(public_key)
    await expect(by_test_id(page, "key-feedback-ok")).to_contain_text(fingerprint)
    await by_test_id(page, "key-submit").click()
    table = by_test_id(page, "keys-table")
    await expect(table).to_contain_text("zhang-laptop")
    await expect(table).to_contain_text(fingerprint)

    await by_test_id(page, "key-name").fill("oops")
    await by_test_id(page, "key-public").fill(private_key)
    await expect(page.get_by_text(t("zh-CN", "keys.privateKeyRefused"))).to_be_visible()
    await expect(by_test_id(page, "key-public")).to_have_value("")
    await by_test_id(page, "key-submit").click()
    assert "PRIVATE KEY" not in await page.content()

    token = await console.stack.token_for(username, password)
    async with console.stack.client(token) as client:
        keys = (await client.get("/api/v1/keys")).json()["items"]
        assert [(k["name"], k["fingerprint"]) for k in keys] == [("zhang-laptop", fingerprint)]
        # The browser never sends it; the server refuses it anyway, naming the field, and keeps nothing.
        refused = await client.post("/api/v1/keys", json={"name": "oops", "public_key": private_key})
        assert refused.status_code in (400, 422), refused.text
        assert "public_key" in refused.text
        assert len((await client.get("/api/v1/keys")).json()["items"]) == 1


async def test_in_english_an_admin_registers_a_cluster_and_a_domain_overlapping_it_is_refused_naming_it(
    console: Console, new_page: NewPage
) -> None:
    page = await new_page()
    await log_in(page, *console.admin)
    await switch_language(page, "en")
    await page.get_by_role("link", name=t("en", "nav.admin")).click()

    await by_test_id(page, "cluster-name").fill("edge-c")
    await add_tags(page, "cluster-pod-cidrs", "10.250.0.0/16")
    await by_test_id(page, "register-cluster-submit").click()
    await expect(by_test_id(page, "agent-credential")).to_contain_text("rlark-agent")
    await by_test_id(page, "credential-done").click()

    await page.get_by_role("link", name=t("en", "nav.domains")).click()
    await by_test_id(page, "domain-name").fill("edge-net")
    cidr = by_test_id(page, "domain-cidr")
    await cidr.fill("10.250.8.0/24")
    conflict = by_test_id(page, "cidr-conflict")
    await expect(conflict).to_contain_text("edge-c")
    await expect(conflict).to_contain_text("10.250.0.0/16")
    await expect(by_test_id(page, "domain-submit")).to_be_disabled()

    await cidr.fill("10.100.64.0/18")  # inside the seeded domain train-net
    await expect(conflict).to_contain_text("train-net")

    await cidr.fill("10.120.0.0/16")
    await expect(by_test_id(page, "cidr-ok")).to_be_visible()
    await by_test_id(page, "domain-submit").click()
    await expect(page.get_by_text(t("en", "domains.created", name="edge-net"))).to_be_visible()
    row = by_test_id(page, "domains-table").locator("tr", has_text="edge-net")
    await expect(row).to_contain_text("10.120.0.0/16")

    async with console.stack.client() as admin:
        domains = {d["name"]: d["cidr"] for d in (await admin.get("/api/v1/domains")).json()["items"]}
    assert domains["edge-net"] == "10.120.0.0/16"
    assert "10.250.8.0/24" not in domains.values()


async def test_a_job_created_with_the_wizard_in_chinese_succeeds_and_shows_its_logs(
    console: Console, new_page: NewPage
) -> None:
    page = await new_page()
    await log_in(page, *console.admin)
    await page.get_by_role("link", name=t("zh-CN", "nav.jobs")).click()
    await by_test_id(page, "create-job").click()
    wizard = WizardInput(
        name="wizard ray job",
        cluster=CLUSTER,
        selector=console.seed.wizard_selector,
        image=console.seed.image,
        run_script=WIZARD_RUN,
    )
    await fill_wizard_roles(page, wizard)
    await next_step(page, 1)
    await fill_wizard_workers(page, wizard)
    await expect(by_test_id(page, "match-line").first).to_contain_text(
        t("zh-CN", "wizard.matchEnough", count=1)
    )
    await next_step(page, 2)
    await fill_wizard_common(page, wizard, keys=["laptop"])
    await next_step(page, 3)
    await expect(by_test_id(page, "preview-ok")).to_have_text(t("zh-CN", "wizard.previewOk"))
    await expect(by_test_id(page, "preview-yaml")).to_contain_text("rlark.io/pool: cpu")
    await by_test_id(page, "wizard-submit").click()

    await page.wait_for_url(re.compile(r"/jobs/job-[0-9a-f]+$"))
    job_id = page.url.rsplit("/", 1)[1]
    final = await wait_status(console.stack, job_id, {"Succeeded"})
    assert len(final["workers"]) == 3
    assert final["spec"]["spec"]["sshKeys"] == ["laptop"]

    # The open page follows the job by itself (live events), without a reload.
    status = page.locator('.page-title [data-testid="job-status"]')
    await expect(status).to_have_text(t("zh-CN", "jobStatus.Succeeded"), timeout=60_000)
    await page.get_by_role("tab", name=t("zh-CN", "logs.title")).click()
    await choose(page, "log-worker", "actor-0")
    await expect(by_test_id(page, "log-view")).to_contain_text("WIZARD_JOB_NODES=3", timeout=60_000)


async def test_in_english_a_selector_nothing_matches_is_refused_and_one_no_node_can_take_now_stays_pending_explained(
    console: Console, new_page: NewPage
) -> None:
    page = await new_page("en")
    await log_in(page, *console.admin)
    await page.goto("/jobs/new")
    await by_test_id(page, "wizard-name").fill("waits for maintenance")
    await next_step(page, 1)
    await choose(page, "role-cluster-0", CLUSTER)
    await add_tags(page, "role-selector-0", "rlark.io/pool=nowhere")
    await by_test_id(page, "role-image-0").fill(console.seed.image)
    match = by_test_id(page, "match-line")
    await expect(match).to_contain_text(t("en", "wizard.matchNone"))
    await next_step(page, 2)
    await next_step(page, 3)
    errors = by_test_id(page, "preview-errors")
    await expect(errors).to_contain_text("spec.tasks[0].nodeSelector")
    await expect(errors).to_contain_text("matches none of the 6 nodes")
    await expect(by_test_id(page, "wizard-submit")).to_be_disabled()

    # The error links back to the input; a selector matching only the cordoned node fits later, not now.
    await errors.get_by_role("button", name="spec.tasks[0].nodeSelector").click()
    await by_test_id(page, "wizard-step-1").wait_for()
    await by_test_id(page, "role-selector-0").locator(".ant-select-selection-item-remove").click()
    await add_tags(page, "role-selector-0", "rlark.io/pool=maintenance")
    await expect(match).to_contain_text("1 nodes match, 1 ready, 0 can take")
    await next_step(page, 2)
    await next_step(page, 3)
    await expect(by_test_id(page, "preview-warnings")).to_contain_text("stays Pending")
    await by_test_id(page, "wizard-submit").click()

    await page.wait_for_url(re.compile(r"/jobs/job-[0-9a-f]+$"))
    job_id = page.url.rsplit("/", 1)[1]
    await expect(page.locator('.page-title [data-testid="job-status"]')).to_have_text(
        t("en", "jobStatus.Pending")
    )
    explanation = by_test_id(page, "pending-explanation")
    await expect(explanation).to_contain_text("rlark.io/pool=maintenance")
    await expect(explanation).to_contain_text("0 schedulable")
    await expect(by_test_id(page, "job-reason")).to_contain_text('role "worker" needs 1 node')

    async def still_pending() -> bool:
        detail = await job(console.stack, job_id)
        return detail["status"] == "Pending" and detail["pending"]["roles"][0]["schedulable"] == 0

    assert await eventually(still_pending, timeout_s=10, what="the job held Pending with the funnel")
    async with console.stack.client() as admin:
        cancelled = await admin.post(f"/api/v1/jobs/{job_id}:cancel")
        assert cancelled.status_code in (200, 202), cancelled.text


def test_the_text_check_flags_the_other_language_raw_keys_and_broken_values() -> None:
    english_title = t("en", "keys.title")
    chinese_title = t("zh-CN", "keys.title")
    assert text_problems([chinese_title, "gpu-lab", "2026-11-30 05:32"], "zh-CN") == []
    assert text_problems([english_title, "ray smoke test", "中文"], "en") == []
    assert text_problems([english_title], "zh-CN") == [
        f"English console text on the zh-CN page: {english_title!r}"
    ]
    assert text_problems([chinese_title], "en") == [f"Chinese text on the English page: {chinese_title!r}"]
    assert text_problems(["wizard.step1", "undefined", "{{count}} nodes"], "en") == [
        "raw i18n key 'wizard.step1'",
        "broken text 'undefined'",
        "broken text '{{count}} nodes'",
    ]
