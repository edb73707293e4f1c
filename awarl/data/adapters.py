"""Official benchmark files -> `QARecord`s and `Passage`s.

Each adapter reads the file as published (HotpotQA and 2WikiMultiHopQA: a JSON list; MuSiQue and
FlashRAG: JSONL) and reports bad input with the file, the index or line, and the field. The
passages of all questions are pooled and deduplicated by content, so the same paragraph shared
by two questions gets one stable id.

`FORMATS` is the registry: one `DatasetFormat` per benchmark (name, display name, file shape,
loader, hub id, marker fields), read by the commands' ``--dataset`` options and the format checks.
Adding a benchmark is one loader and one `register` call here (docs/data.md, "Adding a dataset").
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from awarl.data.records import (DataError, Passage, QARecord, UniqueIds, iter_jsonl, json_type, kind_name, parse_json,
                                passage_id, read_text)
from awarl.errors import ConfigError


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


def format_evidence(row: dict[str, Any]) -> tuple[dict[str, list[str]], dict[tuple[str, ...], list[str]]]:
    """Which registered formats ``row`` carries telling fields of: the fields (and ``type`` values)
    only one format's files carry, by format, and the fields several formats share, by the group of
    formats sharing them.

    >>> own, shared = format_evidence({"_id": "a", "type": "compositional", "evidences": []})
    >>> own, shared
    ({'2wiki': ["'evidences'", "type 'compositional'"]}, {('hotpotqa', '2wiki'): ["'_id'"]})
    """
    own: dict[str, list[str]] = {}
    shared: dict[tuple[str, ...], list[str]] = {}
    kind = row.get("type")
    for fmt in FORMATS.values():
        hits = [repr(k) for k in sorted(fmt.markers.intersection(row)) if len(_carriers(k)) == 1]
        if isinstance(kind, str) and kind in fmt.marker_types:
            hits.append(f"type {kind!r}")
        if hits:
            own[fmt.name] = hits
    for key in sorted(k for k in row if isinstance(k, str) and len(_carriers(k)) > 1):
        shared.setdefault(_carriers(key), []).append(repr(key))
    return own, shared


def _carriers(field_name: str) -> tuple[str, ...]:
    """The registered formats whose official files carry the marker field ``field_name``."""
    return tuple(f.name for f in FORMATS.values() if field_name in f.markers)


def _looks_like(row: Any) -> str:
    """``"; the first example looks like MuSiQue (…): use --dataset musique"``, or "" when nothing stands out."""
    if not isinstance(row, dict):
        return ""
    if isinstance(row.get("answer"), dict) and "sp" in row:
        return "; it looks like a HotpotQA/2Wiki predictions file (give it to `awarl eval score --predictions`)"
    own, shared = format_evidence(row)
    for names, hits in [*(((name,), hits) for name, hits in own.items()), *shared.items()]:
        return f"; the first example looks like {_display(names)} ({', '.join(hits)}): use {_option(names)}"
    return ""


def _display(names: tuple[str, ...]) -> str:
    return " or ".join(FORMATS[n].display for n in names)


def _option(names: tuple[str, ...]) -> str:
    return " or ".join(f"--dataset {n}" for n in names)


def check_format(row: Any, dataset: str, path: Path, where: str) -> None:
    """Refuse a row that carries another format's telling fields and none of ``dataset``'s, so a
    2Wiki file read as HotpotQA is not silently labelled hotpotqa. Rows with no telling fields
    either way pass (the required-field checks then speak)."""
    if not isinstance(row, dict):
        return
    own, shared = format_evidence(row)
    if dataset in own:
        return
    if own:
        names, hits = (next(iter(own)),), next(iter(own.values()))
    else:
        foreign = [(group, hits) for group, hits in shared.items() if dataset not in group]
        if not foreign:
            return
        names, hits = foreign[0]
    raise DataError(path, where, f"this looks like a {_display(names)} example ({', '.join(hits)}), "
                                 f"not {FORMATS[dataset].display}: use {_option(names)}")


def required_field(row: dict[str, Any], name: str, kind: type | tuple[type, ...], path: Path, where: str) -> Any:
    """``row[name]``, refused with a `DataError` naming the position and field when ``row`` is not an
    object, the field is missing or its value is not of ``kind``."""
    if not isinstance(row, dict):
        raise DataError(path, where, f"expected a JSON object, got {json_type(row)}")
    if name not in row:
        raise DataError(path, where, "missing required field", name)
    value = row[name]
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
        raise DataError(path, where, f"expected {kind_name(kinds)}, got {json_type(value)}", name)
    return value


def json_list(path: Path, dataset: str) -> list[Any]:
    """The examples of a file that must be one JSON list. JSON lines, or a single object, get a
    message naming the shape mismatch (and the format the content looks like) instead of the
    parser's "Extra data" at line 2."""
    text = read_text(path)
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):
        first = _first_line_object(text)
        if first is not None:
            raise DataError(path, "", f"this looks like JSON lines (one object per line); {FORMATS[dataset].display} "
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


def jsonl_rows(path: Path, dataset: str) -> Iterable[tuple[int, dict[str, Any]]]:
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
        raise DataError(path, "", f"this looks like one JSON list; {FORMATS[dataset].display} files are JSON lines "
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
    seen = UniqueIds(path, field="_id")
    for where, row in rows:
        check_format(row, dataset, path, where)
        qid = required_field(row, "_id", str, path, where)
        seen.add(qid, where)
        question = required_field(row, "question", str, path, where)
        answer = required_field(row, "answer", str, path, where)
        context = required_field(row, "context", list, path, where)
        facts = required_field(row, "supporting_facts", list, path, where)
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
    return _wiki_style(((f"example {i} (index {i})", row) for i, row in enumerate(json_list(path, "hotpotqa"))),
                       path, "hotpotqa")


def load_2wiki(path: str | Path) -> tuple[list[QARecord], list[Passage]]:
    """2WikiMultiHopQA: the same context / supporting_facts shape as HotpotQA."""
    path = Path(path)
    return _wiki_style(((f"example {i} (index {i})", row) for i, row in enumerate(json_list(path, "2wiki"))),
                       path, "2wiki")


def load_musique(path: str | Path) -> tuple[list[QARecord], list[Passage]]:
    """MuSiQue-Ans or MuSiQue-Full JSONL. In Full every id appears twice, once with
    ``answerable: false``; the records keep the official id in ``meta["official_id"]`` and the
    unanswerable copy gets the id ``<id>#unanswerable`` so ids stay unique downstream."""
    path = Path(path)
    corpus = CorpusBuilder()
    records = []
    seen = UniqueIds(path)
    for lineno, row in jsonl_rows(path, "musique"):
        where = f"line {lineno}"
        check_format(row, "musique", path, where)
        qid = required_field(row, "id", str, path, where)
        question = required_field(row, "question", str, path, where)
        answer = required_field(row, "answer", str, path, where)
        aliases = row.get("answer_aliases", [])
        if not isinstance(aliases, list) or not all(isinstance(a, str) for a in aliases):
            raise DataError(path, where, "expected a list of strings", "answer_aliases")
        answerable = row.get("answerable", True)
        if not isinstance(answerable, bool):
            raise DataError(path, where, f"expected true/false, got {answerable!r}", "answerable")
        paragraphs = required_field(row, "paragraphs", list, path, where)
        passages, supporting = [], []
        for j, par in enumerate(paragraphs):
            title = required_field(par, "title", str, path, f"{where}, paragraphs[{j}]")
            text = required_field(par, "paragraph_text", str, path, f"{where}, paragraphs[{j}]")
            pid = corpus.add(title, text)
            passages.append(pid)
            if par.get("is_supporting") is True:
                supporting.append(pid)
        uid = qid if answerable else f"{qid}#unanswerable"
        seen.add(uid, where, problem=f"id {qid!r} appears twice with the same answerable flag")
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
    seen = UniqueIds(path)
    for lineno, row in jsonl_rows(path, "flashrag"):
        where = f"line {lineno}"
        check_format(row, "flashrag", path, where)
        qid = str(required_field(row, "id", (str, int), path, where))
        seen.add(qid, where)
        question = required_field(row, "question", str, path, where)
        golds = required_field(row, "golden_answers", list, path, where)
        if not golds or not all(isinstance(g, str) for g in golds):
            raise DataError(path, where, "expected a non-empty list of strings", "golden_answers")
        meta = row.get("metadata") if isinstance(row.get("metadata"), dict) else {}
        records.append(QARecord(qid, question, list(golds), "flashrag", True, [], [], dict(meta)))
    return records, []


Loader = Callable[[Path], tuple[list[QARecord], list[Passage]]]


@dataclass(frozen=True)
class DatasetFormat:
    """One benchmark's official file format: everything awarl knows about it, in one record.

    The `awarl data prepare`, `awarl eval score` and `awarl eval run` options list and accept the
    registered names, and the format checks (a 2Wiki file given as HotpotQA is refused) read the
    marker fields; `FORMATS` is the registry."""

    name: str
    """The ``--dataset`` value and the ``dataset`` of every record read (``"hotpotqa"``)."""
    display: str
    """The benchmark's own spelling, for messages (``"HotpotQA"``)."""
    shape: Literal["json", "jsonl"]
    """The official file: one JSON list of examples, or JSON lines."""
    loader: Loader
    """Reads an official file into records and passages, refusing bad input with a `DataError`."""
    hub: tuple[str, str | None] | None = None
    """Hugging Face hub id and config for ``--hub-split`` (needs a network), or None."""
    markers: frozenset[str] = frozenset()
    """Fields this format's official files carry that tell it from the others; a field several
    formats list (HotpotQA's and 2Wiki's ``_id``) tells that group from the rest."""
    marker_types: frozenset[str] = frozenset()
    """Values of a row's ``type`` field that only this format uses."""


FORMATS: dict[str, DatasetFormat] = {}
"""The registered dataset formats by name, in the order the help lists them."""


def register(fmt: DatasetFormat) -> DatasetFormat:
    """Add ``fmt`` to `FORMATS` (a name is registered once)."""
    if fmt.name in FORMATS:
        raise ValueError(f"dataset format {fmt.name!r} is already registered")
    FORMATS[fmt.name] = fmt
    return fmt


# HotpotQA and 2Wiki share `_id` / `context` / `supporting_facts` and the type "comparison"; what
# tells them apart is 2Wiki's evidence triples and entity ids, and HotpotQA's `level` and type "bridge".
_WIKI = frozenset({"_id", "context", "supporting_facts"})
register(DatasetFormat("hotpotqa", "HotpotQA", "json", load_hotpotqa, hub=("hotpotqa/hotpot_qa", "distractor"),
                       markers=_WIKI | {"level"}, marker_types=frozenset({"bridge"})))
register(DatasetFormat("2wiki", "2WikiMultiHopQA", "json", load_2wiki, hub=("framolfese/2WikiMultihopQA", None),
                       markers=_WIKI | {"evidences", "entity_ids", "answer_id", "evidences_id"},
                       marker_types=frozenset({"compositional", "inference", "bridge_comparison"})))
register(DatasetFormat("musique", "MuSiQue", "jsonl", load_musique, hub=("bdsaglam/musique", "answerable"),
                       markers=frozenset({"paragraphs", "question_decomposition", "answer_aliases"})))
register(DatasetFormat("flashrag", "FlashRAG", "jsonl", load_flashrag, hub=("RUC-NLPIR/FlashRAG_datasets", "hotpotqa"),
                       markers=frozenset({"golden_answers"})))


def format_names() -> str:
    """``"hotpotqa, 2wiki, musique, flashrag"``: the registered names, for help and messages."""
    return ", ".join(FORMATS)


def get_format(dataset: str) -> DatasetFormat:
    """The registered format ``dataset``; an unknown name is a `ConfigError` listing the known ones."""
    if dataset not in FORMATS:
        raise ConfigError(f"unknown dataset {dataset!r}; choose one of {format_names()}")
    return FORMATS[dataset]


def load_dataset_file(dataset: str, path: str | Path) -> tuple[list[QARecord], list[Passage]]:
    """Read an official file of ``dataset`` (a name in `FORMATS`)."""
    return get_format(dataset).loader(Path(path))


def load_hub(dataset: str, split: str = "validation", cache_dir: str | None = None) -> tuple[list[QARecord], list[Passage]]:
    """Load through `datasets` by hub name (needs a network or a warm HF cache), then run the
    same adapter on the rows written as the official local format."""
    import tempfile

    fmt = get_format(dataset)
    if fmt.hub is None:
        raise ConfigError(f"{fmt.display} has no hub id; download the official file and pass --input")
    name, config = fmt.hub
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
        target = Path(tmp) / f"data.{fmt.shape}"
        if fmt.shape == "json":
            target.write_text(json.dumps([_hub_row_to_official(r) for r in rows]), encoding="utf-8")
        else:
            target.write_text("".join(json.dumps(dict(r)) + "\n" for r in rows), encoding="utf-8")
        return load_dataset_file(dataset, target)


def _hub_row_to_official(row: dict[str, Any]) -> dict[str, Any]:
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
