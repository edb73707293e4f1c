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

from awarl.data.records import (DataError, Passage, QARecord, iter_jsonl, json_type, kind_name, parse_json, passage_id,
                                read_text)

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


FORMAT_NAMES = {"hotpotqa": "HotpotQA", "2wiki": "2WikiMultiHopQA", "musique": "MuSiQue", "flashrag": "FlashRAG",
                "wiki": "HotpotQA or 2WikiMultiHopQA"}

# Fields (and `type` values) that only one format's official files carry, checked in this order.
# HotpotQA and 2Wiki share `_id`/`context`/`supporting_facts` and the type "comparison"; what tells
# them apart is 2Wiki's evidence triples and entity ids, and HotpotQA's `level` and type "bridge".
_MARKER_FIELDS: dict[str, frozenset[str]] = {
    "2wiki": frozenset({"evidences", "entity_ids", "answer_id", "evidences_id"}),
    "hotpotqa": frozenset({"level"}),
    "musique": frozenset({"paragraphs", "question_decomposition", "answer_aliases"}),
    "flashrag": frozenset({"golden_answers"}),
    "wiki": frozenset({"_id", "context", "supporting_facts"}),
}
_MARKER_TYPES: dict[str, frozenset[str]] = {
    "2wiki": frozenset({"compositional", "inference", "bridge_comparison"}),
    "hotpotqa": frozenset({"bridge"}),
}
_COMPATIBLE = {"hotpotqa": {"hotpotqa", "wiki"}, "2wiki": {"2wiki", "wiki"}, "musique": {"musique"},
               "flashrag": {"flashrag"}}


def format_evidence(row: dict[str, Any]) -> dict[str, list[str]]:
    """Which official formats ``row`` carries distinguishing fields of, and which fields.

    >>> format_evidence({"_id": "a", "type": "compositional", "evidences": []})
    {'2wiki': ["'evidences'", "type 'compositional'"], 'wiki': ["'_id'"]}
    """
    found: dict[str, list[str]] = {}
    kind = row.get("type")
    for fmt, names in _MARKER_FIELDS.items():
        hits = [repr(k) for k in sorted(names.intersection(row))]
        if isinstance(kind, str) and kind in _MARKER_TYPES.get(fmt, ()):
            hits.append(f"type {kind!r}")
        if hits:
            found[fmt] = hits
    return found


def _looks_like(row: Any) -> str:
    """``"; the first example looks like MuSiQue (…): use --dataset musique"``, or "" when nothing stands out."""
    if not isinstance(row, dict):
        return ""
    if isinstance(row.get("answer"), dict) and "sp" in row:
        return "; it looks like a HotpotQA/2Wiki predictions file (give it to `awarl eval score --predictions`)"
    for fmt, hits in format_evidence(row).items():
        return f"; the first example looks like {FORMAT_NAMES[fmt]} ({', '.join(hits)}): use {_option(fmt)}"
    return ""


def _option(fmt: str) -> str:
    return "--dataset hotpotqa or --dataset 2wiki" if fmt == "wiki" else f"--dataset {fmt}"


def _check_format(row: Any, dataset: str, path: Path, where: str) -> None:
    """Refuse a row that carries another format's distinguishing fields and none of ``dataset``'s,
    so a 2Wiki file read as HotpotQA is not silently labelled hotpotqa. Rows with no telling
    fields either way pass (the required-field checks then speak)."""
    if not isinstance(row, dict):
        return
    found = format_evidence(row)
    specific = {fmt: hits for fmt, hits in found.items() if fmt != "wiki"}
    if dataset in specific:
        return
    if not specific and ("wiki" not in found or dataset in ("hotpotqa", "2wiki")):
        return
    fmt, hits = next(iter(specific.items())) if specific else ("wiki", found["wiki"])
    raise DataError(path, where, f"this looks like a {FORMAT_NAMES[fmt]} example ({', '.join(hits)}), "
                                 f"not {FORMAT_NAMES[dataset]}: use {_option(fmt)}")


def _field(row: dict[str, Any], name: str, kind: type | tuple[type, ...], path: Path, where: str) -> Any:
    if not isinstance(row, dict):
        raise DataError(path, where, f"expected a JSON object, got {json_type(row)}")
    if name not in row:
        raise DataError(path, where, "missing required field", name)
    value = row[name]
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
        raise DataError(path, where, f"expected {kind_name(kinds)}, got {json_type(value)}", name)
    return value


def _json_list(path: Path, dataset: str) -> list[Any]:
    """The examples of a file that must be one JSON list. JSON lines, or a single object, get a
    message naming the shape mismatch (and the format the content looks like) instead of the
    parser's "Extra data" at line 2."""
    text = read_text(path)
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):
        first = _first_line_object(text)
        if first is not None:
            raise DataError(path, "", f"this looks like JSON lines (one object per line); {FORMAT_NAMES[dataset]} "
                                      f"files are one JSON list{_looks_like(first)}") from None
        data = parse_json(path, text)  # raises the parser's own message with line and column
    if isinstance(data, dict):
        raise DataError(path, "top level", f"expected a JSON list of examples, got one JSON object{_looks_like(data)}")
    if not isinstance(data, list):
        raise DataError(path, "top level", f"expected a JSON list of examples, got {json_type(data)}")
    return data


def _first_line_object(text: str) -> dict[str, Any] | None:
    """The first non-blank line as a JSON object when it is one and more lines follow (JSONL)."""
    lines = [line for line in text.splitlines() if line.strip()]
    if len(lines) < 2:
        return None
    try:
        first = json.loads(lines[0])
    except (ValueError, RecursionError):
        return None
    return first if isinstance(first, dict) else None


def _jsonl_rows(path: Path, dataset: str) -> Iterable[tuple[int, dict[str, Any]]]:
    """`iter_jsonl`, after refusing a file that is one JSON list (HotpotQA's shape) with a message
    that says so, instead of "line 1: broken JSON"."""
    start = _head(path).removeprefix(b"\xef\xbb\xbf").lstrip()
    if start.startswith(b"["):
        first = None
        try:
            text = start.decode("utf-8", errors="replace")
            first, _ = json.JSONDecoder().raw_decode(text, len(text) - len(text[1:].lstrip()))
        except (ValueError, RecursionError):
            pass
        raise DataError(path, "", f"this looks like one JSON list; {FORMAT_NAMES[dataset]} files are JSON lines "
                                  f"(one object per line){_looks_like(first)}")
    return iter_jsonl(path)


def _head(path: Path, size: int = 1 << 20) -> bytes:
    """The first bytes of a file (enough to sniff its shape and first example); b"" when it cannot
    be opened, and `iter_jsonl` then reports the missing file or folder as a `DataError`."""
    try:
        with path.open("rb") as fh:
            return fh.read(size)
    except OSError:
        return b""


def _wiki_style(rows: Iterable[tuple[str, Any]], path: Path, dataset: str) -> tuple[list[QARecord], list[Passage]]:
    """HotpotQA and 2WikiMultiHopQA share `context` = [[title, [sentences]]] and
    `supporting_facts` = [[title, sentence index]]."""
    corpus = CorpusBuilder()
    records = []
    seen: dict[str, str] = {}
    for where, row in rows:
        _check_format(row, dataset, path, where)
        qid = _field(row, "_id", str, path, where)
        if qid in seen:
            raise DataError(path, where, f"duplicate id {qid!r} (first at {seen[qid]})", "_id")
        seen[qid] = where
        question = _field(row, "question", str, path, where)
        answer = _field(row, "answer", str, path, where)
        context = _field(row, "context", list, path, where)
        facts = _field(row, "supporting_facts", list, path, where)
        ids_by_title: dict[str, str] = {}
        passages = []
        for j, item in enumerate(context):
            if not (isinstance(item, list) and len(item) == 2 and isinstance(item[0], str) and isinstance(item[1], list)
                    and all(isinstance(s, str) for s in item[1])):
                raise DataError(path, f"{where}, context[{j}]", "expected [title, [sentences]] with string sentences",
                                "context")
            title, sentences = item
            pid = corpus.add(title, "".join(sentences).strip())
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
    return _wiki_style(((f"example {i} (index {i})", row) for i, row in enumerate(_json_list(path, "hotpotqa"))),
                       path, "hotpotqa")


def load_2wiki(path: str | Path) -> tuple[list[QARecord], list[Passage]]:
    """2WikiMultiHopQA: the same context / supporting_facts shape as HotpotQA."""
    path = Path(path)
    return _wiki_style(((f"example {i} (index {i})", row) for i, row in enumerate(_json_list(path, "2wiki"))),
                       path, "2wiki")


def load_musique(path: str | Path) -> tuple[list[QARecord], list[Passage]]:
    """MuSiQue-Ans or MuSiQue-Full JSONL. In Full every id appears twice, once with
    ``answerable: false``; the records keep the official id in ``meta["official_id"]`` and the
    unanswerable copy gets the id ``<id>#unanswerable`` so ids stay unique downstream."""
    path = Path(path)
    corpus = CorpusBuilder()
    records = []
    seen: dict[str, int] = {}
    for lineno, row in _jsonl_rows(path, "musique"):
        where = f"line {lineno}"
        _check_format(row, "musique", path, where)
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
            raise DataError(path, where, f"id {qid!r} appears twice with the same answerable flag "
                                         f"(first on line {seen[uid]})", "id")
        seen[uid] = lineno
        answers = list(dict.fromkeys([answer, *aliases]))
        meta: dict[str, Any] = {"official_id": qid}
        if isinstance(row.get("question_decomposition"), list):
            meta["hops"] = len(row["question_decomposition"])
        records.append(QARecord(uid, question, answers, "musique", answerable, supporting,
                                list(dict.fromkeys(passages)), meta))
    return records, corpus.passages


def load_flashrag(path: str | Path) -> tuple[list[QARecord], list[Passage]]:
    """FlashRAG JSONL: {id, question, golden_answers}. It carries no passages: pair it with a
    corpus of your own and search in ``global`` scope."""
    path = Path(path)
    records = []
    seen: dict[str, int] = {}
    for lineno, row in _jsonl_rows(path, "flashrag"):
        where = f"line {lineno}"
        _check_format(row, "flashrag", path, where)
        qid = str(_field(row, "id", (str, int), path, where))
        if qid in seen:
            raise DataError(path, where, f"duplicate id {qid!r} (first on line {seen[qid]})", "id")
        seen[qid] = lineno
        question = _field(row, "question", str, path, where)
        golds = _field(row, "golden_answers", list, path, where)
        if not golds or not all(isinstance(g, str) for g in golds):
            raise DataError(path, where, "expected a non-empty list of strings", "golden_answers")
        meta = row.get("metadata") if isinstance(row.get("metadata"), dict) else {}
        records.append(QARecord(qid, question, list(golds), "flashrag", True, [], [], dict(meta)))
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

    name, config = HUB_NAMES[dataset]
    where = f"hub:{name}"
    try:
        from datasets import load_dataset
    except ImportError:
        raise DataError(where, "", "loading from the hub needs the `datasets` package (pip install 'awarl[train]'); "
                                   "or download the official file and pass --input") from None
    try:
        rows = load_dataset(name, config, split=split, cache_dir=cache_dir)
    except (OSError, ValueError) as exc:  # offline, unknown split, missing data set: one clear line
        raise DataError(where, "", f"cannot load split {split!r} ({exc}); this needs a network or the data set in "
                                   "the local Hugging Face cache; or download the official file and pass --input") from None
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
