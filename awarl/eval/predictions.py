"""Prediction files in the formats people already have, read and written.

Read (`load_predictions`):
- awarl JSONL: ``{"id": …, "answer": "…"}`` per line (abstention recognised by phrase);
- HotpotQA / 2WikiMultiHopQA official JSON: ``{"answer": {id: text}, "sp": …}``;
- MuSiQue official JSONL: ``{"id", "predicted_answer", "predicted_answerable", …}``, where
  ``predicted_answerable: false`` is an abstention. In MuSiQue-Full an id appears twice; the k-th
  prediction of an id pairs with the k-th record of that id in the data file.

Write (`write_official`): the benchmark's own format next to awarl's JSONL.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from awarl.protocol import ABSTAIN_PHRASE, format_final
from awarl.data.records import DataError, QARecord, iter_jsonl, write_jsonl


@dataclass(frozen=True)
class Prediction:
    """One prediction; ``where`` locates it in its file for error messages."""

    id: str
    answer: str
    where: str
    abstained: bool | None = None  # set when the format says so explicitly (MuSiQue)
    citations: list[str] = field(default_factory=list)

    def as_completion(self) -> str:
        """The prediction as a final message the protocol parser reads."""
        answer = ABSTAIN_PHRASE if self.abstained else self.answer
        return format_final(answer, self.citations)


def load_predictions(path: str | Path) -> list[Prediction]:
    """Read a predictions file in any supported format (detected from its content)."""
    path = Path(path)
    if not path.exists():
        raise DataError(path, "-", "file not found")
    text = path.read_text(encoding="utf-8")
    stripped = text.lstrip()
    if stripped.startswith("{") and "\n{" not in stripped.rstrip():
        try:
            obj = json.loads(text)
        except json.JSONDecodeError:
            obj = None
        if isinstance(obj, dict) and isinstance(obj.get("answer"), dict):
            return _from_hotpot_json(path, obj)
    preds = []
    for lineno, row in iter_jsonl(path):
        where = f"line {lineno}"
        if "id" not in row:
            raise DataError(path, where, "missing required field", "id")
        pid = str(row["id"])
        if "predicted_answer" in row or "predicted_answerable" in row:
            answer = row.get("predicted_answer", "")
            flag = row.get("predicted_answerable", True)
            if not isinstance(answer, str):
                raise DataError(path, where, f"expected a string, got {type(answer).__name__}", "predicted_answer")
            if not isinstance(flag, bool):
                raise DataError(path, where, f"expected true/false, got {flag!r}", "predicted_answerable")
            preds.append(Prediction(pid, answer, where, abstained=not flag))
        elif "answer" in row:
            if not isinstance(row["answer"], str):
                raise DataError(path, where, f"expected a string, got {type(row['answer']).__name__}", "answer")
            cites = row.get("citations", [])
            preds.append(Prediction(pid, row["answer"], where, citations=[str(c) for c in cites] if isinstance(cites, list) else []))
        else:
            raise DataError(path, where, "missing required field (one of 'answer', 'predicted_answer')", "answer")
    return preds


def _from_hotpot_json(path: Path, obj: dict) -> list[Prediction]:
    preds = []
    for key, value in obj["answer"].items():
        if not isinstance(value, str):
            raise DataError(path, f'"answer" entry {key!r}', f"expected a string, got {type(value).__name__}", "answer")
        preds.append(Prediction(str(key), value, f'"answer" entry {key!r}'))
    return preds


def match_predictions(records: Sequence[QARecord], preds: Sequence[Prediction], pred_path: str | Path) -> list[Prediction]:
    """Align predictions with records (same order as ``records``). A prediction may name a record
    by its awarl id or by its official id (``meta['official_id']``, MuSiQue-Full's repeated ids,
    matched in order). Unknown ids, duplicates and missing predictions are errors."""
    by_id = {r.id: i for i, r in enumerate(records)}
    by_official: dict[str, list[int]] = defaultdict(list)
    for i, r in enumerate(records):
        by_official[str(r.meta.get("official_id", r.id))].append(i)
    taken: dict[int, Prediction] = {}
    next_of: dict[str, int] = defaultdict(int)
    for pred in preds:
        if pred.id in by_id and by_id[pred.id] not in taken:
            idx = by_id[pred.id]
        elif pred.id in by_official:
            slots = by_official[pred.id]
            k = next_of[pred.id]
            while k < len(slots) and slots[k] in taken:
                k += 1
            if k >= len(slots):
                raise DataError(pred_path, pred.where, f"more predictions for id {pred.id!r} than records with it", "id")
            next_of[pred.id] = k + 1
            idx = slots[k]
        elif pred.id in by_id:
            raise DataError(pred_path, pred.where, f"duplicate prediction for id {pred.id!r}", "id")
        else:
            raise DataError(pred_path, pred.where, f"prediction id {pred.id!r} is not in the data", "id")
        taken[idx] = pred
    missing = [records[i].id for i in range(len(records)) if i not in taken]
    if missing:
        shown = ", ".join(missing[:5]) + (" …" if len(missing) > 5 else "")
        raise DataError(pred_path, "-", f"{len(missing)} of {len(records)} data ids have no prediction (first: {shown})", "id")
    return [taken[i] for i in range(len(records))]


def write_official(out_dir: str | Path, dataset: str, records: Sequence[QARecord], answers: Sequence[str],
                   abstained: Sequence[bool], citations: Sequence[Sequence[str]]) -> list[Path]:
    """Write predictions as awarl JSONL (``predictions.jsonl``) and in the benchmark's official
    format (HotpotQA / 2Wiki: ``pred.json``; MuSiQue: ``pred.jsonl``). Returns the written paths."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    rows = [
        {"id": r.id, "answer": ABSTAIN_PHRASE if ab else a, "abstained": bool(ab), "citations": list(c)}
        for r, a, ab, c in zip(records, answers, abstained, citations, strict=True)
    ]
    paths = [out / "predictions.jsonl"]
    write_jsonl(paths[0], rows)
    if dataset in ("hotpotqa", "2wiki"):
        official: dict = {"answer": {r.id: row["answer"] for r, row in zip(records, rows)},
                          "sp": {r.id: [] for r in records}}
        if dataset == "2wiki":
            official["evidence"] = {r.id: [] for r in records}
        paths.append(out / "pred.json")
        paths[-1].write_text(json.dumps(official, ensure_ascii=False), encoding="utf-8")
    elif dataset == "musique":
        paths.append(out / "pred.jsonl")
        write_jsonl(paths[-1], (
            {
                "id": r.meta.get("official_id", r.id),
                "predicted_answer": row["answer"],
                "predicted_support_idxs": [r.passages.index(c) for c in row["citations"] if c in r.passages],
                "predicted_answerable": not row["abstained"],
            }
            for r, row in zip(records, rows)
        ))
    return paths
