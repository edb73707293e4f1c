"""`SearchEnv`: the agent's one tool, ``search``, as a TRL ``environment_factory`` environment.

TRL keeps a pool of instances and, before each rollout, calls ``reset(**row)`` with every
column of the dataset row (``id, question, answers, dataset, answerable, supporting, passages,
meta, p`` and ``prompt``). Every public method other than ``reset`` / ``get_reward`` becomes a
tool, so this class has exactly one, `SearchEnv.search`, and its docstring is the tool schema
that training, evaluation, the runner and the SFT data all declare. Helpers stay ``_private``.

An instance holds a reference to the shared retriever, the rollout settings (scope, top-k,
passage words, search budget: `awarl.agent.settings.RolloutSettings`) and its rollout's state:
the queries it ran and the passage ids each returned, which rewards and metrics read after the
rollout. TRL's ``environment_factory`` takes a zero-argument callable; `search_env_factory`
returns one (a `functools.partial`), so two runs in one process never share settings.

With ``RolloutSettings.world_noise`` (a world v2's noise.json), the tool applies the world's search
noise (`awarl.data.world_noise`): silent conflicting passages drawn once per rollout and visible
failures drawn per call, both seeded by (record id, rollout seed), and, where the world draws them,
the rollout's city names (a query naming one searches the city it stands for). The rollout seed is the row's
``rollout_seed`` column when the caller passes one (the runner does: capability p_i and evaluation
give sample k of a record the same seed for the same run seed); otherwise it counts the rollouts of
each record id made by this factory's environments (TRL's GRPO rollouts: 0, 1, 2, ... per question).
Records the table does not list (real data, chatbot questions) get the index's results unchanged.

    >>> from awarl.search.bm25 import BM25Index
    >>> from awarl.data.records import Passage
    >>> index = BM25Index.build([Passage("d1", "Paris", "Paris is the capital of France."),
    ...                          Passage("d2", "Rome", "Rome is the capital of Italy.")])
    >>> make_env = search_env_factory(index, RolloutSettings(topk=1))
    >>> env = make_env()
    >>> env.reset(question="capital of France?", passages=["d1", "d2"])
    >>> env.search("capital of France")
    'Paris: Paris is the capital of France. [d1]'
    >>> env.queries, env.retrieved
    (['capital of France'], [['d1']])
"""

from __future__ import annotations

import functools
import importlib.util
import inspect
from collections.abc import Callable
from typing import Any

from awarl.agent.settings import RolloutSettings
from awarl.protocol import ABSTAIN_PHRASE
from awarl.search.retriever import SCOPES, Retriever, render


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
        rollout_seed: the seed of this rollout's tool-side draws (world noise).
        forced_answer: whether this rollout was generated with the refusal banned (`awarl.train.forced`).
        record_id, question, answers, answerable, supporting, passages, p: the row's columns.
    """

    _checked_classes: set[type] = set()

    def __init__(self, retriever: Retriever, settings: RolloutSettings | None = None,
                 rollouts: dict[str, int] | None = None) -> None:
        if not isinstance(retriever, Retriever):
            raise TypeError(f"retriever must implement search/get_passage/__len__, got {type(retriever).__name__}")
        _check_tool_schema(type(self))
        self._retriever = retriever
        self._settings = settings or RolloutSettings()
        self._rollouts = {} if rollouts is None else rollouts  # record id -> rollouts started (shared by a factory)
        self._noise_table = None
        if self._settings.world_noise:
            from awarl.data.world_noise import load_noise

            self._noise_table = load_noise(str(self._settings.world_noise))
        self._start({})

    @property
    def settings(self) -> RolloutSettings:
        return self._settings

    def reset(self, **row: Any) -> None:
        """Start a rollout for one dataset row (TRL passes every column; only those used are read)."""
        scope = row.get("scope") or self._settings.scope
        if scope not in SCOPES:
            raise ValueError(f"row {row.get('id')!r}: scope must be one of {', '.join(SCOPES)}, got {scope!r}")
        if scope == "closed" and not row.get("passages"):
            raise ValueError(f"row {row.get('id')!r}: closed scope needs the record's 'passages' column (a list of passage ids)")
        self._start(row)
        self._allowed = list(row["passages"]) if scope == "closed" else None
        seed = row.get("rollout_seed")
        if seed is None:
            key = str(row.get("id"))
            seed = self._rollouts.get(key, 0)
            self._rollouts[key] = seed + 1
        self.rollout_seed = int(seed)
        if self._noise_table is not None:
            from awarl.data.world_noise import RolloutNoise

            self._noise = RolloutNoise(self._noise_table, row.get("id"), self.rollout_seed)

    def search(self, query: str) -> str:
        """Search the passage collection for evidence.

        Returns the best-matching passages, one per line, as "<title>: <text> [<passage id>]".
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
        searched = self._noise.world_query(query) if self._noise is not None else query
        hits = self._retriever.search([searched], self._settings.topk, allowed=allowed)[0]
        if self._noise is not None:
            hits = self._noise.apply(hits)
        self.queries.append(query)
        self.retrieved.append([h.passage.id for h in hits])
        return render(hits, self._settings.passage_words) if hits else NO_RESULTS_MESSAGE

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
        self.rollout_seed: int | None = None
        self.forced_answer = False
        self._allowed: list[str] | None = None
        self._noise: Any = None  # awarl.data.world_noise.RolloutNoise of this rollout, when world_noise is set


def _check_tool_schema(cls: type[SearchEnv]) -> None:
    """Fail at construction, not at the first training step, if a tool's docstring or type hints
    cannot become a JSON schema (checked once per class; needs transformers, else skipped)."""
    if cls in SearchEnv._checked_classes or importlib.util.find_spec("transformers") is None:
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
    SearchEnv._checked_classes.add(cls)


def tool_schema() -> dict[str, Any]:
    """The JSON schema of the ``search`` tool, as chat templates and OpenAI-style APIs take it."""
    from transformers.utils import get_json_schema

    return get_json_schema(SearchEnv.search)


def shown_text(env: SearchEnv, text: str) -> str:
    """``text`` with each city under the name ``env``'s current rollout shows for it (unchanged unless the
    world draws city names per rollout): what a user who read this rollout's results would write. A function,
    not a method: every public method of `SearchEnv` is a tool."""
    noise = getattr(env, "_noise", None)
    return noise.shown(text) if noise is not None else text


def search_env_factory(retriever: Retriever, settings: RolloutSettings | None = None) -> Callable[[], SearchEnv]:
    """A zero-argument callable making `SearchEnv` instances over ``retriever`` with ``settings``
    (TRL's ``environment_factory`` contract; the runner takes the same)."""
    settings = settings or RolloutSettings()
    _check_tool_schema(SearchEnv)
    return functools.partial(SearchEnv, retriever, settings, {})


__all__ = ["SearchEnv", "search_env_factory", "shown_text", "tool_schema", "BUDGET_MESSAGE", "NO_RESULTS_MESSAGE", "EMPTY_QUERY_MESSAGE"]
