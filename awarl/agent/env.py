"""`SearchEnv`: the agent's one tool, ``search``, as a TRL ``environment_factory`` environment.

TRL keeps a pool of instances and, before each rollout, calls ``reset(**row)`` with every
column of the dataset row (``id, question, answers, dataset, answerable, supporting, passages,
meta, p`` and ``prompt``). Every public method other than ``reset`` / ``get_reward`` becomes a
tool, so this class has exactly one, `SearchEnv.search`, and its docstring is the tool schema
that training, evaluation, the runner and the SFT data all declare. Helpers stay ``_private``.

The retriever and the settings are shared by every instance (class attributes, set once with
`SearchEnv.configure`); an instance holds only its rollout's state: the queries it ran and the
passage ids each returned, which rewards and metrics read after the rollout.

    >>> from awarl.search.bm25 import BM25Index
    >>> from awarl.data.records import Passage
    >>> index = BM25Index.build([Passage("d1", "Paris", "Paris is the capital of France."),
    ...                          Passage("d2", "Rome", "Rome is the capital of Italy.")])
    >>> Env = SearchEnv.configure(index, topk=1)
    >>> env = Env()
    >>> env.reset(question="capital of France?", passages=["d1", "d2"])
    >>> env.search("capital of France")
    '[d1] Paris: Paris is the capital of France.'
    >>> env.queries, env.retrieved
    (['capital of France'], [['d1']])
"""

from __future__ import annotations

import importlib.util
import inspect
from dataclasses import dataclass, replace
from typing import Any, ClassVar

from awarl.protocol import ABSTAIN_PHRASE
from awarl.search.retriever import SCOPES, Retriever, render


@dataclass(frozen=True)
class SearchSettings:
    """How the search tool behaves in every rollout."""

    topk: int = 3  # passages per search
    scope: str = "global"  # global: whole corpus; closed: only the record's own passages (a row's "scope" column overrides)
    max_searches: int = 4  # searches per rollout; later calls get a message, not results
    max_tokens: int | None = 100  # words kept of each passage's text (None: whole passage)

    def __post_init__(self) -> None:
        if self.scope not in SCOPES:
            raise ValueError(f"scope must be one of {', '.join(SCOPES)}, got {self.scope!r}")
        if self.topk < 1 or self.max_searches < 0:
            raise ValueError(f"need topk >= 1 and max_searches >= 0, got topk={self.topk}, max_searches={self.max_searches}")
        if self.max_tokens is not None and self.max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1 or None, got {self.max_tokens}")


BUDGET_MESSAGE = (
    "Search limit reached ({n} searches). Answer now from the passages you already have, "
    f"or reply <answer>{ABSTAIN_PHRASE}</answer> if they do not contain the answer."
)
EMPTY_QUERY_MESSAGE = "The query is empty. Call search with a few keywords naming what you need."
NO_RESULTS_MESSAGE = "No passages matched this query. Try other keywords."


class SearchEnv:
    """One search-agent rollout: the ``search`` tool over a shared retriever.

    Attributes read after a rollout (by rewards, metrics and the runner):
        queries: every query that was searched, in order.
        retrieved: for each query, the ids of the passages it returned.
        over_budget: search calls refused because the budget was spent.
        record_id, question, answers, answerable, supporting, passages, p: the row's columns.
    """

    _retriever: ClassVar[Retriever | None] = None
    _settings: ClassVar[SearchSettings] = SearchSettings()
    _schema_checked: ClassVar[bool] = False

    @classmethod
    def configure(cls, retriever: Retriever, settings: SearchSettings | None = None, **overrides: Any) -> type["SearchEnv"]:
        """Share ``retriever`` and ``settings`` (or the defaults with ``overrides``) with every
        instance of ``cls``; returns ``cls`` so ``environment_factory=SearchEnv.configure(...)`` works.

        Configure a subclass (``class EvalEnv(SearchEnv): pass``) to run two setups in one process.
        """
        if not isinstance(retriever, Retriever):
            raise TypeError(f"retriever must implement search/get_passage/__len__, got {type(retriever).__name__}")
        settings = replace(settings or SearchSettings(), **overrides)
        cls._retriever = retriever
        cls._settings = settings
        return cls

    def __init__(self) -> None:
        _check_tool_schema(type(self))
        self._start({})

    def reset(self, **row: Any) -> None:
        """Start a rollout for one dataset row (TRL passes every column; only those used are read)."""
        if type(self)._retriever is None:
            raise RuntimeError(f"{type(self).__name__} has no retriever: call {type(self).__name__}.configure(retriever, ...) first")
        scope = row.get("scope") or self._settings.scope
        if scope not in SCOPES:
            raise ValueError(f"row {row.get('id')!r}: scope must be one of {', '.join(SCOPES)}, got {scope!r}")
        if scope == "closed" and not row.get("passages"):
            raise ValueError(f"row {row.get('id')!r}: closed scope needs the record's 'passages' column (a list of passage ids)")
        self._start(row)
        self._allowed = list(row["passages"]) if scope == "closed" else None

    def search(self, query: str) -> str:
        """Search the passage collection for evidence.

        Returns the best-matching passages, one per line, as "[<passage id>] <title>: <text>".
        Cite the passages you use by writing their ids in square brackets after your answer.
        Search for one fact at a time, and search again with other keywords if needed.

        Args:
            query: A short keyword query naming the entity and the fact you need, e.g. "Ronald Shusett screenwriter birthplace".
        """
        query = str(query or "").strip()
        if not query:
            return EMPTY_QUERY_MESSAGE
        if len(self.queries) >= self._settings.max_searches:
            self.over_budget += 1
            return BUDGET_MESSAGE.format(n=len(self.queries))
        allowed = None if self._allowed is None else [self._allowed]
        hits = self._retriever.search([query], self._settings.topk, allowed=allowed)[0]
        self.queries.append(query)
        self.retrieved.append([h.passage.id for h in hits])
        return render(hits, self._settings.max_tokens) if hits else NO_RESULTS_MESSAGE

    def _start(self, row: dict[str, Any]) -> None:
        self.queries: list[str] = []
        self.retrieved: list[list[str]] = []
        self.over_budget = 0
        self.record_id = row.get("id")
        self.question = row.get("question")
        self.answers = list(row.get("answers") or [])
        self.answerable = row.get("answerable", True)
        self.supporting = list(row.get("supporting") or [])
        self.passages = list(row.get("passages") or [])
        self.p = row.get("p")
        self._allowed: list[str] | None = None


def _check_tool_schema(cls: type[SearchEnv]) -> None:
    """Fail at construction, not at the first training step, if a tool's docstring or type hints
    cannot become a JSON schema (checked once per class; needs transformers, else skipped)."""
    if cls.__dict__.get("_schema_checked") or importlib.util.find_spec("transformers") is None:
        return
    from transformers.utils import get_json_schema

    # The same rule TRL uses to turn an environment's methods into tools.
    tools = [name for name, _ in inspect.getmembers(cls, predicate=inspect.isfunction)
             if name not in ("reset", "get_reward") and not name.startswith("_")]
    for name in tools:
        try:
            schema = get_json_schema(getattr(cls, name))
        except Exception as exc:
            raise TypeError(f"{cls.__name__}.{name} cannot be a tool: {exc}") from exc
        params = schema["function"]["parameters"]
        missing = [p for p, spec in params.get("properties", {}).items() if not spec.get("description")]
        if missing or not schema["function"].get("description"):
            raise TypeError(f"{cls.__name__}.{name}: the docstring must describe the tool and every argument ({missing})")
    cls._schema_checked = True


def tool_schema() -> dict[str, Any]:
    """The JSON schema of the ``search`` tool, as chat templates and OpenAI-style APIs take it."""
    from transformers.utils import get_json_schema

    return get_json_schema(SearchEnv.search)


__all__ = ["SearchEnv", "SearchSettings", "tool_schema", "BUDGET_MESSAGE", "NO_RESULTS_MESSAGE", "EMPTY_QUERY_MESSAGE"]
