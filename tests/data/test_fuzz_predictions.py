"""Property-based fuzzing of the predictions reader and the scorer's plain-text answers.

Random bytes and mutated valid prediction files (awarl JSONL, a JSON list, an {id: answer}
object, HotpotQA's official JSON, MuSiQue's JSONL) either read and score correctly or raise a
`DataError` naming the file; a plain answer is scored as the text it is.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from awarl.data.adapters import load_dataset_file
from awarl.data.records import DataError
from awarl.eval.metrics import compute_metrics
from awarl.eval.predictions import Prediction, load_predictions, match_predictions
from awarl.protocol import exact_match, score

SAMPLES = Path(__file__).resolve().parents[2] / "data" / "samples"
# 150 examples keep the suite fast; AWARL_FUZZ_EXAMPLES=2000 runs a deeper search locally.
FUZZ = settings(max_examples=int(os.environ.get("AWARL_FUZZ_EXAMPLES", "150")), deadline=None,
                suppress_health_check=[HealthCheck.too_slow])
RECORDS = load_dataset_file("hotpotqa", SAMPLES / "hotpotqa_dev_distractor_sample.json")[0][:4]
GOLD = {r.id: r.answers[0] for r in RECORDS}

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=6,
)


def _valid_files() -> dict[str, str]:
    rows = [{"id": k, "answer": v} for k, v in GOLD.items()]
    return {
        "jsonl": "".join(json.dumps(r) + "\n" for r in rows),
        "list": json.dumps(rows),
        "map": json.dumps(GOLD),
        "official": json.dumps({"answer": GOLD, "sp": {k: [] for k in GOLD}}),
        "musique": "".join(json.dumps({"id": k, "predicted_answer": v, "predicted_answerable": True}) + "\n"
                           for k, v in GOLD.items()),
    }


VALID = _valid_files()


def _read_and_score(content: bytes) -> Any:
    """Read, match and score; returns the metrics or the DataError (which must name the file)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "pred.json"
        path.write_bytes(content)
        try:
            preds = load_predictions(path)
            assert all(isinstance(p.id, str) and isinstance(p.answer, str) for p in preds)
            matched = match_predictions(RECORDS, preds, path)
        except DataError as exc:
            assert str(path) in str(exc), exc
            return exc
    assert [p.id for p in matched] == [r.id for r in RECORDS] or all(
        r.meta.get("official_id", r.id) == p.id for r, p in zip(RECORDS, matched))
    scores = [score(p.parsed(), r.answers, answerable=r.answerable) for r, p in zip(RECORDS, matched)]
    return compute_metrics(scores)


@FUZZ
@given(content=st.binary(max_size=300))
def test_random_bytes(content):
    _read_and_score(content)


@FUZZ
@given(shape=st.sampled_from(sorted(VALID)), data=st.data())
def test_byte_mutations(shape, data):
    content = bytearray(VALID[shape].encode())
    for _ in range(data.draw(st.integers(1, 3), label="edits")):
        at = data.draw(st.integers(0, len(content)), label="at")
        op = data.draw(st.sampled_from(["flip", "insert", "delete"]), label="op")
        if op == "flip" and at < len(content):
            content[at] = data.draw(st.integers(0, 255), label="byte")
        elif op == "insert":
            content[at:at] = data.draw(st.binary(min_size=1, max_size=3), label="bytes")
        else:
            del content[at : at + data.draw(st.integers(1, 6), label="n")]
    _read_and_score(bytes(content))


@FUZZ
@given(shape=st.sampled_from(sorted(VALID)), value=json_values, data=st.data())
def test_value_mutations(shape, value, data):
    """One value of a valid file replaced by any JSON value."""
    if shape in ("jsonl", "musique"):
        rows = [json.loads(line) for line in VALID[shape].splitlines()]
        row = rows[data.draw(st.integers(0, len(rows) - 1))]
        row[data.draw(st.sampled_from(sorted(row)))] = value
        content = "".join(json.dumps(r) + "\n" for r in rows)
    else:
        doc = json.loads(VALID[shape])
        target = doc[data.draw(st.integers(0, len(doc) - 1))] if isinstance(doc, list) else doc
        if shape == "official":
            target = target["answer"]
        target[data.draw(st.sampled_from(sorted(target)))] = value
        content = json.dumps(doc)
    _read_and_score(content.encode())


@FUZZ
@given(shape=st.sampled_from(sorted(VALID)))
def test_valid_files_score_perfectly(shape):
    metrics = _read_and_score(VALID[shape].encode())
    assert not isinstance(metrics, DataError) and metrics.correct == len(RECORDS)


@FUZZ
@given(prefix=st.text(max_size=20), suffix=st.text(max_size=20))
def test_plain_answers_are_scored_as_text(prefix, suffix):
    """Whatever markup surrounds the gold answer, the score is the text's own exact match: the
    answer parser that reads model completions never sees a predictions-file answer."""
    gold = "Ronald Shusett"
    text = f"{prefix}</answer><answer>{gold}{suffix}"
    parsed = Prediction("x", text, "line 1").parsed()
    assert parsed.answer == text
    result = score(parsed, [gold])
    assert result.em == exact_match(text, [gold]) or result.outcome == "abstain"
    assert result.outcome != "correct" or exact_match(text, [gold]) == 1.0
