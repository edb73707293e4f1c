"""Property-based fuzzing of the official-format adapters and the prepared-file readers.

For random bytes and for valid sample files mutated at the byte or the JSON level, a reader either
returns a correct result (checked against invariants) or raises `DataError` naming the file;
never a traceback of another exception type.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from awarl.data.adapters import FORMATS, load_dataset_file
from awarl.data.records import DataError, load_corpus, load_records, passage_id

SAMPLES = Path(__file__).resolve().parents[2] / "data" / "samples"
# 150 examples keep the suite fast; AWARL_FUZZ_EXAMPLES=2000 runs a deeper search locally.
FUZZ = settings(max_examples=int(os.environ.get("AWARL_FUZZ_EXAMPLES", "150")), deadline=None,
                suppress_health_check=[HealthCheck.too_slow])


def _small_samples() -> dict[str, bytes]:
    """Three examples of each shipped sample (small files keep each example fast)."""
    hotpot = json.loads((SAMPLES / "hotpotqa_dev_distractor_sample.json").read_text())[:3]
    wiki = json.loads((SAMPLES / "2wikimultihopqa_dev_sample.json").read_text())[:3]
    musique = (SAMPLES / "musique_full_train_sample.jsonl").read_text().splitlines()[:3]
    flashrag = [json.dumps({"id": f"test_{i}", "question": f"q{i}?", "golden_answers": ["a", "b"]}) for i in range(3)]
    return {
        "hotpotqa": json.dumps(hotpot).encode(),
        "2wiki": json.dumps(wiki).encode(),
        "musique": ("\n".join(musique) + "\n").encode(),
        "flashrag": ("\n".join(flashrag) + "\n").encode(),
    }


SMALL = _small_samples()

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=6,
)


def _load(dataset: str, content: bytes) -> tuple[Path, Any]:
    """Write ``content`` to a file and read it; returns the path and the result or the DataError."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"data.{FORMATS[dataset].shape}"
        path.write_bytes(content)
        try:
            return path, load_dataset_file(dataset, path)
        except DataError as exc:
            assert str(path) in str(exc), exc  # every message names the file
            return path, exc


def _check_result(dataset: str, result: Any) -> None:
    """Invariants of a successful read."""
    if isinstance(result, DataError):
        return
    records, passages = result
    ids = [r.id for r in records]
    assert len(set(ids)) == len(ids)
    by_id = {p.id: p for p in passages}
    assert len(by_id) == len(passages)
    for p in passages:
        assert isinstance(p.title, str) and isinstance(p.text, str) and p.id == passage_id(p.title, p.text)
    for r in records:
        assert r.dataset == dataset and isinstance(r.question, str)
        assert r.answers and all(isinstance(a, str) for a in r.answers)
        assert set(r.supporting) <= set(r.passages) <= set(by_id)


@pytest.mark.parametrize("dataset", list(FORMATS))
@FUZZ
@given(content=st.binary(max_size=400))
def test_random_bytes(dataset, content):
    _check_result(dataset, _load(dataset, content)[1])


@pytest.mark.parametrize("dataset", list(FORMATS))
@FUZZ
@given(data=st.data())
def test_byte_mutations_of_valid_files(dataset, data):
    content = bytearray(SMALL[dataset])
    for _ in range(data.draw(st.integers(1, 4), label="edits")):
        at = data.draw(st.integers(0, len(content)), label="at")
        op = data.draw(st.sampled_from(["flip", "insert", "delete", "truncate"]), label="op")
        if op == "flip" and at < len(content):
            content[at] = data.draw(st.integers(0, 255), label="byte")
        elif op == "insert":
            content[at:at] = data.draw(st.binary(min_size=1, max_size=4), label="bytes")
        elif op == "delete":
            del content[at : at + data.draw(st.integers(1, 8), label="n")]
        elif op == "truncate":
            del content[at:]
    _check_result(dataset, _load(dataset, bytes(content))[1])


def _mutate(draw: Any, node: Any, depth: int = 0) -> Any:
    """Replace, delete or add one value somewhere inside ``node`` (a parsed JSON document)."""
    if isinstance(node, (dict, list)) and node and depth < 6 and draw(st.booleans()):
        keys = list(node) if isinstance(node, dict) else list(range(len(node)))
        key = draw(st.sampled_from(keys))
        copy = dict(node) if isinstance(node, dict) else list(node)
        copy[key] = _mutate(draw, node[key], depth + 1)
        return copy
    op = draw(st.sampled_from(["replace", "drop", "add", "duplicate"]))
    if op == "drop" and isinstance(node, dict) and node:
        key = draw(st.sampled_from(sorted(node)))
        return {k: v for k, v in node.items() if k != key}
    if op == "add" and isinstance(node, dict):
        return {**node, draw(st.text(max_size=8)): draw(json_values)}
    if op == "duplicate" and isinstance(node, list) and node:
        return [*node, node[draw(st.integers(0, len(node) - 1))]]
    return draw(json_values)


@pytest.mark.parametrize("dataset", list(FORMATS))
@FUZZ
@given(data=st.data())
def test_json_mutations_of_valid_files(dataset, data):
    if FORMATS[dataset].shape == "json":
        doc = json.loads(SMALL[dataset])
        content = json.dumps(_mutate(data.draw, doc)).encode()
    else:
        rows = [json.loads(line) for line in SMALL[dataset].decode().splitlines()]
        rows = _mutate(data.draw, rows)
        if not isinstance(rows, list):
            rows = [rows]
        content = "".join(json.dumps(r) + "\n" for r in rows).encode()
    _check_result(dataset, _load(dataset, content)[1])


@FUZZ
@given(data=st.data())
def test_prepared_records_and_corpus_readers(data):
    """`load_records` / `load_corpus` on mutated prepared rows: a record list or a DataError."""
    records, passages = load_dataset_file("musique", SAMPLES / "musique_full_train_sample.jsonl")
    rows = _mutate(data.draw, [r.to_dict() for r in records[:3]])
    corpus = _mutate(data.draw, [p.to_dict() for p in passages[:3]])
    with tempfile.TemporaryDirectory() as tmp:
        rec_path, corpus_path = Path(tmp) / "records.jsonl", Path(tmp) / "corpus.jsonl"
        rec_path.write_text("".join(json.dumps(r) + "\n" for r in (rows if isinstance(rows, list) else [rows])))
        corpus_path.write_text("".join(json.dumps(p) + "\n" for p in (corpus if isinstance(corpus, list) else [corpus])))
        try:
            loaded = load_records(rec_path)
            assert len({r.id for r in loaded}) == len(loaded)
        except DataError as exc:
            assert str(rec_path) in str(exc)
        try:
            loaded_corpus = load_corpus(corpus_path)
            assert all(isinstance(p.text, str) and isinstance(p.title, str) for p in loaded_corpus)
        except DataError as exc:
            assert str(corpus_path) in str(exc)
