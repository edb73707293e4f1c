"""What awarl writes, as the Hugging Face hub takes it: datasets with a dataset card, a model-index.

- A p_i table (``awarl capability estimate`` output) and an evaluation run folder (``awarl eval
  run`` output) become one ``datasets.Dataset`` each, one row per question, with a ``prompt``
  column (the conversation a rollout starts from, so ``trl grpo --dataset_name DIR`` trains on it)
  and awarl's columns (``answers``, ``answerable``, ``p``, ``supporting`` …). `save_hub_dataset`
  writes it twice, in the hub's layout (``README.md`` + ``data/<split>-00000-of-00001.parquet``,
  what ``datasets.load_dataset(DIR)`` and ``HfApi().upload_folder`` read) and as
  ``save_to_disk`` output under ``arrow/`` (``datasets.load_from_disk(DIR / "arrow")``).
- The dataset card records the provenance in its metadata under ``awarl:`` (the checkpoint, K,
  temperature and rollout settings of a p_i table; the model, sampling, rollout settings and
  metrics of an evaluation run) and says it in words.
- `model_index` turns evaluation runs (their ``metrics.json``) into the ``model-index`` entries
  of a model card: RA-F1, precision, accuracy and refusal rate per data set
  (awarl/train/export.py writes the card).

Publishing is the hub's own call, never made by awarl: ``HfApi().upload_folder(folder_path=DIR,
repo_id="you/name", repo_type="dataset")`` or ``datasets.load_dataset(str(DIR)).push_to_hub(…)``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from awarl.agent.settings import RolloutSettings
from awarl.data.records import DataError, QARecord, capability_value, iter_jsonl, read_json
from awarl.protocol import build_messages

CARD_KEY = "awarl"
"""The dataset card metadata key holding the provenance."""

METRICS = (("ra_f1", "RA-F1"), ("precision", "Precision"), ("accuracy", "Accuracy"), ("refusal_rate", "Refusal rate"))
"""The metrics of a model-index entry: (metrics.json key, name shown on the hub)."""

_OWN_COLUMNS = ("p", "capability")

_CAPABILITY_STATS = ("k", "correct", "wrong", "abstain", "unparsable", "em", "f1", "searches", "completion_tokens")


@dataclass
class HubDataset:
    """Rows for a ``datasets.Dataset``, the split they form and where they came from."""

    kind: str
    """``capability`` (a p_i table) or ``eval_run`` (an evaluation run)."""
    split: str
    rows: list[dict[str, Any]]
    provenance: dict[str, Any]
    source: str

    def dataset(self) -> Any:
        """The rows as a ``datasets.Dataset``."""
        from datasets import Dataset

        return Dataset.from_list(self.rows)


def _question_columns(record: QARecord, rollout: RolloutSettings) -> dict[str, Any]:
    return {
        "id": record.id,
        "prompt": build_messages(record.question, rollout.system_prompt),
        "question": record.question,
        "answers": list(record.answers),
        "dataset": record.dataset,
        "answerable": record.answerable,
        "supporting": list(record.supporting),
        "passages": list(record.passages),
        # Free-form, so one JSON string; p and the capability block have columns and the card of their own.
        "meta": json.dumps({k: v for k, v in record.meta.items() if k not in _OWN_COLUMNS}, ensure_ascii=False,
                           sort_keys=True),
    }


def capability_dataset(path: str | Path) -> HubDataset:
    """A p_i table as hub rows. Every row must be estimated with the same checkpoint, K, temperature
    and rollout settings (they become the card's provenance); a mix is an error naming the line."""
    path = Path(path)
    rows: list[dict[str, Any]] = []
    provenance: dict[str, Any] | None = None
    for lineno, raw in iter_jsonl(path):
        cap = raw.get("capability")
        if "p" not in raw or not isinstance(cap, dict):
            raise DataError(path, f"line {lineno}", "not a capability row (needs p and the capability block "
                            "that `awarl capability estimate` writes)", "capability")
        try:
            rollout = RolloutSettings.from_dict(cap.get("rollout") or {}, f"{path}: line {lineno}: capability.rollout")
        except ValueError as exc:
            raise DataError(path, f"line {lineno}", str(exc), "capability.rollout") from None
        here = {"checkpoint": cap.get("model"), "k": cap.get("k"), "temperature": cap.get("temperature"),
                "rollout": rollout.resolved()}
        if provenance is None:
            provenance = here
        elif here != provenance:
            changed = [k for k in here if here[k] != provenance[k]]
            raise DataError(path, f"line {lineno}", f"estimated with other {', '.join(changed)} than line 1; a "
                            "dataset holds one estimation run (merge shards of one run only)", f"capability.{changed[0]}")
        record = QARecord.from_dict(raw, path=path, where=f"line {lineno}")
        rows.append({**_question_columns(record, rollout), "p": capability_value(path, f"line {lineno}", raw["p"]),
                     **{f"rollouts_{name}": cap.get(name) for name in _CAPABILITY_STATS if name != "k"}})
    if provenance is None:
        raise DataError(path, "-", "no rows: nothing to convert")
    return HubDataset("capability", "train", rows, provenance, str(path))


def eval_run_dataset(run: str | Path) -> HubDataset:
    """An ``awarl eval run`` folder as hub rows: each question with the agent's prediction, its
    outcome under the one scorer (what ``awarl eval score`` counts), the searches it made and its
    whole trajectory (``messages``, a JSON string)."""
    from awarl.eval.score import score_predictions

    run = Path(run)
    for name in ("run.json", "records.jsonl", "predictions.jsonl", "trajectories.jsonl", "metrics.json"):
        if not (run / name).is_file():
            raise DataError(run / name, "-", "missing: not an `awarl eval run` folder (or the run has not finished)")
    settings = read_json(run / "run.json")
    metrics = read_json(run / "metrics.json")
    rollout = RolloutSettings.from_dict(settings.get("rollout") or {}, f"{run / 'run.json'}: rollout")
    scored = score_predictions(run / "records.jsonl", run / "predictions.jsonl", metric=rollout.metric,
                               phrases=rollout.phrases)
    trajectories = {row["record_id"]: row for _, row in iter_jsonl(run / "trajectories.jsonl")}
    rows = []
    for record, score in zip(scored.records, scored.scores):
        traj = trajectories.get(record.id)
        if traj is None:
            raise DataError(run / "trajectories.jsonl", "-", f"no trajectory for record {record.id!r}", "record_id")
        rows.append({**_question_columns(record, rollout), "p": traj.get("p"),
                     "prediction": traj.get("answer"), "abstained": bool(traj.get("abstained")),
                     "citations": list(traj.get("citations") or []), "outcome": score.outcome,
                     "em": score.em, "f1": score.f1, "searches": len(traj.get("queries") or []),
                     "stop_reason": traj.get("stop_reason"),
                     "messages": json.dumps(traj.get("messages") or [], ensure_ascii=False)})
    provenance = {"checkpoint": settings.get("model"), "temperature": settings.get("temperature"),
                  "seed": settings.get("seed"), "rollout": rollout.resolved(),
                  "retrieval": {k: settings.get(k) for k in ("index", "corpus", "retriever_url")},
                  "metrics": {"overall": _rates(metrics.get("overall") or {}),
                              "per_dataset": {k: _rates(v) for k, v in (metrics.get("per_dataset") or {}).items()},
                              "macro": _rates(metrics.get("macro") or {})}}
    return HubDataset("eval_run", "test", rows, provenance, str(run))


def _rates(metrics: dict[str, Any]) -> dict[str, Any]:
    keys = ("n", "precision", "accuracy", "ra_f1", "refusal_rate", "em", "f1", "abstain_recall", "over_refusal")
    return {k: metrics.get(k) for k in keys if k in metrics}


def dataset_card(ds: HubDataset, name: str) -> str:
    """README.md of a converted dataset: metadata (configs, tags, the provenance under ``awarl:``) and
    a few lines saying what the rows are and how they were made."""
    from huggingface_hub import DatasetCard, DatasetCardData

    data = DatasetCardData(
        pretty_name=name, tags=["awarl", "awa-rl", "abstention", "rag", "search-agent"],
        task_categories=["question-answering"], language=["en"],
        configs=[{"config_name": "default", "data_files": [{"split": ds.split, "path": f"data/{ds.split}-*.parquet"}]}],
        **{CARD_KEY: {"kind": ds.kind, **ds.provenance}})
    prov, rollout = ds.provenance, ds.provenance["rollout"]
    lines = [f"# {name}", ""]
    if ds.kind == "capability":
        lines += [f"Per-question capability p_i of `{prov['checkpoint']}`: the share of K = {prov['k']} sampled "
                  f"rollouts (temperature {prov['temperature']}) that awarl's scorer judged correct, under the "
                  "rollout settings below (the ones training must use). One row per question; `prompt` is the "
                  "conversation a rollout starts from, so TRL's `GRPOTrainer` and `trl grpo` read it as is.", ""]
    else:
        lines += [f"An evaluation of `{prov['checkpoint']}` (temperature {prov['temperature']}) with awarl's "
                  "search agent: one row per question with the prediction, its outcome under awarl's scorer, "
                  "the searches made and the whole trajectory (`messages`).", "",
                  "| | RA-F1 | precision | accuracy | refusal |", "|---|---|---|---|---|"]
        for label, m in [*prov["metrics"]["per_dataset"].items(), ("macro average", prov["metrics"]["macro"])]:
            lines.append(f"| {label} | " + " | ".join(cell(m.get(k)) for k in ("ra_f1", "precision", "accuracy",
                                                                               "refusal_rate")) + " |")
        lines.append("")
    lines += ["## Rollout settings", "", "| setting | value |", "|---|---|"]
    lines += [f"| {k} | {cell(v)} |" for k, v in rollout.items() if k != "system_prompt"]
    lines += ["", f"An answer of `{rollout['refusal_phrases'][0]}` (or another refusal phrase above) is an "
              "abstention. Written by `awarl export-dataset` from "
              f"`{Path(ds.source).name}`; the metadata key `{CARD_KEY}` holds all of this.", ""]
    return DatasetCard(f"---\n{data.to_yaml()}\n---\n\n" + "\n".join(lines)).content


def cell(value: Any) -> str:
    """A value as a Markdown table cell (dataset and model cards): 4 decimals, lists as code spans."""
    if isinstance(value, float):
        return f"{value:.4f}"
    if isinstance(value, (list, tuple)):
        return ", ".join(f"`{v}`" for v in value)
    return "n/a" if value is None else str(value).replace("|", "\\|")


def save_hub_dataset(ds: HubDataset, out: str | Path, name: str | None = None) -> Path:
    """Write ``out/README.md``, ``out/data/<split>-00000-of-00001.parquet`` and ``out/arrow/`` (save_to_disk)."""
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise DataError(out, "-", "is a file; the dataset goes into a folder")
    dataset = ds.dataset()
    (out / "data").mkdir(parents=True, exist_ok=True)
    dataset.to_parquet(str(out / "data" / f"{ds.split}-00000-of-00001.parquet"))
    dataset.save_to_disk(str(out / "arrow"))
    (out / "README.md").write_text(dataset_card(ds, name or out.name), encoding="utf-8")
    return out


def convert(source: str | Path) -> HubDataset:
    """A p_i table (a JSONL file) or an evaluation run (a folder), by what ``source`` is."""
    source = Path(source)
    if source.is_dir():
        return eval_run_dataset(source)
    if source.is_file():
        return capability_dataset(source)
    raise DataError(source, "-", "not found (expected a capability JSONL or an `awarl eval run` folder)")


def model_index(runs: Iterable[dict[str, Any]]) -> list[Any]:
    """``huggingface_hub.EvalResult`` entries (the card's ``model-index``) of evaluation runs:
    RA-F1, precision, accuracy and refusal rate of each data set of each run."""
    from huggingface_hub import EvalResult

    results = []
    for run in runs:
        for dataset, m in (run.get("per_dataset") or {}).items():
            for key, label in METRICS:
                if m.get(key) is None:
                    continue
                results.append(EvalResult(
                    task_type="question-answering", task_name="Question answering with abstention",
                    dataset_type=dataset, dataset_name=dataset, metric_type=key, metric_name=label,
                    metric_value=round(float(m[key]), 4)))
    return results


def read_eval_runs(folders: Sequence[str | Path]) -> list[dict[str, Any]]:
    """The ``metrics.json`` of each run folder (a missing or broken file is a `DataError`)."""
    out = []
    for folder in folders:
        path = Path(folder) / "metrics.json"
        if not path.is_file():
            raise DataError(path, "-", "missing: not a finished `awarl eval run` folder")
        metrics = read_json(path)
        if not isinstance(metrics, dict) or "per_dataset" not in metrics:
            raise DataError(path, "-", "not an awarl metrics file (no per_dataset)", "per_dataset")
        out.append(metrics)
    return out
