"""MaxScore top-k is exact: the same rows and bit-identical float32 scores as the exhaustive scorer
(which is itself checked against a full sort), on random corpora and queries, every BM25 variant,
closed scope, empty and stop-word-only queries, and k beyond the matches."""

from __future__ import annotations

from functools import partial

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from awarl.data.records import Passage
from awarl.search.bm25 import BM25Index, BM25Settings
from awarl.search.postings import build_champions
from awarl.search.scoring import best_of, score_all, score_rows, top_k_exhaustive, top_k_maxscore

WORDS = ["paris", "rome", "river", "film", "score", "composer", "alien", "born", "city", "capital", "war",
         "novel", "writer", "france", "italy", "music", "band", "album", "the", "of", "and", "zzunknown"]
METHODS = ["lucene", "robertson", "atire", "bm25l", "bm25+"]

texts = st.lists(st.sampled_from(WORDS[:-1]), min_size=0, max_size=12).map(" ".join)
corpora = st.lists(texts, min_size=1, max_size=40).filter(lambda ts: any(set(t.split()) - {"the", "of", "and"} for t in ts))
queries = st.lists(st.sampled_from(WORDS), min_size=0, max_size=8).map(" ".join)


def _index(docs: list[str], method: str = "lucene", champions: bool = False) -> BM25Index:
    """With ``champions``, every list longer than one posting gets a champion list of half its
    postings, so tiny corpora exercise the champion prefixes the big ones use."""
    index = BM25Index.build([Passage(f"d{i}", "", t) for i, t in enumerate(docs)], BM25Settings(method=method))
    if champions:
        p = index.postings
        p.champ_ptr, p.champ_rows, p.champ_neg = build_champions(p.data, p.indices, p.indptr, min_df=1, share=2)
    return index


def _reference(index: BM25Index, ids: np.ndarray, k: int):
    """A full sort of every passage's score: the documented order, no partitioning tricks."""
    scores = score_all(index.postings, ids)
    return best_of(np.arange(len(scores)), scores, k)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(docs=corpora, qs=st.lists(queries, min_size=1, max_size=6), k=st.integers(1, 50), method=st.sampled_from(METHODS))
@example(docs=["paris", "rome", "paris rome"], qs=["paris rome"], k=1, method="bm25l")  # the threshold once kept bm25l's constant
def test_maxscore_equals_exhaustive_on_random_corpora(docs, qs, k, method):
    index = _index(docs, method, champions=True)
    pruned_only = partial(top_k_maxscore, dense_share=None)  # no fallback to the exhaustive array
    all_long = partial(top_k_maxscore, dense_share=None, short_list=0)  # champion prefixes, needs, MaxScore split
    for ids in index._query_token_ids(qs):
        want_rows, want_scores = _reference(index, ids, k)
        for top_k in (top_k_exhaustive, top_k_maxscore, pruned_only, all_long):
            rows, scores = top_k(index.postings, ids, k)
            assert rows.tolist() == want_rows.tolist(), top_k
            assert scores.tobytes() == want_scores.tobytes(), top_k  # bit-identical


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(docs=corpora, q=queries, k=st.integers(1, 50), data=st.data())
def test_closed_scope_equals_masked_exhaustive(docs, q, k, data):
    index = _index(docs)
    allowed = data.draw(st.lists(st.sampled_from([f"d{i}" for i in range(len(docs))]), min_size=1, max_size=15))
    [ids] = index._query_token_ids([q])
    rows = index.store.rows_for(allowed)
    want = best_of(rows, score_all(index.postings, ids)[rows], k)
    [hits] = index.search([q], k, allowed=[allowed])
    assert [h.passage.id for h in hits] == [f"d{r}" for r in want[0]]
    assert [h.score for h in hits] == [float(s) for s in want[1]]
    assert score_rows(index.postings, ids, rows).tobytes() == score_all(index.postings, ids)[rows].tobytes()


def test_empty_stopword_and_unknown_queries_find_nothing():
    index = _index(["paris is the capital of france", "rome is the capital of italy"])
    for scorer in ("maxscore", "exhaustive"):
        index.scorer = scorer
        assert index.search(["", "the of and", "zzunknown qqq", "   "], 5) == [[], [], [], []]


def test_k_beyond_the_matches_returns_only_matches():
    index = _index(["paris france", "rome italy", "river film", "paris river"])
    [hits] = index.search(["paris"], 50)
    assert [h.passage.id for h in hits] == ["d0", "d3"] or [h.passage.id for h in hits] == ["d3", "d0"]
    assert all(h.score > 0 for h in hits)


def test_ties_go_to_the_lower_row():
    index = _index(["paris"] * 30 + ["rome paris"] + ["paris"] * 30)
    for scorer in ("maxscore", "exhaustive"):
        index.scorer = scorer
        [hits] = index.search(["paris"], 5)
        assert [h.passage.id for h in hits] == ["d0", "d1", "d2", "d3", "d4"]


def test_maxscore_equals_exhaustive_on_a_zipfian_corpus():
    """Long Zipfian posting lists, where MaxScore stops adding candidates and prunes."""
    rng = np.random.default_rng(7)
    vocab = np.array([f"t{i:05d}x" for i in range(3000)])
    weights = 1.0 / np.arange(1, len(vocab) + 1)
    weights /= weights.sum()
    docs = [" ".join(vocab[rng.choice(len(vocab), size=rng.integers(5, 60), p=weights)]) for _ in range(6000)]
    index = _index(docs)
    qs = [" ".join(vocab[rng.choice(len(vocab), size=rng.integers(1, 9), p=weights)]) for _ in range(150)]
    assert (np.diff(index.postings.champ_ptr) > 0).any()  # long lists have champion lists
    for ids in index._query_token_ids(qs):
        for k in (1, 10, 100):
            want = _reference(index, ids, k)
            for short_list in (None, 0):
                for dense_share in (None, 8, 64):  # 8 and 64 reach the dense passes (essential terms only, then all)
                    got = top_k_maxscore(index.postings, ids, k, dense_share=dense_share, short_list=short_list)
                    assert got[0].tolist() == want[0].tolist() and got[1].tobytes() == want[1].tobytes()


@pytest.mark.parametrize("method", METHODS)
def test_every_variant_scores_like_bm25s(method):
    import bm25s
    import Stemmer

    docs = ["paris is the capital of france", "rome river film", "the film score of alien", "paris paris river",
            "composer born in rome", "war novel writer"]
    index = _index(docs, method)
    stemmer = Stemmer.Stemmer("english")
    model = bm25s.BM25(method=method)
    model.index(bm25s.tokenize(docs, stopwords="en", stemmer=stemmer, show_progress=False), show_progress=False)
    q = ["paris river film", "alien composer"]
    toks = bm25s.tokenize(q, stopwords="en", stemmer=stemmer, return_ids=False, show_progress=False)
    _, want = model.retrieve(toks, k=3, show_progress=False)
    got = index.search(q, 3)
    for row, w in zip(got, want):
        np.testing.assert_allclose([h.score for h in row], w[: len(row)], rtol=1e-6)


def test_a_negative_score_turns_pruning_off_and_stays_exact():
    """MaxScore's bounds assume no negative score; a matrix with one falls back to the exhaustive scorer."""
    index = _index(["paris river film", "rome river", "film score", "paris paris", "river"] * 4)
    p = index.postings
    p.data[0] = -0.5
    p.score_min, p.nonnegative = float(p.data.min()), False
    for q in ["paris river", "film score river", "rome"]:
        [ids] = index._query_token_ids([q])
        want = _reference(index, ids, 3)
        got = top_k_maxscore(p, ids, 3, dense_share=None, short_list=0)
        assert got[0].tolist() == want[0].tolist() and got[1].tobytes() == want[1].tobytes()


def test_saved_index_keeps_its_score_floor(tmp_path):
    from awarl.search.index import load_index

    index = _index(["paris river film", "rome river"])
    loaded = load_index(index.save(tmp_path / "idx"))
    assert (tmp_path / "idx" / "bm25s" / "score_min.npy").exists()
    assert loaded.postings.nonnegative and loaded.postings.score_min == pytest.approx(index.postings.score_min)
