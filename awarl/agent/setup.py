"""Wiring shared by capability estimation and evaluation: a retriever and a search environment.

A run searches either a saved index folder (``--index``), a ``corpus.jsonl`` indexed with BM25
on the fly (``--corpus``), or, when neither is given, the ``corpus.jsonl`` beside a prepared
``records.jsonl`` (what ``awarl data prepare`` writes) or the passages of an official data file.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from awarl.data.records import DataError, Passage, QARecord, load_corpus
from awarl.search.retriever import SCOPES, Retriever


def open_retriever(
    index: str | Path | None = None,
    corpus: str | Path | None = None,
    *,
    data: str | Path | None = None,
    passages: Sequence[Passage] | None = None,
) -> Retriever:
    """The retriever a run searches; the first available of index, corpus, the data's sibling
    ``corpus.jsonl``, the data file's own passages."""
    if index is not None and corpus is not None:
        raise ValueError("give --index or --corpus, not both")
    if index is not None:
        from awarl.search.index import load_index

        return load_index(index)
    from awarl.search.bm25 import BM25Index

    if corpus is None and data is not None and (Path(data).parent / "corpus.jsonl").exists():
        corpus = Path(data).parent / "corpus.jsonl"
    if corpus is not None:
        return BM25Index.build(load_corpus(corpus))
    if passages:
        return BM25Index.build(list(passages))
    raise DataError(data or "-", "-", "no passages to search: pass --index DIR or --corpus corpus.jsonl")


def check_scope(records: Sequence[QARecord], scope: str, path: str | Path) -> None:
    """Closed scope needs every record's own passage list; fail before any rollout, naming the record."""
    if scope not in SCOPES:
        raise ValueError(f"scope must be one of {', '.join(SCOPES)}, got {scope!r}")
    if scope == "closed":
        for n, record in enumerate(records, start=1):
            if not record.passages:
                raise DataError(path, f"record {n} (id {record.id!r})", "closed scope needs the record's passage ids",
                                "passages")


def search_env_factory(retriever: Retriever, *, scope: str = "closed", topk: int = 3, max_searches: int = 4,
                       max_tokens: int | None = 100) -> type[Any]:
    """A `SearchEnv` class bound to ``retriever`` (a fresh subclass, so runs in one process don't
    share settings); call it with no arguments for an environment, as TRL does."""
    from awarl.agent.env import SearchEnv, SearchSettings

    env_cls = type("RunSearchEnv", (SearchEnv,), {"__doc__": SearchEnv.__doc__})
    return env_cls.configure(retriever, SearchSettings(topk=topk, scope=scope, max_searches=max_searches,
                                                      max_tokens=max_tokens))


def passage_exists(retriever: Retriever, pid: str) -> bool:
    """Whether the corpus has a passage with this id (a cited id that does not is fabricated)."""
    try:
        retriever.get_passage(pid)
    except KeyError:
        return False
    return True
