"""The BM25 term -> passages matrix: tokenizing, a streaming build, and memory-mapped arrays.

The matrix is bm25s's layout (compressed sparse columns: ``data`` float32 BM25 scores,
``indices`` int32 passage rows, ``indptr`` one start per term), with the same scores bm25s
computes (its own idf and term-frequency functions are called, on arrays instead of one passage
at a time), plus what pruned search needs and bm25s lacks: ``term_max.npy``, the largest score
of each term, the upper bound MaxScore prunes with (`awarl.search.scoring`).

The build streams: passages are tokenized in chunks, each chunk's (passage, term, count) triples
go to a temporary file, and a second pass scatters scores straight into memory-mapped output
arrays (each term's postings stay sorted by row because chunks are visited in row order). Memory
is the vocabulary plus one chunk, never the corpus: bm25s's own ``index`` keeps every passage's
token list in Python lists (about 1 KB per passage), which is what stops it at a few million.
"""

from __future__ import annotations

import json
import re
import tempfile
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from awarl.data.records import DataError

TOKEN_PATTERN = re.compile(r"(?u)\b\w\w+\b")  # bm25s's (and scikit-learn's) default
DATA_FILE = "data.csc.index.npy"
INDICES_FILE = "indices.csc.index.npy"
INDPTR_FILE = "indptr.csc.index.npy"
VOCAB_FILE = "vocab.index.json"
PARAMS_FILE = "params.index.json"
NONOCC_FILE = "nonoccurrence_array.index.npy"
TERM_MAX_FILE = "term_max.npy"
SCORE_MIN_FILE = "score_min.npy"  # the smallest stored score: MaxScore needs none below 0
CHAMP_PTR_FILE = "champions.indptr.npy"
CHAMP_ROWS_FILE = "champions.indices.npy"
CHAMP_DATA_FILE = "champions.data.npy"
CHAMPION_MIN_DF = 256  # shorter posting lists get no champion list (reading them whole is cheap)
CHAMPION_SHARE = 8  # a champion list holds the best 1/8 of its term's postings (12.5% more disk)
NONOCCURRENCE_METHODS = ("bm25l", "bm25+")


def make_stemmer(language: str | None):
    if language is None:
        return None
    import Stemmer

    try:
        return Stemmer.Stemmer(language)
    except KeyError:
        raise ValueError(f"unknown stemmer language {language!r}; see Stemmer.algorithms()") from None


def stopword_set(stopwords: str | None) -> frozenset[str]:
    from bm25s.tokenization import _infer_stopwords

    return frozenset(_infer_stopwords(stopwords) if stopwords else ())


class Tokenizer:
    """bm25s's tokenization (lower case, ``\\b\\w\\w+\\b`` words, stop words dropped before
    stemming, Snowball stems), usable from many threads (PyStemmer objects are not thread-safe,
    so each thread gets its own)."""

    def __init__(self, stopwords: str | None, stemmer: str | None):
        self._stop = stopword_set(stopwords)
        self._language = stemmer
        make_stemmer(stemmer)  # fail now on an unknown language, not at the first query
        self._local = threading.local()

    def _stemmer(self):
        if not hasattr(self._local, "stemmer"):
            self._local.stemmer = make_stemmer(self._language)
        return self._local.stemmer

    def words(self, text: str) -> list[str]:
        """Lower-cased words of ``text`` without stop words, before stemming."""
        stop = self._stop
        return [w for w in TOKEN_PATTERN.findall(text.lower()) if w not in stop]

    def stem(self, words: Sequence[str]) -> list[str]:
        stemmer = self._stemmer()
        return list(words) if stemmer is None else stemmer.stemWords(list(words))

    def terms(self, text: str) -> list[str]:
        return self.stem(self.words(text))


@dataclass(frozen=True)
class Scoring:
    """The BM25 variant and parameters the matrix is built with (bm25s's names)."""

    k1: float
    b: float
    method: str
    delta: float = 0.5  # bm25l / bm25+ only (bm25s's default)


class Postings:
    """The term -> passages score matrix and its vocabulary; arrays may be memory-mapped.

    Besides the row-ordered postings, each long list has a *champion list*: its best postings
    (at least the top 1/8, ties included) in decreasing score order, with ``-score`` stored so a
    binary search finds "every posting scoring at least v" as a prefix. MaxScore reads those
    prefixes instead of the whole list when only high-scoring postings can still reach the top k.
    """

    def __init__(self, data: np.ndarray, indices: np.ndarray, indptr: np.ndarray, num_docs: int,
                 vocab: dict[str, int], term_max: np.ndarray, nonoccurrence: np.ndarray | None,
                 champions: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None, score_min: float | None = None):
        # Plain ndarray views of memory maps: np.memmap's Python-level slicing costs ~5 us a call.
        self.data, self.indices, self.indptr = np.asarray(data), np.asarray(indices), np.asarray(indptr)
        self.num_docs = num_docs
        self.vocab = vocab
        self.term_max = np.asarray(term_max)
        self.nonoccurrence = None if nonoccurrence is None else np.asarray(nonoccurrence)
        if champions is None:
            champions = build_champions(self.data, self.indices, self.indptr)
        self.champ_ptr, self.champ_rows, self.champ_neg = (np.asarray(a) for a in champions)
        # MaxScore's bounds hold only if no score is negative (true for every bm25s variant's
        # stored scores; checked at build, so a future variant cannot silently break exactness,
        # and stored, so opening a large index does not read every score).
        self.score_min = _score_min(self.data) if score_min is None else float(score_min)
        self.nonnegative = self.score_min >= 0

    def __len__(self) -> int:
        return len(self.indptr) - 1

    def rows_at_least(self, term: int, value: float) -> np.ndarray:
        """Rows whose score for ``term`` is >= ``value`` (all of them when value <= 0)."""
        start, end = int(self.indptr[term]), int(self.indptr[term + 1])
        if value <= 0:
            return self.indices[start:end]
        cs, ce = int(self.champ_ptr[term]), int(self.champ_ptr[term + 1])
        if ce > cs and -self.champ_neg[ce - 1] <= value:  # the champion list holds them all: a prefix
            n = int(np.searchsorted(self.champ_neg[cs:ce], -value, side="right"))
            return self.champ_rows[cs : cs + n]
        return self.indices[start:end][self.data[start:end] >= value]

    def list_length(self, term: int) -> int:
        return int(self.indptr[term + 1] - self.indptr[term])

    def count_at_least(self, term: int, value: float) -> int:
        """How many rows `rows_at_least` returns, or a cheap upper bound: exact when a champion
        prefix answers, else the list's length."""
        start, end = int(self.indptr[term]), int(self.indptr[term + 1])
        cs, ce = int(self.champ_ptr[term]), int(self.champ_ptr[term + 1])
        if value > 0 and ce > cs and -self.champ_neg[ce - 1] <= value:
            return int(np.searchsorted(self.champ_neg[cs:ce], -value, side="right"))
        return end - start

    def best_rows(self, term: int, n: int) -> np.ndarray:
        """About the ``n`` best-scoring rows of ``term`` (all rows of a short list)."""
        start, end = int(self.indptr[term]), int(self.indptr[term + 1])
        cs, ce = int(self.champ_ptr[term]), int(self.champ_ptr[term + 1])
        if ce > cs:
            return self.champ_rows[cs : min(ce, cs + n)]
        return self.indices[start:end]

    def save(self, out: Path, scoring: Scoring) -> None:
        out.mkdir(parents=True, exist_ok=True)
        np.save(out / DATA_FILE, np.asarray(self.data))
        np.save(out / INDICES_FILE, np.asarray(self.indices))
        np.save(out / INDPTR_FILE, np.asarray(self.indptr))
        np.save(out / TERM_MAX_FILE, np.asarray(self.term_max))
        np.save(out / SCORE_MIN_FILE, np.float32(self.score_min))
        np.save(out / CHAMP_PTR_FILE, self.champ_ptr)
        np.save(out / CHAMP_ROWS_FILE, self.champ_rows)
        np.save(out / CHAMP_DATA_FILE, self.champ_neg)
        if self.nonoccurrence is not None:
            np.save(out / NONOCC_FILE, np.asarray(self.nonoccurrence))
        _write_vocab_and_params(out, self.vocab, scoring, self.num_docs)

    @classmethod
    def load(cls, folder: Path, mmap: bool = True) -> "Postings":
        mode = "r" if mmap else None
        for name in (DATA_FILE, INDICES_FILE, INDPTR_FILE, VOCAB_FILE, PARAMS_FILE):
            if not (folder / name).exists():
                raise DataError(folder / name, "-", "missing index file (rebuild the index with `awarl index build`)")
        try:
            data = np.load(folder / DATA_FILE, mmap_mode=mode)
            indices = np.load(folder / INDICES_FILE, mmap_mode=mode)
            indptr = np.load(folder / INDPTR_FILE, mmap_mode=mode)
        except ValueError as exc:
            raise DataError(folder, "-", f"unreadable score arrays ({exc}); the index is damaged, rebuild it") from None
        vocab = _read_object(folder / VOCAB_FILE)
        params = _read_object(folder / PARAMS_FILE)
        num_docs = params.get("num_docs")
        if not isinstance(num_docs, int) or len(data) != len(indices) or int(indptr[-1]) != len(data) or len(indptr) != len(vocab) + 1:
            raise DataError(folder, "-", "score arrays, vocabulary and params.index.json disagree; the index is damaged, rebuild it")
        nonocc = np.load(folder / NONOCC_FILE, mmap_mode=mode) if (folder / NONOCC_FILE).exists() else None
        if (folder / TERM_MAX_FILE).exists():
            term_max = np.load(folder / TERM_MAX_FILE, mmap_mode=mode)
        else:  # an index built before awarl stored the bounds: compute them once (one pass over data)
            term_max = _term_max(np.asarray(data), np.asarray(indptr))
        champions = None
        if all((folder / name).exists() for name in (CHAMP_PTR_FILE, CHAMP_ROWS_FILE, CHAMP_DATA_FILE)):
            champions = tuple(np.load(folder / name, mmap_mode=mode) for name in (CHAMP_PTR_FILE, CHAMP_ROWS_FILE, CHAMP_DATA_FILE))
            if len(champions[0]) != len(indptr):
                raise DataError(folder / CHAMP_PTR_FILE, "-", "does not match the vocabulary; the index is damaged, rebuild it")
        score_min = float(np.load(folder / SCORE_MIN_FILE)) if (folder / SCORE_MIN_FILE).exists() else None
        return cls(data, indices, indptr, num_docs, vocab, term_max, nonocc, champions, score_min)


def _read_object(path: Path) -> dict[str, Any]:
    from awarl.data.records import read_json

    obj = read_json(path)
    if not isinstance(obj, dict):
        raise DataError(path, "-", f"expected a JSON object, got {type(obj).__name__}; the index is damaged, rebuild it")
    return obj


def _score_min(data: np.ndarray) -> float:
    step = 1 << 24
    return min((float(np.min(data[i : i + step])) for i in range(0, len(data), step)), default=0.0)


def _term_max(data: np.ndarray, indptr: np.ndarray) -> np.ndarray:
    out = np.zeros(len(indptr) - 1, dtype=np.float32)
    nonempty = np.flatnonzero(np.diff(indptr) > 0)
    if len(nonempty):
        out[nonempty] = np.maximum.reduceat(data, indptr[nonempty])
    return out


def build_champions(data: np.ndarray, indices: np.ndarray, indptr: np.ndarray, folder: Path | None = None,
                    min_df: int = CHAMPION_MIN_DF, share: int = CHAMPION_SHARE) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Champion lists of every long term: the best 1/8 of its postings (ties at the cut
    included), best first, lower row first among equal scores. With ``folder`` they are
    written there as they are made (memory stays at one list) and returned memory-mapped."""
    lengths = np.diff(indptr)
    ptr = np.zeros(len(lengths) + 1, dtype=np.int64)
    sinks = None
    if folder is not None:
        sinks = (tempfile.TemporaryFile(dir=folder), tempfile.TemporaryFile(dir=folder))
    rows_parts: list[np.ndarray] = []
    neg_parts: list[np.ndarray] = []
    total = 0
    for t in range(len(lengths)):
        if lengths[t] > min_df:
            start, end = int(indptr[t]), int(indptr[t + 1])
            vals = np.asarray(data[start:end])
            keep = max(min_df, len(vals) // share, 1)
            cut = np.partition(vals, len(vals) - keep)[len(vals) - keep]
            idx = np.flatnonzero(vals >= cut)
            idx = idx[np.argsort(-vals[idx], kind="stable")]  # idx is ascending: ties stay in row order
            r, v = np.asarray(indices[start:end])[idx].astype(np.int32), (-vals[idx]).astype(np.float32)
            if sinks is None:
                rows_parts.append(r)
                neg_parts.append(v)
            else:
                r.tofile(sinks[0])
                v.tofile(sinks[1])
            total += len(idx)
        ptr[t + 1] = total
    if sinks is None:
        rows = np.concatenate(rows_parts) if rows_parts else np.empty(0, dtype=np.int32)
        neg = np.concatenate(neg_parts) if neg_parts else np.empty(0, dtype=np.float32)
        return ptr, rows, neg
    np.save(folder / CHAMP_PTR_FILE, ptr)
    out = []
    for sink, name, dtype in ((sinks[0], CHAMP_ROWS_FILE, np.int32), (sinks[1], CHAMP_DATA_FILE, np.float32)):
        arr = np.lib.format.open_memmap(folder / name, mode="w+", dtype=dtype, shape=(total,))
        sink.seek(0)
        step = 1 << 20  # 4 MB at a time: the copy must not cost memory in proportion to the index
        for i in range(0, total, step):
            arr[i : i + step] = np.fromfile(sink, dtype=dtype, count=min(step, total - i))
        arr.flush()
        sink.close()
        del arr
        out.append(np.load(folder / name, mmap_mode="r"))
    return ptr, out[0], out[1]


def _write_vocab_and_params(out: Path, vocab: dict[str, int], scoring: Scoring, num_docs: int) -> None:
    """bm25s's own file names and fields, so ``bm25s.BM25.load`` opens an awarl index too."""
    import bm25s

    (out / VOCAB_FILE).write_text(json.dumps(vocab, ensure_ascii=False), encoding="utf-8")
    params = {"k1": scoring.k1, "b": scoring.b, "delta": scoring.delta, "method": scoring.method,
              "idf_method": scoring.method, "dtype": "float32", "int_dtype": "int32", "num_docs": num_docs,
              "version": bm25s.__version__, "backend": "numpy"}
    (out / PARAMS_FILE).write_text(json.dumps(params, indent=4), encoding="utf-8")


# --- the streaming build ----------------------------------------------------------------------


class _ChunkTokens:
    """Turns passage texts into term ids, growing the vocabulary; a word's stem is looked up once."""

    def __init__(self, tokenizer: Tokenizer):
        self.tokenizer = tokenizer
        self.vocab: dict[str, int] = {}
        self._word_term: dict[str, int] = {}  # lower-cased word -> term id (-1: stop word)

    def __call__(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """Term ids of every text, flattened, and each text's number of terms."""
        lookup, stop = self._word_term, self.tokenizer._stop
        flat: list[int] = []
        lengths = np.empty(len(texts), dtype=np.int64)
        for i, text in enumerate(texts):
            words = TOKEN_PATTERN.findall(text.lower())
            ids = list(map(lookup.get, words))
            if None in ids:
                unseen = sorted({w for w, t in zip(words, ids) if t is None})
                stems = self.tokenizer.stem([w for w in unseen if w not in stop])
                it = iter(stems)
                for w in unseen:
                    lookup[w] = -1 if w in stop else self.vocab.setdefault(next(it), len(self.vocab))
                ids = [lookup[w] for w in words]
            kept = [t for t in ids if t >= 0] if -1 in ids else ids
            flat.extend(kept)
            lengths[i] = len(kept)
        return np.asarray(flat, dtype=np.int64), lengths


def build(texts: Iterable[str], out: Path, tokenizer: Tokenizer, scoring: Scoring, chunk_size: int = 20_000,
          on_chunk: Callable[[int], None] | None = None) -> int:
    """Index ``texts`` (one per passage, in row order) into folder ``out``; returns the passage count.

    Pass 1 tokenizes a chunk at a time and spills its (row, term, count) triples to a temporary
    file; pass 2 turns them into bm25s's scores and scatters them into the memory-mapped matrix.
    """
    from bm25s.scoring import _select_idf_scorer, _select_tfc_scorer

    out.mkdir(parents=True, exist_ok=True)
    to_ids = _ChunkTokens(tokenizer)
    with tempfile.TemporaryDirectory(dir=out, prefix="spill-") as spill_dir:
        spill = Path(spill_dir)
        chunks, num_docs, total_len = 0, 0, 0
        df = np.zeros(0, dtype=np.int64)
        for texts_chunk in _chunked(texts, chunk_size):
            flat, lengths = to_ids(texts_chunk)
            rows = np.repeat(np.arange(len(texts_chunk), dtype=np.int64), lengths)
            key, tf = np.unique((rows << 32) | flat, return_counts=True)  # sorted by (row, term)
            terms = (key & 0xFFFFFFFF).astype(np.int32)
            np.savez(spill / f"{chunks}.npz", rows=(key >> 32).astype(np.int32) + np.int32(num_docs), terms=terms,
                     tf=tf.astype(np.int32), lengths=lengths.astype(np.int32))
            if len(df) < len(to_ids.vocab):
                df = np.concatenate([df, np.zeros(len(to_ids.vocab) - len(df), dtype=np.int64)])
            df += np.bincount(terms, minlength=len(df))
            num_docs += len(texts_chunk)
            total_len += int(lengths.sum())
            chunks += 1
            if on_chunk:
                on_chunk(len(texts_chunk))
        if num_docs == 0:
            raise ValueError("cannot index an empty corpus")
        if not to_ids.vocab:
            raise ValueError("no passage has a word left to index after stop-word removal")
        avg_len = total_len / num_docs  # what bm25s's np.mean of the lengths gives (an exact integer sum)
        idf_fn, tfc_fn = _select_idf_scorer(scoring.method), _select_tfc_scorer(scoring.method)
        idf64 = [idf_fn(int(d), N=num_docs) for d in df]
        idf = np.asarray(idf64, dtype=np.float32)
        nonocc = None
        if scoring.method in NONOCCURRENCE_METHODS:
            tfc0 = tfc_fn(tf_array=0, l_d=avg_len, l_avg=avg_len, k1=scoring.k1, b=scoring.b, delta=scoring.delta)
            nonocc = np.asarray([i * tfc0 for i in idf64], dtype=np.float32)
        indptr = np.zeros(len(df) + 1, dtype=np.int64)
        np.cumsum(df, out=indptr[1:])
        nnz = int(indptr[-1])
        data = np.lib.format.open_memmap(out / DATA_FILE, mode="w+", dtype=np.float32, shape=(nnz,))
        indices = np.lib.format.open_memmap(out / INDICES_FILE, mode="w+", dtype=np.int32, shape=(nnz,))
        fill = indptr[:-1].copy()
        for c in range(chunks):
            with np.load(spill / f"{c}.npz") as z:
                rows, terms, tf, lengths = z["rows"], z["terms"], z["tf"], z["lengths"]
            first_row = int(rows[0]) if len(rows) else 0
            doc_len = lengths[rows - first_row] if len(rows) else rows
            if len(rows) and int(rows.min()) < first_row:  # pragma: no cover - rows are sorted
                raise AssertionError("spilled rows out of order")
            scores = _scores(tf, doc_len, terms, idf, nonocc, avg_len, scoring, tfc_fn)
            order = np.argsort(terms, kind="stable")  # rows stay ascending within a term
            t_sorted = terms[order]
            counts = np.bincount(t_sorted, minlength=len(fill))
            group_start = np.concatenate([[0], np.cumsum(counts)])[t_sorted]
            pos = fill[t_sorted] + (np.arange(len(order)) - group_start)
            data[pos] = scores[order]
            indices[pos] = rows[order]
            fill += counts
        data.flush()
        indices.flush()
        term_max = _term_max(data, indptr)
        build_champions(data, indices, indptr, folder=out)
        np.save(out / INDPTR_FILE, indptr)
        np.save(out / TERM_MAX_FILE, term_max)
        np.save(out / SCORE_MIN_FILE, np.float32(_score_min(data)))
        if nonocc is not None:
            np.save(out / NONOCC_FILE, nonocc)
        del data, indices
    _write_vocab_and_params(out, to_ids.vocab, scoring, num_docs)
    return num_docs


def _scores(tf: np.ndarray, doc_len: np.ndarray, terms: np.ndarray, idf: np.ndarray, nonocc: np.ndarray | None,
            avg_len: float, scoring: Scoring, tfc_fn: Callable[..., Any]) -> np.ndarray:
    """bm25s's per-passage arithmetic on arrays, with its operand types (float32 counts, integer
    lengths, float64 average), so every score rounds to the same float32."""
    tfc = tfc_fn(tf_array=tf.astype(np.float32), l_d=doc_len.astype(np.int64), l_avg=np.float64(avg_len),
                 k1=scoring.k1, b=scoring.b, delta=scoring.delta)
    scores = idf[terms] * tfc
    if nonocc is not None:
        scores = scores - nonocc[terms]
    return scores.astype(np.float32)


def _chunked(items: Iterable[str], size: int) -> Iterator[list[str]]:
    chunk: list[str] = []
    for item in items:
        chunk.append(item)
        if len(chunk) >= size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk

