"""The shared resumable rollout stage with a scripted chat backend (no model): chunks, whole-chunk
resume, rows written once, the rows already written read back."""

from __future__ import annotations

import json

import pytest

from awarl.agent.stage import StageConfig, chunks, read_rows, run_stage
from awarl.data.records import DataError, Passage, QARecord, write_jsonl
from awarl.llm.base import Generation
from awarl.search.bm25 import BM25Index


class AnswerAtOnce:
    """A chat backend answering every conversation at its first turn; records the questions it saw."""

    accepts, tokenizer, eos_token_ids, max_model_len, name = "messages", None, [], None, "scripted"

    def __init__(self):
        self.seen: list[str] = []

    def generate(self, prompts, params):
        self.seen += [next(m["content"] for m in p.messages if m["role"] == "user") for p in prompts]
        return [Generation(text="<answer>Paris</answer>", message={"role": "assistant", "content": "<answer>Paris</answer>"},
                           prompt_tokens=10, completion_tokens=5) for _ in prompts]

    def close(self):
        pass


RECORDS = [QARecord(id=f"q{i}", question=f"question {i}?", answers=["Paris"], dataset="toy") for i in range(5)]
INDEX = BM25Index.build([Passage("d1", "Paris", "Paris is the capital of France.")])


def _run(tmp_path, done, samples=2):
    backend = AnswerAtOnce()
    out = tmp_path / "rows.jsonl"
    config = StageConfig(model="scripted", data=tmp_path / "records.jsonl", out=out, chunk=2, max_concurrent=8)
    run = run_stage(config, RECORDS, out, done=done, samples=samples, retriever=INDEX, backend=backend,
                    row_of=lambda record, group: {"id": record.id, "samples": [t.sample for t in group]},
                    label="test", unit="records", progress=False)
    return run, backend, [json.loads(line) for line in out.read_text().splitlines()] if out.exists() else []


def test_a_chunk_with_an_unfinished_record_runs_whole_and_writes_only_the_missing_rows(tmp_path):
    run, backend, rows = _run(tmp_path, done={"q0", "q1", "q2"})
    assert [c[0].id for c in chunks(RECORDS, 2)] == ["q0", "q2", "q4"]
    # chunk [q0, q1] is finished and skipped; [q2, q3] runs whole (q2 again), [q4] runs.
    assert sorted(backend.seen) == sorted(["question 2?", "question 3?", "question 4?"] * 2)
    assert sorted(r["id"] for r in rows) == ["q3", "q4"] and all(r["samples"] == [0, 1] for r in rows)
    assert (run.written, run.rollouts) == (2, 4)


def test_nothing_to_do_runs_nothing(tmp_path):
    run, backend, rows = _run(tmp_path, done={r.id for r in RECORDS})
    assert (run.written, backend.seen, rows) == (0, [], [])


def test_rows_read_back_refuse_a_repeated_id_and_cut_a_torn_tail(tmp_path):
    path = tmp_path / "rows.jsonl"
    write_jsonl(path, [{"id": "a"}, {"id": "b"}])
    with path.open("a") as fh:
        fh.write('{"id": "c", "half')
    assert list(read_rows(path, "id")) == ["a", "b"] and path.read_text().count("\n") == 2
    write_jsonl(path, [{"id": "a"}, {"id": "a"}])
    with pytest.raises(DataError, match="line 2, field 'id': id 'a' appears twice"):
        read_rows(path, "id")
    write_jsonl(path, [{"other": 1}])
    with pytest.raises(DataError, match="line 1, field 'id': missing required field"):
        read_rows(path, "id")


def test_stage_settings_are_checked():
    with pytest.raises(ValueError, match="chunk must be >= 1"):
        StageConfig(model="m", data="d", out="o", chunk=0)
    assert StageConfig(model="m", data="d", out="o", max_concurrent=64).chunk_size(8) == 32
