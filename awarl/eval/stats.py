"""How sure a metric is: bootstrap confidence intervals of a run's macro metrics, and a paired
comparison of two runs on the same questions.

Both resample *questions* with replacement, within each data set (the macro average weighs data
sets equally, so each keeps its size), and recompute the metrics with the one scorer's
`compute_metrics` / `macro_average`, so an interval is always about the number the report shows.
A paired comparison resamples the same question ids for both runs: the noise the two runs share
(which questions happen to be easy) cancels, and a difference smaller than a single run's
interval can still be real. The rule the fidelity study uses: a difference holds when its mean is
beyond 2 standard errors of the paired bootstrap (``beyond_2se``).
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from awarl.data.records import DataError, read_json
from awarl.eval.metrics import by_dataset, macro_average
from awarl.protocol import Score

METRICS = ("precision", "accuracy", "ra_f1", "refusal_rate", "abstain_recall", "over_refusal")
"""The macro metrics given an interval (abstain-recall and over-refusal where the data has unanswerable questions)."""


@dataclass(frozen=True)
class Question:
    """One scored question of a run."""

    id: str
    dataset: str
    score: Score
    answerable: bool


def run_questions(run_dir: str | Path) -> list[Question]:
    """The scored questions of an ``awarl eval run`` folder (its records and predictions, scored with
    the metric the run was made with)."""
    from awarl.eval.score import score_predictions

    run_dir = Path(run_dir)
    for name in ("records.jsonl", "predictions.jsonl"):
        if not (run_dir / name).exists():
            raise DataError(run_dir / name, "-", "missing: not a finished evaluation run folder (run `awarl eval run` first)")
    settings = read_json(run_dir / "run.json") if (run_dir / "run.json").exists() else {}
    rollout = (settings.get("rollout") or {}) if isinstance(settings, dict) else {}
    scored = score_predictions(run_dir / "records.jsonl", run_dir / "predictions.jsonl", metric=rollout.get("metric", "em"))
    return [Question(r.id, r.dataset, s, r.answerable) for r, s in zip(scored.records, scored.scores)]


def macro_metrics(questions: Sequence[Question]) -> dict[str, float | None]:
    """The report's macro metrics of these questions."""
    macro = macro_average(by_dataset((q.dataset, q.score, q.answerable) for q in questions))
    return {k: macro.get(k) for k in METRICS}


def _resample(by_set: dict[str, list[int]], rng: random.Random) -> list[int]:
    """Question indices drawn with replacement within each data set."""
    return [idx[rng.randrange(len(idx))] for idx in by_set.values() for _ in idx]


def _groups(questions: Sequence[Question]) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for i, q in enumerate(questions):
        out.setdefault(q.dataset, []).append(i)
    return out


def _interval(values: list[float], level: float) -> tuple[float, float]:
    values = sorted(values)
    lo = values[int((1 - level) / 2 * (len(values) - 1))]
    hi = values[int((1 + level) / 2 * (len(values) - 1))]
    return lo, hi


def _stderr(values: list[float]) -> float:
    mean = sum(values) / len(values)
    return (sum((v - mean) ** 2 for v in values) / max(len(values) - 1, 1)) ** 0.5


def bootstrap_ci(questions: Sequence[Question], *, samples: int = 1000, level: float = 0.95,
                 seed: int = 0) -> dict[str, dict[str, float | None]]:
    """Per metric: the value, and the percentile interval of ``samples`` bootstrap resamples.

    >>> qs = [Question(str(i), "toy", Score("correct" if i % 2 else "wrong", float(i % 2), float(i % 2)), True)
    ...       for i in range(40)]
    >>> ci = bootstrap_ci(qs, samples=200)["accuracy"]
    >>> ci["value"], ci["low"] < 0.5 < ci["high"]
    (0.5, True)
    """
    if not questions:
        raise DataError("-", "-", "no questions to resample")
    rng, by_set = random.Random(seed), _groups(questions)
    point = macro_metrics(questions)
    draws: dict[str, list[float]] = {k: [] for k in METRICS}
    for _ in range(samples):
        m = macro_metrics([questions[i] for i in _resample(by_set, rng)])
        for k in METRICS:
            if m[k] is not None:
                draws[k].append(m[k])
    out: dict[str, dict[str, Any]] = {}
    for k in METRICS:
        if point[k] is None or not draws[k]:
            out[k] = {"value": None, "low": None, "high": None}
            continue
        lo, hi = _interval(draws[k], level)
        out[k] = {"value": point[k], "low": lo, "high": hi}
    _exact_at_the_edges(out, questions, level)
    return out


def _rate_counts(questions: Sequence[Question]) -> dict[str, dict[str, tuple[int, int]]]:
    """Per rate, per data set: (successes, trials) — the binomial proportion behind each macro rate."""
    counts: dict[str, dict[str, tuple[int, int]]] = {k: {} for k in METRICS if k != "ra_f1"}
    for name, idx in _groups(questions).items():
        qs = [questions[i] for i in idx]
        answered = [q for q in qs if q.score.answered]
        unans = [q for q in qs if not q.answerable]
        ans = [q for q in qs if q.answerable]
        counts["precision"][name] = (sum(q.score.correct for q in answered), len(answered))
        counts["accuracy"][name] = (sum(q.score.correct for q in qs), len(qs))
        counts["refusal_rate"][name] = (sum(q.score.outcome == "abstain" for q in qs), len(qs))
        if unans:
            counts["abstain_recall"][name] = (sum(q.score.outcome == "abstain" for q in unans), len(unans))
            if ans:
                counts["over_refusal"][name] = (sum(q.score.outcome == "abstain" for q in ans), len(ans))
    return counts


def _exact_at_the_edges(out: dict[str, dict[str, Any]], questions: Sequence[Question], level: float) -> None:
    """A rate of 0 (or 1) on every data set has a percentile-bootstrap interval of [0, 0] (or [1, 1]):
    every resample repeats it, and the interval claims a certainty that 90 questions cannot give. There
    the bound comes from the exact (Clopper–Pearson) interval of each data set's count, 0 of n → upper
    1 − ((1 − level) / 2)^(1/n), averaged over data sets like the rate itself, and the entry is marked
    ``exact``. RA-F1 rises with both P and A, so its bound is RA-F1 of their bounds."""
    tail = (1 - level) / 2
    for key, per_set in _rate_counts(questions).items():
        ci = out.get(key)
        if not ci or ci["value"] is None or ci["low"] != ci["high"] or not per_set:
            continue
        trials = [n for _, n in per_set.values() if n]
        if not trials:
            continue
        if all(k == 0 for k, _ in per_set.values()):
            ci.update(low=0.0, high=sum(1 - tail ** (1 / n) for n in trials) / len(trials), exact=True)
        elif all(k == n for k, n in per_set.values()):
            ci.update(low=sum(tail ** (1 / n) for n in trials) / len(trials), high=1.0, exact=True)
    p, a, f = out.get("precision"), out.get("accuracy"), out.get("ra_f1")
    if f and f["value"] is not None and f["low"] == f["high"] and p and a and (p.get("exact") or a.get("exact")):
        from awarl.eval.metrics import ra_f1

        f.update(low=min(f["low"], ra_f1(p["low"], a["low"])), high=max(f["high"], ra_f1(p["high"], a["high"])),
                 exact=True)


def paired_comparison(a: Sequence[Question], b: Sequence[Question], *, samples: int = 1000, level: float = 0.95,
                      seed: int = 0) -> dict[str, dict[str, Any]]:
    """Per metric: ``b − a`` on the same questions, its paired-bootstrap interval and standard error,
    and whether the difference is beyond 2 standard errors. The runs must hold the same question ids."""
    ids_a, ids_b = [q.id for q in a], {q.id: q for q in b}
    if len(ids_a) != len(ids_b) or set(ids_a) != set(ids_b):
        only_a, only_b = set(ids_a) - set(ids_b), set(ids_b) - set(ids_a)
        raise DataError("-", "-", f"the runs hold different questions ({len(only_a)} only in the first, "
                        f"{len(only_b)} only in the second, e.g. {sorted(only_a or only_b)[:3]}); compare runs on the same data")
    b_aligned = [ids_b[i] for i in ids_a]
    rng, by_set = random.Random(seed), _groups(a)
    base_a, base_b = macro_metrics(a), macro_metrics(b_aligned)
    draws: dict[str, list[float]] = {k: [] for k in METRICS}
    for _ in range(samples):
        idx = _resample(by_set, rng)
        ma, mb = macro_metrics([a[i] for i in idx]), macro_metrics([b_aligned[i] for i in idx])
        for k in METRICS:
            if ma[k] is not None and mb[k] is not None:
                draws[k].append(mb[k] - ma[k])
    out: dict[str, dict[str, Any]] = {}
    for k in METRICS:
        if base_a[k] is None or base_b[k] is None or len(draws[k]) < 2:
            continue
        diff, se = base_b[k] - base_a[k], _stderr(draws[k])
        lo, hi = _interval(draws[k], level)
        out[k] = {"a": base_a[k], "b": base_b[k], "diff": diff, "low": lo, "high": hi, "stderr": se,
                  "beyond_2se": abs(diff) > 2 * se}
    return out


def _hash_file(digest: Any, path: Path) -> None:
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)


FINGERPRINT_VERSION = 3
"""What `fingerprint` hashes; 3 hashes the passages themselves, so an index and the corpus file it was built
from agree (2 hashed an index's id table and file sizes, which missed a text changed under the same ids;
1, which recorded no version, its meta and file sizes only). Fingerprints of two versions are not compared
(`awarl.eval.report.comparability_warnings`)."""


def fingerprint(index: str | Path | None = None, corpus: str | Path | None = None,
                records: str | Path | None = None) -> dict[str, Any] | None:
    """What identifies the passages a run searched, as a SHA-256 of every passage (id, title and text, in
    order) as an index folder stores them: the folder's passage file, or the same lines built from a corpus
    file's rows, so a run on an index and a run on the corpus it was built from get one fingerprint, and a
    changed text gets another. Where the run searched the data file's own passages, that file's bytes
    (``records``). None for a remote retriever."""
    from awarl.search.store import PASSAGES_FILE, PASSAGES_SHA_FILE, passage_line

    digest = hashlib.sha256()
    if index is not None and Path(index).is_dir():
        folder = Path(index)
        meta_path = folder / "awarl_index.json"
        meta = json.loads(meta_path.read_text(encoding="utf-8")) if meta_path.exists() else {}
        if not (folder / PASSAGES_FILE).is_file():
            return None
        try:  # the hash the store wrote with its passages, while the file is the one it hashed
            recorded = json.loads((folder / PASSAGES_SHA_FILE).read_text(encoding="utf-8"))
            sha = recorded["sha256"] if recorded["bytes"] == (folder / PASSAGES_FILE).stat().st_size else None
        except (OSError, ValueError, KeyError, TypeError):
            sha = None
        if sha is None:
            _hash_file(digest, folder / PASSAGES_FILE)
            sha = digest.hexdigest()
        return {"kind": "index", "sha256": sha, "passages": meta.get("passages"), "version": FINGERPRINT_VERSION}
    if corpus is not None and Path(corpus).is_file():
        from awarl.data.records import Passage, iter_jsonl

        count = 0
        for n, row in iter_jsonl(corpus):
            digest.update(passage_line(Passage.from_dict(row, path=corpus, where=f"line {n}"), errors="surrogatepass"))
            count += 1
        return {"kind": "corpus", "sha256": digest.hexdigest(), "passages": count, "version": FINGERPRINT_VERSION}
    if records is not None and Path(records).is_file():
        _hash_file(digest, Path(records))
        return {"kind": "records", "sha256": digest.hexdigest(), "version": FINGERPRINT_VERSION}
    return None
