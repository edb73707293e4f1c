"""`awarl eval score` run as a subprocess on official-format files."""

import json
import subprocess
import sys

import pytest

from awarl.data.records import DataError
from awarl.eval.score import score_predictions


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


# -- hardening: answers scored as text, prediction shapes, duplicates, empty and bad inputs ----------

def _score(data, pred, *extra):
    return run_cli("eval", "score", "--data", str(data), "--predictions", str(pred), "--json", *extra)


def _gold_answers(sample_files):
    return {ex["_id"]: ex["answer"] for ex in json.loads(sample_files["hotpotqa"].read_text())}


def test_answer_markup_in_predictions_is_scored_as_text(sample_files, tmp_path):
    """`garbage</answer><answer>Ronald Shusett` is not the answer "Ronald Shusett"."""
    answers = _gold_answers(sample_files)
    first = next(iter(answers))
    assert answers[first] == "Ronald Shusett"
    answers[first] = "garbage</answer><answer>Ronald Shusett"
    pred = tmp_path / "pred.json"
    pred.write_text(json.dumps({"answer": answers, "sp": {}}))
    m = json.loads(_score(sample_files["hotpotqa"], pred, "--dataset", "hotpotqa").stdout)
    assert m["correct"] == 39 and m["answered"] == 40 and m["em"] == pytest.approx(39 / 40)
    jsonl = tmp_path / "pred.jsonl"
    jsonl.write_text("".join(json.dumps({"id": k, "answer": f"<answer>{v}</answer>"}) + "\n" for k, v in answers.items()))
    m = json.loads(_score(sample_files["hotpotqa"], jsonl, "--dataset", "hotpotqa").stdout)
    assert m["correct"] == 0  # tags are part of a plain answer, not markup to strip


@pytest.mark.parametrize("shape", ["list", "map", "jsonl", "official"])
def test_prediction_shapes_read_alike(sample_files, tmp_path, shape):
    answers = _gold_answers(sample_files)
    answers = {k: (v if i % 2 else "not enough information") for i, (k, v) in enumerate(answers.items())}
    pred = tmp_path / "pred.json"
    if shape == "list":
        pred.write_text(json.dumps([{"id": k, "answer": v} for k, v in answers.items()]))
    elif shape == "map":
        pred.write_text(json.dumps(answers))
    elif shape == "jsonl":
        pred.write_text("".join(json.dumps({"id": k, "answer": v}) + "\n" for k, v in answers.items()))
    else:
        pred.write_text(json.dumps({"answer": answers, "sp": {k: [] for k in answers}}))
    m = score_predictions(sample_files["hotpotqa"], pred, "hotpotqa").metrics
    assert (m.correct, m.abstained, m.answered) == (20, 20, 20)


def test_explicit_abstained_flag_wins_over_the_phrase(sample_files, tmp_path):
    answers = _gold_answers(sample_files)
    pred = tmp_path / "pred.jsonl"
    pred.write_text("".join(json.dumps({"id": k, "answer": v, "abstained": i < 4}) + "\n"
                            for i, (k, v) in enumerate(answers.items())))
    m = json.loads(_score(sample_files["hotpotqa"], pred, "--dataset", "hotpotqa").stdout)
    assert (m["correct"], m["abstained"]) == (36, 4)


@pytest.mark.parametrize(
    "content,message",
    [
        ('{"a": 1}', "field 'answer': expected a string answer, got a number"),
        ('{"answer": {"5a85fb085542994775f606de": "x", "5a85fb085542994775f606de": "y"}}',
         "key '5a85fb085542994775f606de' appears twice in one JSON object"),
        ('[{"id": "5a85fb085542994775f606de", "answer": "x"}, 3]', "index 1: expected a JSON object, got a number"),
        ('[{"id": true, "answer": "x"}]', "index 0, field 'id': expected a string id, got true/false"),
        ('[{"id": "x", "answer": "a"},\n {"id": }]', "line 2: broken JSON"),
        ('"just text"', "top level: expected predictions (JSON lines, a list or an object), got a string"),
        ("", "holds no predictions (40 data ids to predict)"),
        ('{"id": "5a85fb085542994775f606de", "answer": "x", "citations": "d1"}', "field 'citations': expected a list"),
    ],
)
def test_bad_prediction_shapes_are_named(sample_files, tmp_path, content, message):
    pred = tmp_path / "pred.json"
    pred.write_text(content)
    with pytest.raises(DataError) as info:
        score_predictions(sample_files["hotpotqa"], pred, "hotpotqa")
    assert message in str(info.value) and str(info.value).startswith(str(pred))


def test_duplicate_prediction_names_both_lines(sample_files, tmp_path):
    answers = _gold_answers(sample_files)
    rows = [{"id": k, "answer": v} for k, v in answers.items()]
    rows.insert(5, rows[2])
    pred = tmp_path / "pred.jsonl"
    pred.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = _score(sample_files["hotpotqa"], pred, "--dataset", "hotpotqa")
    assert out.returncode == 1
    assert (f"line 6, field 'id': a second prediction for id {rows[2]['id']!r} (already at line 3)"
            in " ".join(out.stderr.split()))


def test_duplicate_ids_in_the_data_stop_scoring(sample_files, tmp_path):
    """The issue's case: with a repeated `_id`, perfect predictions were scored 38/40."""
    rows = json.loads(sample_files["hotpotqa"].read_text())
    rows[9]["_id"] = rows[4]["_id"]
    data = tmp_path / "dev.json"
    data.write_text(json.dumps(rows))
    pred = tmp_path / "pred.json"
    pred.write_text(json.dumps({r["_id"]: r["answer"] for r in rows}))
    out = _score(data, pred, "--dataset", "hotpotqa")
    assert out.returncode == 1 and "example 9 (index 9), field '_id': duplicate id" in " ".join(out.stderr.split())


def test_empty_data_and_predictions_warn(tmp_path):
    data = tmp_path / "records.jsonl"
    data.write_text("")
    pred = tmp_path / "pred.jsonl"
    pred.write_text("")
    for extra in ((), ("--dataset", "musique")):  # an empty prepared file, or an empty official one
        out = _score(data, pred, *extra)
        assert out.returncode == 0, out.stderr
        assert "warning:" in out.stderr and "holds 0 records" in out.stderr
        assert json.loads(out.stdout)["n"] == 0


def test_unreadable_inputs_are_error_lines(sample_files, tmp_path):
    pred = tmp_path / "pred.jsonl"
    pred.write_bytes('{"id": "5a85fb085542994775f606de", "answer": "Ronald Shusett é"}\n'.encode("latin-1"))
    out = _score(sample_files["hotpotqa"], pred, "--dataset", "hotpotqa")
    assert out.returncode == 1 and "Traceback" not in out.stderr
    assert f"{pred}: not UTF-8 text: byte b'\\xe9' at byte offset" in " ".join(out.stderr.split())
    out = _score(sample_files["hotpotqa"], tmp_path, "--dataset", "hotpotqa")
    assert out.returncode == 1 and f"error: {tmp_path}: is a folder; expected a file" in out.stderr
    out = _score(tmp_path, pred, "--dataset", "hotpotqa")
    assert out.returncode == 1 and f"error: {tmp_path}: is a folder; expected a file" in out.stderr


def test_the_table_of_two_data_sets_has_their_macro_average(tmp_path):
    from awarl.data.records import write_jsonl

    records = [{"id": f"{d}{i}", "question": "?", "answers": ["x"], "dataset": d} for d, n in (("a", 4), ("b", 2))
               for i in range(n)]
    write_jsonl(tmp_path / "records.jsonl", records)
    write_jsonl(tmp_path / "p.jsonl", [{"id": r["id"], "answer": "x" if r["id"] in ("a0", "b0") else "y"} for r in records])
    out = run_cli("eval", "score", "--data", str(tmp_path / "records.jsonl"), "--predictions", str(tmp_path / "p.jsonl"))
    assert out.returncode == 0, out.stderr
    macro = next(line for line in out.stdout.splitlines() if "macro avg" in line)
    assert "0.3750" in macro  # accuracy (1/4 + 1/2) / 2, where the pooled "all" row says 2/6
    assert "0.3333" in next(line for line in out.stdout.splitlines() if "│ all" in line)
