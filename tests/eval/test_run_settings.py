"""Evaluation run folders pin their settings only once a question has finished: a start that failed
(a wrong model path) must not block the corrected rerun; a folder with finished questions refuses
other rollout settings. A scripted chat backend stands in for the model (no weights needed)."""

from __future__ import annotations

import json

import pytest

from awarl.agent.settings import RolloutSettings
from awarl.data.records import DataError, write_jsonl
from awarl.eval.run import EvalConfig, run_eval
from awarl.llm.base import BackendError, Generation


class AnswerParis:
    """A chat backend that answers every question at once, citing nothing."""

    accepts, tokenizer, eos_token_ids, max_model_len, name = "messages", None, [], None, "scripted"

    def generate(self, prompts, params):
        return [Generation(text="<answer>Paris</answer>", message={"role": "assistant",
                                                                    "content": "<answer>Paris</answer>"},
                           prompt_tokens=10, completion_tokens=5) for _ in prompts]

    def close(self):
        pass


@pytest.fixture()
def data(tmp_path):
    records = [{"id": f"q{i}", "question": f"capital {i}?", "answers": ["Paris"], "dataset": "toy",
                "passages": ["d1"], "supporting": ["d1"]} for i in range(3)]
    write_jsonl(tmp_path / "data" / "records.jsonl", records)
    write_jsonl(tmp_path / "data" / "corpus.jsonl", [{"id": "d1", "title": "Paris", "text": "Paris is in France."}])
    return tmp_path / "data" / "records.jsonl"


def test_failed_start_does_not_block_the_corrected_rerun(data, tmp_path):
    out = tmp_path / "run"
    with pytest.raises(BackendError):
        run_eval(EvalConfig(model=str(tmp_path / "no-such-model"), data=data, out=out,
                            rollout=RolloutSettings(topk=5)), progress=False)
    fixed = EvalConfig(model="scripted", data=data, out=out, rollout=RolloutSettings(topk=2))
    result = run_eval(fixed, backend=AnswerParis(), progress=False)
    assert result.evaluated == 3 and result.metrics["macro"]["accuracy"] == 1.0
    assert json.loads((out / "run.json").read_text())["rollout"]["topk"] == 2


def test_finished_questions_pin_the_rollout_settings(data, tmp_path):
    out = tmp_path / "run"
    run_eval(EvalConfig(model="scripted", data=data, out=out, rollout=RolloutSettings(topk=2)),
             backend=AnswerParis(), progress=False)
    with pytest.raises(DataError, match=r"other settings \(topk: 2 -> 4\)"):
        run_eval(EvalConfig(model="scripted", data=data, out=out, rollout=RolloutSettings(topk=4)),
                 backend=AnswerParis(), progress=False)
    again = run_eval(EvalConfig(model="scripted", data=data, out=out, rollout=RolloutSettings(topk=2)),
                     backend=AnswerParis(), progress=False)
    assert (again.evaluated, again.skipped) == (0, 3)


def test_a_second_run_on_one_folder_is_refused_naming_the_holder(data, tmp_path, lock_holder):
    out = tmp_path / "run"
    out.mkdir()
    with lock_holder(out, folder=True) as pid:
        with pytest.raises(DataError, match=rf"^{out}: another run \(pid {pid}\) is writing here; wait for it "
                                            "to finish or write to another --out$"):
            run_eval(EvalConfig(model="scripted", data=data, out=out), backend=AnswerParis(), progress=False)
    assert not (out / "trajectories.jsonl").exists()
    assert run_eval(EvalConfig(model="scripted", data=data, out=out), backend=AnswerParis(), progress=False).evaluated == 3


def test_a_run_on_the_corpus_beside_its_records_records_that_corpus_fingerprint(data, tmp_path):
    """No --corpus given: the run searches the corpus.jsonl beside the records, and its metrics name those
    passages (the report's comparability check needs them); a changed corpus gives another fingerprint."""
    from awarl.eval.stats import fingerprint

    first = run_eval(EvalConfig(model="scripted", data=data, out=tmp_path / "a"), backend=AnswerParis(), progress=False)
    recorded = json.loads((tmp_path / "a" / "metrics.json").read_text())["fingerprint"]
    assert first.evaluated == 3 and recorded == fingerprint(corpus=data.parent / "corpus.jsonl")
    assert recorded["kind"] == "corpus"
    write_jsonl(data.parent / "corpus.jsonl", [{"id": "d1", "title": "Paris", "text": "Paris is in Texas."}])
    run_eval(EvalConfig(model="scripted", data=data, out=tmp_path / "b"), backend=AnswerParis(), progress=False)
    assert json.loads((tmp_path / "b" / "metrics.json").read_text())["fingerprint"]["sha256"] != recorded["sha256"]


def test_an_index_and_the_corpus_it_was_built_from_have_one_fingerprint_and_a_changed_text_another(tmp_path):
    """The fingerprint hashes the passages themselves: a run with --index and one with --corpus on the same
    passages compare, and a text changed under the same ids (the same length) does not pass for the same."""
    from awarl.data.records import load_corpus
    from awarl.eval.stats import fingerprint
    from awarl.search.bm25 import BM25Index

    rows = [{"id": "p1", "title": "Yana Tesk", "text": "Yana Tesk was born in Harn."},
            {"id": "p2", "title": "Harn", "text": "Harn is a city in the country Ruvia."}]
    write_jsonl(tmp_path / "corpus.jsonl", rows)
    write_jsonl(tmp_path / "changed.jsonl", [{**rows[0], "text": "Yana Xesk was born in Harn."}, rows[1]])
    for name in ("corpus", "changed"):
        BM25Index.build_folder(load_corpus(tmp_path / f"{name}.jsonl"), tmp_path / f"{name}-index")
    index, corpus = fingerprint(index=tmp_path / "corpus-index"), fingerprint(corpus=tmp_path / "corpus.jsonl")
    assert index["sha256"] == corpus["sha256"] and index["passages"] == corpus["passages"] == 2
    assert fingerprint(index=tmp_path / "changed-index")["sha256"] != index["sha256"]
    sidecar = tmp_path / "corpus-index" / "passages.sha256.json"  # written with the passages: read, not recomputed
    recorded = json.loads(sidecar.read_text())
    sidecar.write_text(json.dumps({**recorded, "sha256": "0" * 64}))
    assert fingerprint(index=tmp_path / "corpus-index")["sha256"] == "0" * 64
    sidecar.write_text(json.dumps({**recorded, "sha256": "0" * 64, "bytes": recorded["bytes"] + 1}))  # another file
    assert fingerprint(index=tmp_path / "corpus-index")["sha256"] == index["sha256"]
    sidecar.unlink()  # an index written before the store recorded it
    assert fingerprint(index=tmp_path / "corpus-index")["sha256"] == index["sha256"]
    assert fingerprint(corpus=tmp_path / "changed.jsonl")["sha256"] != corpus["sha256"]
    (tmp_path / "odd.jsonl").write_text('{"id": "p1", "title": "x", "text": "a lone \\ud800 surrogate"}\n')
    assert fingerprint(corpus=tmp_path / "odd.jsonl")["passages"] == 1  # hashed, not a UnicodeEncodeError
