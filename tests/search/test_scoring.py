"""MaxScore top-k is exact: the same rows and bit-identical float32 scores as the exhaustive scorer
(which is itself checked against a full sort), on random corpora and queries, every BM25 variant,
closed scope, empty and stop-word-only queries, and k beyond the matches; with and without the
block bounds, for several block geometries."""

from __future__ import annotations

from contextlib import contextmanager
from functools import partial

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from awarl.data.records import Passage
from awarl.search.bm25 import BM25Index, BM25Settings
from awarl.search.postings import BLOCK_FILE, build_block_bounds, build_champions
from awarl.search import scoring
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


def _with_blocks(index: BM25Index, rows: int, span: int, min_share: int) -> BM25Index:
    """Block bounds of another geometry (tiny blocks, or only some terms bounded, the rest
    bounded on the fly), so small corpora reach every branch of the block path."""
    p = index.postings
    p.blocks = build_block_bounds(p.data, p.indices, p.indptr, p.num_docs, p.term_max, rows=rows, span=span, min_share=min_share)
    return index


BLOCK_GEOMETRY = st.tuples(st.sampled_from([1, 2, 4, 8]), st.sampled_from([8, 16, 256]), st.sampled_from([1, 3, 64]))


@contextmanager
def _skip_min(value: int):
    """Lists from this length on are searched through block skips (big corpora only by
    default); with 0, the block path also scores one block per round at first, so small
    corpora take many rounds. Hypothesis runs many examples per test: a fixture cannot set these."""
    old = scoring.SKIP_MIN, scoring.FIRST_BLOCKS
    scoring.SKIP_MIN = value
    scoring.FIRST_BLOCKS = 1 if value == 0 else old[1]
    try:
        yield
    finally:
        scoring.SKIP_MIN, scoring.FIRST_BLOCKS = old


def _reference(index: BM25Index, ids: np.ndarray, k: int):
    """A full sort of every passage's score: the documented order, no partitioning tricks."""
    scores = score_all(index.postings, ids)
    return best_of(np.arange(len(scores)), scores, k)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(docs=corpora, qs=st.lists(queries, min_size=1, max_size=6), k=st.integers(1, 50), method=st.sampled_from(METHODS),
       geometry=BLOCK_GEOMETRY)
@example(docs=["paris", "rome", "paris rome"], qs=["paris rome"], k=1, method="bm25l", geometry=(8, 256, 64))  # the threshold once kept bm25l's constant
def test_maxscore_equals_exhaustive_on_random_corpora(docs, qs, k, method, geometry):
    index = _with_blocks(_index(docs, method, champions=True), *geometry)
    pruned_only = partial(top_k_maxscore, dense_share=None)  # no fallback to the exhaustive array
    all_long = partial(top_k_maxscore, dense_share=None, short_list=0, block_min=0)  # champion prefixes, needs, MaxScore split, blocks
    at_fallback = partial(top_k_maxscore, dense_share=10**9, short_list=0)  # the block path where the array pass was
    no_blocks = partial(top_k_maxscore, dense_share=None, short_list=0, blocks=False)
    for ids in index._query_token_ids(qs):
        want_rows, want_scores = _reference(index, ids, k)
        for top_k in (top_k_exhaustive, top_k_maxscore, pruned_only, all_long, at_fallback, no_blocks):
            for skip_min in (scoring.SKIP_MIN, 0):  # 0: every bounded list is searched through its block skips
                with _skip_min(skip_min):
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
    for skip_min in (scoring.SKIP_MIN, 0):
        with _skip_min(skip_min):
            [hits] = index.search([q], k, allowed=[allowed])
            assert score_rows(index.postings, ids, rows).tobytes() == score_all(index.postings, ids)[rows].tobytes()
        assert [h.passage.id for h in hits] == [f"d{r}" for r in want[0]]
        assert [h.score for h in hits] == [float(s) for s in want[1]]


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
    qs += [" ".join(vocab[rng.choice(40, size=rng.integers(3, 9))]) for _ in range(60)]  # frequent words only
    assert (np.diff(index.postings.champ_ptr) > 0).any()  # long lists have champion lists
    assert len(index.postings.blocks.bound) > 10  # frequent terms have block bounds (built with the index)
    for ids in index._query_token_ids(qs):
        for k in (1, 10, 100):
            want = _reference(index, ids, k)
            for short_list in (None, 0):
                for dense_share in (None, 8, 64):  # 8 and 64 reach the dense passes (essential terms only, then all)
                    for blocks in (True, False):  # with blocks, the block path replaces the dense passes
                        with _skip_min(0 if blocks else scoring.SKIP_MIN):
                            got = top_k_maxscore(index.postings, ids, k, dense_share=dense_share, short_list=short_list,
                                                 blocks=blocks, block_min=0)
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


_ONE_ULP_LOW = ["paris paris paris paris paris paris paris paris paris paris paris rome", "", "", "", "", "paris", "paris",
                "paris", "paris paris", "paris paris", "paris rome", "paris paris paris", "paris paris paris",
                "paris paris paris paris", "paris paris paris paris paris", "paris paris paris paris paris paris rome",
                "paris paris paris paris paris paris rome", "paris paris paris paris paris paris paris rome",
                "paris paris paris paris paris paris paris paris rome",
                "paris paris paris paris paris paris paris paris paris rome",
                "paris paris paris paris paris paris paris paris paris paris paris rome"]
"""A corpus whose stored bound for 'paris', scaled in float32 without a margin, fell one ulp below its score."""


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(docs=corpora, geometry=BLOCK_GEOMETRY)
@example(docs=_ONE_ULP_LOW, geometry=(1, 8, 3))
def test_block_bounds_bound_every_score(docs, geometry):
    """The stored byte of every (term, block), scaled as the scorer scales it, is at least every
    score of that term in that block, and the skips point at exactly the block's postings."""
    p = _with_blocks(_index(docs), *geometry).postings
    b = p.blocks
    for t in range(len(p)):
        start, end = int(p.indptr[t]), int(p.indptr[t + 1])
        rows, scores = p.indices[start:end], p.data[start:end]
        bound = p.block_bound(t)
        assert (bound[rows // b.rows] >= scores).all()
        blocks = np.arange(b.n_blocks, dtype=np.int64)
        lo, hi = p.block_ranges(t, blocks)
        assert (hi - lo).tolist() == np.bincount(rows // b.rows, minlength=b.n_blocks).tolist()
        assert all((rows[lo[j] : hi[j]] // b.rows == j).all() for j in blocks)


def _frequent_corpus(n: int = 3000) -> list[str]:
    rng = np.random.default_rng(3)
    vocab = [f"w{i:03d}x" for i in range(60)]
    return [" ".join(rng.choice(vocab, size=rng.integers(5, 30))) for _ in range(n)]


def test_incomplete_block_bounds_are_refused_naming_the_rebuild(tmp_path):
    from awarl.data.records import DataError
    from awarl.search.index import load_index

    folder = _index(_frequent_corpus(500)).save(tmp_path / "idx")
    (folder / "bm25s" / BLOCK_FILE).unlink()
    with pytest.raises(DataError, match="awarl index build"):
        load_index(folder)
