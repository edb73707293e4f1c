"""``awarl eval run``: run the agent over evaluation data, write predictions and score them.

A run folder holds:

- ``run.json``: the settings (model, retrieval, sampling, budgets);
- ``records.jsonl``: the records evaluated (so ``awarl eval score --data DIR/records.jsonl`` works);
- ``trajectories.jsonl``: one line per question, appended as each finishes (an interrupted run
  resumes from it, aligned to whole chunks: `awarl.agent.stage`; a finished question is never
  written twice, and a sampled run, ``temperature > 0``, resumes to exactly the rows of an
  uninterrupted one); one run writes a folder at a time;
- ``predictions.jsonl`` (all data sets, awarl JSONL) and ``predictions/<dataset>/`` in each
  benchmark's official format;
- ``metrics.json``: the scorer's numbers per data set and macro-averaged, plus searches per
  question, stop reasons and citation integrity.

Metrics come from scoring the written predictions exactly as ``awarl eval score`` does, so the
two can never disagree.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from awarl.agent.settings import RolloutSettings
from awarl.agent.stage import OutputLock, StageConfig, read_rows, run_stage
from awarl.data.records import Passage, QARecord, check_unique_ids, iter_jsonl, read_json, write_jsonl
from awarl.errors import ConfigError, DataError


@dataclass
class EvalConfig(StageConfig):
    """One evaluation run. ``data`` is a prepared records.jsonl (any mix of data sets) or an official
    data file (with ``dataset``); ``out`` is the run folder; ``corpus`` defaults to the one beside
    ``data``, else the data file's own passages; ``temperature`` 0 is greedy (the default)."""

    dataset: str | None = None
    """Format of ``data`` when it is an official file: a name in `awarl.data.adapters.FORMATS`."""
    name: str | None = None
    """Run name in reports (default: the folder name)."""
    limit: int | None = None
    """Evaluate only the first N questions of each data set."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.limit is not None and self.limit < 1:
            raise ConfigError(f"limit must be >= 1, got {self.limit}")
        if self.dataset is not None:
            from awarl.data.adapters import get_format

            get_format(self.dataset)

    def settings(self) -> dict[str, Any]:
        row = asdict(self)
        row["rollout"] = self.rollout.resolved()
        return {k: str(v) if isinstance(v, Path) else v for k, v in row.items()}


@dataclass
class EvalResult:
    out: Path
    metrics: dict[str, Any]
    evaluated: int
    skipped: int
    seconds: float


def load_data(config: EvalConfig) -> tuple[list[QARecord], list[Passage] | None]:
    """Records to evaluate (first ``limit`` per data set) and, for an official file, its passages."""
    from awarl.data.adapters import load_dataset_file
    from awarl.eval.score import load_eval_data

    passages = None
    if config.dataset is not None and not _is_records_file(config.data):
        records, passages = load_dataset_file(config.dataset, config.data)
    else:
        records = load_eval_data(config.data, config.dataset)
    if config.limit is not None:
        kept: dict[str, int] = {}
        limited = []
        for r in records:
            kept[r.dataset] = kept.get(r.dataset, 0) + 1
            if kept[r.dataset] <= config.limit:
                limited.append(r)
        records = limited
    check_unique_ids(config.data, ((r.id, f"record {n}") for n, r in enumerate(records, start=1)))
    if not records:
        raise DataError(config.data, "-", "no records to evaluate")
    return records, passages


def _is_records_file(path: Path) -> bool:
    if path.suffix != ".jsonl" or not path.exists():
        return False
    first = next(iter_jsonl(path), None)
    return first is not None and {"answers", "dataset"} <= set(first[1])


def run_eval(config: EvalConfig, *, backend: Any = None, progress: bool = True) -> EvalResult:
    """Run (or resume) an evaluation, then write predictions and metrics."""
    from awarl.agent.setup import check_scope, resolve_retriever

    records, passages = load_data(config)
    out = config.out
    out.mkdir(parents=True, exist_ok=True)
    traj_path = out / "trajectories.jsonl"
    with OutputLock(out, folder=True):
        done = read_rows(traj_path, "record_id")
        # A folder with finished questions pins its questions and settings; one whose earlier start failed
        # before any question finished does not block the corrected rerun.
        _pin_records(out / "records.jsonl", records, resuming=bool(done))
        _pin_settings(out / "run.json", config, resuming=bool(done))
        todo = [r for r in records if r.id not in done]
        check_scope(todo, config.rollout.scope, config.data)
        retriever = resolve_retriever(config.index, config.corpus, config.retriever_url, data=config.data,
                                      passages=passages)

        def row_of(record: QARecord, group: list[Any]) -> dict[str, Any]:
            return {**group[0].to_dict(), "p": record.meta.get("p"), "answerable": record.answerable}

        run = run_stage(config, records, traj_path, done=done, samples=1, row_of=row_of, retriever=retriever,
                        backend=backend, label="eval", unit="questions", progress=progress)
        metrics = write_predictions_and_metrics(config, records, read_rows(traj_path, "record_id"), retriever)
    return EvalResult(out, metrics, len(todo), len(records) - len(todo), run.seconds)


def _pin_records(path: Path, records: Sequence[QARecord], *, resuming: bool) -> None:
    """Write the evaluated records; a resumed run must be over the same questions."""
    if path.exists() and resuming:
        before = [row.get("id") for _, row in iter_jsonl(path)]
        if before != [r.id for r in records]:
            raise DataError(path, "-", "this run folder holds a run over other questions; use a new --out "
                            "(or the same --data / --dataset / --limit as before)")
        return
    write_jsonl(path, (r.to_dict() for r in records))


RESULT_SETTINGS = ("model", "index", "corpus", "retriever_url", "rollout", "temperature", "seed")
"""Settings that change what a run produces: resuming with others would mix two runs in one folder."""


def _pin_settings(path: Path, config: EvalConfig, *, resuming: bool) -> None:
    settings = config.settings()
    if path.exists() and resuming:
        before = read_json(path)
        if not isinstance(before, dict):
            raise DataError(path, "-", "not a run settings file (expected a JSON object); use a new --out")
        changed = [f"{k}: {before[k]!r} -> {settings[k]!r}" for k in RESULT_SETTINGS
                   if k in before and k != "rollout" and before[k] != settings[k]]
        if isinstance(before.get("rollout"), dict):
            changed += RolloutSettings.from_dict(before["rollout"], f"{path}: rollout").mismatch(config.rollout, " -> ")
        else:
            changed.append("rollout: not recorded")
        if changed:
            raise DataError(path, "-", "this run folder holds a run with other settings "
                            f"({'; '.join(changed)}); use a new --out")
    path.write_text(json.dumps(settings, indent=2) + "\n", encoding="utf-8")


def write_predictions_and_metrics(config: EvalConfig, records: Sequence[QARecord], trajectories: dict[str, dict[str, Any]],
                                  retriever: Any) -> dict[str, Any]:
    """Predictions (awarl JSONL + official formats), scored with the one scorer, plus run statistics."""
    from awarl.eval.predictions import write_official
    from awarl.eval.score import score_predictions
    from awarl.agent.setup import searched_corpus
    from awarl.eval.stats import fingerprint

    corpus = searched_corpus(config.index, config.corpus, config.retriever_url, config.data)
    own = None if (config.index or config.retriever_url or corpus) else config.data  # the data file's own passages
    out = config.out
    rows = [trajectories[r.id] for r in records]
    answers = [t.get("answer") or "" for t in rows]  # no parsable answer is an empty answer: wrong, not an abstention
    abstained = [bool(t.get("abstained")) for t in rows]
    citations = [list(t.get("citations") or []) for t in rows]
    write_jsonl(out / "predictions.jsonl", (
        {"id": r.id, "answer": a, "abstained": ab, "citations": c}
        for r, a, ab, c in zip(records, answers, abstained, citations)
    ))
    groups: dict[str, list[int]] = {}
    for i, r in enumerate(records):
        groups.setdefault(r.dataset, []).append(i)
    for dataset, idx in groups.items():
        write_official(out / "predictions" / dataset, dataset, [records[i] for i in idx], [answers[i] for i in idx],
                       [abstained[i] for i in idx], [citations[i] for i in idx])
    scored = score_predictions(out / "records.jsonl", out / "predictions.jsonl", metric=config.rollout.metric,
                                phrases=config.rollout.phrases)

    def extras(idx: Sequence[int]) -> dict[str, Any]:
        return {**run_stats([rows[i] for i in idx]),
                **citation_integrity([records[i] for i in idx], [rows[i] for i in idx], retriever)}

    per_dataset = {name: {**m.to_dict(), **extras(groups[name])} for name, m in scored.per_dataset.items()}
    macro = dict(scored.macro)
    for key in ("searches_per_question", "fabricated_share", "unsupported_share", "unretrieved_share", "support_coverage",
                "all_support_share"):
        values = [d[key] for d in per_dataset.values() if d.get(key) is not None]
        macro[key] = sum(values) / len(values) if values else None
    metrics = {
        "name": config.name or out.name,
        "model": config.model,
        "settings": config.settings(),
        "recipe": checkpoint_hyperparameters(config.model),
        "fingerprint": fingerprint(config.index, corpus, records=own),
        "overall": {**scored.metrics.to_dict(), **extras(range(len(records)))},
        "per_dataset": per_dataset,
        "macro": macro,
    }
    (out / "metrics.json").write_text(json.dumps(metrics, indent=2) + "\n", encoding="utf-8")
    return metrics


def run_stats(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Searches per question, stop reasons, unparsable finals, tokens and time."""
    n = len(rows) or 1
    stops: dict[str, int] = {}
    for t in rows:
        stops[t["stop_reason"]] = stops.get(t["stop_reason"], 0) + 1
    return {
        "searches_per_question": sum(len(t.get("queries", [])) for t in rows) / n,
        "stop_reasons": stops,
        "no_parsable_answer": sum(t.get("answer") is None for t in rows),
        "completion_tokens_per_question": sum(t.get("completion_tokens", 0) for t in rows) / n,
        "seconds_per_question": sum(t.get("seconds", 0.0) for t in rows) / n,
    }


def citation_integrity(records: Sequence[QARecord], rows: Sequence[dict[str, Any]], retriever: Any) -> dict[str, Any]:
    """The VaaS citation error types over answered (non-abstained) questions.

    - fabricated share: cited ids that are not in the corpus, over all cited ids;
    - unretrieved share: cited passages that exist but that none of the answer's own searches returned
      (recalled from training or guessed, not read), over cited existing passages of rows that record
      what their searches returned (``retrieved_ids``);
    - unsupported share: cited passages that exist but are not among the question's gold
      supporting passages, over cited existing passages of questions that have gold support;
    - support coverage: the share of its gold supporting passages an answer cites, averaged over
      answered answerable questions with gold support; all-support share: right answers that cite
      every one of them (every hop: what lets a checker prove the answer from its citations alone).
    """
    from awarl.agent.setup import passage_exists

    cited = fabricated = checked = unsupported = answered = with_citation = traced = unretrieved = 0
    coverage: list[float] = []
    right_full: list[bool] = []
    for record, t in zip(records, rows):
        if t.get("abstained") or t.get("answer") is None:
            continue
        answered += 1
        cites = t.get("citations") or []
        with_citation += bool(cites)
        gold = set(record.supporting)
        if gold and record.answerable:
            coverage.append(len(gold & set(cites)) / len(gold))
            if t.get("outcome") == "correct":
                right_full.append(gold <= set(cites))
        returned = set(t["retrieved_ids"]) if "retrieved_ids" in t else None
        for pid in cites:
            cited += 1
            if not passage_exists(retriever, pid):
                fabricated += 1
                continue
            if returned is not None:
                traced += 1
                unretrieved += pid not in returned
            if gold:
                checked += 1
                unsupported += pid not in gold
    return {
        "citations": cited,
        "cited_answer_share": with_citation / answered if answered else None,
        "fabricated_share": fabricated / cited if cited else None,
        "unsupported_share": unsupported / checked if checked else None,
        "unretrieved_share": unretrieved / traced if traced else None,
        "support_coverage": sum(coverage) / len(coverage) if coverage else None,
        "all_support_share": sum(right_full) / len(right_full) if right_full else None,
    }


def checkpoint_hyperparameters(model: str) -> dict[str, Any] | None:
    """The reward and rollout settings a checkpoint was trained with (from the ``awarl_recipe.yaml`` awarl
    saves beside it), flattened as ``reward/gamma`` …, so reports compare runs by their settings."""
    from awarl.agent.settings import RECIPE_FILE
    from awarl.config_fields import read_yaml_file

    from awarl.llm.spec import checkpoint_folder

    folder = checkpoint_folder(model)
    if folder is None:
        return None
    for base in (folder, folder.parent):
        path = base / RECIPE_FILE
        if not path.is_file():
            continue
        try:
            raw = read_yaml_file(path) or {}
        except ConfigError:
            return None
        # the recipe's SFT stage writes <sft.output_dir, default output_dir/sft>/final: that checkpoint had no RL,
        # so the recipe's reward says nothing about it
        sft_dir = Path((raw.get("sft") or {}).get("output_dir") or Path(str(raw.get("output_dir") or ".")) / "sft")
        stage = "sft" if folder.name == "final" and folder.parent.name == sft_dir.name else "grpo"
        flat = {f"{section}/{key}": value for section in (("reward", "rollout") if stage == "grpo" else ("rollout",))
                for key, value in (raw.get(section) or {}).items()
                if isinstance(value, (int, float, str, bool)) and key != "system_prompt" and not key.startswith("judge")}
        flat["stage"] = stage
        flat["recipe"] = str(path)
        return flat
    return None
