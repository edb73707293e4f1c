"""Top-k over a `awarl.search.postings.Postings` matrix: the exhaustive scorer and MaxScore.

Both return the same rows and the same float32 scores, ties broken by lower row first:

- `top_k_exhaustive` (the scorer awarl used first, kept as the reference and the benchmark's
  baseline) adds every query term's posting list into a score array as long as the corpus, then
  partitions it. Its cost grows with the corpus: about 80 ms per query at 21M passages before any
  term is scored.
- `top_k_maxscore` (the default) touches only the query terms' postings and prunes with
  MaxScore (Turtle & Flood, 1995): terms are visited from the highest upper bound (largest score
  in the term's postings, stored at build) down; once the bounds of the terms left sum to less
  than the current k-th best partial score, no passage outside the candidates can reach the top
  k, so the remaining (usually long, low-idf) lists are only binary-searched for the candidates,
  and candidates whose partial score plus the bounds left falls below it are dropped. The
  survivors are then scored exactly as the exhaustive scorer does (float32, query-term order), so
  ids and scores are bit-identical, not merely close.

Partial scores are float64 and the pruning tests carry a relative margin far above float32
rounding of a sum of a few hundred terms, so rounding can never prune a true top-k passage.
"""

from __future__ import annotations

import numpy as np

from awarl.search.postings import Postings

SCORERS = ("maxscore", "exhaustive")
_EMPTY = (np.empty(0, dtype=np.int64), np.empty(0, dtype=np.float32))


def score_rows(p: Postings, token_ids: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """Exact float32 scores of ``rows`` (sorted, unique): each term's posting list is
    binary-searched for them, in query-term order, as the exhaustive scorer adds them."""
    scores = np.zeros(len(rows), dtype=np.float32)
    indptr, indices, data = p.indptr, p.indices, p.data
    for t in token_ids:
        start, end = int(indptr[t]), int(indptr[t + 1])
        posting = indices[start:end]
        pos = np.searchsorted(posting, rows)
        found = pos < len(posting)
        found[found] = posting[pos[found]] == rows[found]
        scores[found] += data[start + pos[found]]
    if p.nonoccurrence is not None and len(token_ids):
        scores += p.nonoccurrence[token_ids].sum()
    return scores


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


def top_k_maxscore(p: Postings, token_ids: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    if len(token_ids) == 0:
        return _EMPTY
    terms, counts = np.unique(token_ids, return_counts=True)
    bounds = p.term_max[terms].astype(np.float64) * counts
    order = np.argsort(-bounds, kind="stable")
    # rest[j]: the most that terms order[j:] can add to any passage
    rest = np.concatenate([np.cumsum(bounds[order][::-1])[::-1], [0.0]])
    margin = 1.0 + max(1e-4, 8.0 * len(token_ids) * 2.0**-24)
    prune = p.nonnegative
    cand = np.empty(0, dtype=np.int64)
    part = np.empty(0, dtype=np.float64)
    theta = 0.0
    indptr, indices, data = p.indptr, p.indices, p.data
    for j, u in enumerate(order):
        start, end = int(indptr[terms[u]]), int(indptr[terms[u] + 1])
        posting = indices[start:end]
        weight = float(counts[u])
        closed = prune and theta > 0 and rest[j] * margin < theta  # no new passage can make the top k
        if closed and len(cand) < end - start:
            pos = np.searchsorted(posting, cand)
            hit = pos < len(posting)
            hit[hit] = posting[pos[hit]] == cand[hit]
            part[hit] += data[start + pos[hit]].astype(np.float64) * weight
        else:
            rows = posting.astype(np.int64)
            vals = data[start:end].astype(np.float64) * weight
            pos = np.searchsorted(cand, rows)
            hit = pos < len(cand)
            hit[hit] = cand[pos[hit]] == rows[hit]
            part[pos[hit]] += vals[hit]
            if not closed and not hit.all():
                merged = np.concatenate([cand, rows[~hit]])
                keep = np.argsort(merged, kind="stable")  # two sorted runs: a linear merge
                cand, part = merged[keep], np.concatenate([part, vals[~hit]])[keep]
        if prune and len(cand) >= k:
            theta = max(theta, float(np.partition(part, len(part) - k)[len(part) - k]))
            if theta > 0:
                alive = (part + rest[j + 1]) * margin >= theta
                if not alive.all():
                    cand, part = cand[alive], part[alive]
    scores = score_rows(p, token_ids, cand)
    rows, scores = best_of(cand, scores, k)
    if len(rows) < k and p.nonoccurrence is not None:
        rows, scores = _fill_nonoccurrence(p, token_ids, cand, rows, scores, k)
    return rows, scores


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
