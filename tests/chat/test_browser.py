"""The web UI in a real headless Chromium (Debian's package, driven by Playwright; no browser
download): ask a world question, see the answer's badge, open the debug panel and the proof,
switch policy in the config panel, answer a clarifying question, end a thread INVALID after max
rewrites and decide its review on the review page. Saves screenshots (``$AWARL_CHAT_SCREENSHOT``
and ``*_reviews.png`` beside it, default under the test's temp folder)."""

from __future__ import annotations

import os
import shutil
import socket
import threading
import time
from pathlib import Path

import pytest
import uvicorn

from awarl.chat.app import create_app
from awarl.chat.generate import ScriptedGenerator

from .conftest import ADMIN, GOLD_UNKNOWN, settings_for

CHROMIUM_FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--no-first-run"]


def chromium() -> str:
    """The browser binary itself (Debian's ``chromium`` command is a shell wrapper around it)."""
    for candidate in ("/usr/lib/chromium/chromium", shutil.which("chromium"), shutil.which("chromium-browser")):
        if candidate and Path(candidate).exists():
            return candidate
    pytest.skip("chromium is not installed (CI installs it: apt-get install -y chromium)")


@pytest.fixture
def server(tmp_path, world_dir, world):
    q = next(q for q in world.questions if q.answerable and q.relation == "born")
    wrong = next(c for c in sorted(set(world.parent.values())) if c != q.answer)
    cites = " ".join(f"[{i}]" for i in world.supporting(q))

    def answer(text, n):
        if "member" in text:
            return "<answer>You get 15% off your order.</answer>"
        return f"<answer>{wrong}</answer> {cites}"

    def rewrite(prompt, n):
        if "gold member" in prompt:
            return "DECISION: ASK_QUESTIONS\n1. **Question:** Are the items regular-priced or on sale?"
        return f"DECISION: REWRITE\nANSWER: <answer>{q.answer}</answer> {cites}"

    settings = settings_for(tmp_path, generator="scripted", policy=str(world_dir / "policy.yaml"), policy_name="world",
                            corpus=str(world_dir / "corpus.jsonl"), mode_note="Scripted agent over the test world.")
    app = create_app(settings, generators={"scripted": ScriptedGenerator(answer, rewrite)})
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    srv = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    th = threading.Thread(target=srv.run, daemon=True)
    th.start()
    deadline = time.monotonic() + 20
    while not srv.started and time.monotonic() < deadline:
        time.sleep(0.02)
    yield f"http://127.0.0.1:{port}", q
    srv.should_exit = True
    th.join(timeout=10)


def test_ask_see_badge_debug_proof_and_answer_a_question(server, tmp_path):
    playwright = pytest.importorskip("playwright.sync_api")
    binary = chromium()
    url, q = server
    shot = Path(os.environ.get("AWARL_CHAT_SCREENSHOT", tmp_path / "chat_ui.png"))
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
            page.fill("#prompt", q.question)
            page.click("#send")
            first = page.locator(".msg.bot").first
            expect(first.get_by_test_id("badge")).to_have_text("VALID", timeout=20000)
            expect(first.get_by_test_id("final")).to_contain_text(q.answer)
            first.get_by_test_id("debug-toggle").click()
            iterations = first.get_by_test_id("iteration")
            expect(iterations).to_have_count(2)
            expect(iterations.nth(0)).to_contain_text("initial")
            expect(iterations.nth(0)).to_contain_text("INVALID")
            expect(iterations.nth(1)).to_contain_text("rewrite_invalid")
            expect(iterations.nth(1)).to_contain_text("VALID")
            first.get_by_test_id("proof-toggle").click()
            expect(first.get_by_test_id("proof")).to_contain_text(f"{q.chain[0]} is a city in the country {q.answer}.")

            # config panel: switch to the pricing policy, then answer the clarifying question it raises
            page.select_option("#cfg-policy", "pricing")
            page.click("#cfg-save")
            expect(page.locator("#cfg-status")).to_contain_text("Saved")
            page.fill("#prompt", GOLD_UNKNOWN)
            page.click("#send")
            second = page.locator(".msg.bot").nth(1)
            form = second.get_by_test_id("questions")
            expect(form).to_contain_text("Are the items regular-priced or on sale?", timeout=20000)
            form.locator("input").fill("They are regular-priced.")
            form.get_by_test_id("answer-submit").click()
            expect(second.get_by_test_id("badge")).to_have_text("VALID given your statement", timeout=20000)
            expect(second.get_by_test_id("warning")).to_contain_text("gold member")
            expect(second.get_by_test_id("clarifications")).to_contain_text("They are regular-priced.")
            page.screenshot(path=str(shot), full_page=True)

            # no rewrites allowed: a wrong answer ends "INVALID after max rewrites" and waits for review
            page.fill("#cfg-max", "0")
            page.click("#cfg-save")
            page.fill("#prompt", "I am not a member and I have no coupon. What discount do I get?")
            page.click("#send")
            third = page.locator(".msg.bot").nth(2)
            expect(third.get_by_test_id("badge")).to_have_text("INVALID after max rewrites", timeout=20000)
            expect(third.get_by_test_id("warning")).to_contain_text("after 0 rewrite(s)")
            page.click("#tab-reviews")
            review = page.locator(".review").first
            expect(review).to_contain_text("max_iterations")
            review.locator("textarea").fill("Non-members without a coupon get no discount.")
            review.get_by_test_id("review-submit").click()
            expect(page.locator(".review").first).to_contain_text("correction: Non-members without a coupon get no discount.")
            page.screenshot(path=str(shot.with_name(shot.stem + "_reviews.png")), full_page=True)
        finally:
            browser.close()
    assert shot.exists() and shot.stat().st_size > 10_000
