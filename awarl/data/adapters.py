"""Official benchmark files -> `QARecord`s and `Passage`s.

Each adapter reads the file as published (HotpotQA and 2WikiMultiHopQA: a JSON list; MuSiQue and
FlashRAG: JSONL) and reports bad input with the file, the index or line, and the field. The
passages of all questions are pooled and deduplicated by content, so the same paragraph shared
by two questions gets one stable id.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from awarl.data.records import DataError, Passage, QARecord, iter_jsonl, passage_id, read_json

DATASETS = ("hotpotqa", "2wiki", "musique", "flashrag")

# Hub names for `load_hub`; local files are the tested path, these need a network.
HUB_NAMES: dict[str, tuple[str, str | None]] = {
    "hotpotqa": ("hotpotqa/hotpot_qa", "distractor"),
    "2wiki": ("framolfese/2WikiMultihopQA", None),
    "musique": ("bdsaglam/musique", "answerable"),
    "flashrag": ("RUC-NLPIR/FlashRAG_datasets", "hotpotqa"),
}


class CorpusBuilder:
    """Collects passages, deduplicated by (title, text), in first-seen order."""

    def __init__(self) -> None:
        self._by_id: dict[str, Passage] = {}

    def add(self, title: str, text: str) -> str:
        pid = passage_id(title, text)
        self._by_id.setdefault(pid, Passage(pid, title, text))
        return pid

    @property
    def passages(self) -> list[Passage]:
        return list(self._by_id.values())


def _field(row: dict[str, Any], name: str, kind: type | tuple[type, ...], path: Path, where: str) -> Any:
    if not isinstance(row, dict):
        raise DataError(path, where, f"expected a JSON object, got {type(row).__name__}")
    if name not in row:
        raise DataError(path, where, "missing required field", name)
    value = row[name]
    if not isinstance(value, kind):
        kinds = kind if isinstance(kind, tuple) else (kind,)
        raise DataError(path, where, f"expected {'/'.join(k.__name__ for k in kinds)}, got {type(value).__name__}", name)
    return value


def _json_list(path: Path) -> list[Any]:
    data = read_json(path)
    if not isinstance(data, list):
        raise DataError(path, "top level", f"expected a JSON list of examples, got {type(data).__name__}")
    return data


def _wiki_style(rows: Iterable[tuple[str, Any]], path: Path, dataset: str) -> tuple[list[QARecord], list[Passage]]:
    """HotpotQA and 2WikiMultiHopQA share `context` = [[title, [sentences]]] and
    `supporting_facts` = [[title, sentence index]]."""
    corpus = CorpusBuilder()
    records = []
    for where, row in rows:
        qid = _field(row, "_id", str, path, where)
        question = _field(row, "question", str, path, where)
        answer = _field(row, "answer", str, path, where)
        context = _field(row, "context", list, path, where)
        facts = _field(row, "supporting_facts", list, path, where)
        ids_by_title: dict[str, str] = {}
        passages = []
        for j, item in enumerate(context):
            if not (isinstance(item, list) and len(item) == 2 and isinstance(item[0], str) and isinstance(item[1], list)):
                raise DataError(path, f"{where}, context[{j}]", "expected [title, [sentences]]", "context")
            title, sentences = item
            pid = corpus.add(title, "".join(s for s in sentences if isinstance(s, str)).strip())
            ids_by_title.setdefault(title, pid)
            passages.append(pid)
        supporting = []
        for j, fact in enumerate(facts):
            if not (isinstance(fact, list) and fact and isinstance(fact[0], str)):
                raise DataError(path, f"{where}, supporting_facts[{j}]", "expected [title, sentence index]", "supporting_facts")
            pid = ids_by_title.get(fact[0])
            if pid is None:
                raise DataError(path, f"{where}, supporting_facts[{j}]", f"title {fact[0]!r} is not in the context", "supporting_facts")
            if pid not in supporting:
                supporting.append(pid)
        meta = {k: row[k] for k in ("type", "level") if k in row}
        records.append(QARecord(qid, question, [answer], dataset, True, supporting, list(dict.fromkeys(passages)), meta))
    return records, corpus.passages


def load_hotpotqa(path: str | Path) -> tuple[list[QARecord], list[Passage]]:
    """HotpotQA (distractor or fullwiki): a JSON list of {_id, question, answer, context, supporting_facts, ...}."""
    path = Path(path)
    return _wiki_style(((f"example {i} (index {i})", row) for i, row in enumerate(_json_list(path))), path, "hotpotqa")


def load_2wiki(path: str | Path) -> tuple[list[QARecord], list[Passage]]:
    """2WikiMultiHopQA: the same context / supporting_facts shape as HotpotQA."""
    path = Path(path)
    return _wiki_style(((f"example {i} (index {i})", row) for i, row in enumerate(_json_list(path))), path, "2wiki")


def load_musique(path: str | Path) -> tuple[list[QARecord], list[Passage]]:
    """MuSiQue-Ans or MuSiQue-Full JSONL. In Full every id appears twice, once with
    ``answerable: false``; the records keep the official id in ``meta["official_id"]`` and the
    unanswerable copy gets the id ``<id>#unanswerable`` so ids stay unique downstream."""
    path = Path(path)
    corpus = CorpusBuilder()
    records = []
    seen: set[str] = set()
    for lineno, row in iter_jsonl(path):
        where = f"line {lineno}"
        qid = _field(row, "id", str, path, where)
        question = _field(row, "question", str, path, where)
        answer = _field(row, "answer", str, path, where)
        aliases = row.get("answer_aliases", [])
        if not isinstance(aliases, list) or not all(isinstance(a, str) for a in aliases):
            raise DataError(path, where, "expected a list of strings", "answer_aliases")
        answerable = row.get("answerable", True)
        if not isinstance(answerable, bool):
            raise DataError(path, where, f"expected true/false, got {answerable!r}", "answerable")
        paragraphs = _field(row, "paragraphs", list, path, where)
        passages, supporting = [], []
        for j, par in enumerate(paragraphs):
            title = _field(par, "title", str, path, f"{where}, paragraphs[{j}]")
            text = _field(par, "paragraph_text", str, path, f"{where}, paragraphs[{j}]")
            pid = corpus.add(title, text)
            passages.append(pid)
            if par.get("is_supporting") is True:
                supporting.append(pid)
        uid = qid if answerable else f"{qid}#unanswerable"
        if uid in seen:
            raise DataError(path, where, f"id {qid!r} appears twice with the same answerable flag", "id")
        seen.add(uid)
        answers = list(dict.fromkeys([answer, *aliases]))
        meta = {"official_id": qid}
        if "question_decomposition" in row:
            meta["hops"] = len(row["question_decomposition"])
        records.append(QARecord(uid, question, answers, "musique", answerable, supporting,
                                list(dict.fromkeys(passages)), meta))
    return records, corpus.passages


def load_flashrag(path: str | Path) -> tuple[list[QARecord], list[Passage]]:
    """FlashRAG JSONL: {id, question, golden_answers}. It carries no passages: pair it with a
    corpus of your own and search in ``global`` scope."""
    path = Path(path)
    records = []
    for lineno, row in iter_jsonl(path):
        where = f"line {lineno}"
        qid = _field(row, "id", (str, int), path, where)
        question = _field(row, "question", str, path, where)
        golds = _field(row, "golden_answers", list, path, where)
        if not golds or not all(isinstance(g, str) for g in golds):
            raise DataError(path, where, "expected a non-empty list of strings", "golden_answers")
        meta = row.get("metadata") if isinstance(row.get("metadata"), dict) else {}
        records.append(QARecord(str(qid), question, list(golds), "flashrag", True, [], [], dict(meta)))
    return records, []


LOADERS: dict[str, Callable[[str | Path], tuple[list[QARecord], list[Passage]]]] = {
    "hotpotqa": load_hotpotqa,
    "2wiki": load_2wiki,
    "musique": load_musique,
    "flashrag": load_flashrag,
}


def load_dataset_file(dataset: str, path: str | Path) -> tuple[list[QARecord], list[Passage]]:
    """Read an official file of ``dataset`` (one of `DATASETS`)."""
    if dataset not in LOADERS:
        raise ValueError(f"unknown dataset {dataset!r}; choose one of {', '.join(DATASETS)}")
    return LOADERS[dataset](path)


def load_hub(dataset: str, split: str = "validation", cache_dir: str | None = None) -> tuple[list[QARecord], list[Passage]]:
    """Load through `datasets` by hub name (needs a network or a warm HF cache), then run the
    same adapter on the rows written as the official local format."""
    import tempfile

    from datasets import load_dataset

    name, config = HUB_NAMES[dataset]
    rows = load_dataset(name, config, split=split, cache_dir=cache_dir)
    with tempfile.TemporaryDirectory() as tmp:
        target = Path(tmp) / ("data.json" if dataset in ("hotpotqa", "2wiki") else "data.jsonl")
        if target.suffix == ".json":
            target.write_text(json.dumps([_hub_row_to_official(dataset, r) for r in rows]), encoding="utf-8")
        else:
            target.write_text("".join(json.dumps(dict(r)) + "\n" for r in rows), encoding="utf-8")
        return load_dataset_file(dataset, target)


def _hub_row_to_official(dataset: str, row: dict[str, Any]) -> dict[str, Any]:
    """The hub's parquet rows store context as {title: [...], sentences: [...]}; undo that."""
    out = dict(row)
    if "id" in out and "_id" not in out:
        out["_id"] = out.pop("id")
    ctx = out.get("context")
    if isinstance(ctx, dict):
        out["context"] = [[t, s] for t, s in zip(ctx["title"], ctx["sentences"])]
    facts = out.get("supporting_facts")
    if isinstance(facts, dict):
        out["supporting_facts"] = [[t, i] for t, i in zip(facts["title"], facts["sent_id"])]
    return out
