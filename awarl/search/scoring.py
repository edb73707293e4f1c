"""Top-k over a `awarl.search.postings.Postings` matrix: the exhaustive scorer and MaxScore.

Both return the same rows and the same float32 scores, ties broken by lower row first:

- `top_k_exhaustive` (the reference and the benchmark's baseline) adds every query term's posting list into a score array as long as the corpus, then
  partitions it. Its cost grows with the corpus: about 80 ms per query at 21M passages before any
  term is scored.
- `top_k_maxscore` (the default) touches only the query terms' postings and prunes with
  MaxScore (Turtle & Flood, 1995) and impact-ordered champion lists. Rare terms' short lists are
  scored whole; with each long term's best postings they give a threshold theta (a k-th best
  exact score of real passages). A passage reaches theta only if it scores at least
  ``theta - (upper bounds of every other long term)`` on each long term (bounds: the largest
  score in a term's postings, stored at build); where that need is positive the qualifying
  passages are a prefix of the term's champion list, and the smallest such prefix holds every
  candidate. Otherwise MaxScore's split: long terms whose bounds sum below theta cannot lift a
  passage alone, so a candidate must hold one of the others. The candidates are then scored
  exactly as the exhaustive scorer does (float32 sums in query-term order, each term's list
  binary-searched), so ids and scores are bit-identical, not merely close.
- Queries made of frequent words leave too many candidates for that (more than 1/1024 of the
  corpus). With the index's block bounds (`awarl.search.postings.BlockBounds`: each frequent
  term's largest score in every block of 8 rows) the long terms' bounds are summed for every
  block at once, and blocks are scored exactly, best bound first, in rounds; the k-th best
  score found so far prunes every block whose bound is below it (block-max pruning, as in
  Ding & Suel's block-max WAND, but over row ranges so the bounds add up as arrays). For bm25l
  and bm25+, where rows outside every list score too, block bounds do not bound a row's score:
  when the candidates would exceed 1/8 of the corpus, one pass over a score array, with theta
  replacing the corpus-wide partition.

Bounds are float64 and every pruning test carries a relative margin far above the float32
rounding of a sum of a few hundred terms, so rounding can never prune a true top-k passage.
"""

from __future__ import annotations

from collections import Counter

import numpy as np

from awarl.search.postings import Postings

SCORERS = ("maxscore", "exhaustive")
_EMPTY = (np.empty(0, dtype=np.int64), np.empty(0, dtype=np.float32))


def score_rows(p: Postings, token_ids: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """Exact float32 scores of ``rows`` (sorted, unique): each term's posting list is searched
    for them (binary search, or the block skips of a frequent term), in query-term order, as
    the exhaustive scorer adds them."""
    scores = np.zeros(len(rows), dtype=np.float32)
    indptr, indices, data = p.indptr, p.indices, p.data
    stored = p.blocks.rows_of if p.blocks is not None else None
    for t in token_ids:
        start, end = int(indptr[t]), int(indptr[t + 1])
        posting = indices[start:end]
        if len(posting) < len(rows):  # search the shorter list in the longer one; same additions
            pos = np.searchsorted(rows, posting)
            hit = pos < len(rows)
            hit[hit] = rows[pos[hit]] == posting[hit]
            scores[pos[hit]] += data[start:end][hit]
        elif stored is not None and stored[t] >= 0 and end - start >= SKIP_MIN:
            # a frequent term's block skips narrow each row to its block's few postings: one
            # gather per posting slot instead of a binary search over a list of millions
            found, pos = _find_in_blocks(p, int(t), rows)
            scores[found] += data[start + pos]
        else:
            if not len(posting):
                continue
            pos = np.minimum(np.searchsorted(posting, rows), len(posting) - 1)
            # adding 0 where the row is absent leaves its float32 sum as it was: no masked writes
            scores += np.where(posting[pos] == rows, data[start + pos], np.float32(0))
    if p.nonoccurrence is not None and len(token_ids):
        scores += p.nonoccurrence[token_ids].sum()
    return scores


SKIP_MIN = 1 << 17  # lists this long are searched through their block skips (measured: 2^16..2^18 best at 1M; shorter lists, as at 100k, binary-search as fast)


def _find_in_blocks(p: Postings, term: int, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Which of ``rows`` are in ``term``'s list (a mask) and where those are (relative to the
    list's start), read through the term's block skips: only the postings of each row's block
    (at most ``rows per block``, usually one or two) are compared with the row."""
    lo, hi = p.block_ranges(term, rows // p.blocks.rows)
    counts = hi - lo
    total = int(counts.sum())
    found = np.zeros(len(rows), dtype=bool)
    if not total:
        return found, lo[:0]
    owner = np.repeat(np.arange(len(rows)), counts)  # the row each compared posting belongs to
    pos = _spread(lo, counts, total)
    hit = np.flatnonzero(p.indices[int(p.indptr[term]) + pos] == rows[owner])
    found[owner[hit]] = True  # rows are unique in a list: at most one hit per row, in row order
    return found, pos[hit]


def _spread(lo: np.ndarray, counts: np.ndarray, total: int) -> np.ndarray:
    """Every position of the ranges ``lo[i] .. lo[i] + counts[i]``, range after range
    (``total`` is ``counts.sum()``)."""
    return np.repeat(lo - (np.cumsum(counts) - counts), counts) + np.arange(total)


def score_all(p: Postings, token_ids: np.ndarray) -> np.ndarray:
    """Every passage's float32 score (the exhaustive scorer's array)."""
    scores = np.zeros(p.num_docs, dtype=np.float32)
    indptr, indices, data = p.indptr, p.indices, p.data
    for t in token_ids:
        start, end = indptr[t], indptr[t + 1]
        scores[indices[start:end]] += data[start:end]  # rows are unique within a posting list
    if p.nonoccurrence is not None and len(token_ids):
        scores += p.nonoccurrence[token_ids].sum()
    return scores


def best_of(rows: np.ndarray, scores: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The ``k`` best positive scores among ``rows``, best first, ties: lower row first."""
    keep = scores > 0
    rows, scores = rows[keep], scores[keep]
    if len(scores) > 4 * k:  # a partition first: sorting every candidate costs more
        kth = np.partition(scores, len(scores) - k)[len(scores) - k]
        keep = scores >= kth  # all ties with the k-th score stay, so the lower rows win them
        rows, scores = rows[keep], scores[keep]
    order = np.lexsort((rows, -scores))[:k]
    return rows[order], scores[order]


def top_k_exhaustive(p: Postings, token_ids: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    scores = score_all(p, token_ids)
    k = min(k, len(scores))
    if k < len(scores):
        cand = np.argpartition(-scores, k - 1)[:k]
        kth = scores[cand].min()
        # argpartition picks an arbitrary passage among those tied with the k-th score; take
        # all of them so that ties go to the lower row, as documented.
        cand = np.concatenate([cand[scores[cand] > kth], np.flatnonzero(scores == kth)])
    else:
        cand = np.arange(len(scores))
    return best_of(cand, scores[cand], k)


SEED_ROWS = 64  # best postings per long query term scored for the threshold (a wider second try cost more than it saved)
SHORT_LIST = 2048  # posting lists this short (and under 0.2% of the corpus) are scored whole; the rest are pruned
DENSE_SHARE = 8  # more candidates than 1/8 of the corpus: the exhaustive array is cheaper


def top_k_maxscore(p: Postings, token_ids: np.ndarray, k: int, dense_share: int | None = DENSE_SHARE,
                   short_list: int | None = None, blocks: bool = True, block_min: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Exact top-k touching only what can still reach it (see the module docstring).
    ``dense_share=None`` never falls back to the exhaustive array and ``short_list=0`` treats
    every list as long (tests use both to reach every path on small corpora); ``blocks=False``
    ignores the index's block bounds (the benchmark's baseline) and ``block_min=0`` takes the
    block path for any number of candidates."""
    block_min = BLOCK_MIN if block_min is None else block_min
    if len(token_ids) == 0:
        return _EMPTY
    if not p.nonnegative:
        return top_k_exhaustive(p, token_ids, k)
    terms, counts = _distinct(token_ids)
    lengths = p.indptr[terms + 1] - p.indptr[terms]
    bounds = p.term_max[terms].astype(np.float64) * counts
    margin = 1.0 + max(1e-4, 8.0 * len(token_ids) * 2.0**-24)
    short = lengths <= (min(SHORT_LIST, max(64, p.num_docs // 500)) if short_list is None else short_list)
    long_terms, long_counts, long_bounds = terms[~short], counts[~short], bounds[~short]
    total = float(long_bounds.sum())
    const = float(p.nonoccurrence[token_ids].sum()) if p.nonoccurrence is not None else 0.0
    # 1. Every passage holding a rare (short-list) term is a candidate; with the best postings of
    #    the long terms they are scored exactly (all at once) and give a threshold: the k-th best
    #    exact score among real passages, so the true k-th best is at least as high.
    seed = _union([p.indices[p.indptr[t] : p.indptr[t + 1]] for t in terms[short]]
                  + [p.best_rows(int(t), SEED_ROWS) for t in long_terms] + [np.empty(0, np.int64)])
    seed_scores = score_rows(p, token_ids, seed)
    kth = np.partition(seed_scores, len(seed) - k)[len(seed) - k] if len(seed) >= k else np.float32(0)
    # bm25l / bm25+ add the same constant to every passage's score; the bounds exclude it
    theta = max(0.0, float(kth) - const - 4 * 2.0**-24 * (abs(float(kth)) + const)) / margin if len(seed) >= k else 0.0
    # 2. A passage outside the short lists scores at most the long terms' bounds, so to reach
    #    theta it needs at least `need` from each long term u (all the others giving at most
    #    their bounds). Where a need is positive the passage must be in u's list with at least
    #    that score, a prefix of u's champion list; the smallest such prefix holds every
    #    candidate (they must be in all of them).
    parts = None
    needs = (theta - (total - long_bounds) * margin) / long_counts
    if (needs > 0).any():
        sizes = [p.count_at_least(int(t), float(nd)) if nd > 0 else p.num_docs + 1 for t, nd in zip(long_terms, needs)]
        u = int(np.argmin(sizes))
        if dense_share is None or sizes[u] * dense_share <= p.num_docs:
            parts = [p.rows_at_least(int(long_terms[u]), float(needs[u]))]
    if parts is None:
        # 3. No need is positive (or none is selective): MaxScore's split. Long terms whose bounds
        #    sum below theta (smallest first) cannot lift a passage into the top k alone; a
        #    candidate must hold one of the others, the essential terms.
        order = np.argsort(long_bounds, kind="stable")
        nonessential = np.cumsum(long_bounds[order]) * margin < theta
        parts, size = [], 0
        for u in order[~nonessential]:
            size += p.list_length(int(long_terms[u]))
            if dense_share is not None and size * dense_share > p.num_docs:
                if blocks and _use_blocks(p):
                    return _top_k_blocks(p, token_ids, k, long_terms, long_counts, seed, seed_scores)
                return _top_k_dense(p, token_ids, k, kth)
            parts.append(p.rows_at_least(int(long_terms[u]), 0.0))
    if parts and blocks and _use_blocks(p) and _many(sum(len(x) for x in parts), p.num_docs, block_min):
        return _top_k_blocks(p, token_ids, k, long_terms, long_counts, seed, seed_scores)
    if parts:
        more = _union(parts)
        more = more[~_isin_sorted(more, seed)]
        seed, seed_scores = _merge(seed, seed_scores, more, score_rows(p, token_ids, more))
    rows, scores = best_of(seed, seed_scores, k)
    if len(rows) < k and p.nonoccurrence is not None:
        rows, scores = _fill_nonoccurrence(p, token_ids, seed, rows, scores, k)
    return rows, scores


# Where the block path replaces scoring MaxScore's candidates one by one: more than 1/1024 of the
# corpus (measured best at 1M passages among 1/8 .. 1/4096) and more than 1,000 (below that,
# scoring them costs no more than bounding every block; measured at 100k).
BLOCK_SHARE = 1024
BLOCK_MIN = 1000


def _many(candidates: int, num_docs: int, block_min: int) -> bool:
    return candidates * BLOCK_SHARE > num_docs and candidates > block_min


FIRST_BLOCKS = 1024  # blocks scored in the first round (best bounds first), then twice as many each round (64..4096 measured: 512-1024 best at 0.1-3M)


def _use_blocks(p: Postings) -> bool:
    # bm25l / bm25+ give absent terms a score too (rows outside every list can rank): those
    # variants keep the array pass.
    return p.blocks is not None and p.nonoccurrence is None


def _top_k_blocks(p: Postings, token_ids: np.ndarray, k: int, long_terms: np.ndarray, long_counts: np.ndarray,
                  seed: np.ndarray, seed_scores: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Block-max pruning for queries of frequent words. A row outside ``seed`` (which holds
    every row of the short lists, already scored exactly) scores at most the sum over the long
    terms of their block bounds, computed for every block at once. Blocks are scored exactly in
    rounds, best bound first, and the k-th best exact score found so far prunes every block
    whose bound is below it; what is left when no block can reach it is the exact top k."""
    bound = np.zeros(p.blocks.n_blocks, dtype=np.float32)
    scratch = np.empty_like(bound)  # one buffer for every term: a fresh array per term costs its page faults
    for t, c in zip(long_terms, long_counts):
        bound += p.block_bound(int(t), times=int(c), out=scratch)
    margin = 1.0 + max(1e-4, 8.0 * len(token_ids) * 2.0**-24)
    pool_rows, pool_scores = seed, seed_scores
    theta = 0.0
    if len(pool_rows) >= k:  # the seed's k-th score prunes in the same pass that lists the blocks
        kth = float(np.partition(pool_scores, len(pool_scores) - k)[len(pool_scores) - k])
        theta = max(0.0, kth - 4 * 2.0**-24 * abs(kth)) / margin
    cand = np.flatnonzero(bound >= theta) if theta > 0 else np.flatnonzero(bound > 0)
    width = FIRST_BLOCKS
    while True:
        if len(pool_rows) >= k:
            kth = float(np.partition(pool_scores, len(pool_scores) - k)[len(pool_scores) - k])
            keep = pool_scores >= kth  # ties with the k-th score stay: the lower row must win them
            pool_rows, pool_scores = pool_rows[keep], pool_scores[keep]
            theta = max(0.0, kth - 4 * 2.0**-24 * abs(kth)) / margin
            cand = cand[bound[cand] >= theta]
        if not len(cand):
            break
        if len(cand) > width:
            pick = np.argpartition(-bound[cand], width - 1)[:width]
            take, rest = np.zeros(len(cand), dtype=bool), cand
            take[pick] = True
            chosen, cand = np.sort(rest[take]), rest[~take]
        else:
            chosen, cand = cand, cand[:0]
        rows, scores = _score_blocks(p, token_ids, chosen, skip=seed)  # seed rows are in the pool (or were pruned from it) already
        pool_rows = np.concatenate([pool_rows, rows])
        pool_scores = np.concatenate([pool_scores, scores])
        width *= 2
    return best_of(pool_rows, pool_scores, k)


def _score_blocks(p: Postings, token_ids: np.ndarray, blocks: np.ndarray,
                  skip: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Exact float32 scores of every row in ``blocks`` (sorted) that holds a query term, but
    those in ``skip`` (sorted rows): each term's postings in those blocks are read through the
    stored skips and added in query-term order, as `score_all` adds them (so the scores are
    bit-identical)."""
    width = p.blocks.rows
    starts = blocks * width
    local = np.zeros(len(blocks) * width, dtype=np.float32)
    offset = np.arange(len(blocks), dtype=np.int64) * width - starts  # row -> place in `local`
    indptr, indices, data = p.indptr, p.indices, p.data
    ranges: dict[int, tuple[np.ndarray, np.ndarray, int]] = {}
    for t in token_ids:
        t = int(t)
        if t not in ranges:  # a repeated query word is added again, as score_all does, from the same ranges
            lo, hi = p.block_ranges(t, blocks)
            counts = hi - lo
            total = int(counts.sum())
            pos = int(indptr[t]) + _spread(lo, counts, total) if total else None
            ranges[t] = (pos, np.repeat(offset, counts) if total else None, total)
        pos, where, total = ranges[t]
        if total:
            local[where + indices[pos]] += data[pos]
    if skip is not None and len(skip):
        b = skip // width
        j = np.minimum(np.searchsorted(blocks, b), len(blocks) - 1)
        inside = blocks[j] == b
        local[j[inside] * width + skip[inside] % width] = 0
    hit = np.flatnonzero(local > 0)
    return starts[hit // width] + hit % width, local[hit]


def _merge(rows: np.ndarray, scores: np.ndarray, more: np.ndarray, more_scores: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Two disjoint sorted row sets and their scores as one sorted set."""
    if not len(more):
        return rows, scores
    merged = np.concatenate([rows, more])
    order = np.argsort(merged, kind="stable")
    return merged[order], np.concatenate([scores, more_scores])[order]


def _distinct(token_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sorted distinct terms of a query and how often each occurs (np.unique's bookkeeping
    costs more than the handful of terms a query has)."""
    counts = Counter(token_ids.tolist())
    terms = sorted(counts)
    return np.asarray(terms, dtype=np.int64), np.asarray([counts[t] for t in terms], dtype=np.int64)


def _union(parts: list[np.ndarray]) -> np.ndarray:
    """Sorted distinct rows of several arrays (a sort beats np.unique's hashing here)."""
    rows = np.sort(np.concatenate(parts).astype(np.int64))
    return rows[np.concatenate([[True], rows[1:] != rows[:-1]])] if len(rows) else rows


def _isin_sorted(values: np.ndarray, sorted_set: np.ndarray) -> np.ndarray:
    pos = np.searchsorted(sorted_set, values)
    hit = pos < len(sorted_set)
    hit[hit] = sorted_set[pos[hit]] == values[hit]
    return hit


def _top_k_dense(p: Postings, token_ids: np.ndarray, k: int, kth: np.float32) -> tuple[np.ndarray, np.ndarray]:
    """The exhaustive score array, but with a known k-th best score ``kth`` (the float32 score
    of a real passage): every passage of the top k scores at least that, so one comparison pass
    replaces the partition of the whole corpus."""
    scores = score_all(p, token_ids)
    cand = np.flatnonzero(scores >= kth) if kth > 0 else np.arange(len(scores))
    if len(cand) < k and kth > 0:  # cannot happen (kth is reached by k passages); stay exact regardless
        return top_k_exhaustive(p, token_ids, k)
    return best_of(cand, scores[cand], k)


def _fill_nonoccurrence(p: Postings, token_ids: np.ndarray, touched: np.ndarray, rows: np.ndarray,
                        scores: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """bm25l / bm25+ give every passage a constant score for the query terms it lacks; when fewer
    than k passages contain a term, the exhaustive scorer returns the lowest rows among the rest."""
    const = np.float32(0) + p.nonoccurrence[token_ids].sum()
    if not const > 0:
        return rows, scores
    need = min(k, p.num_docs) - len(rows)
    extra = np.setdiff1d(np.arange(min(p.num_docs, need + len(touched)), dtype=np.int64), touched)[:need]
    return np.concatenate([rows, extra]), np.concatenate([scores, np.full(len(extra), const, dtype=np.float32)])
