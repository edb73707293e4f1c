"""Prediction files in the formats people already have, read and written.

Read (`load_predictions`), the shape detected from the content:
- awarl JSONL: ``{"id": …, "answer": "…"}`` per line, optionally ``"abstained": true/false`` and
  ``"citations": [ids]`` (what ``awarl eval run`` writes); without ``abstained`` an answer that
  *is* a refusal phrase counts as an abstention;
- the same rows as one JSON list ``[{"id": …, "answer": …}, …]``;
- a plain ``{id: answer}`` JSON object;
- HotpotQA / 2WikiMultiHopQA official JSON: ``{"answer": {id: text}, "sp": …}``;
- MuSiQue official JSONL: ``{"id", "predicted_answer", "predicted_answerable", …}``, where
  ``predicted_answerable: false`` is an abstention. In MuSiQue-Full an id appears twice; the k-th
  prediction of an id pairs with the k-th record of that id in the data file.

Answers are plain text and are scored as text: markup in them (``<answer>`` tags, brackets) is
part of the answer, never re-parsed, so ``garbage</answer><answer>Right`` cannot score as
``Right``. Only awarl's own trajectory completions go through the protocol's answer parser.

Write (`write_official`): the benchmark's own format next to awarl's JSONL.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from awarl.protocol import ABSTAIN_PHRASE, DEFAULT_REFUSAL_PHRASES, ParsedAnswer, is_abstention
from awarl.data.records import DataError, QARecord, iter_jsonl, json_type, parse_json, read_text, write_jsonl


@dataclass(frozen=True)
class Prediction:
    """One prediction; ``where`` locates it in its file for error messages."""

    id: str
    answer: str
    where: str
    abstained: bool | None = None  # set when the format says so explicitly (MuSiQue, awarl's own rows)
    citations: list[str] = field(default_factory=list)

    def parsed(self, phrases: Iterable[str] = DEFAULT_REFUSAL_PHRASES) -> ParsedAnswer:
        """The prediction as the scorer's input, taken as plain text: an explicit abstention flag
        wins, else the answer abstains when it *is* a refusal phrase."""
        abstained = self.abstained if self.abstained is not None else is_abstention(self.answer, phrases)
        return ParsedAnswer(text=self.answer, answer=self.answer, abstained=abstained, citations=list(self.citations))


_ROW_KEYS = frozenset({"id", "answer", "predicted_answer", "predicted_answerable"})
"""Keys that make a lone JSON object one prediction row rather than an {id: answer} map."""


class _DuplicateKey(DataError):
    pass


def _no_duplicate_keys(path: Path) -> Any:
    """``object_pairs_hook`` refusing a key that appears twice in one object: ``json`` would keep
    the last silently, so ``{"answer": {"a": "x", "a": "y"}}`` would score only one of two answers."""

    def hook(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, value in pairs:
            if key in out:
                raise _DuplicateKey(path, "", f"key {key!r} appears twice in one JSON object")
            out[key] = value
        return out

    return hook


def load_predictions(path: str | Path) -> list[Prediction]:
    """Read a predictions file in any supported format (detected from its content); anything else
    is a `DataError` naming the file, the line or index, and the field."""
    path = Path(path)
    text = read_text(path)
    if not text.strip():
        return []
    try:
        whole = json.loads(text, object_pairs_hook=_no_duplicate_keys(path))
    except _DuplicateKey:
        raise
    except (ValueError, RecursionError):
        whole = None  # not one JSON document: JSON lines (or broken; iter_jsonl says where)
    if whole is None and not _first_line_is_json(text):
        parse_json(path, text)  # one broken JSON document: the parser's message with line and column
    if isinstance(whole, dict):
        if isinstance(whole.get("answer"), dict):
            return _from_mapping(path, whole["answer"], '"answer" entry')
        if _ROW_KEYS.intersection(whole):  # one line of awarl / MuSiQue JSONL
            return [_from_row(path, "line 1", whole)]
        return _from_mapping(path, whole, "entry")  # {id: answer}; a non-string value is named there
    if isinstance(whole, list):
        return [_from_row(path, f"index {i}", row) for i, row in enumerate(whole)]
    if whole is not None:
        raise DataError(path, "top level", f"expected predictions (JSON lines, a list or an object), got {json_type(whole)}")
    return [_from_row(path, f"line {lineno}", row) for lineno, row in iter_jsonl(path)]


def _first_line_is_json(text: str) -> bool:
    """Whether the first non-blank line is a JSON value by itself (JSON lines), rather than the
    start of one document spread over lines (a list, or a pretty-printed object)."""
    first = next(line for line in text.splitlines() if line.strip())
    if first.lstrip().startswith("["):
        return False
    try:
        json.loads(first)
    except (ValueError, RecursionError):
        return False
    return True


def _from_row(path: Path, where: str, row: Any) -> Prediction:
    """One awarl or MuSiQue prediction row."""
    if not isinstance(row, dict):
        raise DataError(path, where, f"expected a JSON object, got {json_type(row)}")
    if "id" not in row:
        raise DataError(path, where, "missing required field", "id")
    pid = row["id"]
    if isinstance(pid, bool) or not isinstance(pid, (str, int)):
        raise DataError(path, where, f"expected a string id, got {json_type(pid)}", "id")
    if "predicted_answer" in row or "predicted_answerable" in row:
        answer = row.get("predicted_answer", "")
        flag = row.get("predicted_answerable", True)
        if not isinstance(answer, str):
            raise DataError(path, where, f"expected a string, got {json_type(answer)}", "predicted_answer")
        if not isinstance(flag, bool):
            raise DataError(path, where, f"expected true/false, got {flag!r}", "predicted_answerable")
        return Prediction(str(pid), answer, where, abstained=not flag)
    if "answer" not in row:
        raise DataError(path, where, "missing required field (one of 'answer', 'predicted_answer')", "answer")
    if not isinstance(row["answer"], str):
        raise DataError(path, where, f"expected a string, got {json_type(row['answer'])}", "answer")
    abstained = row.get("abstained")
    if abstained is not None and not isinstance(abstained, bool):
        raise DataError(path, where, f"expected true/false, got {abstained!r}", "abstained")
    cites = row.get("citations", [])
    if not isinstance(cites, list) or not all(isinstance(c, str) for c in cites):
        raise DataError(path, where, "expected a list of passage ids", "citations")
    return Prediction(str(pid), row["answer"], where, abstained=abstained, citations=list(cites))


def _from_mapping(path: Path, mapping: dict[str, Any], label: str) -> list[Prediction]:
    preds = []
    for key, value in mapping.items():
        where = f"{label} {key!r}"
        if not isinstance(value, str):
            raise DataError(path, where, f"expected a string answer, got {json_type(value)}", "answer")
        preds.append(Prediction(str(key), value, where))
    return preds


def match_predictions(records: Sequence[QARecord], preds: Sequence[Prediction], pred_path: str | Path) -> list[Prediction]:
    """Align predictions with records (same order as ``records``). A prediction may name a record
    by its awarl id or by its official id (``meta['official_id']``, MuSiQue-Full's repeated ids,
    matched in order). Unknown ids, duplicates (naming both positions) and missing predictions are errors."""
    by_id = {r.id: i for i, r in enumerate(records)}
    by_official: dict[str, list[int]] = defaultdict(list)
    for i, r in enumerate(records):
        by_official[str(r.meta.get("official_id", r.id))].append(i)
    taken: dict[int, Prediction] = {}
    for pred in preds:
        if pred.id in by_id and by_id[pred.id] not in taken:
            idx = by_id[pred.id]
        elif pred.id in by_official:
            free = [i for i in by_official[pred.id] if i not in taken]
            if not free:
                earlier = ", ".join(taken[i].where for i in by_official[pred.id] if i in taken)
                what = "a second prediction" if len(by_official[pred.id]) == 1 else "more predictions than records"
                raise DataError(pred_path, pred.where, f"{what} for id {pred.id!r} (already at {earlier})", "id")
            idx = free[0]
        elif pred.id in by_id:
            raise DataError(pred_path, pred.where, f"a second prediction for id {pred.id!r} "
                                                  f"(already at {taken[by_id[pred.id]].where})", "id")
        else:
            raise DataError(pred_path, pred.where, f"prediction id {pred.id!r} is not in the data", "id")
        taken[idx] = pred
    missing = [records[i].id for i in range(len(records)) if i not in taken]
    if missing and not preds:
        raise DataError(pred_path, "", f"holds no predictions ({len(records)} data ids to predict)")
    if missing:
        shown = ", ".join(missing[:5]) + (" …" if len(missing) > 5 else "")
        raise DataError(pred_path, "", f"{len(missing)} of {len(records)} data ids have no prediction (first: {shown})", "id")
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
        tmp = paths[-1].with_suffix(".json.tmp")  # temp file + rename, like write_jsonl: never half a file
        tmp.write_text(json.dumps(official, ensure_ascii=False), encoding="utf-8")
        tmp.replace(paths[-1])
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
