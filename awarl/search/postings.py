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

Block bounds and skips (``blockmax.*``), for each frequent term (in at least 1/64 of the
passages): the largest score it has in every block of 8 consecutive rows, quantised upward to a
byte of its ``term_max``, and where each block's postings start (an int32 per 256 rows plus a
byte per block). A query made of frequent words adds those bounds up for every block at once
and scores only the blocks that can still reach the top k, jumping straight to their postings
(`awarl.search.scoring`). They cost about 0.27 bytes per passage per bounded term (at most about
half the disk of the lists they bound, much less for the most frequent terms). Indexes built
before they existed load and search without them.
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
from awarl.errors import ConfigError

_ROUNDING_MARGIN = 1.0 + 2.0**-20
"""A float32 block bound's upward margin over its two roundings (`Postings.block_bound`)."""

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
BLOCK_FILE = "blockmax.npy"  # uint8 [bounded terms, blocks]: each block's largest score, in 1/255 of term_max, rounded up
BLOCK_TERMS_FILE = "blockmax.terms.npy"  # int32 per term: its row in the block arrays, -1 when not bounded per block
BLOCK_REL_FILE = "blockmax.skip.npy"  # uint8 [bounded terms, blocks + 1]: first posting of each block, from its 256-row span's
BLOCK_BASE_FILE = "blockmax.base.npy"  # int32 [bounded terms, spans + 1]: first posting of each 256-row span (from indptr)
BLOCK_META_FILE = "blockmax.json"  # {"block": rows per block, "span": rows per span}
BLOCK_ROWS = 8  # rows per block: frequent terms are in nearly every block of 64+ rows, so only small blocks bound anything
BLOCK_SPAN = 256  # rows per span: a block's start within its span fits a byte (at most 255 postings before it)
BLOCK_MIN_SHARE = 64  # terms in at least 1/64 of the passages get stored block bounds; rarer ones are bounded on the fly
NONOCCURRENCE_METHODS = ("bm25l", "bm25+")


def make_stemmer(language: str | None):
    if language is None:
        return None
    import Stemmer

    try:
        return Stemmer.Stemmer(language)
    except KeyError:
        raise ConfigError(f"unknown stemmer language {language!r}; see Stemmer.algorithms()") from None


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
                 champions: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None, score_min: float | None = None,
                 blocks: "BlockBounds | None" = None):
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
        self.blocks = blocks  # None: searched without block bounds (still exact)

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
        if self.blocks is not None:
            self.blocks.save(out)
        _write_vocab_and_params(out, self.vocab, scoring, self.num_docs)

    def block_bound(self, term: int, times: int = 1, out: np.ndarray | None = None) -> np.ndarray:
        """float32 upper bound of ``times`` x ``term``'s score in every block (0 where it is
        absent), written into ``out`` when given: the stored bytes scaled by term_max / 255, or,
        for a term without them, the per-block maxima of its postings (one pass over a list
        shorter than 1/64 of the corpus)."""
        b = self.blocks
        r = int(b.rows_of[term])
        if out is None:
            out = np.empty(b.n_blocks, dtype=np.float32)
        if r >= 0:
            # float32 rounds the scale and the product (each within 2^-24 of exact), which can put a bound one ulp
            # below the score it bounds; the margin keeps every bound above (a bound may be loose, never low)
            scale = np.float32(float(self.term_max[term]) / 255.0 * times * _ROUNDING_MARGIN)
            return np.multiply(b.bound[r], scale, out=out)
        out[:] = 0
        start, end = int(self.indptr[term]), int(self.indptr[term + 1])
        if end > start:
            blk = self.indices[start:end] // b.rows
            first = np.flatnonzero(np.concatenate([[True], blk[1:] != blk[:-1]]))
            out[blk[first]] = np.maximum.reduceat(self.data[start:end], first) * np.float32(times)
        return out

    def block_ranges(self, term: int, blocks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Where each of ``blocks``' (sorted) postings of ``term`` start and end, relative to the
        term's list: read from the stored skips, else two binary searches per block."""
        b = self.blocks
        r = int(b.rows_of[term])
        if r >= 0:
            base, rel, shift = b.base[r], b.rel[r], b.shift
            nxt = blocks + 1
            return (base[blocks >> shift].astype(np.int64) + rel[blocks],
                    base[nxt >> shift].astype(np.int64) + rel[nxt])
        posting = self.indices[int(self.indptr[term]) : int(self.indptr[term + 1])]
        starts = blocks * b.rows
        return np.searchsorted(posting, starts), np.searchsorted(posting, starts + b.rows)

    @classmethod
    def load(cls, folder: Path, mmap: bool = True) -> "Postings":
        mode = "r" if mmap else None
        for name in (DATA_FILE, INDICES_FILE, INDPTR_FILE, VOCAB_FILE, PARAMS_FILE, TERM_MAX_FILE):
            if not (folder / name).exists():
                raise DataError(folder / name, "-", "missing index file (rebuild the index with `awarl index build`)")
        data, indices, indptr = (load_array(folder / name, mode) for name in (DATA_FILE, INDICES_FILE, INDPTR_FILE))
        vocab = _read_object(folder / VOCAB_FILE)
        params = _read_object(folder / PARAMS_FILE)
        num_docs = params.get("num_docs")
        if not isinstance(num_docs, int) or len(data) != len(indices) or int(indptr[-1]) != len(data) or len(indptr) != len(vocab) + 1:
            raise DataError(folder, "-", "score arrays, vocabulary and params.index.json disagree; the index is damaged, rebuild it")
        nonocc = load_array(folder / NONOCC_FILE, mode) if (folder / NONOCC_FILE).exists() else None
        term_max = load_array(folder / TERM_MAX_FILE, mode)
        champions = None
        if all((folder / name).exists() for name in (CHAMP_PTR_FILE, CHAMP_ROWS_FILE, CHAMP_DATA_FILE)):
            champions = tuple(load_array(folder / name, mode) for name in (CHAMP_PTR_FILE, CHAMP_ROWS_FILE, CHAMP_DATA_FILE))
            if len(champions[0]) != len(indptr):
                raise DataError(folder / CHAMP_PTR_FILE, "-", "does not match the vocabulary; the index is damaged, rebuild it")
        score_min = float(load_array(folder / SCORE_MIN_FILE, None)) if (folder / SCORE_MIN_FILE).exists() else None
        blocks = BlockBounds.load(folder, mode, len(vocab), num_docs)
        return cls(data, indices, indptr, num_docs, vocab, term_max, nonocc, champions, score_min, blocks)


class BlockBounds:
    """Per-block score bounds and posting skips of the frequent terms (see the module docstring)."""

    FILES = (BLOCK_META_FILE, BLOCK_TERMS_FILE, BLOCK_FILE, BLOCK_REL_FILE, BLOCK_BASE_FILE)

    def __init__(self, rows: int, span: int, num_docs: int, rows_of: np.ndarray, bound: np.ndarray, rel: np.ndarray,
                 base: np.ndarray):
        self.rows, self.span, self.num_docs = rows, span, num_docs
        self.n_blocks = -(-num_docs // rows)
        self.shift = (span // rows).bit_length() - 1  # block -> span
        self.rows_of, self.bound, self.rel, self.base = (np.asarray(a) for a in (rows_of, bound, rel, base))

    @classmethod
    def load(cls, folder: Path, mode: str | None, vocab_size: int, num_docs: int) -> "BlockBounds":
        missing = [name for name in cls.FILES if not (folder / name).exists()]
        if missing:
            raise DataError(folder / missing[0], "-", "missing block bound file; the index is damaged, rebuild it with "
                            "`awarl index build`")
        meta = _read_object(folder / BLOCK_META_FILE)
        rows, span = meta.get("block"), meta.get("span")
        arrays = [load_array(folder / name, mode) for name in cls.FILES[1:]]
        ok = isinstance(rows, int) and isinstance(span, int) and 1 <= rows <= span <= 256 and span % rows == 0
        ok = ok and ((span // rows) & (span // rows - 1)) == 0
        if ok:
            rows_of, bound, rel, base = arrays
            n_blocks = -(-num_docs // rows)
            ok = (len(rows_of) == vocab_size and bound.shape == (len(bound), n_blocks) and rel.shape == (len(bound), n_blocks + 1)
                  and base.shape == (len(bound), (n_blocks >> ((span // rows).bit_length() - 1)) + 1)
                  and (not len(rows_of) or int(rows_of.max()) < len(bound)))
        if not ok:
            raise DataError(folder / BLOCK_FILE, "-", "block bounds do not match the score arrays; the index is damaged, "
                            "rebuild it with `awarl index build`")
        return cls(rows, span, num_docs, *arrays)

    def save(self, out: Path) -> None:
        for name, arr in zip(self.FILES[1:], (self.rows_of, self.bound, self.rel, self.base)):
            np.save(out / name, np.asarray(arr))
        (out / BLOCK_META_FILE).write_text(json.dumps({"block": self.rows, "span": self.span}), encoding="utf-8")


def build_block_bounds(data: np.ndarray, indices: np.ndarray, indptr: np.ndarray, num_docs: int, term_max: np.ndarray,
                       folder: Path | None = None, rows: int = BLOCK_ROWS, span: int = BLOCK_SPAN,
                       min_share: int = BLOCK_MIN_SHARE) -> BlockBounds:
    """Block bounds and skips of every term in at least 1/``min_share`` of the passages (see
    the module docstring). Each stored byte q satisfies q * term_max / 255 >= the block's
    largest score (float64, checked). With ``folder`` they are written there a term at a time
    (memory: one term's list) and returned memory-mapped."""
    lengths = np.diff(np.asarray(indptr))
    chosen = np.flatnonzero((lengths * min_share >= num_docs) & (lengths > 0))
    rows_of = np.full(len(lengths), -1, dtype=np.int32)
    rows_of[chosen] = np.arange(len(chosen), dtype=np.int32)
    n_blocks = -(-num_docs // rows)
    per_span = span // rows
    shapes = {BLOCK_FILE: (np.uint8, n_blocks), BLOCK_REL_FILE: (np.uint8, n_blocks + 1),
              BLOCK_BASE_FILE: (np.int32, (n_blocks // per_span) + 1)}
    if folder is None or not len(chosen):  # (a memory map cannot be empty)
        out = {name: np.zeros((len(chosen), width), dtype=dtype) for name, (dtype, width) in shapes.items()}
    else:
        out = {name: np.lib.format.open_memmap(folder / (name + ".tmp"), mode="w+", dtype=dtype, shape=(len(chosen), width))
               for name, (dtype, width) in shapes.items()}
    for r, t in enumerate(chosen):
        start, end = int(indptr[t]), int(indptr[t + 1])
        blk = np.asarray(indices[start:end]) // rows
        first = np.flatnonzero(np.concatenate([[True], blk[1:] != blk[:-1]]))
        peak = np.maximum.reduceat(np.asarray(data[start:end], dtype=np.float64), first)
        top = float(term_max[t])
        q = np.minimum(np.ceil(peak * 255.0 / top), 255.0) if top > 0 else np.zeros_like(peak)
        under = q * (top / 255.0) < peak  # float64 rounding of the scale: never let a bound fall below a score
        q[under] = np.minimum(q[under] + 1, 255.0)
        row = np.zeros(n_blocks, dtype=np.uint8)
        row[blk[first]] = q.astype(np.uint8)
        out[BLOCK_FILE][r] = row
        block_start = np.zeros(n_blocks + 1, dtype=np.int64)  # first posting of every block, and the list's end
        np.cumsum(np.bincount(blk, minlength=n_blocks), out=block_start[1:])
        base = block_start[::per_span]
        out[BLOCK_BASE_FILE][r] = base
        out[BLOCK_REL_FILE][r] = block_start - np.repeat(base, per_span)[: n_blocks + 1]
    if folder is not None:
        for name in shapes:
            arr = out[name]
            if isinstance(arr, np.memmap):
                arr.flush()
                del arr
                out[name] = None
                (folder / (name + ".tmp")).replace(folder / name)
            else:
                np.save(folder / name, arr)
        np.save(folder / BLOCK_TERMS_FILE, rows_of)
        (folder / BLOCK_META_FILE).write_text(json.dumps({"block": rows, "span": span}), encoding="utf-8")
        return BlockBounds.load(folder, "r", len(lengths), num_docs)
    return BlockBounds(rows, span, num_docs, rows_of, out[BLOCK_FILE], out[BLOCK_REL_FILE], out[BLOCK_BASE_FILE])


def load_array(path: Path, mode: str | None = "r") -> np.ndarray:
    """One saved array of an index folder (memory-mapped with ``mode="r"``); a truncated or damaged
    file is a `DataError` naming it."""
    try:
        return np.load(path, mmap_mode=mode)
    except (ValueError, EOFError) as exc:
        raise DataError(path, "-", f"unreadable array ({exc}); the index is damaged, rebuild it with "
                        "`awarl index build`") from None


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
          on_chunk: Callable[[int], None] | None = None, source: str | Path = "the corpus") -> int:
    """Index ``texts`` (one per passage, in row order) into folder ``out``; returns the passage count.
    A corpus with nothing to index is a `DataError` naming ``source`` (the corpus file).

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
            raise DataError(source, "-", "no passages: cannot index an empty corpus")
        if not to_ids.vocab:
            raise DataError(source, "-", "no passage has a word left to index after stop-word removal")
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
        build_block_bounds(data, indices, indptr, num_docs, term_max, folder=out)
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

