"""`awarl eval score` run as a subprocess on official-format files."""

import json
import subprocess
import sys

import pytest


def run_cli(*args):
    return subprocess.run([sys.executable, "-m", "awarl.cli", *args], capture_output=True, text=True, timeout=120)


def hotpot_predictions(sample_files, tmp_path):
    data = json.loads(sample_files["hotpotqa"].read_text())
    answers = {}
    for i, ex in enumerate(data):
        answers[ex["_id"]] = [ex["answer"], ex["answer"].upper() + ".", "not enough information", "zzz"][i % 4]
    path = tmp_path / "pred.json"
    path.write_text(json.dumps({"answer": answers, "sp": {k: [] for k in answers}}))
    return path


def test_score_hotpot_official(sample_files, tmp_path):
    pred = hotpot_predictions(sample_files, tmp_path)
    out = run_cli("eval", "score", "--data", str(sample_files["hotpotqa"]), "--dataset", "hotpotqa",
                  "--predictions", str(pred), "--json")
    assert out.returncode == 0, out.stderr
    m = json.loads(out.stdout)
    assert m["n"] == 40 and m["correct"] == 20 and m["abstained"] == 10 and m["answered"] == 30
    assert m["precision"] == pytest.approx(20 / 30) and m["accuracy"] == pytest.approx(0.5)
    assert m["ra_f1"] == pytest.approx(2 * (2 / 3) * 0.5 / (2 / 3 + 0.5))
    assert m["refusal_rate"] == pytest.approx(0.25)


def test_score_prepared_records_and_jsonl(sample_files, tmp_path):
    out = run_cli("data", "prepare", "--dataset", "2wiki", "--input", str(sample_files["2wiki"]), "--out", str(tmp_path))
    assert out.returncode == 0, out.stderr
    assert "40 records" in out.stdout
    records = [json.loads(line) for line in (tmp_path / "records.jsonl").read_text().splitlines()]
    pred = tmp_path / "p.jsonl"
    pred.write_text("".join(json.dumps({"id": r["id"], "answer": r["answers"][0] if i < 30 else "nope"}) + "\n"
                            for i, r in enumerate(records)))
    out = run_cli("eval", "score", "--data", str(tmp_path / "records.jsonl"), "--predictions", str(pred), "--json")
    m = json.loads(out.stdout)
    assert m["correct"] == 30 and m["precision"] == 0.75 and m["accuracy"] == 0.75


def test_score_musique_full_official(sample_files, tmp_path):
    rows = [json.loads(line) for line in sample_files["musique_full"].read_text().splitlines()]
    # a predictor that always answers the gold: right on answerable copies, wrong on unanswerable ones;
    # then one that abstains exactly on the unanswerable copies
    always = tmp_path / "always.jsonl"
    always.write_text("".join(json.dumps({"id": r["id"], "predicted_answer": r["answer"], "predicted_support_idxs": [],
                                          "predicted_answerable": True}) + "\n" for r in rows))
    m = json.loads(run_cli("eval", "score", "--data", str(sample_files["musique_full"]), "--dataset", "musique",
                           "--predictions", str(always), "--json").stdout)
    assert m["correct"] == 5 and m["answered"] == 10 and m["abstain_recall"] == 0.0
    oracle = tmp_path / "oracle.jsonl"
    oracle.write_text("".join(json.dumps({"id": r["id"], "predicted_answer": r["answer"],
                                          "predicted_answerable": r["answerable"]}) + "\n" for r in rows))
    m = json.loads(run_cli("eval", "score", "--data", str(sample_files["musique_full"]), "--dataset", "musique",
                           "--predictions", str(oracle), "--json").stdout)
    assert m["precision"] == 1.0 and m["abstain_recall"] == 1.0 and m["over_refusal"] == 0.0 and m["accuracy"] == 0.5


def test_score_musique_full_repeated_ids(tmp_path):
    base = {"question": "q?", "answer": "Paris", "answer_aliases": [],
            "paragraphs": [{"idx": 0, "title": "T", "paragraph_text": "x", "is_supporting": True}]}
    data = tmp_path / "full.jsonl"
    data.write_text(json.dumps({"id": "a", **base, "answerable": True}) + "\n"
                    + json.dumps({"id": "a", **base, "answerable": False}) + "\n")
    pred = tmp_path / "pred.jsonl"
    pred.write_text(json.dumps({"id": "a", "predicted_answer": "Paris", "predicted_answerable": True}) + "\n"
                    + json.dumps({"id": "a", "predicted_answer": "Paris", "predicted_answerable": False}) + "\n")
    m = json.loads(run_cli("eval", "score", "--data", str(data), "--dataset", "musique", "--predictions", str(pred),
                           "--json").stdout)
    assert m["correct"] == 1 and m["abstained"] == 1 and m["abstain_recall"] == 1.0


@pytest.mark.parametrize(
    "lines,message",
    [
        (['{"id": "5a85fb085542994775f606de", "answer": "x"}', "{oops"], "line 2: broken JSON"),
        (['{"id": "nope", "answer": "x"}'], "line 1, field 'id': prediction id 'nope' is not in the data"),
        (['{"answer": "x"}'], "line 1, field 'id': missing"),
        (['{"id": "5a85fb085542994775f606de", "answer": "x"}'], "39 of 40 data ids have no prediction (first: "),
    ],
)
def test_score_bad_predictions(sample_files, tmp_path, lines, message):
    pred = tmp_path / "bad.jsonl"
    pred.write_text("\n".join(lines) + "\n")
    out = run_cli("eval", "score", "--data", str(sample_files["hotpotqa"]), "--dataset", "hotpotqa",
                  "--predictions", str(pred), "--json")
    assert out.returncode == 1
    assert message in " ".join(out.stderr.split())
    assert str(pred) in out.stderr.replace("\n", "")


def test_cli_help_everywhere():
    for group in ("", "data", "index", "search", "capability", "eval", "train", "verify"):
        out = run_cli(*([group] if group else []), "--help")
        assert out.returncode == 0, (group, out.stderr)


def test_import_awarl_does_not_import_torch():
    code = ("import sys, awarl, awarl.cli, awarl.protocol, awarl.eval.metrics, awarl.data.adapters;"
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "False", out.stderr
