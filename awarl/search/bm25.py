"""BM25 over a corpus with bm25s: build, save, memory-mapped load, batched top-k search.

bm25s tokenizes (lower case, English stop words, Snowball stemming) and precomputes every
(term, passage) BM25 score into a sparse term -> passages matrix. Search sums the columns of
the query terms. awarl reads that matrix directly instead of calling ``BM25.retrieve``: a
posting list never repeats a passage, so a plain vectorised ``scores[rows] += values`` is exact
and several times faster than bm25s's ``np.add.at`` loop (same scores; a test checks it).

Closed scope (each query restricted to its own passages) never touches the other passages:
posting lists are sorted by row, so the score of each allowed row is found by binary search,
O(query terms x allowed passages x log postings), instead of scoring the corpus and masking.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from awarl.data.records import DataError, Passage
from awarl.search.index import META_FILE, read_meta, write_meta
from awarl.search.retriever import Hit, check_request
from awarl.search.store import PassageStore

_BM25S_DIR = "bm25s"


def _bm25s():
    import bm25s

    logging.getLogger("bm25s").setLevel(logging.WARNING)  # bm25s logs every build at DEBUG
    return bm25s


@dataclass(frozen=True)
class BM25Settings:
    """How passages and queries are tokenized and scored; saved with the index."""

    k1: float = 1.5  # term-frequency saturation
    b: float = 0.75  # length normalisation
    method: str = "lucene"  # bm25s scoring variant: robertson, lucene, atire, bm25l, bm25+
    stemmer: str | None = "english"  # Snowball language for PyStemmer; None keeps words as they are
    stopwords: str | None = "en"  # bm25s stop-word list; None keeps every word
    index_title: bool = True  # index "title text" (titles carry the entity name in wiki passages)

    def __post_init__(self) -> None:
        if self.k1 < 0 or not 0 <= self.b <= 1:
            raise ValueError(f"need k1 >= 0 and 0 <= b <= 1, got k1={self.k1}, b={self.b}")
        if self.method not in ("robertson", "lucene", "atire", "bm25l", "bm25+"):
            raise ValueError(f"unknown BM25 method {self.method!r}; choose robertson, lucene, atire, bm25l or bm25+")


class BM25Index:
    """A BM25 index over passages; implements `awarl.search.retriever.Retriever`."""

    kind = "bm25"

    def __init__(self, model: Any, store: PassageStore, settings: BM25Settings):
        self._model = model
        self.store = store
        self.settings = settings
        self._local = threading.local()  # PyStemmer objects are not thread-safe: one per thread
        _make_stemmer(settings.stemmer)  # fail now on an unknown language, not at the first query
        scores = model.scores
        self._data, self._indices, self._indptr = scores["data"], scores["indices"], scores["indptr"]
        self._num_docs = int(scores["num_docs"])
        self._vocab: dict[str, int] = model.vocab_dict
        self._nonoccurrence = model.nonoccurrence_array
        if self._num_docs != len(store):
            raise ValueError(f"index has {self._num_docs} rows but the passage store has {len(store)}")

    # --- building and loading -------------------------------------------------------------

    @classmethod
    def build(cls, passages: Sequence[Passage], settings: BM25Settings | None = None, show_progress: bool = False) -> "BM25Index":
        bm25s = _bm25s()
        settings = settings or BM25Settings()
        if not passages:
            raise ValueError("cannot index an empty corpus")
        store = PassageStore.from_passages(passages)
        texts = [f"{p.title} {p.text}" if settings.index_title and p.title else p.text for p in passages]
        tokens = bm25s.tokenize(
            texts, stopwords=settings.stopwords, stemmer=_make_stemmer(settings.stemmer), show_progress=show_progress
        )
        if not tokens.vocab:
            raise ValueError("no passage has a word left to index after stop-word removal")
        model = bm25s.BM25(k1=settings.k1, b=settings.b, method=settings.method)
        model.index(tokens, show_progress=show_progress)
        _sort_postings(model.scores)
        return cls(model, store, settings)

    def save(self, out_dir: str | Path) -> Path:
        """Write the index folder (bm25s arrays, passages, settings)."""
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        self._model.save(out / _BM25S_DIR, show_progress=False)
        self.store.save(out)
        write_meta(out, self.kind, len(self), asdict(self.settings))
        return out

    @classmethod
    def load(cls, index_dir: str | Path, mmap: bool = True) -> "BM25Index":
        """Open a saved index; with ``mmap`` the score arrays and passage texts stay on disk."""
        bm25s = _bm25s()
        index_dir = Path(index_dir)
        meta = read_meta(index_dir, expect_kind=cls.kind)
        try:
            settings = BM25Settings(**meta["settings"])
        except (TypeError, ValueError) as exc:
            raise DataError(index_dir / META_FILE, "-", f"bad settings: {exc}", "settings") from None
        model = bm25s.BM25.load(index_dir / _BM25S_DIR, mmap=mmap, show_progress=False)
        return cls(model, PassageStore.load(index_dir, mmap_text=mmap), settings)

    # --- the Retriever interface ----------------------------------------------------------

    def __len__(self) -> int:
        return self._num_docs

    def get_passage(self, pid: str) -> Passage:
        return self.store.get(pid)

    def search(self, queries: list[str], k: int, allowed: list[list[str]] | None = None) -> list[list[Hit]]:
        check_request(queries, k, allowed)
        token_ids = self._query_token_ids(queries)
        out: list[list[Hit]] = []
        for i, ids in enumerate(token_ids):
            if allowed is None:
                rows, scores = self._top_k(self._score_all(ids), k)
            else:
                rows = self.store.rows_for(allowed[i])
                rows, scores = self._top_k_of(rows, self._score_rows(ids, rows), k)
            out.append([Hit(self.store.row(int(r)), float(s)) for r, s in zip(rows, scores)])
        return out

    # --- scoring --------------------------------------------------------------------------

    @property
    def _stemmer(self):
        if not hasattr(self._local, "stemmer"):
            self._local.stemmer = _make_stemmer(self.settings.stemmer)
        return self._local.stemmer

    def _query_token_ids(self, queries: Sequence[str]) -> list[np.ndarray]:
        tokens = _bm25s().tokenize(
            list(queries), stopwords=self.settings.stopwords, stemmer=self._stemmer, return_ids=False, show_progress=False
        )
        vocab = self._vocab
        # A repeated query word counts each time, as in bm25s and rank_bm25.
        return [np.asarray([vocab[t] for t in q if t in vocab and t != ""], dtype=np.int64) for q in tokens]

    def _score_all(self, token_ids: np.ndarray) -> np.ndarray:
        scores = np.zeros(self._num_docs, dtype=np.float32)
        indptr, indices, data = self._indptr, self._indices, self._data
        for t in token_ids:
            start, end = indptr[t], indptr[t + 1]
            scores[indices[start:end]] += data[start:end]  # rows are unique within a posting list
        if self._nonoccurrence is not None and len(token_ids):
            scores += self._nonoccurrence[token_ids].sum()
        return scores

    def _score_rows(self, token_ids: np.ndarray, rows: np.ndarray) -> np.ndarray:
        scores = np.zeros(len(rows), dtype=np.float32)
        indptr, indices, data = self._indptr, self._indices, self._data
        for t in token_ids:
            start, end = int(indptr[t]), int(indptr[t + 1])
            posting = indices[start:end]
            pos = np.searchsorted(posting, rows)
            found = pos < len(posting)
            found[found] = posting[pos[found]] == rows[found]
            scores[found] += data[start + pos[found]]
        if self._nonoccurrence is not None and len(token_ids):
            scores += self._nonoccurrence[token_ids].sum()
        return scores

    @staticmethod
    def _top_k(scores: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Rows of the ``k`` best positive scores, best first (ties: lower row first)."""
        k = min(k, len(scores))
        cand = np.argpartition(-scores, k - 1)[:k] if k < len(scores) else np.arange(len(scores))
        cand = cand[scores[cand] > 0]
        order = np.lexsort((cand, -scores[cand]))
        return cand[order], scores[cand[order]]

    @staticmethod
    def _top_k_of(rows: np.ndarray, scores: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        keep = scores > 0
        rows, scores = rows[keep], scores[keep]
        order = np.lexsort((rows, -scores))[:k]
        return rows[order], scores[order]


def _sort_postings(scores: dict[str, Any]) -> None:
    """Make every posting list ascending by row (closed scope binary-searches them). bm25s
    builds them sorted; this checks it, and reorders in place if a future version does not."""
    indices, indptr = scores["indices"], scores["indptr"]
    if len(indices) < 2:
        return
    rising = np.diff(indices) > 0
    rising[indptr[1:-1][(indptr[1:-1] > 0) & (indptr[1:-1] < len(indices))] - 1] = True  # column boundaries
    if rising.all():
        return
    column = np.repeat(np.arange(len(indptr) - 1), np.diff(indptr))
    order = np.lexsort((indices, column))
    scores["indices"], scores["data"] = indices[order], scores["data"][order]


def _make_stemmer(language: str | None):
    if language is None:
        return None
    import Stemmer

    try:
        return Stemmer.Stemmer(language)
    except KeyError:
        raise ValueError(f"unknown stemmer language {language!r}; see Stemmer.algorithms()") from None
