"""Chat configs: bad files name the file and the key; the CLI reports them without a traceback."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from awarl.chat.config import ChatConfigError, load_chat_config
from awarl.chat.generate import ScriptedGenerator
from awarl.chat.loop import Loop
from awarl.chat.prompts import Prompts
from awarl.chat.thread import Thread
from awarl.chat.validate import Validator
from awarl.cli import app
from awarl.verify.translate import PatternTranslator

from .conftest import GOLD_80, PRICING, ROOT


def write(tmp_path, data) -> str:
    path = tmp_path / "chat.yaml"
    path.write_text(yaml.safe_dump(data) if not isinstance(data, str) else data)
    return str(path)


@pytest.mark.parametrize("data,message", [
    ({"policy": str(PRICING), "max_iteration": 3}, "unknown field(s) 'max_iteration' (did you mean 'max_iterations'?)"),
    ({"policy": str(PRICING), "max_iterations": "3"}, "max_iterations: expected a whole number, got '3'"),
    ({"policy": str(PRICING), "decisions": True}, "decisions: must be one of 'auto', 'on', 'off', got True"),
    ({"policy": str(PRICING), "rollout": {"topk": 0}}, "rollout: topk must be >= 1, got 0"),
    ({"policy": str(PRICING), "rollout": {"top_k": 3}}, "rollout: unknown field(s) 'top_k' (did you mean 'topk'?)"),
    ({"generator": "hf:x"}, "key 'policy': missing"),
    ({"policy": "nope.yaml"}, "key 'policy': nope.yaml does not exist"),
    ({"policy": str(PRICING), "decisions": "maybe"}, "decisions: must be one of 'auto', 'on', 'off', got 'maybe'"),
    ({"policy": str(PRICING), "max_questions": 9}, "max_questions must be in [1, 5]"),
    ("- just\n- a list\n", "expected a mapping of settings"),
    ("policy: [unclosed\n", "not valid YAML"),
])
def test_bad_configs_name_the_file_and_the_problem(tmp_path, data, message):
    path = write(tmp_path, data)
    with pytest.raises(ChatConfigError) as err:
        load_chat_config(path)
    assert path in str(err.value) and message in str(err.value)


def test_shipped_chat_configs_load_or_name_their_missing_inputs(tmp_path, monkeypatch):
    for name in ("pricing", "benefits"):
        s = load_chat_config(ROOT / "configs" / "chat" / f"{name}.yaml")
        assert s.policy_name == name and s.generator is None and "Validate-only" in s.mode_note
    monkeypatch.chdir(tmp_path)  # a folder where no demo has run (the config's paths are relative to it)
    with pytest.raises(ChatConfigError, match="runs/demo/world/policy.yaml does not exist"):
        load_chat_config(ROOT / "configs" / "chat" / "world.yaml")


def test_yaml_1_2_words_stay_strings_and_rollout_is_typed(tmp_path):
    """`decisions: on` is the string 'on' (YAML 1.2, like every recipe), and `rollout` is `RolloutSettings`."""
    from awarl.agent.settings import RolloutSettings

    s = load_chat_config(write(tmp_path, f"policy: {PRICING}\ndecisions: on\nrollout: {{topk: 2, max_searches: 3}}\n"))
    assert s.decisions == "on" and s.uses_decisions("hf:x")
    assert isinstance(s.rollout, RolloutSettings) and (s.rollout.topk, s.rollout.max_searches) == (2, 3)
    shipped = load_chat_config(ROOT / "configs" / "chat" / "vllm_agent.yaml", corpus=str(PRICING))
    assert shipped.decisions == "on" and shipped.rollout.max_completion_tokens == 2048


def test_cli_reports_a_bad_config_without_a_traceback(tmp_path):
    result = CliRunner().invoke(app, ["chat", "serve", "--config", write(tmp_path, {"policy": str(PRICING), "oops": 1})])
    assert result.exit_code == 2 and "unknown field(s) 'oops'" in result.output and "Traceback" not in result.output


def test_cli_reports_a_bad_corrections_file_without_a_traceback(tmp_path):
    bad = tmp_path / "corrections.yaml"
    bad.write_text("corrections:\n  - {id: x, error: '(unclosed', correction: fix}\n")
    config = write(tmp_path, {"policy": str(PRICING), "corrections": str(bad), "db": str(tmp_path / "c.sqlite")})
    result = CliRunner().invoke(app, ["chat", "serve", "--config", config])
    assert result.exit_code == 2 and "field 'error': bad regex" in result.output and "Traceback" not in result.output


class Flaky:
    """A translator whose endpoint fails ``failures`` times first (as an LLM translator's may)."""

    def __init__(self, failures: int):
        self.failures, self.inner = failures, PatternTranslator()

    def translate(self, question, answer, policy):
        if self.failures > 0:
            self.failures -= 1
            raise RuntimeError("translator endpoint: 503 Service Unavailable")
        return self.inner.translate(question, answer, policy)


def test_validation_retries_with_backoff_then_succeeds_or_ends_in_error():
    from awarl.chat.loop import LoopSettings

    gen = ScriptedGenerator(lambda q, n: "<answer>As a gold member you get 15% off.</answer>", None)
    settings = LoopSettings(retries=3, backoff_s=0.01)
    ok = Loop(Validator(PRICING, translator=Flaky(2)), gen, Prompts(), settings).run(Thread.new(GOLD_80, generator="s"))
    assert ok.badge.value == "VALID_GIVEN_YOUR_STATEMENT"
    down = Loop(Validator(PRICING, translator=Flaky(5)), gen, Prompts(), settings).run(Thread.new(GOLD_80, generator="s"))
    assert down.badge.value == "ERROR" and "validation of thread" in down.error and "after 3 attempt(s)" in down.error


@pytest.mark.parametrize("verdict,queued", [("YES", 0), ("NO", 1)])
def test_a_second_judge_cross_checks_borderline_citations(make_manager, openai_server, world_dir, world, verdict, queued):
    judge = openai_server(lambda body: [verdict], model="judge")
    q = next(q for q in world.questions if q.answerable and q.relation == "born")
    cites = " ".join(f"[{i}]" for i in world.supporting(q))
    gen = ScriptedGenerator(lambda text, n: f"<answer>{q.answer}, known for poets</answer> {cites}", None)
    m = make_manager(gen, policy=str(world_dir / "policy.yaml"), corpus=str(world_dir / "corpus.jsonl"),
                     second_judge=f"openai:{judge.base_url}#judge")
    m.wait(m.submit(q.question).id)
    reviews = m.reviews()
    assert len(reviews) == queued
    if queued:
        assert reviews[0]["data"]["second_judge"] == "NO"


def test_save_stores_only_the_fields_set_and_a_restart_serves_the_mode_it_reports(tmp_path, caplog):
    """Save in validate-only mode changes max rewrites only: after the agent is configured and the server
    restarted, it serves the agent, and GET /api/config, /api/health and the start-up log say so; a generator
    switched off on purpose stays off across a restart, and all three say that instead."""
    from fastapi.testclient import TestClient

    from awarl.chat.app import create_app

    from .conftest import ADMIN_HEADERS, settings_for

    def serve(**kw):
        app = create_app(settings_for(tmp_path, **kw), generators={"scripted": ScriptedGenerator(lambda q, n: "x", None)})
        return TestClient(app, base_url="http://127.0.0.1", headers=ADMIN_HEADERS)

    with serve(mode_note="Validate-only mode: no agent yet.") as c:
        assert c.get("/api/config").json()["mode"] == "validate-only"
        assert c.post("/api/config", json={"max_iterations": 1}).json()["generator"] is None
        assert c.post("/api/config", json={"generator": None}).json()["mode"] == "validate-only"
    caplog.set_level("INFO", logger="awarl.chat.manager")
    with serve(generator="scripted", mode_note="Serving the scripted agent.") as c:
        cfg = c.get("/api/config").json()
        assert (cfg["mode"], cfg["generator"], cfg["max_iterations"]) == ("agent", "scripted", 1)
        assert c.get("/api/health").json()["mode"] == "agent"
        assert "chat: agent mode: Serving the scripted agent." in caplog.text
        assert c.post("/api/config", json={"generator": None}).json()["mode"] == "validate-only"
        assert c.post("/api/config", json={"max_iterations": 3}).json()["max_iterations"] == 3  # the file's value again
    caplog.clear()
    with serve(generator="scripted", mode_note="Serving the scripted agent.") as c:
        cfg = c.get("/api/config").json()
        assert (cfg["mode"], cfg["generator"], cfg["max_iterations"]) == ("validate-only", None, 3)
        assert "chosen in the config panel" in cfg["mode_note"] and "scripted" in cfg["mode_note"]
        assert c.get("/api/health").json()["mode_note"] == cfg["mode_note"]
        assert f"chat: validate-only mode: {cfg['mode_note']}" in caplog.text
        assert c.post("/api/chat", json={"prompt": "What discount do I get?"}).status_code == 503


def test_a_shipped_config_reads_its_shipped_policy_from_any_folder(tmp_path, monkeypatch):
    from awarl.resources import config_path

    monkeypatch.chdir(tmp_path)  # no configs/ folder here
    settings = load_chat_config(config_path("chat", "pricing.yaml"))
    assert Path(settings.policy) == config_path("policies", "pricing.yaml")
    (tmp_path / "mine.yaml").write_text("policy: configs/policies/nowhere.yaml\n")
    with pytest.raises(ChatConfigError, match="nowhere.yaml does not exist"):
        load_chat_config(tmp_path / "mine.yaml")
