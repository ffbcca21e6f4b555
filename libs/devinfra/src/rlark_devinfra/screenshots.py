"""The console in a real browser: Debian's Chromium driven by Playwright, and the screenshot tour.

Role: two users share this module. The console's end-to-end tests (``tests/e2e/test_console_e2e.py``)
launch Chromium and fill Ant Design inputs with the helpers here; ``make screenshots`` runs the tour
(:func:`capture`) against a platform those tests seed with realistic data, writing every main page in
both languages to ``docs/screenshots/<page>.<language>.png``.

Contract:
- :func:`launch_chromium` starts ``/usr/bin/chromium`` (``RLARK_CHROMIUM`` overrides the path); a
  browser is never downloaded (``playwright install`` is not part of this project).
- :func:`capture` fails (``ScreenshotError``) rather than write a screenshot of a broken page: each
  page's key element (``data-testid``) must be visible, and :func:`text_problems` must find no text of
  the other language, raw i18n key, ``undefined``/``NaN`` or unfilled ``{{placeholder}}`` on it. The
  console's own strings (``web/src/i18n/*.json``) are compared, and so are the server's sentences
  (``web/src/i18n/server/en.json``, ADR 0011): one left in English on a Chinese page is a leak.

Why Playwright's async API: the end-to-end tests run every service in the test's own event loop, so a
blocking browser driver would freeze the platform it is looking at.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from playwright.async_api import Browser, BrowserContext, Locator, Page, Playwright, ViewportSize

from rlark_devinfra.paths import repo_root

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
)
LANGUAGES = ("zh-CN", "en")
"""The console's languages; zh-CN is its default."""
LANGUAGE_STORAGE_KEY = "rlark.lang"
VIEWPORT = ViewportSize(width=1440, height=900)
TIMEOUT_MS = 30_000
USAGE_WAIT_S = 180
"""How long the tour waits for a running job's usage line (two one-minute points) before it gives up."""

_CJK = re.compile(r"[\u3400-\u9fff\uf900-\ufaff]")
_BROKEN = re.compile(r"^(undefined|null|NaN|\[object Object\])$|\{\{|\}\}")
_ALLOWED_CJK = {"中文"}  # the language switch names Chinese in Chinese in both languages


class ScreenshotError(RuntimeError):
    """A page did not render as expected; the message names the page, language and problem."""


def chromium_path() -> str:
    """The Chromium binary: ``RLARK_CHROMIUM`` or Debian's ``/usr/bin/chromium``."""
    path = os.environ.get("RLARK_CHROMIUM", CHROMIUM)
    if not Path(path).is_file():
        raise ScreenshotError(
            f"{path} not found: install Debian's Chromium (`apt-get install -y chromium`, or `make setup`)"
        )
    return path


async def launch_chromium(playwright: Playwright) -> Browser:
    """Headless Chromium with the flags this machine needs (no sandbox, GPU, QUIC or phoning home)."""
    return await playwright.chromium.launch(
        executable_path=chromium_path(), headless=True, args=list(CHROMIUM_ARGS)
    )


async def new_context(browser: Browser, base_url: str, language: str | None = None) -> BrowserContext:
    """A fresh profile (no cookies) at ``base_url``; with ``language`` the console starts in it."""
    context = await browser.new_context(
        base_url=base_url, viewport=VIEWPORT, locale=language or "zh-CN", timezone_id="Asia/Shanghai"
    )
    context.set_default_timeout(TIMEOUT_MS)
    if language is not None:
        await context.add_init_script(
            f"window.localStorage.setItem({json.dumps(LANGUAGE_STORAGE_KEY)}, {json.dumps(language)})"
        )
    return context


# --- the console's own texts --------------------------------------------------------------------------


def _flatten(prefix: str, value: Any) -> Iterator[tuple[str, str]]:
    if isinstance(value, dict):
        for key, child in value.items():
            yield from _flatten(f"{prefix}.{key}" if prefix else key, child)
    else:
        yield prefix, str(value)


@cache
def translations(language: str) -> Mapping[str, str]:
    """``web/src/i18n/<language>.json`` flattened to dotted keys (``keys.privateKeyRefused``)."""
    path = repo_root() / "web" / "src" / "i18n" / f"{language}.json"
    return dict(_flatten("", json.loads(path.read_text(encoding="utf-8"))))


def t(language: str, key: str, **values: Any) -> str:
    """The console's text for ``key`` as i18next renders it (``{{x}}`` interpolation, ``_one``/``_other``)."""
    texts = translations(language)
    if "count" in values:
        plural = f"{key}_one" if values["count"] == 1 and f"{key}_one" in texts else f"{key}_other"
        key = plural if plural in texts else key
    text = texts[key]
    for name, value in values.items():
        text = text.replace("{{" + name + "}}", str(value))
    return text


@cache
def english_server_sentences() -> tuple[re.Pattern[str], ...]:
    """The server's English catalogue sentences (ADR 0011) as patterns, placeholders matching anything;
    only sentences of three or more words of their own, so that ``{field}: {detail}`` matches nothing."""
    path = repo_root() / "web" / "src" / "i18n" / "server" / "en.json"
    patterns = []
    for template in json.loads(path.read_text(encoding="utf-8")).values():
        pieces = re.split(r"\{\w+\}", template)
        if len(re.findall(r"[A-Za-z]{2,}", " ".join(pieces))) >= 3:
            patterns.append(re.compile(".+?".join(re.escape(piece) for piece in pieces)))
    return tuple(patterns)


def text_problems(texts: Sequence[str], language: str) -> list[str]:
    """Visible UI text nodes that look wrong in ``language``: the other language's console strings,
    raw i18n keys, ``undefined``/``NaN``, unfilled placeholders. User data is the caller's to exclude."""
    own = translations(language)
    other = translations("en" if language == "zh-CN" else "zh-CN")
    foreign = {
        value
        for key, value in other.items()
        if own.get(key) != value and len(value) >= 4 and "{{" not in value
    }
    keys = set(own)
    problems: list[str] = []
    for raw in texts:
        text = raw.strip()
        if not text:
            continue
        if _BROKEN.search(text):
            problems.append(f"broken text {text!r}")
        elif text in keys:
            problems.append(f"raw i18n key {text!r}")
        elif language == "en" and _CJK.search(text) and text not in _ALLOWED_CJK:
            problems.append(f"Chinese text on the English page: {text!r}")
        elif language != "en" and text in foreign:
            problems.append(f"English console text on the {language} page: {text!r}")
        elif language != "en" and any(p.fullmatch(text) for p in english_server_sentences()):
            problems.append(f"English server text on the {language} page: {text!r}")
    return problems


_VISIBLE_TEXTS_JS = """
() => {
  const skip = 'pre, code, textarea, input, .mono, .cm-editor, .log-view, .yaml-view, [data-user-text]';
  const out = [];
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    const el = node.parentElement;
    if (!el || el.closest(skip)) continue;
    const style = getComputedStyle(el);
    if (style.visibility === 'hidden' || style.display === 'none' || !el.getClientRects().length) continue;
    out.push(node.textContent);
  }
  return out;
}
"""


async def visible_texts(page: Page) -> list[str]:
    """The page's visible text nodes, without code, logs, YAML and inputs (user data)."""
    texts: list[str] = await page.evaluate(_VISIBLE_TEXTS_JS)
    return texts


# --- driving the console ------------------------------------------------------------------------------


def by_test_id(page: Page, test_id: str) -> Locator:
    return page.locator(f'[data-testid="{test_id}"]')


async def log_in(page: Page, username: str, password: str) -> None:
    """Sign in through the login form and wait for the console's frame."""
    await page.goto("/login")
    await by_test_id(page, "login-username").fill(username)
    await by_test_id(page, "login-password").fill(password)
    await by_test_id(page, "login-submit").click()
    await by_test_id(page, "user-menu").wait_for()


async def switch_language(page: Page, language: str) -> None:
    """Click the header's language switch (kept in localStorage for the next pages)."""
    label = "中文" if language == "zh-CN" else "English"
    await by_test_id(page, "lang-switch").get_by_text(label, exact=True).click()
    # Locator waits, not wait_for_function: the gateway's CSP forbids the eval that one needs.
    await page.locator(f"html[lang={json.dumps(language)}]").wait_for(state="attached")


def _select(page: Page, test_id: str) -> Locator:
    """The Ant Design Select carrying ``data-testid`` (the attribute sits on its root or its input)."""
    marked = by_test_id(page, test_id)
    return (
        page.locator(".ant-select")
        .filter(has=marked)
        .or_(page.locator(f'.ant-select[data-testid="{test_id}"]'))
    )


async def choose(page: Page, test_id: str, text: str) -> None:
    """Pick an option of the Select ``test_id``: the first whose label contains ``text``, or else (a
    searchable Select whose search matched the option's value) the first the search ``text`` finds."""
    select = _select(page, test_id).first
    await select.click()
    field = select.locator("input").first
    if await field.is_editable():
        await field.fill(text)
    options = page.locator(".ant-select-dropdown:not(.ant-select-dropdown-hidden) .ant-select-item-option")
    await options.first.wait_for()
    labelled = options.filter(has_text=text)
    if await labelled.count():
        await labelled.first.click()
    else:
        await field.press("Enter")
    await page.keyboard.press("Escape")


async def add_tags(page: Page, test_id: str, *values: str) -> None:
    """Type ``values`` into a tags-mode Select (each confirmed with Enter)."""
    select = _select(page, test_id).first
    await select.click()
    field = select.locator("input").first
    for value in values:
        await field.fill(value)
        await field.press("Enter")
    await page.keyboard.press("Escape")


async def set_number(page: Page, test_id: str, value: int) -> None:
    """Replace the value of an InputNumber (the attribute sits on its input) and leave the field."""
    field = by_test_id(page, test_id)
    await field.fill(str(value))
    await field.press("Tab")


# --- the tour -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Seed:
    """What the seeded platform holds, for the pages that need a name or an id."""

    cluster: str
    node: str
    finished_job: str
    failed_job: str
    pending_job: str
    running_job: str
    """A job that keeps running, busy, while the pages are taken (its Usage tab)."""
    wizard_cluster: str
    wizard_selector: str
    image: str = "python:3.11-slim"


@dataclass(frozen=True)
class WizardInput:
    """The wizard's inputs for the tour (a small two-role job on the seeded cluster)."""

    name: str
    cluster: str
    selector: str
    image: str
    run_script: str = "python -m rlinf.run --config-name grpo_math_7b\n"
    rollout_nodes: int = 2


Step = Callable[[Page], Awaitable[None]]


@dataclass(frozen=True)
class Shot:
    """One screenshot: open ``path`` (or run ``steps``), wait for ``ready``, write ``<name>.<lang>.png``.

    ``anonymous`` shots are taken in a profile of their own, signed out (the login page)."""

    name: str
    ready: str
    path: str | None = None
    steps: tuple[Step, ...] = field(default_factory=tuple)
    full_page: bool = True
    anonymous: bool = False


async def fill_wizard_roles(page: Page, wizard: WizardInput) -> None:
    """Step 1: name, two roles (``actor`` Header with 1 node, ``rollout`` with ``rollout_nodes``), no GPUs."""
    await by_test_id(page, "wizard-name").fill(wizard.name)
    await by_test_id(page, "role-name-0").fill("actor")
    await set_number(page, "role-gpus-0", 0)
    await by_test_id(page, "add-role").click()
    await by_test_id(page, "role-name-1").fill("rollout")
    await set_number(page, "role-replicas-1", wizard.rollout_nodes)
    await set_number(page, "role-gpus-1", 0)


async def fill_wizard_workers(page: Page, wizard: WizardInput, roles: int = 2) -> None:
    """Step 2: every role on ``wizard.cluster`` with the selector and image, checked by the match line."""
    tabs = by_test_id(page, "worker-tabs")
    for index in range(roles):
        if index:
            await tabs.locator(".ant-tabs-tab").nth(index).click()
        await choose(page, f"role-cluster-{index}", wizard.cluster)
        if wizard.selector:
            await add_tags(page, f"role-selector-{index}", wizard.selector)
        await by_test_id(page, f"role-image-{index}").fill(wizard.image)
        await page.locator('[data-testid="match-line"]:visible').wait_for()
    await tabs.locator(".ant-tabs-tab").first.click()


async def fill_wizard_common(page: Page, wizard: WizardInput, keys: Sequence[str] = ()) -> None:
    """Step 3: SSH keys and the run script (the network domain keeps its default)."""
    for key in keys:
        await choose(page, "common-keys", key)
    await by_test_id(page, "common-run-script").fill(wizard.run_script)


async def next_step(page: Page, step: int) -> None:
    await by_test_id(page, "wizard-next").click()
    await by_test_id(page, f"wizard-step-{step}").wait_for()


def tour(seed: Seed, keys: Sequence[str]) -> list[Shot]:
    """Every main page of the console, in the order a new user meets them."""
    wizard = WizardInput(
        name="grpo math 7B", cluster=seed.wizard_cluster, selector=seed.wizard_selector, image=seed.image
    )

    async def open_wizard(page: Page) -> None:
        await page.goto("/jobs/new")
        await by_test_id(page, "wizard-step-0").wait_for()
        await fill_wizard_roles(page, wizard)

    async def to_workers(page: Page) -> None:
        await next_step(page, 1)
        await fill_wizard_workers(page, wizard)

    async def to_common(page: Page) -> None:
        await next_step(page, 2)
        await fill_wizard_common(page, wizard, keys)

    async def to_preview(page: Page) -> None:
        await next_step(page, 3)
        await page.locator('[data-testid="preview-ok"], [data-testid="preview-errors"]').first.wait_for()

    async def to_yaml(page: Page) -> None:
        await by_test_id(page, "wizard-edit-yaml").click()
        await page.locator('[data-testid="yaml-editor"] .cm-content').wait_for()
        await by_test_id(page, "yaml-validate").click()
        await page.locator('[data-testid="yaml-ok"], [data-testid="yaml-errors"]').first.wait_for()

    async def yaml_errors(page: Page) -> None:
        # A document the server refuses on several rules: its errors, said in the page's language.
        await page.goto("/jobs/new/yaml")
        editor = page.locator('[data-testid="yaml-editor"] .cm-content')
        await editor.click()
        await page.keyboard.press("Control+A")
        await page.keyboard.insert_text(_refused_yaml(seed))
        await by_test_id(page, "yaml-validate").click()
        await by_test_id(page, "yaml-errors").wait_for()

    async def logs_tab(page: Page) -> None:
        await page.goto(f"/jobs/{seed.finished_job}")
        await by_test_id(page, "workers-table").wait_for()
        await page.locator(".ant-tabs-tab").nth(1).click()
        view = page.locator('[data-testid="log-view"]:not(:empty)')
        await view.wait_for()
        await view.evaluate("(el) => { el.scrollTop = el.scrollHeight; }")  # the run script's lines

    async def usage_tab(page: Page) -> None:
        # The running job's Usage tab once its CPU line has two points at least (its samples fall into the
        # tab's one-minute buckets; the tab refetches every 30 s, a reload asks at once).
        await page.goto(f"/jobs/{seed.running_job}")
        await by_test_id(page, "workers-table").wait_for()
        for _ in range(USAGE_WAIT_S // 5):
            await page.locator('.ant-tabs-tab[data-node-key="usage"]').click()
            line = page.locator('[data-testid="usage-table"] [data-testid^="usage-cpu-"] polyline').first
            if await line.count() and len((await line.get_attribute("points") or "").split()) >= 2:
                return
            await page.wait_for_timeout(5_000)
            await page.reload()
            await by_test_id(page, "workers-table").wait_for()
        raise ScreenshotError(f"the usage of {seed.running_job} has no line after {USAGE_WAIT_S} s")

    return [
        Shot("login", "login-card", path="/login", anonymous=True),
        Shot("overview", "jobs-by-state", path="/"),
        Shot("clusters", "clusters-table", path="/clusters"),
        Shot("cluster-detail", "node-table", path=f"/clusters/{seed.cluster}"),
        Shot("node-detail", "node-resources", path=f"/clusters/{seed.cluster}/nodes/{seed.node}"),
        Shot("keys", "keys-table", path="/keys"),
        Shot("secrets", "secrets-table", path="/secrets"),
        Shot("domains", "domains-table", path="/domains"),
        Shot("notifications", "notify-table", path="/notifications"),
        Shot("jobs", "jobs-table", path="/jobs"),
        Shot("queue", "queue-table", path="/queue"),
        Shot("projects", "projects-table", path="/projects"),
        Shot("wizard-1-roles", "roles-table", steps=(open_wizard,)),
        Shot("wizard-2-workers", "match-line", steps=(to_workers,)),
        Shot("wizard-3-common", "common-run-script", steps=(to_common,)),
        Shot("wizard-4-preview", "preview-yaml", steps=(to_preview,)),
        Shot("job-yaml", "yaml-editor", steps=(to_yaml,)),
        Shot("job-yaml-errors", "yaml-errors", steps=(yaml_errors,)),
        Shot("job-detail", "workers-table", path=f"/jobs/{seed.finished_job}"),
        Shot("job-logs", "log-view", steps=(logs_tab,)),
        Shot("job-failed", "job-reason", path=f"/jobs/{seed.failed_job}"),
        Shot("job-pending", "pending-explanation", path=f"/jobs/{seed.pending_job}"),
        Shot("job-usage", "usage-table", steps=(usage_tab,)),
        Shot("admin", "register-cluster-form", path="/admin/clusters"),
        Shot("admin-users", "users-table", path="/admin/users"),
        Shot("admin-audit", "audit-table", path="/admin/audit"),
    ]


def _refused_yaml(seed: Seed) -> str:
    """A job document with an unknown cluster, a ``latest`` image, a priority out of range and an SSH
    key nobody has: four server errors on four lines."""
    return (
        "apiVersion: rlark.io/v1\n"
        "kind: Job\n"
        "metadata:\n"
        "  name: refused example\n"
        "spec:\n"
        "  header: actor\n"
        "  priority: 500\n"
        "  sshKeys: [nobody-has-this-key]\n"
        "  runScript: python train.py\n"
        "  tasks:\n"
        "    - name: actor\n"
        "      cluster: no-such-cluster\n"
        "      replicas: 1\n"
        "      gpusPerWorker: 0\n"
        f"      image: {seed.image.rsplit(':', 1)[0]}:latest\n"
    )


async def _settle(page: Page) -> None:
    """Wait for data: no spinner and no skeleton left, then let transitions end."""
    await page.wait_for_load_state("networkidle")
    busy = page.locator(".ant-spin-spinning, .ant-skeleton-active, .ant-table-placeholder .ant-spin")
    await busy.first.wait_for(state="detached")
    await page.wait_for_timeout(400)


async def capture(
    browser: Browser,
    base_url: str,
    username: str,
    password: str,
    shots: Sequence[Shot],
    out_dir: Path,
    languages: Sequence[str] = LANGUAGES,
) -> list[Path]:
    """Take ``shots`` in every language into ``out_dir``; the written files, in order (language by language).

    Shots without a ``path`` continue from the page the previous shot left (the wizard's steps). The languages
    are taken side by side, each in its own browser context: the shots only read, and most of a shot's time is
    waiting for the page to settle."""
    await asyncio.to_thread(out_dir.mkdir, parents=True, exist_ok=True)

    async def in_language(language: str) -> list[Path]:
        written: list[Path] = []
        context = await new_context(browser, base_url, language)
        try:
            page = await context.new_page()
            await log_in(page, username, password)
            for shot in shots:
                try:
                    if shot.anonymous:
                        signed_out = await new_context(browser, base_url, language)
                        try:
                            written.append(await _take(await signed_out.new_page(), shot, language, out_dir))
                        finally:
                            await signed_out.close()
                    else:
                        written.append(await _take(page, shot, language, out_dir))
                except ScreenshotError:
                    raise
                except Exception as exc:
                    raise ScreenshotError(f"{shot.name} ({language}): {exc}") from exc
        finally:
            await context.close()
        return written

    per_language = await asyncio.gather(*(in_language(language) for language in languages))
    return [path for paths in per_language for path in paths]


async def _take(page: Page, shot: Shot, language: str, out_dir: Path) -> Path:
    if shot.path is not None:
        await page.goto(shot.path)
    for step in shot.steps:
        await step(page)
    await by_test_id(page, shot.ready).first.wait_for(state="visible")
    await page.evaluate("document.activeElement && document.activeElement.blur()")
    await _settle(page)
    problems = text_problems(await visible_texts(page), language)
    if problems:
        raise ScreenshotError(f"{shot.name} ({language}): " + "; ".join(problems))
    path = out_dir / f"{shot.name}.{language}.png"
    await page.screenshot(path=str(path), full_page=shot.full_page, animations="disabled")
    return path


__all__ = [
    "CHROMIUM_ARGS",
    "LANGUAGES",
    "ScreenshotError",
    "Seed",
    "Shot",
    "WizardInput",
    "add_tags",
    "by_test_id",
    "capture",
    "choose",
    "chromium_path",
    "fill_wizard_common",
    "fill_wizard_roles",
    "fill_wizard_workers",
    "launch_chromium",
    "log_in",
    "new_context",
    "next_step",
    "set_number",
    "switch_language",
    "t",
    "text_problems",
    "tour",
    "translations",
    "visible_texts",
]
