"""A custom prompts folder: the templates it holds replace the shipped ones, the others stay shipped."""

from __future__ import annotations

import logging
from importlib import resources

import pytest

from awarl.chat.generate import ScriptedGenerator
from awarl.chat.prompts import NAMES, Prompts
from awarl.errors import ConfigError

from .conftest import GOLD_80

CUSTOM_INVALID = ("Our own wording. The answer {answer!r} breaks these rules:\n{finding_rules}\n"
                  "Reply with\nDECISION: REWRITE\nANSWER: <the corrected answer>\n")


def shipped(name: str) -> str:
    return resources.files("awarl.chat").joinpath("prompts", f"{name}.txt").read_text(encoding="utf-8")


def test_a_folder_with_one_template_overrides_it_and_the_rest_are_shipped(tmp_path, caplog):
    (tmp_path / "rewrite_invalid.txt").write_text(CUSTOM_INVALID, encoding="utf-8")
    with caplog.at_level(logging.INFO, logger="awarl.chat.prompts"):
        prompts = Prompts(tmp_path)
    assert prompts.templates["rewrite_invalid"] == CUSTOM_INVALID
    assert prompts.sources["rewrite_invalid"] == str(tmp_path / "rewrite_invalid.txt")
    others = [n for n in NAMES if n != "rewrite_invalid"]
    assert others and all(prompts.templates[n] == shipped(n) for n in others)
    assert all(prompts.sources[n].endswith(f"prompts/{n}.txt") and str(tmp_path) not in prompts.sources[n] for n in others)
    [line] = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
    assert f"from {tmp_path}: rewrite_invalid; shipped: " in line and "rewrite_citation" in line


def test_the_loop_rewrites_with_the_custom_template_and_asks_with_the_shipped_one(make_manager, tmp_path):
    folder = tmp_path / "prompts"
    folder.mkdir()
    (folder / "rewrite_invalid.txt").write_text(CUSTOM_INVALID, encoding="utf-8")
    gen = ScriptedGenerator(lambda q, n: "<answer>You get 10% off.</answer>",
                            lambda q, n: "DECISION: REWRITE\nANSWER: As a gold member you get 15% off.")
    m = make_manager(gen, prompts_dir=str(folder))
    t = m.wait(m.submit(GOLD_80).id)
    assert [(i["result"], i["template"]) for i in t["iterations"]] == [("INVALID", None), ("VALID", "rewrite_invalid")]
    [rewrite] = [p for k, p in gen.prompts if k == "rewrite"]
    assert rewrite.startswith("Our own wording. The answer 'You get 10% off.' breaks these rules:")
    assert "- Gold members get 15% off regular-priced items." in rewrite
    assert [p for k, p in gen.prompts if k == "answer"][0] == GOLD_80  # the shipped agent_question


def test_a_file_that_names_no_template_or_a_missing_folder_is_a_config_error(tmp_path):
    (tmp_path / "rewrite_invalide.txt").write_text(CUSTOM_INVALID, encoding="utf-8")
    with pytest.raises(ConfigError, match=r"rewrite_invalide.txt: no prompt template is called 'rewrite_invalide' "
                                          r"\(did you mean rewrite_invalid.txt\?\)"):
        Prompts(tmp_path)
    with pytest.raises(ConfigError, match="not a folder of prompt templates"):
        Prompts(tmp_path / "absent")


def test_every_kind_that_rewrites_has_its_shipped_template_and_every_style_its_css_rule():
    from awarl.chat.prompts import TEMPLATE_OF
    from awarl.chat.thread import Badge
    from awarl.verify.findings import KINDS

    templates = {row.template for row in KINDS.values() if row.template}
    assert templates == set(TEMPLATE_OF.values()) and templates <= set(NAMES)
    assert all(resources.files("awarl.chat").joinpath("prompts", f"{t}.txt").is_file() for t in templates)
    css = resources.files("awarl.chat").joinpath("static", "style.css").read_text(encoding="utf-8")
    assert all(f".badge.{row.style}" in css for row in KINDS.values())
    assert {b.value for b in Badge} == {row.badge for row in KINDS.values()}
