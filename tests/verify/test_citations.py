"""Citation gates on the shipped HotpotQA sample, the corrections list, the review queue and the LLM judge."""

from __future__ import annotations

from pathlib import Path

import pytest

from awarl.data.records import Passage
from awarl.llm.text import TextModel
from awarl.verify.citations import (
    CitationGate,
    LexicalJudge,
    LLMSupportJudge,
    ReviewQueue,
    Verdict,
    cited_sentences,
    load_corrections,
    render_corrections,
)
from awarl.verify.findings import Finding, Result, aggregate

CORRECTIONS = Path(__file__).resolve().parents[2] / "configs" / "policies" / "corrections.yaml"


@pytest.fixture(scope="module")
def hotpot():
    from awarl.data.adapters import load_dataset_file

    root = Path(__file__).resolve().parents[2] / "data" / "samples" / "hotpotqa_dev_distractor_sample.json"
    return load_dataset_file("hotpotqa", root)


def test_gold_citations_pass_and_unrelated_citations_are_caught_on_the_hotpotqa_sample(hotpot, tmp_path):
    records, passages = hotpot
    queue = ReviewQueue(tmp_path / "review.jsonl")
    gate = CitationGate.from_passages(passages, review_queue=queue)
    clean = caught = 0
    for i, r in enumerate(records):
        good = f"<answer>{r.answers[0]}</answer> " + " ".join(f"[{p}]" for p in r.supporting)
        clean += not gate.check(r.question, good)
        other = records[(i + 7) % len(records)]
        bad = f"<answer>{r.answers[0]}</answer> " + " ".join(f"[{p}]" for p in other.supporting)
        findings = gate.check(r.question, bad)
        caught += any(f.citation.kind == "unsupported" for f in findings)
        assert all(f.result is Result.INVALID for f in findings)
    assert clean >= 0.8 * len(records)
    assert caught >= 0.75 * len(records)
    queued = queue.read()
    assert queued and all(q["reason"] == "borderline" for q in queued)
    assert {"question", "sentence", "passage_ids", "time"} <= set(queued[0])


def test_fabricated_ids_are_invalid_findings_that_rank_with_invalid(hotpot):
    records, passages = hotpot
    r = records[0]
    gate = CitationGate.from_passages(passages)
    findings = gate.check(r.question, f"<answer>{r.answers[0]}</answer> [{r.supporting[0]}] [d0000000000]")
    fabricated = [f for f in findings if f.citation.kind == "fabricated"]
    assert len(fabricated) == 1 and fabricated[0].citation.passage_id == "d0000000000"
    assert fabricated[0].result is Result.INVALID
    assert aggregate([Finding(Result.VALID), *findings]) is Result.INVALID
    assert aggregate([Finding(Result.IMPOSSIBLE), *findings]) is Result.IMPOSSIBLE


def test_sentences_carry_their_own_citations():
    text = "Paris is the capital of France [p1]. It lies on the Seine. [p2] Berlin is in Germany [p3][p4]."
    got = [(s.text, s.ids) for s in cited_sentences(text)]
    assert got == [("Paris is the capital of France.", ["p1"]), ("It lies on the Seine.", ["p2"]), ("Berlin is in Germany.", ["p3", "p4"])]


def test_lexical_judge_thresholds():
    p = Passage("p1", "Paris", "Paris is the capital and largest city of France.")
    judge = LexicalJudge(yes_at=0.6, no_below=0.3)
    assert judge.judge("Paris is the capital of France", [p]) is Verdict.YES
    assert judge.judge("Paris hosts the Louvre", [p]) is Verdict.BORDERLINE  # 1 of 3 content words
    assert judge.judge("Berlin hosts museums", [p]) is Verdict.NO
    assert judge.judge("It is.", [p]) is Verdict.BORDERLINE  # nothing to judge lexically
    with pytest.raises(ValueError, match="no_below <= yes_at"):
        LexicalJudge(yes_at=0.2, no_below=0.5)


def test_corrections_are_checked_against_answers_and_rendered_for_prompts():
    corrections = load_corrections(CORRECTIONS)
    gate = CitationGate(corpus={}, judge=None, corrections=corrections)
    findings = gate.check("Is Vioxx available?", "Yes, Vioxx is still available by prescription.")
    assert [f.citation.kind for f in findings] == ["correction"]
    assert findings[0].citation.detail.startswith("rofecoxib-withdrawn: Rofecoxib (Vioxx) was withdrawn")
    assert gate.check("Is Vioxx available?", "No. Vioxx was withdrawn in 2004.") == []
    assert gate.check("q", "PARK2 is the official gene symbol for parkin.")[0].citation.detail.startswith("prkn-gene-symbol")
    block = render_corrections(corrections, "What happened to rofecoxib?")
    assert block.startswith("Known corrections") and "withdrawn" in block and "PRKN" not in block
    assert render_corrections(corrections, "What is the capital of France?") == ""
    assert render_corrections(corrections).count("\n- ") == len(corrections)


@pytest.mark.parametrize(
    "text, message",
    [
        ("corrections: [{id: a, error: '(', correction: c}]", r"corrections\[0\], field 'error': bad regex"),
        ("corrections: [{id: a, correction: c}]", r"corrections\[0\], field 'error': missing"),
        ("corrections: [{id: a, error: x, correction: c}, {id: a, error: y, correction: d}]", r"corrections\[1\], field 'id': duplicate"),
        ("items: []", "expected a mapping with a 'corrections' list"),
        ("corrections: [{id: a, error: '(\\w+\\s?)+done', correction: c}]", r"corrections\[0\], field 'error': the regex repeats a group that itself repeats"),
        ("corrections: [{id: a, error: x, topic: 5, correction: c}]", r"corrections\[0\], field 'topic': bad regex"),
        ("corrections: [unclosed", r"c.yaml, line \d+: not valid YAML"),
        ("", "expected a mapping with a 'corrections' list"),
    ],
)
def test_bad_corrections_files_name_the_entry_and_field(tmp_path, text, message):
    path = tmp_path / "c.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ValueError, match=message):
        load_corrections(path)


def test_llm_support_judge_over_a_local_server(chat_server, tmp_path):
    replies = iter([(503, []), (200, ["YES"]), (200, ["**NO** - the passage is about Berlin."]), (200, ["Borderline."]), (200, ["I cannot tell."])])
    server = chat_server(lambda body: next(replies))
    judge = LLMSupportJudge(TextModel.openai(server.base_url, "judge", timeout_s=5, retries=2, backoff_s=0.01))
    passages = [Passage("p1", "Paris", "Paris is the capital of France."), Passage("p2", "Berlin", "Berlin is the capital of Germany.")]
    queue = ReviewQueue(tmp_path / "review.jsonl")
    gate = CitationGate.from_passages(passages, judge=judge, review_queue=queue)
    assert gate.check("Capital of France?", "<answer>Paris</answer> [p1]") == []  # 503 retried, then YES
    prompt = server.requests[-1]["messages"][0]["content"]
    assert '[p1] "Paris": "Paris is the capital of France."' in prompt and 'Claim: "Paris"' in prompt  # quoted data
    assert server.requests[-1]["temperature"] == 0.0
    [f] = gate.check("Capital of France?", "<answer>Paris</answer> [p2]")
    assert f.citation.kind == "unsupported" and f.citation.passage_id == "p2"
    assert gate.check("q", "Paris [p1].") == [] and queue.read()[-1]["reason"] == "borderline"
    # A judge that could not judge is excluded (queued), never scored as unsupported.
    assert gate.check("q", "Paris [p1].") == []
    last = queue.read()[-1]
    assert last["reason"] == "judge_failed" and "no YES/NO/BORDERLINE" in last["detail"]


def test_unreadable_corrections_files_name_the_file(tmp_path):
    with pytest.raises(ValueError, match=r"missing.yaml: file not found"):
        load_corrections(tmp_path / "missing.yaml")
    with pytest.raises(ValueError, match=r"is a folder"):
        load_corrections(tmp_path)
    latin = tmp_path / "latin.yaml"
    latin.write_bytes("corrections: [{id: a, error: caf\xe9, correction: c}]".encode("latin-1"))
    with pytest.raises(ValueError, match=r"latin.yaml, byte 32: not UTF-8 text"):
        load_corrections(latin)
