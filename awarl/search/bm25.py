"""BM25 over a corpus: a streaming build, memory-mapped load, and exact top-k with MaxScore.

Tokenization and scores are bm25s's (lower case, English stop words, Snowball stemming; every
(term, passage) BM25 score precomputed into a sparse term -> passages matrix, saved in bm25s's
file layout). awarl builds that matrix itself, streaming (`awarl.search.postings`), and searches
it itself (`awarl.search.scoring`): MaxScore touches only the query terms' postings and skips
most of the long ones, so a query's cost follows the query, not the corpus, and it returns the
same ids and float32 scores as summing every column into a corpus-long array (``scorer=
"exhaustive"``, kept as the reference). A test checks the scores against ``bm25s.BM25.retrieve``.

Closed scope (each query restricted to its own passages) never touches the other passages:
posting lists are sorted by row, so the score of each allowed row is found by binary search,
O(query terms x allowed passages x log postings), instead of scoring the corpus and masking.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from awarl.data.records import DataError, Passage
from awarl.errors import ConfigError
from awarl.search import postings as _postings
from awarl.search.folder import check_passage_count, read_index_meta, staged, write_meta
from awarl.search.postings import Postings, Scoring, Tokenizer
from awarl.search.retriever import Hit, check_request
from awarl.search.scoring import SCORERS, best_of, score_all, score_rows, top_k_exhaustive, top_k_maxscore
from awarl.search.store import PassageStore, PassageWriter

_BM25S_DIR = "bm25s"


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
            raise ConfigError(f"need k1 >= 0 and 0 <= b <= 1, got k1={self.k1}, b={self.b}")
        if self.method not in ("robertson", "lucene", "atire", "bm25l", "bm25+"):
            raise ConfigError(f"unknown BM25 method {self.method!r}; choose robertson, lucene, atire, bm25l or bm25+")

    def text(self, p: Passage) -> str:
        """What is indexed of a passage."""
        return f"{p.title} {p.text}" if self.index_title and p.title else p.text

    @property
    def scoring(self) -> Scoring:
        return Scoring(k1=self.k1, b=self.b, method=self.method)


class BM25Index:
    """A BM25 index over passages; implements `awarl.search.retriever.Retriever`.

    ``scorer`` picks the top-k algorithm: ``"maxscore"`` (default) or ``"exhaustive"`` (the
    reference; same results, cost grows with the corpus)."""

    kind = "bm25"

    def __init__(self, postings: Postings, store: PassageStore, settings: BM25Settings, scorer: str = "maxscore"):
        if scorer not in SCORERS:
            raise ConfigError(f"unknown scorer {scorer!r}; choose one of {', '.join(SCORERS)}")
        self.postings = postings
        self.store = store
        self.settings = settings
        self.scorer = scorer
        self.tokenizer = Tokenizer(settings.stopwords, settings.stemmer)
        if postings.num_docs != len(store):
            raise ValueError(f"index has {postings.num_docs} rows but the passage store has {len(store)}")

    # --- building and loading -------------------------------------------------------------

    @classmethod
    def build(cls, passages: Sequence[Passage], settings: BM25Settings | None = None, show_progress: bool = False,
              scorer: str = "maxscore", source: str | Path = "the corpus") -> "BM25Index":
        """An index held in memory (for corpora that fit in a list; `build_folder` streams). An empty
        corpus or a repeated id is a `DataError` naming ``source`` (the corpus file)."""
        settings = settings or BM25Settings()
        if not passages:
            raise DataError(source, "-", "no passages: cannot index an empty corpus")
        store = PassageStore.from_passages(passages, source)  # duplicate ids fail here, before any work
        with tempfile.TemporaryDirectory(prefix="awarl-bm25-") as tmp:
            _postings.build((settings.text(p) for p in passages), Path(tmp), Tokenizer(settings.stopwords, settings.stemmer),
                            settings.scoring, source=source)
            postings = Postings.load(Path(tmp), mmap=False)
        return cls(postings, store, settings, scorer)

    @classmethod
    def build_folder(cls, passages: Iterable[Passage], out_dir: str | Path, settings: BM25Settings | None = None,
                     chunk_size: int = 20_000, on_chunk: Callable[[int], None] | None = None,
                     source: str | Path = "the corpus") -> int:
        """Stream ``passages`` into a new index folder at ``out_dir`` (replacing an index there
        atomically); memory stays at one chunk plus the vocabulary. Returns the passage count. An
        empty corpus or a repeated id is a `DataError` naming ``source`` (the corpus file)."""
        settings = settings or BM25Settings()
        with staged(out_dir) as out:
            with PassageWriter(out, source) as writer:
                def texts() -> Iterable[str]:
                    for p in passages:
                        writer.add(p)
                        yield settings.text(p)

                n = _postings.build(texts(), out / _BM25S_DIR, Tokenizer(settings.stopwords, settings.stemmer),
                                    settings.scoring, chunk_size=chunk_size, on_chunk=on_chunk, source=source)
            write_meta(out, cls.kind, n, asdict(settings))
        return n

    def save(self, out_dir: str | Path) -> Path:
        """Write the index folder (score arrays, passages, settings); an index already there is
        replaced atomically, so a server reading it keeps working (`awarl.search.folder`)."""
        with staged(out_dir) as out:
            self.postings.save(out / _BM25S_DIR, self.settings.scoring)
            self.store.save(out)
            write_meta(out, self.kind, len(self), asdict(self.settings))
        return Path(out_dir)

    @classmethod
    def load(cls, index_dir: str | Path, mmap: bool = True, scorer: str = "maxscore") -> "BM25Index":
        """Open a saved index; with ``mmap`` the score arrays and passage texts stay on disk
        (shared by every process that opens them)."""
        index_dir = Path(index_dir)
        meta, settings = read_index_meta(index_dir, cls.kind, BM25Settings)
        postings = Postings.load(index_dir / _BM25S_DIR, mmap=mmap)
        store = PassageStore.load(index_dir, mmap_text=mmap)
        check_passage_count(index_dir, meta, len(store))
        return cls(postings, store, settings, scorer)

    # --- the Retriever interface ----------------------------------------------------------

    def __len__(self) -> int:
        return self.postings.num_docs

    def get_passage(self, pid: str) -> Passage:
        return self.store.get(pid)

    def search(self, queries: list[str], k: int, allowed: list[list[str]] | None = None) -> list[list[Hit]]:
        check_request(queries, k, allowed)
        token_ids = self._query_token_ids(queries)
        top_k = top_k_maxscore if self.scorer == "maxscore" else top_k_exhaustive
        out: list[list[Hit]] = []
        for i, ids in enumerate(token_ids):
            if allowed is None:
                rows, scores = top_k(self.postings, ids, k)
            else:
                rows = self.store.rows_for(allowed[i])
                rows, scores = best_of(rows, score_rows(self.postings, ids, rows), k)
            out.append([Hit(self.store.row(int(r)), float(s)) for r, s in zip(rows, scores)])
        return out

    # --- scoring --------------------------------------------------------------------------

    def _query_token_ids(self, queries: Sequence[str]) -> list[np.ndarray]:
        vocab = self.postings.vocab
        # A repeated query word counts each time, as in bm25s and rank_bm25.
        return [np.asarray([vocab[t] for t in self.tokenizer.terms(q) if t in vocab], dtype=np.int64) for q in queries]

    def _score_all(self, token_ids: np.ndarray) -> np.ndarray:
        return score_all(self.postings, token_ids)

    def _score_rows(self, token_ids: np.ndarray, rows: np.ndarray) -> np.ndarray:
        return score_rows(self.postings, token_ids, rows)
