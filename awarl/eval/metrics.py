"""Reliability metrics (docs/data.md, "Metrics"): precision, accuracy, RA-F1, refusal rate, EM, F1, and on
data with unanswerable questions, abstain-recall and over-refusal.

- Precision P = correct / answered (0 when nothing was answered)
- Accuracy A = correct / all
- RA-F1 = 2PA / (P + A), 0 when P + A = 0 (the harmonic mean the AWA-RL paper reports)
- refusal rate = abstained / all; EM and F1 are averaged over all questions (abstentions score 0)
- abstain-recall = abstained unanswerable / unanswerable; over-refusal = abstained answerable / answerable

A macro average is the plain mean of each metric over data sets, as the paper averages per data set.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass

from awarl.protocol import Score


def ra_f1(precision: float, accuracy: float) -> float:
    """Harmonic mean of precision and accuracy; 0 when both are 0.

    >>> ra_f1(0.8, 0.4)
    0.5333333333333333
    >>> ra_f1(0.0, 0.0)
    0.0
    """
    total = precision + accuracy
    return 0.0 if total == 0 else 2 * precision * accuracy / total


@dataclass(frozen=True)
class Metrics:
    n: int
    answered: int
    abstained: int
    correct: int
    unparsable: int
    precision: float
    accuracy: float
    ra_f1: float
    refusal_rate: float
    em: float
    f1: float
    n_unanswerable: int = 0
    abstain_recall: float | None = None
    over_refusal: float | None = None

    def to_dict(self) -> dict:
        return asdict(self)


def compute_metrics(scores: Sequence[Score], answerable: Sequence[bool] | None = None) -> Metrics:
    """Metrics of one set of scored answers. ``answerable`` (aligned with ``scores``) enables
    abstain-recall and over-refusal; without it every question counts as answerable."""
    n = len(scores)
    flags = list(answerable) if answerable is not None else [True] * n
    if len(flags) != n:
        raise ValueError(f"{n} scores but {len(flags)} answerable flags")
    answered = sum(s.answered for s in scores)
    abstained = sum(s.outcome == "abstain" for s in scores)
    correct = sum(s.correct for s in scores)
    precision = correct / answered if answered else 0.0
    accuracy = correct / n if n else 0.0
    n_unans = sum(not f for f in flags)
    n_ans = n - n_unans
    abst_unans = sum(s.outcome == "abstain" and not f for s, f in zip(scores, flags))
    abst_ans = sum(s.outcome == "abstain" and f for s, f in zip(scores, flags))
    return Metrics(
        n=n,
        answered=answered,
        abstained=abstained,
        correct=correct,
        unparsable=sum(s.outcome == "unparsable" for s in scores),
        precision=precision,
        accuracy=accuracy,
        ra_f1=ra_f1(precision, accuracy),
        refusal_rate=abstained / n if n else 0.0,
        em=sum(s.em for s in scores) / n if n else 0.0,
        f1=sum(s.f1 for s in scores) / n if n else 0.0,
        n_unanswerable=n_unans,
        abstain_recall=abst_unans / n_unans if n_unans else None,
        over_refusal=abst_ans / n_ans if (n_unans and n_ans) else None,
    )


MACRO_FIELDS = ("precision", "accuracy", "ra_f1", "refusal_rate", "em", "f1", "abstain_recall", "over_refusal")


def macro_average(per_dataset: Mapping[str, Metrics]) -> dict[str, float | int | None]:
    """Mean of each rate over data sets (counts are summed). RA-F1 is averaged per data set, not
    recomputed from the averaged P and A, matching the paper's tables."""
    rows = list(per_dataset.values())
    out: dict[str, float | int | None] = {k: sum(getattr(m, k) for m in rows) for k in ("n", "answered", "abstained", "correct")}
    for key in MACRO_FIELDS:
        values = [getattr(m, key) for m in rows if getattr(m, key) is not None]
        out[key] = sum(values) / len(values) if values else None
    return out


def by_dataset(items: Iterable[tuple[str, Score, bool]]) -> dict[str, Metrics]:
    """Group ``(dataset, score, answerable)`` triples and compute metrics per data set."""
    groups: dict[str, tuple[list[Score], list[bool]]] = {}
    for dataset, s, ok in items:
        scores, flags = groups.setdefault(dataset, ([], []))
        scores.append(s)
        flags.append(ok)
    return {name: compute_metrics(scores, flags) for name, (scores, flags) in groups.items()}
