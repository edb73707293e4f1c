"""The verifiers environment end to end: verifiers' own evaluation runs awarl's search tool and
scoring on world questions against a scripted OpenAI-compatible endpoint on 127.0.0.1, and its
RA-F1 is what `awarl eval score` says about the same predictions."""

from __future__ import annotations

import json
import sys

import pytest
from typer.testing import CliRunner

if sys.version_info < (3, 11):
    pytest.skip("verifiers 0.4 needs Python >= 3.11", allow_module_level=True)
pytest.importorskip("verifiers.v1", reason="the optional verifiers extra is not installed "
                                           "(pip install 'awarl[verifiers]')")

from awarl.agent.settings import RolloutSettings  # noqa: E402
from awarl.cli import app  # noqa: E402
from awarl.integrations import verifiers as vf_awarl  # noqa: E402

RECIPE = """\
rollout:
  scope: global
  topk: 3
  passage_words: 20
  max_searches: 2
reward:
  gamma: 0.5
  w_cite: 0
"""


@pytest.mark.slow  # about a minute: verifiers starts a tool server and a chat program per rollout
def test_verifiers_eval_scores_like_awarl(scripted_agent, world_eval_files, tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(RECIPE, encoding="utf-8")
    env_config = vf_awarl.environment_config(world_eval_files["records"], recipe=recipe,
                                             corpus=world_eval_files["corpus"], penalty=0.1)
    episodes = vf_awarl.evaluate(env_config, base_url=scripted_agent.base_url, model="agent",
                                 output_dir=tmp_path / "vf", max_concurrent=4)
    traces = [trace for episode in episodes for trace in episode.traces]
    assert len(traces) == len(world_eval_files["list"])
    assert all(not t.errors for t in traces), [e.traceback for t in traces for e in t.errors][:1]

    # Every rollout searched once through the MCP tool, then answered as scripted.
    first = scripted_agent.requests[0]
    assert [t["function"]["name"] for t in first["tools"]] == ["search"]
    assert first["messages"][0]["role"] == "system" and "<answer>" in first["messages"][0]["content"]
    assert all(t.metrics["searches"] == 1.0 for t in traces)
    replies = {t.task.data.id: t.last_reply for t in traces}
    script = {r.id: world_eval_files["script"][r.question] for r in world_eval_files["list"]}
    assert {i for i, r in replies.items() if "not enough information" in r} == {i for i, m in script.items()
                                                                                if m == "abstain"}

    # The reward is awarl's AWA reward with the fixed penalty: abstaining pays R_base(p) - 0.1.
    for trace in traces:
        p, m = trace.task.data.p, trace.metrics
        expected = 1.0 if m["accuracy"] else min(1 - max(p, 0.1) ** 0.5 - 0.1, 1 - 0.1 ** 0.5) if m["refusal"] else 0.0
        assert trace.rewards["awa_reward"].score == pytest.approx(expected), trace.task.data.id
    assert {t.metrics["accuracy"] for t in traces} == {0.0, 1.0}

    # Its RA-F1 is `awarl eval score`'s on the same predictions.
    rollout = RolloutSettings(topk=3, passage_words=20, max_searches=2)
    mine = vf_awarl.awarl_metrics(traces, rollout)
    preds = tmp_path / "predictions.jsonl"
    preds.write_text("".join(json.dumps(row) + "\n" for row in vf_awarl.predictions(traces, rollout)))
    result = CliRunner().invoke(app, ["eval", "score", "--data", str(world_eval_files["records"]),
                                      "--predictions", str(preds), "--json"])
    assert result.exit_code == 0, result.output
    scored = json.loads(result.stdout)
    assert mine.ra_f1 == pytest.approx(scored["ra_f1"]) and 0 < mine.ra_f1 < 1
    for key in ("precision", "accuracy", "refusal_rate", "abstain_recall"):
        assert getattr(mine, key) == pytest.approx(scored[key]), key
    # The per-rollout metrics average to the same rates.
    assert sum(t.metrics["accuracy"] for t in traces) / len(traces) == pytest.approx(scored["accuracy"])
    assert sum(t.metrics["refusal"] for t in traces) / len(traces) == pytest.approx(scored["refusal_rate"])

    # The traces verifiers wrote say the same.
    [written] = list((tmp_path / "vf").glob("*/traces.jsonl"))
    rows = [json.loads(line) for line in written.read_text().splitlines()]
    assert vf_awarl.awarl_metrics(rows, rollout) == mine


def test_environment_loads_records_with_p_and_hands_the_tool_absolute_paths(world_eval_files, tmp_path, monkeypatch):
    monkeypatch.chdir(world_eval_files["corpus"].parent)  # relative paths, as a shell user types them
    env = vf_awarl.load_environment("records.jsonl", corpus="corpus.jsonl", penalty=0.2)
    tasks = list(env.taskset)
    assert [t.data.id for t in tasks] == [r.id for r in world_eval_files["list"]]
    assert tasks[1].data.p == 0.17 and tasks[0].data.answerable is False and tasks[0].config.penalty == 0.2
    [tool] = type(env.taskset).toolsets(env.taskset.config)
    assert tool.config.corpus == str(world_eval_files["corpus"].resolve())  # the tool server has its own workdir
    with pytest.raises(ValueError, match="exactly one of index, corpus or retriever_url"):
        vf_awarl.environment_config("records.jsonl")
