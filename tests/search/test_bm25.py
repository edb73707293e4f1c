"""BM25 index: build/save/load round trip, exact scores, retrieval quality, closed vs global scope."""

from __future__ import annotations

import json

import bm25s
import numpy as np
import pytest

from awarl.data.adapters import load_dataset_file
from awarl.data.records import DataError, Passage
from awarl.search.bm25 import BM25Index, BM25Settings
from awarl.search.index import load_index
from awarl.search.retriever import Retriever, SearchError, UnknownPassageError


def _recall(records, results) -> float:
    """Mean share of each question's supporting passages found among its hits."""
    found = [len(set(r.supporting) & {h.passage.id for h in hits}) / len(set(r.supporting)) for r, hits in zip(records, results)]
    return float(np.mean(found))


def test_index_is_a_retriever(hotpot_index):
    assert isinstance(hotpot_index, Retriever)


@pytest.mark.parametrize("mmap", [True, False])
def test_round_trip_gives_identical_results(hotpot_prepared, hotpot_index, hotpot_index_dir, mmap):
    records, passages = hotpot_prepared
    loaded = load_index(hotpot_index_dir, mmap=mmap)
    assert isinstance(loaded, BM25Index) and len(loaded) == len(passages)
    assert loaded.settings == hotpot_index.settings
    questions = [r.question for r in records]
    before, after = hotpot_index.search(questions, 5), loaded.search(questions, 5)
    assert [[(h.passage, h.score) for h in row] for row in before] == [[(h.passage, h.score) for h in row] for row in after]
    for p in passages[::37]:
        assert loaded.get_passage(p.id) == p


def test_mmap_load_keeps_arrays_on_disk(hotpot_index_dir):
    loaded = BM25Index.load(hotpot_index_dir, mmap=True)
    assert not loaded.postings.data.flags.owndata and isinstance(loaded.postings.data.base, np.memmap | __import__("mmap").mmap)


def test_scores_equal_bm25s_retrieve(hotpot_prepared, hotpot_index):
    """awarl's own streaming build and scorer give bm25s's scores and ranking (bm25s built apart)."""
    import Stemmer

    records, passages = hotpot_prepared
    stemmer = Stemmer.Stemmer("english")
    texts = [f"{p.title} {p.text}" if p.title else p.text for p in passages]
    model = bm25s.BM25(k1=1.5, b=0.75, method="lucene")
    model.index(bm25s.tokenize(texts, stopwords="en", stemmer=stemmer, show_progress=False), show_progress=False)
    questions = [r.question for r in records]
    tokens = bm25s.tokenize(questions, stopwords="en", stemmer=stemmer, return_ids=False, show_progress=False)
    docs, scores = model.retrieve(tokens, k=5, show_progress=False)
    ours = hotpot_index.search(questions, 5)
    for i, row in enumerate(ours):
        np.testing.assert_allclose([h.score for h in row], scores[i][: len(row)], rtol=1e-6)
        assert hotpot_index.store.rows_for([row[0].passage.id])[0] == docs[i][0] or row[0].score == pytest.approx(row[1].score)
    # same matrix, term by term (vocabularies number terms differently)
    ours_p = hotpot_index.postings
    for term, t in list(model.vocab_dict.items())[::50]:
        u = ours_p.vocab[term]
        a, b = model.scores["indptr"][t : t + 2]
        c, d = ours_p.indptr[u : u + 2]
        assert model.scores["indices"][a:b].tolist() == ours_p.indices[c:d].tolist()
        assert model.scores["data"][a:b].tolist() == ours_p.data[c:d].tolist()  # bit-identical float32


def test_tokenizer_matches_bm25s(hotpot_prepared, hotpot_index):
    import Stemmer

    _, passages = hotpot_prepared
    texts = [p.text for p in passages[:200]] + ["Ünïcode Straße 123 a b x_y ...", ""]
    want = bm25s.tokenize(texts, stopwords="en", stemmer=Stemmer.Stemmer("english"), return_ids=False, show_progress=False)
    assert [hotpot_index.tokenizer.terms(t) for t in texts] == [list(w) for w in want]


def test_gold_passages_rank_high_on_hotpotqa(hotpot_prepared, hotpot_index):
    """Measured on the shipped 40-question sample: recall@5 0.74, recall@10 0.96 (global scope)."""
    records, _ = hotpot_prepared
    questions = [r.question for r in records]
    assert _recall(records, hotpot_index.search(questions, 5)) >= 0.70
    assert _recall(records, hotpot_index.search(questions, 10)) >= 0.90
    top1_gold = [hits[0].passage.id in r.supporting for r, hits in zip(records, hotpot_index.search(questions, 1))]
    assert np.mean(top1_gold) >= 0.6


def test_closed_scope_searches_only_the_records_passages(hotpot_prepared, hotpot_index):
    records, _ = hotpot_prepared
    questions = [r.question for r in records]
    closed = hotpot_index.search(questions, 10, allowed=[r.passages for r in records])
    glob = hotpot_index.search(questions, 50)
    for r, c_hits, g_hits in zip(records, closed, glob):
        assert c_hits and {h.passage.id for h in c_hits} <= set(r.passages)
        # same scores as the global index gives those passages (idf is corpus-wide in both scopes)
        g_scores = {h.passage.id: h.score for h in g_hits}
        for h in c_hits:
            if h.passage.id in g_scores:
                assert h.score == pytest.approx(g_scores[h.passage.id], rel=1e-5)
    # With 10 passages per question, closed recall@10 is complete.
    assert _recall(records, closed) == 1.0
    # Global top-10 lists do pull in other questions' paragraphs; closed scope excludes them.
    assert any({h.passage.id for h in g[:10]} - set(r.passages) for r, g in zip(records, glob))


def test_closed_scope_matches_masked_full_scoring(hotpot_prepared, hotpot_index):
    """The binary-search scorer equals scoring the whole corpus and keeping the allowed rows."""
    records, _ = hotpot_prepared
    for r in records[:10]:
        ids = hotpot_index._query_token_ids([r.question])[0]
        rows = hotpot_index.store.rows_for(r.passages)
        np.testing.assert_allclose(hotpot_index._score_rows(ids, rows), hotpot_index._score_all(ids)[rows], rtol=1e-6)


def test_musique_full_unanswerable_questions_stay_closed(sample_files):
    """MuSiQue-Full contrast copies: in closed scope, no passage outside the record can leak in."""
    records, passages = load_dataset_file("musique", sample_files["musique_full"])
    index = BM25Index.build(passages)
    unanswerable = [r for r in records if not r.answerable]
    assert unanswerable
    results = index.search([r.question for r in unanswerable], 20, allowed=[r.passages for r in unanswerable])
    for r, hits in zip(unanswerable, results):
        assert {h.passage.id for h in hits} <= set(r.passages)


def test_hits_are_sorted_and_unmatched_passages_left_out(hotpot_index):
    [hits] = hotpot_index.search(["Jerry Goldsmith film score"], 8)
    scores = [h.score for h in hits]
    assert scores == sorted(scores, reverse=True) and all(s > 0 for s in scores)
    assert hotpot_index.search(["zzzqqq xxyyzz"], 5) == [[]]  # no known word
    assert hotpot_index.search(["the of and"], 5) == [[]]  # stop words only
    assert hotpot_index.search([], 5) == []


def test_k_larger_than_corpus_and_repeated_allowed_ids(hotpot_prepared, hotpot_index):
    records, _ = hotpot_prepared
    r = records[0]
    [hits] = hotpot_index.search([r.question], 1000, allowed=[r.passages + r.passages])
    assert len(hits) == len({h.passage.id for h in hits}) <= len(set(r.passages))
    assert len(hotpot_index.search([r.question], 10_000)[0]) <= len(hotpot_index)


def test_bad_requests_are_clear_errors(hotpot_index):
    with pytest.raises(SearchError, match="k must be a positive integer"):
        hotpot_index.search(["x"], 0)
    with pytest.raises(SearchError, match="one list per query"):
        hotpot_index.search(["a", "b"], 3, allowed=[["x"]])
    with pytest.raises(SearchError, match="list of strings"):
        hotpot_index.search("a question", 3)
    with pytest.raises(UnknownPassageError, match="'nope'"):
        hotpot_index.search(["film"], 3, allowed=[["nope"]])
    with pytest.raises(UnknownPassageError):
        hotpot_index.get_passage("nope")


def test_build_rejects_bad_corpora_and_settings():
    with pytest.raises(ValueError, match="empty corpus"):
        BM25Index.build([])
    with pytest.raises(ValueError, match="no passage has a word"):
        BM25Index.build([Passage("d1", "", "the of and")])
    with pytest.raises(ValueError, match="duplicate passage id"):
        BM25Index.build([Passage("d1", "", "paris"), Passage("d1", "", "rome")])
    with pytest.raises(ValueError, match="unknown BM25 method"):
        BM25Settings(method="bm99")
    with pytest.raises(ValueError, match="unknown stemmer"):
        BM25Index.build([Passage("d1", "", "paris")], BM25Settings(stemmer="klingon"))


def test_settings_change_scoring():
    passages = [Passage("d1", "Runner", "running runs"), Passage("d2", "Other", "a runner ran far")]
    stemmed = BM25Index.build(passages)
    plain = BM25Index.build(passages, BM25Settings(stemmer=None, index_title=False))
    assert [h.passage.id for h in stemmed.search(["run"], 2)[0]] == ["d1"]  # "running" and "runs" stem to "run"…
    assert plain.search(["run"], 2) == [[]]  # …but without stemming no passage says "run"


def test_loading_a_damaged_or_foreign_folder_fails_clearly(hotpot_index, tmp_path):
    with pytest.raises(DataError, match="not an awarl index folder"):
        load_index(tmp_path)
    saved = hotpot_index.save(tmp_path / "idx")
    meta = json.loads((saved / "awarl_index.json").read_text())
    (saved / "awarl_index.json").write_text(json.dumps({**meta, "format": 99}))
    with pytest.raises(DataError, match="index format 99"):
        load_index(saved)
    (saved / "awarl_index.json").write_text(json.dumps(meta))
    (saved / "passages.idhash.npy").unlink()
    with pytest.raises(DataError, match="missing index file"):
        load_index(saved)


def test_concurrent_searches_from_threads_agree(hotpot_prepared, hotpot_index_dir):
    """Servers and evaluation call one index from several threads (stemmers are per thread)."""
    from concurrent.futures import ThreadPoolExecutor

    records, _ = hotpot_prepared
    index = load_index(hotpot_index_dir)
    questions = [r.question for r in records]
    expected = [[h.passage.id for h in row] for row in index.search(questions, 5)]
    with ThreadPoolExecutor(max_workers=8) as pool:
        got = list(pool.map(lambda i: [h.passage.id for h in index.search([questions[i % 40]], 5)[0]], range(320)))
    assert got == [expected[i % 40] for i in range(320)]


def test_posting_lists_are_sorted_for_binary_search(hotpot_index):
    p = hotpot_index.postings
    indices, indptr = p.indices, p.indptr
    assert all((np.diff(indices[indptr[t]:indptr[t + 1]]) > 0).all() for t in range(len(indptr) - 1))
    # the stored upper bound of each term is the largest score in its postings
    assert all(p.term_max[t] == p.data[indptr[t]:indptr[t + 1]].max() for t in range(0, len(indptr) - 1, 7))
