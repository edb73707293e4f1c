"""The web UI in a real headless Chromium (Debian's package, driven by Playwright; no browser
download), against a real server (uvicorn, the loop, Z3, SQLite; only the model's replies are
scripted). One walk through the page covers: Shift+Enter adds a line and Enter sends; the served
answer's citations as numbered footnotes with the passage title and text; Proof and Debug opened
and closed independently; the raw model reply and a TRANSLATION_AMBIGUOUS finding's two readings
in the debug panel; a clarifying question answered; a hedged statement of the user's named in the
warning and the debug panel; the passages a search returned, listed in the debug panel; Save sending only the field changed; a
fabricated citation's warning mark; a review item with its finding, the served answer and a link
that opens its thread. Screenshots go to ``$AWARL_CHAT_SCREENSHOTS`` (a folder; default the
test's temp folder): ``chat.png``, ``debug.png``, ``reviews.png``, ``review_thread.png``."""

from __future__ import annotations

import os
import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from awarl.chat.app import create_app
from awarl.chat.generate import ScriptedGenerator
from awarl.verify.findings import Ambiguity, Statement, Translation
from awarl.verify.translate import PatternTranslator

from .conftest import ADMIN, GOLD_80, GOLD_UNKNOWN, serving, settings_for

CHROMIUM_FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--no-first-run"]
FABRICATED = "fffffffffff"


def chromium() -> str:
    """The browser binary itself (Debian's ``chromium`` command is a shell wrapper around it)."""
    for candidate in ("/usr/lib/chromium/chromium", shutil.which("chromium"), shutil.which("chromium-browser")):
        if candidate and Path(candidate).exists():
            return candidate
    pytest.skip("chromium is not installed (CI installs it: apt-get install -y chromium)")


class AmbiguousOnce:
    """The policy's pattern translator, except that the first reading of the $80-jacket question is
    ambiguous between 15% and 10% off (as an LLM translator's samples may disagree)."""

    fired = False

    def __init__(self):
        self.inner = PatternTranslator()

    def __getattr__(self, name):  # everything else (`about`, `hedged`) as the pattern translator does it
        return getattr(self.inner, name)

    def translate(self, question, answer, policy):
        if "jacket for $80" in question and not AmbiguousOnce.fired:
            AmbiguousOnce.fired = True
            options = [[Translation(premises=[Statement("(= tier gold)")], claims=[Statement(f"(= discount_percent {d})")],
                                    confidence=0.5)] for d in (15, 10)]
            return [Ambiguity(options=options, confidence=0.5)]
        return self.inner.translate(question, answer, policy)


def expect_badge(expect, manager, msg, badge):
    """The message shows the label its thread's JSON carries (the page keeps no list of badges)."""
    expect(msg.get_by_test_id("badge")).to_be_visible(timeout=20000)
    t = manager.wait(msg.get_attribute("data-thread"), timeout=20)
    assert t["badge"] == badge, t["badge"]
    expect(msg.get_by_test_id("badge")).to_have_text(t.get("badge_label") or badge.replace("_", " "))


@pytest.fixture
def server(tmp_path, world_dir, world, monkeypatch):
    answerable = [q for q in world.questions if q.answerable and q.relation == "born"]
    q, other = answerable[0], next(x for x in answerable[1:] if x.person != answerable[0].person)
    countries = sorted(set(world.parent.values()))
    cites = " ".join(f"[{i}]" for i in world.supporting(q))

    def answer(text, n):
        if "member" in text:
            return "<answer>You get 15% off your order.</answer>"
        if other.person in text:  # a wrong answer with one cited id that is in no corpus
            wrong = next(c for c in countries if c != other.answer)
            return f"<answer>{wrong}</answer> {' '.join(f'[{i}]' for i in world.supporting(other))} [{FABRICATED}]"
        return f"<answer>{next(c for c in countries if c != q.answer)}</answer> {cites}"

    def rewrite(prompt, n):
        if "reading 1" in prompt:
            return "DECISION: REWRITE\nANSWER: As a gold member you get 15% off."
        if "gold member" in prompt:
            return "DECISION: ASK_QUESTIONS\n1. **Question:** Are the items regular-priced or on sale?"
        return f"DECISION: REWRITE\nANSWER: <answer>{q.answer}</answer> {cites}"

    import awarl.chat.wiring as wiring_module

    real = wiring_module.Validator
    AmbiguousOnce.fired = False
    monkeypatch.setattr(wiring_module, "Validator",
                        lambda path, translator=None, **kw: real(path, translator=translator or AmbiguousOnce(), **kw))
    settings = settings_for(tmp_path, generator="scripted", policy=str(world_dir / "policy.yaml"), policy_name="world",
                            corpus=str(world_dir / "corpus.jsonl"), mode_note="Scripted agent over the test world.")
    class Searched(ScriptedGenerator):
        """The scripted agent, whose first answer to ``q`` comes with the passages its search returned."""

        def answer(self, question, temperature):
            reply = super().answer(question, temperature)
            if q.question not in question:
                return reply
            shown = [{"id": i, "title": world.passage(i).title, "text": world.passage(i).text} for i in world.supporting(q)]
            return replace(reply, queries=[q.person], retrieved_ids=[p["id"] for p in shown], returned=shown)

    app = create_app(settings, generators={"scripted": Searched(answer, rewrite)})
    with serving(app) as url:
        yield url, q, other, app.state.manager


def test_the_page_citations_proof_debug_questions_config_and_reviews(server, tmp_path, world):
    playwright = pytest.importorskip("playwright.sync_api")
    binary = chromium()
    url, q, other, manager = server
    shots = Path(os.environ.get("AWARL_CHAT_SCREENSHOTS", tmp_path))
    shots.mkdir(parents=True, exist_ok=True)
    with playwright.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=binary, args=CHROMIUM_FLAGS, headless=True)
        try:
            page = browser.new_page(viewport={"width": 1360, "height": 1000})
            expect = playwright.expect
            page.goto(url)
            expect(page.get_by_test_id("mode")).to_contain_text("Scripted agent over the test world")
            expect(page.locator("#thread-list")).to_contain_text("needs a reviewer's or the admin token")
            page.fill("#admin-token", ADMIN)  # asked once; the browser keeps it (localStorage)
            page.click("#token-save")
            expect(page.get_by_test_id("token-status")).to_contain_text("Token saved")
            page.reload()  # kept by the browser: not asked again
            expect(page.get_by_test_id("token-status")).to_contain_text("Token saved in this browser")

            # Shift+Enter adds a line and sends nothing; Enter sends
            page.click("#prompt")
            page.keyboard.type("first line")
            page.keyboard.press("Shift+Enter")
            page.keyboard.type("second line")
            assert page.input_value("#prompt") == "first line\nsecond line"
            expect(page.locator(".msg")).to_have_count(0)
            page.fill("#prompt", q.question)
            page.press("#prompt", "Enter")
            first = page.locator(".msg.bot").first
            expect_badge(expect, manager, first, "VALID")
            expect(page.locator("#prompt")).to_have_value("")

            # the citations: numbered footnotes with each passage's title and text, no raw ids in the answer
            final = first.get_by_test_id("final")
            expect(final).to_contain_text(q.answer)
            ids = list(world.supporting(q))
            assert not any(f"[{i}]" in final.inner_text() for i in ids)
            expect(final.locator("sup.cite")).to_have_count(len(ids))
            notes = first.get_by_test_id("footnote")
            expect(notes).to_have_count(len(ids))
            for n, pid in enumerate(ids):
                expect(notes.nth(n)).to_contain_text(world.passage(pid).title)
                expect(notes.nth(n)).to_contain_text(world.passage(pid).text)
            expect(first.get_by_test_id("citation-warning")).to_have_count(0)

            # Proof and Debug open and close independently
            first.get_by_test_id("proof-toggle").click()
            proof = first.get_by_test_id("proof")
            expect(proof).to_contain_text(f"{q.chain[0]} is a city in the country {q.answer}.")
            first.get_by_test_id("debug-toggle").click()
            expect(first.get_by_test_id("debug")).to_be_visible()
            expect(proof).to_be_visible()
            iterations = first.get_by_test_id("iteration")
            expect(iterations).to_have_count(2)
            expect(iterations.nth(0)).to_contain_text("initial")
            expect(iterations.nth(0)).to_contain_text("INVALID")
            expect(iterations.nth(1)).to_contain_text("rewrite_invalid")
            expect(iterations.nth(1).get_by_test_id("raw-reply")).to_contain_text("DECISION: REWRITE")
            returned = iterations.nth(0).get_by_test_id("returned")  # what the search showed the agent, collapsed
            expect(returned).to_contain_text(f"passages its search returned ({len(ids)})")
            returned.locator("summary").click()
            for pid in ids:
                expect(returned).to_contain_text(f"[{pid}] {world.passage(pid).title}: {world.passage(pid).text}")
            first.get_by_test_id("debug-toggle").click()
            expect(first.get_by_test_id("debug")).to_have_count(0)
            expect(proof).to_be_visible()
            first.get_by_test_id("proof-toggle").click()
            expect(first.get_by_test_id("proof")).to_have_count(0)

            # config: Save sends only the field changed (the policy), then an ambiguous reading shows both readings
            with page.expect_request(lambda r: r.url.endswith("/api/config") and r.method == "POST") as sent:
                page.select_option("#cfg-policy", "pricing")
                page.click("#cfg-save")
            assert sent.value.post_data_json == {"policy": "pricing"}
            expect(page.locator("#cfg-status")).to_contain_text("Saved policy")
            assert manager.store.setting("config") == {"policy": "pricing"}
            page.fill("#prompt", GOLD_80)
            page.press("#prompt", "Enter")
            second = page.locator(".msg.bot").nth(1)
            expect_badge(expect, manager, second, "VALID_GIVEN_YOUR_STATEMENT")
            second.get_by_test_id("debug-toggle").click()
            readings = second.get_by_test_id("iteration").nth(0).get_by_test_id("reading")
            expect(readings).to_have_count(2)
            expect(readings.nth(0)).to_contain_text("(= discount_percent 15)")
            expect(readings.nth(1)).to_contain_text("(= discount_percent 10)")
            second.get_by_test_id("iteration").nth(0).scroll_into_view_if_needed()
            page.screenshot(path=str(shots / "debug.png"), full_page=True)
            second.get_by_test_id("debug-toggle").click()

            # a clarifying question, answered
            page.fill("#prompt", GOLD_UNKNOWN)
            page.click("#send")
            third = page.locator(".msg.bot").nth(2)
            form = third.get_by_test_id("questions")
            expect(form).to_contain_text("Are the items regular-priced or on sale?", timeout=20000)
            form.locator("input").fill("They are regular-priced.")
            form.get_by_test_id("answer-submit").click()
            expect_badge(expect, manager, third, "VALID_GIVEN_YOUR_STATEMENT")
            expect(third.get_by_test_id("warning")).to_contain_text("gold member")
            expect(third.get_by_test_id("clarifications")).to_contain_text("They are regular-priced.")

            # no rewrites: a wrong answer citing an id in no corpus keeps its warning mark and waits for review
            page.select_option("#cfg-policy", "world")
            page.fill("#cfg-max", "0")
            page.click("#cfg-save")
            expect(page.locator("#cfg-status")).to_contain_text("Saved policy, max_iterations")
            assert manager.store.setting("config") == {"max_iterations": 0}  # the world policy is the file's own
            # the user's hedged statement is no premise, and the debug panel says so
            hedge = f"{other.person} was born in {other.chain[0]} or {q.chain[0]}."
            page.fill("#prompt", f"{hedge} {other.question}")
            page.press("#prompt", "Enter")
            fourth = page.locator(".msg.bot").nth(3)
            expect_badge(expect, manager, fourth, "INVALID")
            expect(fourth.get_by_test_id("warning")).to_contain_text("after 0 rewrite(s)")
            expect(fourth.get_by_test_id("warning")).to_contain_text(f"Not taken as facts, as they qualify what they state: “{hedge}”")
            fourth.get_by_test_id("debug-toggle").click()
            expect(fourth.get_by_test_id("hedged")).to_contain_text(hedge)
            fourth.get_by_test_id("debug-toggle").click()
            notes = fourth.get_by_test_id("footnote")
            expect(notes).to_have_count(len(world.supporting(other)) + 1)
            fabricated = notes.filter(has_text=FABRICATED)
            expect(fabricated.get_by_test_id("citation-warning")).to_have_count(1)
            expect(fabricated).to_contain_text("not in the corpus (fabricated)")
            for pid in world.supporting(other):  # real passages, shown with their text even when they do not support it
                expect(notes.filter(has_text=world.passage(pid).text)).to_have_count(1)
            warned = fourth.get_by_test_id("citation-warning").count()
            assert warned >= 1 and fourth.locator("sup.cite.bad").count() == warned
            page.screenshot(path=str(shots / "chat.png"), full_page=True)

            # the review item: what the checker found, the answer served, a link that opens the thread
            page.click("#tab-reviews")
            review = page.locator(".review").first
            expect(review.get_by_test_id("review-finding")).to_contain_text("INVALID after 0 rewrite(s)")
            expect(review.get_by_test_id("review-answer")).to_contain_text(fourth.get_by_test_id("badge").inner_text())
            expect(review.get_by_test_id("review-answer")).to_contain_text(FABRICATED)
            review.locator("textarea").fill("Check whose passage is cited.")
            review.get_by_test_id("review-submit").click()
            expect(page.locator(".review").first).to_contain_text("correction: Check whose passage is cited.")
            page.screenshot(path=str(shots / "reviews.png"), full_page=True)
            thread_id = fourth.get_attribute("data-thread")
            page.locator(".review").first.get_by_test_id("review-thread").click()
            expect(page.locator("#chat-view")).to_be_visible()
            assert page.url.endswith(f"#thread/{thread_id}")

            page.reload()  # the address alone opens the thread
            opened = page.locator(f'.msg.bot[data-thread="{thread_id}"]')
            expect_badge(expect, manager, opened, "INVALID")
            expect(page.locator(".msg.user").first).to_contain_text(other.question)
            expect(page.locator("#cfg-policy")).to_have_value("world")
            expect(opened.get_by_test_id("citation-warning")).to_have_count(warned)
            page.screenshot(path=str(shots / "review_thread.png"), full_page=True)
        finally:
            browser.close()
    for name in ("chat.png", "debug.png", "reviews.png", "review_thread.png"):
        assert (shots / name).stat().st_size > 10_000
