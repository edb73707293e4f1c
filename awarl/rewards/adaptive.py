"""Adaptive p_i (awarl's, beyond the paper): a ratchet that raises a query's capability as the policy learns.

p_i is measured once, on the checkpoint GRPO starts from. A policy that learns to answer a query
keeps being paid for refusing it as if it could not, and a group that abstains on every rollout
gives no gradient: refusal collapse is absorbing. Every ``adaptive_p_every`` generation batches a
forced-answer probe (`awarl.train.probe`: the refusal phrases cannot be sampled) measures what the
current policy *could* answer on a rolling subset of the RL questions, and this ratchet folds the
counts in:

- the probe's counts are pooled with the earlier probes' counts of the same query;
- p_i rises to an exact lower confidence bound of the pooled share, never above it, and never
  falls: ``p_i ← max(p_i, LB(pooled))``. The ratchet is a max over rounds, so each round's bound is
  taken at α/(r(r+1)) (``adaptive_p_alpha`` = α split over the rounds r = 1, 2, …): the chance that a
  question's p_i is ever raised above the policy's true rate stays below α.

Raising p_i to a single probe's K′-sample estimate would inflate it by chance (a max over noisy
estimates drifts up even when nothing is learned: four samples of a p = 0.3 policy are all correct
in 1% of rounds); a lower bound of the pooled counts tightens towards the true rate from below
instead. The state (pooled counts, raised p_i, rounds, probe
compute) is plain JSON, saved with the penalty state in every checkpoint, and identical on every
process because every process folds in the same gathered counts.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any


@functools.lru_cache(maxsize=65536)  # a run asks for the same few (successes, n, alpha) again and again
def binomial_lower(successes: int, n: int, alpha: float) -> float:
    """Exact (Clopper–Pearson) one-sided lower confidence bound of a binomial share: the smallest p with
    P(X ≥ successes | n, p) > ``alpha`` (0 when there is no success). Its coverage holds at every n,
    which a normal or Wilson bound does not give at the few samples a probe draws.

    >>> round(binomial_lower(4, 4, 0.05), 4)     # 0.05 ** (1 / 4)
    0.4729
    >>> binomial_lower(0, 10, 0.05)
    0.0
    """
    if not 0 <= successes <= n:
        raise ValueError(f"need 0 <= successes <= n, got {successes} of {n}")
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be in (0, 1), got {alpha!r}")
    if successes == 0:
        return 0.0
    lo, hi = 0.0, successes / n
    for _ in range(48):  # to 2^-48 of the share; P(X >= k | p) = I_p(k, n - k + 1) rises with p: bisect
        mid = (lo + hi) / 2
        if _betainc(successes, n - successes + 1, mid) > alpha:
            hi = mid
        else:
            lo = mid
    return lo


def _betainc(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta function I_x(a, b), by its continued fraction (Lentz's method;
    Numerical Recipes, 3rd ed., section 6.4)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    if x > (a + 1) / (a + b + 2):  # the fraction converges fast on this side only: use the symmetry
        return 1.0 - _betainc(b, a, 1.0 - x)
    tiny, c, d = 1e-300, 1.0, 1.0 - (a + b) * x / (a + 1)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    f = d
    for m in range(1, 300):
        for num in (m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
                    -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))):
            d = 1.0 + num * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + num / c
            c = c if abs(c) > tiny else tiny
            f *= c * d
        if abs(c * d - 1.0) < 1e-15:
            break
    return front * f / a


def round_alpha(alpha: float, rounds: int) -> float:
    """The error share of a question's ``rounds``-th probe: α / (r (r + 1)), which sums to α over every
    round, so the chance that a p_i is *ever* raised above the true rate stays below α (union bound)."""
    return alpha / (rounds * (rounds + 1))


@dataclass(frozen=True)
class RatchetUpdate:
    """One raised p_i: what it was, what it is, and the pooled counts behind it."""

    id: str
    before: float
    after: float
    correct: int
    samples: int


class CapabilityRatchet:
    """Pooled forced-answer counts per query and the p_i they justify; p_i only rises.

    >>> ratchet = CapabilityRatchet(alpha=0.05)
    >>> [round(u.after, 4) for u in ratchet.update({"q": (8, 8)}, {"q": 0.0})]   # 8 of 8 correct
    [0.6306]
    >>> ratchet.update({"q": (0, 8)}, {"q": 0.0})                      # a bad round never lowers p_i
    []
    >>> round(ratchet.p("q", 0.0), 4)
    0.6306
    """

    def __init__(self, alpha: float = 0.05):
        if not 0.0 < alpha < 1.0:
            raise ValueError(f"alpha must be in (0, 1), got {alpha!r}")
        self.alpha = alpha
        self.counts: dict[str, list[int]] = {}   # id -> [correct, samples, rounds], over every probe so far
        self.raised: dict[str, float] = {}       # id -> p_i the ratchet set (only ids it raised)
        self.rounds = 0
        self.rollouts = 0
        self.seconds = 0.0

    def p(self, query_id: str | None, base: float) -> float:
        """The p_i to use: the measured ``base`` or what the ratchet raised it to, whichever is larger."""
        if query_id is None:
            return base
        return max(base, self.raised.get(query_id, 0.0))

    def update(self, counts: Mapping[str, tuple[int, int]], base: Mapping[str, float],
               seconds: float = 0.0) -> list[RatchetUpdate]:
        """Fold one probe round in: ``counts[id] = (correct, samples)``, ``base[id]`` the measured p_i.
        Returns the p_i that rose (in id order)."""
        updates = []
        for query_id in sorted(counts):
            correct, samples = (int(v) for v in counts[query_id])
            if not 0 <= correct <= samples:
                raise ValueError(f"probe counts of {query_id!r}: need 0 <= correct <= samples, got {correct}/{samples}")
            pooled = self.counts.setdefault(query_id, [0, 0, 0])
            pooled[0] += correct
            pooled[1] += samples
            pooled[2] += 1
            self.rollouts += samples
            before = self.p(query_id, float(base[query_id]))
            bound = binomial_lower(pooled[0], pooled[1], round_alpha(self.alpha, pooled[2])) if pooled[1] else 0.0
            if bound > before:
                self.raised[query_id] = bound
                updates.append(RatchetUpdate(query_id, before, bound, pooled[0], pooled[1]))
        self.rounds += 1
        self.seconds += seconds
        return updates

    def subset(self, ids: Sequence[str], size: int) -> list[str]:
        """The questions of the next probe: a rolling window of ``size`` over ``ids`` (their given order),
        round r starting where round r − 1 stopped, so every question is probed once per pass."""
        if not ids:
            return []
        size = min(size, len(ids))
        start = (self.rounds * size) % len(ids)
        return [ids[(start + i) % len(ids)] for i in range(size)]

    def state_dict(self) -> dict[str, Any]:
        """Plain JSON: saved with the penalty state in every checkpoint."""
        return {"alpha": self.alpha, "rounds": self.rounds, "rollouts": self.rollouts, "seconds": self.seconds,
                "counts": {k: list(v) for k, v in self.counts.items()}, "raised": dict(self.raised)}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore a `state_dict`; a malformed entry is an error naming it."""
        try:
            counts = {str(k): [int(v[0]), int(v[1]), int(v[2])] for k, v in state["counts"].items()}
            raised = {str(k): float(v) for k, v in state["raised"].items()}
            rounds, rollouts, seconds = int(state["rounds"]), int(state["rollouts"]), float(state["seconds"])
        except (KeyError, TypeError, ValueError, IndexError) as exc:
            raise ValueError(f"adaptive p_i state: malformed ({type(exc).__name__}: {exc}); expected the keys "
                             f"{sorted(self.state_dict())}") from None
        if any(not 0 <= c <= n for c, n, _ in counts.values()) or any(not 0.0 <= p <= 1.0 for p in raised.values()):
            raise ValueError("adaptive p_i state: counts must satisfy 0 <= correct <= samples and p_i lie in [0, 1]")
        self.counts, self.raised, self.rounds, self.rollouts, self.seconds = counts, raised, rounds, rollouts, seconds

    def __repr__(self) -> str:
        return f"CapabilityRatchet(alpha={self.alpha}, rounds={self.rounds}, raised={len(self.raised)}, rollouts={self.rollouts})"
