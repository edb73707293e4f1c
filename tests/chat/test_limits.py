"""Limits and start-up: an answer over 16,000 characters, a body over 1 MB (declared or chunked), invalid
Unicode; bad ports, types, negative timeouts and temperatures, broken or conflicting policies are
refused at start with the key or file named; every shipped chat config parses, type-checks and lints."""

from __future__ import annotations


import httpx
import pytest
import yaml
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from awarl.chat.app import create_app
from awarl.chat.config import ChatConfigError, ChatSettings, load_chat_config
from awarl.cli import app as cli
from awarl.resources import config_path
from awarl.verify.lint import lint
from awarl.verify.policy import load_policy

from .conftest import ADMIN_HEADERS, GOLD_80, PRICING, serving, settings_for


@pytest.fixture
def client(tmp_path):
    with TestClient(create_app(settings_for(tmp_path)), base_url="http://127.0.0.1", headers=ADMIN_HEADERS) as c:
        yield c


def envelope(r, status, code):
    assert r.status_code == status, r.text
    assert set(r.json()) == {"error"} and r.json()["error"]["code"] == code
    return r.json()["error"]


def test_answer_length_and_unicode_are_checked(client):
    envelope(client.post("/api/chat", json={"prompt": GOLD_80, "answer": "x" * 16001}), 422, "answer_too_long")
    assert client.post("/api/chat", json={"prompt": GOLD_80, "answer": "x" * 16000}).status_code == 200
    for body in (b'{"prompt": "\\ud800 what discount?"}', b'{"prompt": "q", "answer": "a \\udfff"}'):
        err = envelope(client.post("/api/chat", content=body, headers={"content-type": "application/json"}), 400, "invalid_unicode")
        assert "lone surrogate" in err["message"]
    envelope(client.post("/api/thread/x/answer", content=b'{"answers": ["\\ud83d"]}',
                         headers={"content-type": "application/json"}), 400, "invalid_unicode")
    envelope(client.post("/api/chat", content=b'{"prompt": "\xff\xfe"}', headers={"content-type": "application/json"}),
             400, "malformed_json")


def test_a_body_over_one_megabyte_is_413_declared_or_chunked(tmp_path):
    app = create_app(settings_for(tmp_path))
    with serving(app) as url, httpx.Client(base_url=url, timeout=30) as c:
        big = b'{"prompt": "' + b"x" * 1_100_000 + b'"}'
        envelope(c.post("/api/chat", content=big, headers={"content-type": "application/json"}), 413, "body_too_large")

        def chunks():
            for k in range(0, len(big), 65536):
                yield big[k:k + 65536]

        envelope(c.post("/api/chat", content=chunks(), headers={"content-type": "application/json"}), 413, "body_too_large")
        assert c.get("/api/health").json()["ok"] is True  # and it keeps serving


def write(tmp_path, data) -> str:
    path = tmp_path / "chat.yaml"
    path.write_text(yaml.safe_dump({"policy": str(PRICING), "db": str(tmp_path / "c.sqlite"), **data}))
    return str(path)


@pytest.mark.parametrize("data,message", [
    ({"port": 99999}, "port must be in [1, 65535], got 99999"),
    ({"port": 0}, "port must be in [1, 65535]"),
    ({"workers": 2.5}, "workers"),
    ({"policy": [1, 2]}, "policy"),
    ({"max_iterations": "three"}, "max_iterations"),
    ({"temperature": -0.5}, "temperature must be >= 0"),
    ({"question_timeout_s": -5}, "question_timeout_s must be > 0"),
    ({"generation_timeout_s": 0}, "generation_timeout_s must be > 0"),
    ({"db_timeout_s": -1}, "db_timeout_s must be > 0"),
    ({"reviewers": {"bob": "short"}}, "reviewers.bob: the token must be a string of at least 16 characters"),
    ({"translator": "llm"}, "translator: llm needs llm_url and llm_model"),
    ({"judge": "llm", "llm_url": "http://127.0.0.1:9/v1"}, "judge: llm needs llm_model"),
])
def test_bad_start_up_values_name_the_key(tmp_path, data, message):
    path = write(tmp_path, data)
    with pytest.raises(ChatConfigError) as err:
        load_chat_config(path)
    assert message in str(err.value) and path in str(err.value)
    result = CliRunner().invoke(cli, ["chat", "serve", "--config", path])
    assert result.exit_code == 2 and "Traceback" not in result.output


def test_port_flag_out_of_range_is_one_error_line(tmp_path):
    result = CliRunner().invoke(cli, ["chat", "serve", "--config", write(tmp_path, {}), "--port", "99999"])
    assert result.exit_code == 2 and "port must be in [1, 65535], got 99999" in result.output and "Traceback" not in result.output


def test_a_broken_or_conflicting_policy_is_refused_at_start(tmp_path):
    broken = tmp_path / "broken.yaml"
    broken.write_text("version: '1'\nvariables:\n  - {name: x, type: int, description: d}\nrules:\n  - {id: r, expression: '(> x'}\n")
    result = CliRunner().invoke(cli, ["chat", "serve", "--config", write(tmp_path, {"policy": str(broken)})])
    assert result.exit_code == 2 and str(broken) in result.output and "Traceback" not in result.output
    conflict = tmp_path / "conflict.yaml"
    conflict.write_text(yaml.safe_dump({"version": "1", "variables": [{"name": "x", "type": "int", "description": "d"}],
                                        "rules": [{"id": "big", "expression": "(> x 5)", "description": "x is big"},
                                                  {"id": "small", "expression": "(< x 2)", "description": "x is small"}]}))
    result = CliRunner().invoke(cli, ["chat", "serve", "--config", write(tmp_path, {"policy": str(conflict)})])
    assert result.exit_code == 2 and "rules conflict" in result.output and "big" in result.output
    # a policy one may switch to is read at start as well
    with pytest.raises(ValueError, match="broken.yaml"):
        create_app(settings_for(tmp_path, policies={"broken": str(broken)}))


def test_every_shipped_chat_config_parses_type_checks_and_lints(tmp_path, world_dir):
    folder = config_path("chat")
    names = sorted(p.name for p in folder.glob("*.yaml"))
    assert names == ["benefits.yaml", "pricing.yaml", "vllm_agent.yaml", "world.yaml"]
    for name in names:
        raw = yaml.safe_load((folder / name).read_text())
        # Inputs a run would make (the demo's world, a prepared corpus) come from the test world here; the
        # generator is named, not loaded (it needs a GPU or a server), since loading is lazy.
        stub = {k: str(world_dir / ("policy.yaml" if k == "policy" else "corpus.jsonl"))
                for k in ("policy", "corpus") if str(raw.get(k) or "").startswith("runs/")}
        settings = load_chat_config(folder / name, **stub)
        assert isinstance(settings, ChatSettings) and settings.policy
        issues = lint(load_policy(settings.policy), budget_s=60)
        assert not [i for i in issues if i.severity == "error"], (name, issues)
