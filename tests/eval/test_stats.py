"""Bootstrap intervals, paired comparisons and passage fingerprints (awarl.eval.stats) and their
place in `awarl eval report`."""

from __future__ import annotations

import json

import pytest

from awarl.data.records import DataError
from awarl.eval.stats import Question, bootstrap_ci, fingerprint, paired_comparison
from awarl.protocol import Score


def _q(i, outcome, dataset="toy", answerable=True):
    return Question(f"q{i}", dataset, Score(outcome, float(outcome == "correct"), float(outcome == "correct")), answerable)


def _run(outcomes, dataset="toy"):
    return [_q(i, o, dataset) for i, o in enumerate(outcomes)]


def test_a_rate_at_zero_or_one_gets_the_exact_bound_not_a_zero_width_interval():
    # 0 correct of 40 and of 50: every resample is 0 again, so the percentile interval would be [0, 0]
    qs = [*_run(["wrong"] * 40, "a"), *[_q(100 + i, "unparsable", "b") for i in range(50)]]
    ci = bootstrap_ci(qs, samples=200)
    upper = ((1 - 0.025 ** (1 / 40)) + (1 - 0.025 ** (1 / 50))) / 2  # Clopper-Pearson, averaged like the rate
    assert ci["accuracy"] == {"value": 0.0, "low": 0.0, "high": pytest.approx(upper), "exact": True}
    assert 0.07 < upper < 0.09
    assert ci["precision"]["exact"] and ci["ra_f1"]["high"] == pytest.approx(upper) and ci["ra_f1"]["low"] == 0.0
    assert ci["refusal_rate"]["high"] == pytest.approx(upper)  # nobody abstained: the same bound
    # every one right: the lower end moves off 1; a rate strictly inside keeps its bootstrap interval
    right = bootstrap_ci(_run(["correct"] * 30), samples=200)["accuracy"]
    assert right["high"] == 1.0 and right["low"] == pytest.approx(0.025 ** (1 / 30)) and right["exact"]
    assert "exact" not in bootstrap_ci(_run(["correct", "wrong"] * 20), samples=200)["accuracy"]


def test_the_interval_holds_the_value_and_narrows_with_more_questions():
    small = bootstrap_ci(_run(["correct", "wrong"] * 20), samples=300)["accuracy"]
    large = bootstrap_ci(_run(["correct", "wrong"] * 500), samples=300)["accuracy"]
    assert small["value"] == large["value"] == 0.5
    assert small["low"] < 0.5 < small["high"] and large["low"] < 0.5 < large["high"]
    assert (large["high"] - large["low"]) < (small["high"] - small["low"]) / 3


def test_intervals_are_reproducible_for_a_seed():
    qs = _run(["correct", "wrong", "abstain"] * 30)
    assert bootstrap_ci(qs, samples=200, seed=3) == bootstrap_ci(qs, samples=200, seed=3)


def test_a_paired_difference_smaller_than_either_interval_is_still_found():
    # b fixes 6 of a's 200 wrong answers and changes nothing else: +0.015 accuracy, far inside
    # either run's own interval, but every resample sees it, so it is beyond 2 standard errors.
    a = _run(["correct"] * 200 + ["wrong"] * 200)
    b = _run(["correct"] * 206 + ["wrong"] * 194)
    ci_a = bootstrap_ci(a, samples=300)["accuracy"]
    assert ci_a["high"] - ci_a["low"] > 0.05
    diff = paired_comparison(a, b, samples=300)["accuracy"]
    assert diff["diff"] == pytest.approx(0.015) and diff["beyond_2se"] and diff["low"] > 0


def test_a_paired_comparison_of_equal_runs_finds_nothing():
    a = _run(["correct", "wrong", "abstain"] * 40)
    diff = paired_comparison(a, list(a), samples=200)["accuracy"]
    assert diff["diff"] == 0.0 and not diff["beyond_2se"]


def test_runs_over_other_questions_are_refused():
    with pytest.raises(DataError, match="different questions"):
        paired_comparison(_run(["correct"] * 5), [_q(i + 100, "correct") for i in range(5)])


def test_the_fingerprint_names_the_corpus(tmp_path):
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text(json.dumps({"id": "d1", "title": "A", "text": "a"}) + "\n")
    first = fingerprint(corpus=corpus)
    assert first == fingerprint(corpus=corpus) and first["kind"] == "corpus"
    corpus.write_text(json.dumps({"id": "d1", "title": "A", "text": "b"}) + "\n")
    assert fingerprint(corpus=corpus)["sha256"] != first["sha256"]
    assert fingerprint() is None  # a remote retriever: nothing local to name


def test_the_fingerprint_of_an_index_folder_follows_its_passages(tmp_path):
    from awarl.data.records import Passage
    from awarl.search.bm25 import BM25Index

    BM25Index.build_folder([Passage("d1", "A", "alpha"), Passage("d2", "B", "beta")], tmp_path / "i1")
    BM25Index.build_folder([Passage("d1", "A", "alpha"), Passage("d3", "C", "gamma")], tmp_path / "i2")
    f1, f2 = fingerprint(index=tmp_path / "i1"), fingerprint(index=tmp_path / "i2")
    assert f1["kind"] == "index" and f1["passages"] == 2 and f1["sha256"] != f2["sha256"]
    # The same passage texts under other ids of the same length: every file keeps its size, the id table differs
    BM25Index.build_folder([Passage("d1", "A", "alpha"), Passage("d9", "B", "beta")], tmp_path / "i3")
    assert fingerprint(index=tmp_path / "i3")["sha256"] != f1["sha256"]
