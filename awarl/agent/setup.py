"""Wiring shared by capability estimation, evaluation, training and the chatbot: the retriever a
run searches and the runner that drives the agent.

A run searches a saved index folder (``--index``), a ``corpus.jsonl`` indexed with BM25 on the fly
(``--corpus``), a running ``awarl search serve`` (``--retriever-url``), or, when none is given, the
``corpus.jsonl`` beside a prepared ``records.jsonl`` (what ``awarl data prepare`` writes) or the
passages of an official data file.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from awarl.agent.settings import RolloutSettings
from awarl.data.records import DataError, Passage, QARecord
from awarl.errors import ConfigError
from awarl.search.retriever import SCOPES, Retriever

log = logging.getLogger(__name__)


def searched_corpus(index: str | Path | None, corpus: str | Path | None, url: str | None,
                    data: str | Path | None) -> str | Path | None:
    """The corpus file a run searches (`resolve_retriever`): the one given, else, with no index or URL,
    the ``corpus.jsonl`` beside ``data`` when there is one; None otherwise."""
    if corpus is None and not (index or url) and data is not None and (Path(data).parent / "corpus.jsonl").exists():
        return Path(data).parent / "corpus.jsonl"
    return corpus


def resolve_retriever(
    index: str | Path | None = None,
    corpus: str | Path | None = None,
    url: str | None = None,
    *,
    data: str | Path | None = None,
    passages: Sequence[Passage] | None = None,
) -> Retriever:
    """The retriever a run searches: the one given (index folder, corpus.jsonl, or server URL), else
    the ``corpus.jsonl`` beside ``data``, else the data file's own passages. Each opens through
    `awarl.search.client.open_retriever`, the one opener every stage uses."""
    given = [name for name, value in (("index", index), ("corpus", corpus), ("url", url)) if value]
    if len(given) > 1:
        raise ConfigError(f"give one of index, corpus or url, not {' and '.join(given)}")
    from awarl.search.client import open_retriever

    corpus = searched_corpus(index, corpus, url, data)
    if index or url or corpus:
        return open_retriever(str(index or url or corpus))
    if passages:
        from awarl.search.bm25 import BM25Index

        return BM25Index.build(list(passages))
    raise DataError(data or "run settings", "-", "no passages to search: pass --index DIR, --corpus corpus.jsonl "
                    "or --retriever-url URL")


def check_scope(records: Sequence[QARecord], scope: str, path: str | Path) -> None:
    """Closed scope needs every record's own passage list; fail before any rollout, naming the record."""
    if scope not in SCOPES:
        raise ConfigError(f"scope must be one of {', '.join(SCOPES)}, got {scope!r}")
    if scope == "closed":
        for n, record in enumerate(records, start=1):
            if not record.passages:
                raise DataError(path, f"record {n} (id {record.id!r})", "closed scope needs the record's passage ids",
                                "passages")


def build_runner(backend: Any, retriever: Retriever, rollout: RolloutSettings, *, temperature: float,
                 seed: int | None = 0, max_concurrent: int = 64) -> Any:
    """The rollout runner every stage uses: ``backend`` driving `SearchEnv` over ``retriever``, the agent
    defined by ``rollout``, sampled at ``temperature`` (p_i: 1.0, evaluation: 0.0)."""
    from awarl.agent.env import search_env_factory
    from awarl.agent.runner import Runner, RunnerConfig

    warning = rollout.budget_warning()
    if warning:
        log.warning(warning)
    if backend.accepts == "tokens":  # a chat backend (OpenAI-compatible server) templates on its side
        from awarl.agent.chat_template import use_chat_template

        use_chat_template(backend.tokenizer, rollout.chat_template, getattr(backend, "name", "the model"))
    return Runner(backend, search_env_factory(retriever, rollout),
                  RunnerConfig(rollout=rollout, temperature=temperature, seed=seed, max_concurrent=max_concurrent))


def passage_exists(retriever: Retriever, pid: str) -> bool:
    """Whether the corpus has a passage with this id (a cited id that does not is fabricated)."""
    try:
        retriever.get_passage(pid)
    except KeyError:
        return False
    return True
