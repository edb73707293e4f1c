"""`awarl eval run` and `awarl eval report` with the warm-started tiny model on the shipped samples:
files, agreement with `awarl eval score` on the same predictions, resume, report and plots."""

from __future__ import annotations

import json
import shutil
import socket
from pathlib import Path

import pytest

from awarl.agent.settings import load_rollout
from typer.testing import CliRunner

from awarl.cli import app
from awarl.data.records import write_jsonl
from awarl.eval.stats import FINGERPRINT_VERSION

SCORER_KEYS = ("n", "answered", "abstained", "correct", "precision", "accuracy", "ra_f1", "refusal_rate", "em", "f1",
               "abstain_recall", "over_refusal")


@pytest.fixture(scope="module")
def prepared(sample_files, tmp_path_factory) -> Path:
    """HotpotQA + MuSiQue-Full records (with a p column, as `awarl capability estimate` writes) and their corpus."""
    from awarl.data.adapters import load_dataset_file

    hotpot, hp = load_dataset_file("hotpotqa", sample_files["hotpotqa"])
    musique, mp = load_dataset_file("musique", sample_files["musique_full"])
    musique = musique[1:3]  # MuSiQue-Full: an answerable question and an unanswerable copy
    assert [r.answerable for r in musique] == [True, False]
    records = hotpot[:2] + musique
    folder = tmp_path_factory.mktemp("prepared")
    rows = [{**r.to_dict(), "p": round(0.15 + 0.23 * i, 2) % 1.0} for i, r in enumerate(records)]
    write_jsonl(folder / "records.jsonl", rows)
    keep = {pid for r in records for pid in r.passages}
    passages = {p.id: p for p in hp + mp if p.id in keep}
    write_jsonl(folder / "corpus.jsonl", (p.to_dict() for p in passages.values()))
    return folder / "records.jsonl"


@pytest.fixture(scope="module")
def run_dir(prepared, tiny_sft_model_dir, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("runs") / "greedy"
    res = CliRunner().invoke(app, [
        "eval", "run", "--model", str(tiny_sft_model_dir), "--data", str(prepared), "--out", str(out),
        "--scope", "closed", "--topk", "2", "--max-searches", "2", "--max-completion-tokens", "512", "--device", "cpu",
        "--no-progress",
    ])
    assert res.exit_code == 0, res.output
    assert "4 questions run, 0 already done" in res.output and "macro avg: precision" in res.output
    return out


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _score_json(data: Path, predictions: Path) -> dict:
    res = CliRunner().invoke(app, ["eval", "score", "--data", str(data), "--predictions", str(predictions), "--json"])
    assert res.exit_code == 0, res.output
    return json.loads(res.output)


def test_run_writes_every_file(run_dir):
    for name in ("run.json", "records.jsonl", "trajectories.jsonl", "predictions.jsonl", "metrics.json",
                 "predictions/hotpotqa/pred.json", "predictions/musique/pred.jsonl"):
        assert (run_dir / name).exists(), name
    trajectories = _lines(run_dir / "trajectories.jsonl")
    assert len(trajectories) == 4
    assert all(t["p"] is not None and t["turns"] for t in trajectories)
    official = json.loads((run_dir / "predictions/hotpotqa/pred.json").read_text())
    assert set(official) >= {"answer", "sp"} and len(official["answer"]) == 2
    musique = _lines(run_dir / "predictions/musique/pred.jsonl")
    assert [m["id"] for m in musique] == [r["meta"]["official_id"] for r in _lines(run_dir / "records.jsonl")[2:]]


def test_metrics_agree_with_eval_score_on_the_same_predictions(run_dir):
    metrics = json.loads((run_dir / "metrics.json").read_text())
    scored = _score_json(run_dir / "records.jsonl", run_dir / "predictions.jsonl")
    for key in SCORER_KEYS:
        assert metrics["overall"][key] == scored[key], key
        assert metrics["macro"][key] == scored["macro"][key], key
    for dataset in ("hotpotqa", "musique"):
        for key in SCORER_KEYS:
            assert metrics["per_dataset"][dataset][key] == scored["per_dataset"][dataset][key], (dataset, key)
    # The official files score the same as awarl's own JSONL.
    records = _lines(run_dir / "records.jsonl")
    for dataset, name in (("hotpotqa", "pred.json"), ("musique", "pred.jsonl")):
        subset = run_dir / f"only-{dataset}.jsonl"
        write_jsonl(subset, [r for r in records if r["dataset"] == dataset])
        official = _score_json(subset, run_dir / "predictions" / dataset / name)
        for key in SCORER_KEYS:
            assert official[key] == metrics["per_dataset"][dataset][key], (dataset, key)
    # MuSiQue-Full in closed scope reports abstention on its unanswerable copies.
    assert metrics["per_dataset"]["musique"]["n_unanswerable"] == 1
    assert metrics["per_dataset"]["musique"]["abstain_recall"] is not None


def test_run_statistics_match_the_trajectories(run_dir, prepared):
    metrics = json.loads((run_dir / "metrics.json").read_text())
    trajectories = _lines(run_dir / "trajectories.jsonl")
    records = {r["id"]: r for r in _lines(prepared)}
    corpus = {p["id"] for p in _lines(prepared.parent / "corpus.jsonl")}
    overall = metrics["overall"]
    assert overall["searches_per_question"] == pytest.approx(sum(len(t["queries"]) for t in trajectories) / 4)
    assert overall["refusal_rate"] == pytest.approx(sum(t["abstained"] for t in trajectories) / 4)
    assert sum(overall["stop_reasons"].values()) == 4
    cited = [(c, t["record_id"]) for t in trajectories if not t["abstained"] and t["answer"] is not None
             for c in t["citations"]]
    assert overall["citations"] == len(cited)
    if cited:
        assert overall["fabricated_share"] == pytest.approx(sum(c not in corpus for c, _ in cited) / len(cited))
    real = [(c, rid) for c, rid in cited if c in corpus and records[rid]["supporting"]]
    expected = sum(c not in records[rid]["supporting"] for c, rid in real) / len(real) if real else None
    assert overall["unsupported_share"] == (pytest.approx(expected) if expected is not None else None)


def test_interrupted_run_resumes_without_redoing_work(run_dir, prepared, tiny_sft_model_dir, tmp_path):
    from awarl.eval.run import EvalConfig, run_eval
    from awarl.llm.spec import load_backend

    resumed = tmp_path / "resumed"
    shutil.copytree(run_dir, resumed)
    kept = (resumed / "trajectories.jsonl").read_text().splitlines()[:2]
    (resumed / "trajectories.jsonl").write_text("\n".join(kept) + '\n{"record_id": "torn')  # crash mid-write
    (resumed / "metrics.json").unlink()

    class Counting:
        def __init__(self, inner):
            self.inner, self.calls = inner, 0
            for name in ("accepts", "tokenizer", "eos_token_ids", "max_model_len", "name"):
                setattr(self, name, getattr(inner, name))

        def generate(self, prompts, params):
            self.calls += sum(self.inner.tokenizer.convert_tokens_to_ids("<tool_response>") not in p for p in prompts)
            return self.inner.generate(prompts, params)

    backend = Counting(load_backend(str(tiny_sft_model_dir), device="cpu"))
    config = EvalConfig(model=str(tiny_sft_model_dir), data=prepared, out=resumed,
                        # what the CLI ran: the checkpoint's saved settings with the fixture's options on top
                        rollout=load_rollout(tiny_sft_model_dir).replace(scope="closed", topk=2, max_searches=2,
                                                                         max_completion_tokens=512),
                        chunk=1)  # resume redoes whole chunks: one question each, so only unfinished ones run
    result = run_eval(config, backend=backend, progress=False)
    assert (result.evaluated, result.skipped) == (2, 2)
    assert backend.calls == 2  # first turns of the unfinished questions only
    lines = (resumed / "trajectories.jsonl").read_text().splitlines()
    assert lines[:2] == kept and len(lines) == 4
    assert (resumed / "predictions.jsonl").read_text() == (run_dir / "predictions.jsonl").read_text()

    other = CliRunner().invoke(app, ["eval", "run", "--model", str(tiny_sft_model_dir), "--data", str(prepared),
                                     "--out", str(resumed), "--limit", "1", "--device", "cpu", "--scope", "closed"])
    assert other.exit_code == 1 and "holds a run over other questions" in other.output
    other = CliRunner().invoke(app, ["eval", "run", "--model", str(tiny_sft_model_dir), "--data", str(prepared),
                                     "--out", str(resumed), "--scope", "closed", "--topk", "2", "--max-searches", "3",
                                     "--max-completion-tokens", "512"])
    assert other.exit_code == 1 and "holds a run with other settings (max_searches: 2 -> 3)" in other.output


def test_report_over_two_runs(run_dir, prepared, tiny_sft_model_dir, tmp_path):
    second = tmp_path / "no-search"
    res = CliRunner().invoke(app, ["eval", "run", "--model", str(tiny_sft_model_dir), "--data", str(prepared),
                                   "--out", str(second), "--scope", "closed", "--max-searches", "0",
                                   "--max-completion-tokens", "64", "--device", "cpu",
                                   "--no-progress"])
    assert res.exit_code == 0, res.output
    out = tmp_path / "report"
    res = CliRunner().invoke(app, ["eval", "report", str(run_dir), str(second), "--out", str(out)])
    assert res.exit_code == 0, res.output
    for name in ("report.md", "report.json", "frontier.png", "calibration.png"):
        assert (out / name).exists()
    for png in ("frontier.png", "calibration.png"):
        data = (out / png).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000
    report = json.loads((out / "report.json").read_text())
    metrics = {p.name: json.loads((p / "metrics.json").read_text()) for p in (run_dir, second)}
    assert [r["name"] for r in report["runs"]] == ["greedy", "no-search"]
    rows = {(r["run"], r["dataset"]): r for r in report["table"]}
    assert set(rows) == {(run, ds) for run in ("greedy", "no-search") for ds in ("hotpotqa", "musique", "macro avg")}
    for run, m in metrics.items():
        assert rows[(run, "macro avg")]["ra_f1"] == m["macro"]["ra_f1"]
        assert rows[(run, "musique")]["abstain_recall"] == m["per_dataset"]["musique"]["abstain_recall"]
        assert rows[(run, "hotpotqa")]["searches_per_question"] == m["per_dataset"]["hotpotqa"]["searches_per_question"]
    assert rows[("no-search", "macro avg")]["searches_per_question"] == 0.0
    # Calibration: refusal rate per p_i decile, recomputed from the trajectories.
    trajectories = _lines(run_dir / "trajectories.jsonl")
    deciles = report["runs"][0]["refusal_by_p_decile"]
    assert sum(d["n"] for d in deciles) == 4
    for d in deciles:
        inside = [t for t in trajectories if min(int(t["p"] * 10), 9) == d["decile"]]
        assert d["n"] == len(inside)
        if inside:
            assert d["refusal_rate"] == pytest.approx(sum(t["abstained"] for t in inside) / len(inside))
    markdown = (out / "report.md").read_text()
    assert "| greedy | macro avg |" in markdown and "Refusal rate by p_i decile" in markdown


def test_bad_input_gets_clear_errors(prepared, tmp_path):
    cli = CliRunner()
    res = cli.invoke(app, ["eval", "report", str(tmp_path), "--out", str(tmp_path / "r")])
    assert res.exit_code == 1 and "not an evaluation run folder" in res.output
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    res = cli.invoke(app, ["eval", "run", "--model", f"openai:http://127.0.0.1:{port}/v1#m", "--data", str(prepared),
                           "--out", str(tmp_path / "run")])
    assert res.exit_code == 1 and "cannot connect" in res.output
    broken = tmp_path / "records.jsonl"
    broken.write_text(prepared.read_text().splitlines()[0] + "\n{not json\n")
    res = cli.invoke(app, ["eval", "run", "--model", "x", "--data", str(broken), "--out", str(tmp_path / "r2")])
    assert res.exit_code == 1 and "line 2: broken JSON" in res.output


def test_support_coverage_counts_the_hops_an_answer_cites():
    """Coverage is the share of an answerable question's gold passages cited, over answered
    questions; the all-support share counts right answers that cite every hop."""
    from awarl.data.records import QARecord
    from awarl.eval.run import citation_integrity

    class Corpus:
        def get_passage(self, pid):
            if pid not in {"a1", "a2", "b1", "b2", "c1", "x"}:
                raise KeyError(pid)

    records = [QARecord("a", "q", ["A"], "world", supporting=["a1", "a2"]),
               QARecord("b", "q", ["B"], "world", supporting=["b1", "b2"]),
               QARecord("c", "q", ["C"], "world", supporting=["c1"]),
               QARecord("u", "q", ["U"], "world", answerable=False, supporting=["x"]),
               QARecord("d", "q", ["D"], "world", supporting=["c1"])]
    rows = [{"answer": "A", "outcome": "correct", "citations": ["a1", "a2"]},   # both hops
            {"answer": "B", "outcome": "correct", "citations": ["b2", "zz"]},   # one of two, one fabricated
            {"answer": "no", "outcome": "wrong", "citations": []},              # wrong, nothing cited
            {"answer": "U", "outcome": "wrong", "citations": ["x"]},            # unanswerable: not in coverage
            {"answer": None, "abstained": True, "citations": ["c1"]}]           # abstained: not counted
    got = citation_integrity(records, rows, Corpus())
    assert got["support_coverage"] == pytest.approx((1.0 + 0.5 + 0.0) / 3)
    assert got["all_support_share"] == pytest.approx(1 / 2)
    assert got["fabricated_share"] == pytest.approx(1 / 5)  # zz of a1, a2, b2, zz, x
    assert got["unretrieved_share"] is None  # no row records what its searches returned


def test_unretrieved_share_counts_cited_passages_the_answers_own_searches_never_returned():
    """A cited passage that exists but that none of the answer's searches returned was recalled or guessed, not
    read; fabricated ids, abstentions and rows that do not record their searches are left out."""
    from awarl.data.records import QARecord
    from awarl.eval.run import citation_integrity

    class Corpus:
        def get_passage(self, pid):
            if pid not in {"a1", "a2", "b1", "b2", "m"}:
                raise KeyError(pid)

    records = [QARecord(k, "q", ["A"], "world", supporting=s) for k, s in
               (("a", ["a1", "a2"]), ("b", ["b1", "b2"]), ("c", ["a1"]), ("d", ["b1"]))]
    rows = [{"answer": "A", "outcome": "correct", "citations": ["a1", "a2"], "retrieved_ids": ["a1", "a2", "x"]},
            {"answer": "B", "outcome": "wrong", "citations": ["b1", "m", "zz"], "retrieved_ids": ["b1"]},  # m recalled
            {"answer": "C", "outcome": "wrong", "citations": ["a2"]},  # searches not recorded: left out
            {"answer": None, "abstained": True, "citations": ["m"], "retrieved_ids": []}]  # abstained: left out
    got = citation_integrity(records, rows, Corpus())
    assert got["unretrieved_share"] == pytest.approx(1 / 4)  # m of a1, a2, b1, m (zz is fabricated)
    assert got["fabricated_share"] == pytest.approx(1 / 6)


def test_report_warns_of_what_keeps_runs_from_being_compared(run_dir, tmp_path):
    """Another corpus, a run that records none, and a run on other questions: each is a warning in report.md,
    report.json and on stderr, where they used to pass silently (no paired row, no fingerprint line)."""
    assert json.loads((run_dir / "metrics.json").read_text())["fingerprint"]["kind"] == "corpus"  # the corpus beside the records
    copies = {}
    for name, fingerprint in (("other-corpus", {"kind": "corpus", "sha256": "f" * 64, "version": FINGERPRINT_VERSION}), ("remote", None)):
        copies[name] = shutil.copytree(run_dir, tmp_path / name)
        metrics = json.loads((copies[name] / "metrics.json").read_text())
        (copies[name] / "metrics.json").write_text(json.dumps({**metrics, "name": name, "fingerprint": fingerprint}))
    for file in ("records.jsonl", "predictions.jsonl"):  # the other corpus's run answered three of the four questions
        lines = (copies["other-corpus"] / file).read_text().splitlines()
        (copies["other-corpus"] / file).write_text("\n".join(lines[:3]) + "\n")
    out = tmp_path / "report"
    res = CliRunner().invoke(app, ["eval", "report", str(run_dir), str(copies["other-corpus"]), str(copies["remote"]),
                                   "--out", str(out), "--bootstrap", "50"])
    assert res.exit_code == 0, res.output
    warnings = json.loads((out / "report.json").read_text())["warnings"]
    assert warnings == [
        "the runs searched different passages; their numbers are not comparable as they stand",
        "remote records no fingerprint (a remote retriever or an older run): whether it searched the same passages "
        "as the others is unknown",
        "other-corpus has no paired difference against greedy: its questions differ from greedy's (3 and 4, 3 shared)",
    ]
    markdown = (out / "report.md").read_text()
    assert all(f"- **warning: {w}**" in markdown for w in warnings)
    assert all(f"warning: {w}" in res.output for w in warnings)
    assert "| remote |" in markdown.split("Paired differences")[1]  # the run on the same questions is still paired


def test_fingerprints_of_an_older_awarl_are_not_compared_and_pairing_is_checked_without_resamples(run_dir, tmp_path):
    older = shutil.copytree(run_dir, tmp_path / "older")
    metrics = json.loads((older / "metrics.json").read_text())
    old_print = {k: v for k, v in metrics["fingerprint"].items() if k != "version"} | {"sha256": "0" * 64}
    (older / "metrics.json").write_text(json.dumps({**metrics, "name": "older", "fingerprint": old_print}))
    for file in ("records.jsonl", "predictions.jsonl"):
        (older / file).write_text("\n".join((older / file).read_text().splitlines()[:2]) + "\n")
    out = tmp_path / "report"
    res = CliRunner().invoke(app, ["eval", "report", str(run_dir), str(older), "--out", str(out), "--bootstrap", "0"])
    assert res.exit_code == 0, res.output
    assert json.loads((out / "report.json").read_text())["warnings"] == [
        "older's fingerprint was recorded by an older awarl (another hash): whether it searched the same passages as "
        "the others is unknown",
        "older has no paired difference against greedy: its questions differ from greedy's (2 and 4, 2 shared)",
    ]


def test_the_sft_checkpoint_of_a_recipe_is_not_reported_as_trained_with_its_reward(tmp_path):
    """A recipe saved beside its SFT checkpoint names the reward GRPO will use; the SFT model had no RL."""
    import yaml

    from awarl.eval.report import RunSummary, _settings_section
    from awarl.eval.run import checkpoint_hyperparameters

    recipe = {"output_dir": "grpo/awa", "reward": {"kind": "awa", "gamma": 0.5}, "rollout": {"topk": 3},
              "sft": {"output_dir": "sft"}}
    for folder in ("sft/final", "grpo/awa/final"):
        (tmp_path / folder).mkdir(parents=True)
        (tmp_path / folder / "awarl_recipe.yaml").write_text(yaml.safe_dump(recipe))
    sft, grpo = (checkpoint_hyperparameters(str(tmp_path / f)) for f in ("sft/final", "grpo/awa/final"))
    assert sft["stage"] == "sft" and "reward/kind" not in sft and sft["rollout/topk"] == 3
    assert grpo["stage"] == "grpo" and grpo["reward/gamma"] == 0.5
    rows = _settings_section([RunSummary(n, tmp_path, {"model": n, "recipe": r}, []) for n, r in (("base", sft), ("awa", grpo))])
    assert rows[4].endswith("| SFT only (no RL) |") and rows[5].endswith("| kind=awa, gamma=0.5 |")
