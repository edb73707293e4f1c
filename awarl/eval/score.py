"""Score a predictions file against a data file with the one protocol scorer.

Predictions are plain answers: they are scored as text (`Prediction.parsed`), not passed through
the ``<answer>`` parser that reads model completions.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from awarl.protocol import DEFAULT_REFUSAL_PHRASES, Score, score
from awarl.data.adapters import load_dataset_file
from awarl.data.records import DataError, QARecord, iter_jsonl, load_records
from awarl.eval.metrics import Metrics, by_dataset, compute_metrics, macro_average
from awarl.eval.predictions import load_predictions, match_predictions

log = logging.getLogger(__name__)


def load_eval_data(path: str | Path, dataset: str | None = None) -> list[QARecord]:
    """Records from a prepared ``records.jsonl`` or from an official data file of ``dataset``."""
    path = Path(path)
    if path.suffix == ".jsonl" and path.is_file():
        first = next(iter_jsonl(path), None)
        if first is not None and {"answers", "dataset"} <= set(first[1]):
            return load_records(path)
        if first is None and dataset is None:
            return []  # an empty records.jsonl: 0 records, which the caller warns about
    if dataset is None:
        raise DataError(path, "", "not a records.jsonl; pass --dataset to read it as an official file")
    return load_dataset_file(dataset, path)[0]


@dataclass(frozen=True)
class ScoredRun:
    records: list[QARecord]
    scores: list[Score]
    metrics: Metrics
    per_dataset: dict[str, Metrics]
    macro: dict


def score_predictions(
    data: str | Path,
    predictions: str | Path,
    dataset: str | None = None,
    *,
    metric: Literal["em", "f1"] = "em",
    phrases: tuple[str, ...] = DEFAULT_REFUSAL_PHRASES,
) -> ScoredRun:
    """Match predictions to records and score every one; MuSiQue-Full copies are scored against
    their own ``answerable`` flag."""
    records = load_eval_data(data, dataset)
    if not records:
        log.warning("%s holds 0 records: nothing was scored, and every metric below is 0 by convention", data)
    preds = match_predictions(records, load_predictions(predictions), predictions)
    scores = [
        score(p.parsed(phrases), r.answers, answerable=r.answerable, metric=metric)
        for r, p in zip(records, preds)
    ]
    per = by_dataset((r.dataset, s, r.answerable) for r, s in zip(records, scores))
    return ScoredRun(records, scores, compute_metrics(scores, [r.answerable for r in records]), per, macro_average(per))
