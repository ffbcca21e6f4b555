"""The message catalogue (ADR 0011): complete in every language, placeholders equal to the English
entry's, every key the workspace emits present, and the console's copy in sync."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from rlark_contracts.messages import LANGUAGES, Text, catalogue, language_of, placeholders, render, text

ROOT = Path(__file__).resolve().parents[3]
CATALOGUE_DIR = ROOT / "libs/contracts/src/rlark_contracts/messages"
WEB_COPY = ROOT / "web/src/i18n/server"
# A key literal handed to the catalogue: text("key", ...), messages.text("key"), Text("key", ...).
_EMITTED = re.compile(r"""\b(?:text|Text)\(\s*f?["']([a-z0-9_.{}]+)["']""")
# rlark_platform.errors.not_found("cluster", name) says the sentence "cluster_not_found".
_NOT_FOUND = re.compile(r"""\bnot_found\(\s*["']([a-z_]+)["']""")
_CJK = re.compile(r"[\u4e00-\u9fff]")


def emitted_keys() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for source in [
        *ROOT.glob("services/*/src/**/*.py"),
        *ROOT.glob("libs/*/src/**/*.py"),
        *ROOT.glob("cli/src/**/*.py"),
    ]:
        for key in _EMITTED.findall(source.read_text(encoding="utf-8")):
            if "{" not in key:
                found[key] = source
        for what in _NOT_FOUND.findall(source.read_text(encoding="utf-8")):
            found[f"{what}_not_found"] = source
    return found


def test_every_language_has_exactly_the_english_keys() -> None:
    english = set(catalogue("en"))
    for lang in LANGUAGES:
        assert set(catalogue(lang)) == english, lang


@pytest.mark.parametrize("lang", [lang for lang in LANGUAGES if lang != "en"])
def test_every_translation_interpolates_exactly_the_english_placeholders(lang: str) -> None:
    wrong = {
        key: (sorted(placeholders(catalogue("en")[key])), sorted(placeholders(template)))
        for key, template in catalogue(lang).items()  # type: ignore[arg-type]
        if placeholders(template) != placeholders(catalogue("en")[key])
    }
    assert wrong == {}


def test_the_chinese_catalogue_is_written_in_chinese() -> None:
    untranslated = [key for key, template in catalogue("zh-CN").items() if not _CJK.search(template)]
    assert untranslated == []


def test_every_key_the_workspace_emits_is_in_the_catalogue() -> None:
    emitted = emitted_keys()
    assert len(emitted) > 50, "the scan found too few keys: has the calling convention changed?"
    missing = {
        key: str(path.relative_to(ROOT)) for key, path in emitted.items() if key not in catalogue("en")
    }
    assert missing == {}


def test_the_consoles_copy_equals_the_catalogue() -> None:
    # The console's Docker stage copies only web/, so it carries a copy; `python -m
    # rlark_contracts.messages` rewrites it after the catalogue changes.
    for lang in LANGUAGES:
        copy = json.loads((WEB_COPY / f"{lang}.json").read_text(encoding="utf-8"))
        assert copy == dict(catalogue(lang)), f"web/src/i18n/server/{lang}.json is stale"


def test_a_text_renders_in_each_language_and_english_is_the_message() -> None:
    said = text("domain_exists", name="'train-net'")
    assert said.english == "a network domain named 'train-net' already exists"
    assert "'train-net'" in said.render("zh-CN")
    assert _CJK.search(said.render("zh-CN"))
    assert said.wire() == {"message_key": "domain_exists", "params": {"name": "'train-net'"}}


def test_a_key_missing_from_the_catalogue_cannot_become_a_text() -> None:
    with pytest.raises(KeyError, match="no_such_message"):
        Text("no_such_message")


def test_an_unknown_key_falls_back_to_the_given_message() -> None:
    assert render("no_such_message", {}, "zh-CN", "the server's words") == "the server's words"
    assert render("domain_exists", {}, "zh-CN").count("{name}") == 1


@pytest.mark.parametrize(
    ("tag", "lang"),
    [
        ("zh_CN.UTF-8", "zh-CN"),
        ("zh-TW", "zh-CN"),
        ("zh", "zh-CN"),
        ("en_US.UTF-8", "en"),
        ("C", "en"),
        ("", "en"),
        (None, "en"),
    ],
)
def test_a_locale_picks_its_language(tag: str | None, lang: str) -> None:
    assert language_of(tag) == lang
