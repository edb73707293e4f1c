"""awarl's search task as a ``verifiers`` 0.4 environment (the optional ``verifiers`` extra).

verifiers 0.4 builds an environment from a *taskset* it imports by id (``vf-eval <taskset-id>``,
prime-rl's ``[env]`` block): here the id ``awarl-search``, whose module is `AWARL_MODULE`. The
taskset holds:

- the tasks: the records of a ``records.jsonl`` (or a p_i table: `awarl.integrations.hub`'s
  input), each with its answers, answerable flag, supporting passages and capability ``p``;
  the prompt is awarl's system prompt and the question (`awarl.protocol.build_messages`);
- the tool: `SearchToolset`, an MCP server with the one ``search(query)`` tool, `SearchEnv.search`
  itself over an awarl index folder, a corpus.jsonl or a running ``awarl search serve`` URL, with
  the rollout settings' top-k, passage words and search budget (global scope);
- the scoring: `AwarlTask`'s reward is awarl's AWA reward (`AnswerAbstainReward`, the very object
  ``awarl train grpo`` uses), its metrics the scorer's verdict per rollout (``accuracy`` and
  ``refusal`` average to awarl's accuracy and refusal rate); `awarl_metrics` turns a run's traces
  into awarl's precision, accuracy, RA-F1, refusal rate and abstain-recall;
- the harness: `AwarlHarness`, verifiers' own tool-calling chat loop (the ``null`` harness program)
  run by this Python instead of a uv environment it would download.

What verifiers cannot give the reward: a batch. verifiers scores each rollout on its own
(``@vf.reward`` sees one trace), so P_t cannot move with the batch refusal rate; the reward charges
abstentions a fixed ``penalty`` (the P_t of the checkpoint being evaluated or trained from, from its
``awa_penalty_state.json``; 0 by default) and ``awa/…`` batch terms are not logged.

Use from Python (`load_environment`, `evaluate`) or from a shell (``python -m
awarl.integrations.verifiers`` takes ``vf-eval``'s arguments with the ``awarl-search`` taskset
available; docs/integrations.md).
"""

from __future__ import annotations

import asyncio
import json
import sys
import types
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

try:
    import verifiers.v1 as vf
    from pydantic import Field
    from verifiers.v1.harnesses.null.harness import NullHarness, NullHarnessConfig
except ModuleNotFoundError as exc:  # the optional extra
    raise ImportError(f"awarl.integrations.verifiers needs verifiers 0.4 (Python >= 3.11): "
                      f"pip install 'awarl[verifiers]' ({exc})") from None

from awarl.agent.settings import RolloutSettings
from awarl.data.records import DataError, QARecord, iter_jsonl
from awarl.eval.metrics import Metrics, compute_metrics
from awarl.integrations.trl import load_recipe_settings
from awarl.protocol import build_messages, score
from awarl.rewards.awa import AnswerAbstainReward
from awarl.rewards.config import RewardConfig
from awarl.rewards.outcome import judge_completion

TASKSET_ID = "awarl-search"
"""The taskset id verifiers resolves (``vf-eval awarl-search``)."""
AWARL_MODULE = "awarl_search"
"""The module verifiers imports for `TASKSET_ID`; `register` makes it this module."""


# -- the tool ---------------------------------------------------------------------------------------------------
class SearchState(vf.State):
    """What one rollout searched (the search tool's budget and the reward's search count)."""

    queries: list[str] = Field(default_factory=list)
    retrieved: list[list[str]] = Field(default_factory=list)


class SearchToolsetConfig(vf.ToolsetConfig):
    """Where the search tool searches, and the rollout settings it applies."""

    index: str | None = None
    """A saved index folder (`awarl index build`)."""
    corpus: str | None = None
    """A corpus.jsonl, indexed with BM25 when the tool server starts."""
    retriever_url: str | None = None
    """A running `awarl search serve`."""
    rollout: dict[str, Any] = Field(default_factory=dict)
    """The rollout settings (awarl.agent.settings.RolloutSettings) as a mapping."""


class SearchToolset(vf.Toolset[SearchToolsetConfig, SearchState]):
    """awarl's ``search`` tool as an MCP server shared by every rollout of the taskset; each call
    runs `SearchEnv.search` with the calling rollout's queries so far (its budget and results)."""

    TOOL_PREFIX = None  # the tool is ``search``, as awarl's prompt and the trained agents call it

    async def setup(self) -> None:
        from awarl.agent.setup import resolve_retriever

        cfg = self.config
        self._settings = RolloutSettings.from_dict(cfg.rollout, "search toolset rollout")
        if self._settings.scope != "global":
            raise ValueError("the verifiers search tool searches the whole corpus: set rollout.scope to global")
        self._retriever = resolve_retriever(cfg.index, cfg.corpus, cfg.retriever_url)

    @vf.tool
    async def search(self, query: str) -> str:
        """Search the passage collection for evidence.

        Returns the best-matching passages, one per line, as "<title>: <text> [<passage id>]".
        Cite the passages you use by writing their ids in square brackets after your answer.
        Search for one fact at a time, and search again with other keywords if needed.

        Args:
            query: A short keyword query naming the entity and the fact you need, e.g. "Ronald Shusett screenwriter birthplace".
        """
        from awarl.agent.env import SearchEnv

        env = SearchEnv(self._retriever, self._settings)
        env.reset()
        env.queries, env.retrieved = list(self.state.queries), [list(r) for r in self.state.retrieved]
        result = await asyncio.to_thread(env.search, query)
        self.state.queries, self.state.retrieved = env.queries, env.retrieved
        return result


# -- the tasks and their scoring ----------------------------------------------------------------------------------
class AwarlTaskData(vf.TaskData):
    """One question, with what awarl's scorer and reward read."""

    question: str
    answers: list[str] = Field(default_factory=list)
    answerable: bool = True
    dataset: str = ""
    supporting: list[str] = Field(default_factory=list)
    p: float | None = None
    """Capability p_i of the question (needed by the AWA reward)."""


class AwarlTaskConfig(vf.TaskConfig):
    """The reward settings and rollout settings (a recipe's sections) and the fixed penalty."""

    reward: dict[str, Any] = Field(default_factory=dict)
    rollout: dict[str, Any] = Field(default_factory=dict)
    penalty: float = 0.0
    """P_t charged to every abstention (verifiers scores rollouts one by one, so it cannot move)."""


class AwarlTask(vf.Task[AwarlTaskData, SearchState, AwarlTaskConfig]):
    """A question scored by awarl: the AWA reward, and the scorer's verdict as metrics."""

    def _reward(self) -> AnswerAbstainReward:
        cached = getattr(self, "_awa", None)
        if cached is None:
            cfg = self.config
            cached = AnswerAbstainReward(RewardConfig.from_dict(cfg.reward, "verifiers reward"),
                                         RolloutSettings.from_dict(cfg.rollout, "verifiers rollout"))
            cached.load_state_dict({**cached.state_dict(), "penalty": cfg.penalty})
            cached.frozen = True  # one rollout is no batch: P_t stays at the given penalty
            self._awa = cached
        return cached

    @vf.reward
    async def awa_reward(self, task: AwarlTaskData, trace: vf.Trace) -> float:
        """awarl's AWA reward of this rollout (answer: outcome reward; abstention: R_base(p) − P, capped)."""
        awa = self._reward()
        [value] = awa([build_messages(task.question)], [trace.last_reply], None, answers=[list(task.answers)],
                      answerable=[task.answerable], p=[task.p] if task.p is not None else None, id=[task.id],
                      n_search=[len(trace.state.queries)])
        return value

    @vf.metric
    async def awarl(self, task: AwarlTaskData, trace: vf.Trace) -> dict[str, float]:
        """The scorer's verdict as numbers whose means are awarl's rates: accuracy (correct), refusal
        (abstained), answered, and for abstain-recall, unanswerable and abstained_unanswerable."""
        rollout = self._reward().rollout
        verdict = judge_completion(trace.last_reply, list(task.answers), answerable=task.answerable,
                                   metric=rollout.metric, phrases=rollout.phrases)
        outcome = verdict.score.outcome
        return {"accuracy": float(outcome == "correct"), "refusal": float(outcome == "abstain"),
                "answered": float(verdict.score.answered), "unanswerable": float(not task.answerable),
                "abstained_unanswerable": float(outcome == "abstain" and not task.answerable),
                "searches": float(len(trace.state.queries))}


class AwarlTasksetConfig(vf.TasksetConfig):
    """The records to run and the recipe to run them under (``--env.taskset.*`` on vf-eval)."""

    id: str = TASKSET_ID
    records: str = ""
    """records.jsonl (`awarl data prepare`) or a p_i table (`awarl capability estimate`); ``p`` is read
    from each row."""
    recipe: str | None = None
    """An awarl recipe (or a checkpoint folder holding awarl_recipe.yaml): its reward: and rollout:
    sections; none = the defaults."""
    index: str | None = None
    corpus: str | None = None
    retriever_url: str | None = None
    penalty: float = 0.0
    """The fixed P_t of the reward (see AwarlTaskConfig)."""


class AwarlTaskset(vf.Taskset[AwarlTask, AwarlTasksetConfig]):
    """awarl's records as verifiers tasks, with the search tool shared by all of them."""

    def load(self) -> Iterable[AwarlTask]:
        cfg = self.config
        if not cfg.records:
            raise ValueError("awarl-search needs --env.taskset.records (a records.jsonl or p_i table)")
        reward, rollout = load_recipe_settings(cfg.recipe)
        task_cfg = AwarlTaskConfig(**{**cfg.task.model_dump(), "reward": reward.to_dict(), "rollout": rollout.to_dict(),
                                      "penalty": cfg.penalty})
        for record, p in _records(Path(cfg.records)):
            data = AwarlTaskData(id=record.id, name=record.id, prompt=record.question, system_prompt=rollout.prompt,
                                 question=record.question, answers=list(record.answers), answerable=record.answerable,
                                 dataset=record.dataset, supporting=list(record.supporting), p=p)
            yield AwarlTask(data, task_cfg)

    @classmethod
    def toolsets(cls, config: AwarlTasksetConfig) -> list[vf.Toolset]:
        _, rollout = load_recipe_settings(config.recipe)
        # The tool server runs in a workdir of its own: hand it absolute paths.
        index, corpus = (str(Path(v).resolve()) if v else None for v in (config.index, config.corpus))
        return [SearchToolset(SearchToolsetConfig(index=index, corpus=corpus, retriever_url=config.retriever_url,
                                                  rollout=rollout.to_dict()))]


def _records(path: Path) -> list[tuple[QARecord, float | None]]:
    out = []
    for lineno, row in iter_jsonl(path):
        record = QARecord.from_dict(row, path=path, where=f"line {lineno}")
        p = row.get("p", record.meta.get("p"))
        if p is not None and (isinstance(p, bool) or not isinstance(p, (int, float)) or not 0 <= p <= 1):
            raise DataError(path, f"line {lineno}", f"capability must be a number in [0, 1], got {p!r}", "p")
        out.append((record, None if p is None else float(p)))
    if not out:
        raise DataError(path, "-", "no records")
    return out


# -- the harness --------------------------------------------------------------------------------------------------
class AwarlHarnessConfig(NullHarnessConfig):
    id: str = TASKSET_ID


class AwarlHarness(NullHarness):
    """verifiers' ``null`` harness program (a tool-calling chat loop over the rollout's MCP tools)
    run by this Python: its packages (openai, mcp, httpx) come with verifiers, so nothing is
    downloaded, where the ``null`` harness would build a uv environment for it."""

    async def setup(self, runtime: vf.Runtime) -> None:
        return None

    async def launch(self, ctx, trace, runtime, endpoint, secret, mcp_urls, data, tool_interception_url=None):
        from verifiers.v1.harnesses.utils.launch import CHAT_PROGRAM_SOURCE, launch_chat_program

        system_prompt, prompt = self.resolve_prompt(data)
        return await launch_chat_program(
            CHAT_PROGRAM_SOURCE, self.config, ctx, trace, _ThisPython(runtime), endpoint, secret, mcp_urls,
            system_prompt, prompt,
            extra_args=[f"--tool-interception-url={tool_interception_url}"] if tool_interception_url else ())


class _ThisPython:
    """A runtime whose PEP 723 scripts run under this interpreter (every other call goes to ``runtime``)."""

    def __init__(self, runtime: Any) -> None:
        self._runtime = runtime

    def __getattr__(self, name: str) -> Any:
        return getattr(self._runtime, name)

    async def prepare_uv_script(self, script: str | bytes, env: dict[str, str] | None = None, *,
                                activate: bool = True) -> list[str]:
        import hashlib

        data = script.encode() if isinstance(script, str) else script
        path = f".vf-awarl-{hashlib.sha256(data).hexdigest()[:16]}.py"
        await self._runtime.write(path, data)
        return [sys.executable, path]


__all__ = ["AwarlHarness", "AwarlTaskset"]
"""What verifiers' loader reads: the taskset and its bundled harness."""


# -- entry points -------------------------------------------------------------------------------------------------
def register() -> None:
    """Make `AWARL_MODULE` importable (this module), so verifiers resolves the ``awarl-search`` id.
    The module is taken by its package name even when it runs as ``__main__``: verifiers starts the
    tool server with ``python -m <the toolset class's module>``."""
    import importlib

    sys.modules.setdefault(AWARL_MODULE, importlib.import_module("awarl.integrations.verifiers"))


def load_environment(records: str | Path, *, recipe: str | Path | None = None, index: str | Path | None = None,
                     corpus: str | Path | None = None, retriever_url: str | None = None,
                     penalty: float = 0.0) -> vf.Env:
    """The verifiers environment over ``records`` (records.jsonl or a p_i table), searching ``index``,
    ``corpus`` or ``retriever_url``, under the recipe's reward and rollout settings."""
    register()
    return vf.load_environment(environment_config(records, recipe=recipe, index=index, corpus=corpus,
                                                  retriever_url=retriever_url, penalty=penalty))


def environment_config(records: str | Path, *, recipe: str | Path | None = None, index: str | Path | None = None,
                       corpus: str | Path | None = None, retriever_url: str | None = None,
                       penalty: float = 0.0) -> vf.EnvConfig:
    """verifiers' ``[env]`` block for the awarl-search taskset (what `load_environment` builds)."""
    register()
    given = [name for name, v in (("index", index), ("corpus", corpus), ("retriever_url", retriever_url)) if v]
    if len(given) != 1:
        raise ValueError(f"give exactly one of index, corpus or retriever_url (got {given or 'none'})")
    taskset = {"id": TASKSET_ID, "records": str(records), "recipe": str(recipe) if recipe else None,
               "index": str(index) if index else None, "corpus": str(corpus) if corpus else None,
               "retriever_url": retriever_url, "penalty": penalty}
    # The agent's chat loop runs here, as a subprocess (verifiers' default is a remote Prime sandbox).
    return vf.SingleAgentEnvConfig.model_validate({"taskset": taskset, "agent": {"runtime": {"type": "subprocess"}}})


def evaluate(env_config: vf.EnvConfig, *, base_url: str, model: str, output_dir: str | Path,
             api_key_var: str = "OPENAI_API_KEY", temperature: float | None = None, max_tokens: int | None = None,
             num_rollouts: int = 1, max_concurrent: int = 8) -> list[Any]:
    """Run verifiers' own evaluation (what ``vf-eval`` runs) against an OpenAI-compatible endpoint;
    traces land in ``output_dir/<run>/traces.jsonl``. Returns the episodes."""
    from verifiers.v1.cli.eval.runner import run_eval
    from verifiers.v1.configs.cli.eval import EvalConfig

    register()
    sampling = {k: v for k, v in (("temperature", temperature), ("max_tokens", max_tokens)) if v is not None}
    config = EvalConfig.model_validate({
        "env": env_config.model_dump(), "model": model, "num_rollouts": num_rollouts,
        "max_concurrent": max_concurrent, "client": {"type": "eval", "base_url": base_url, "api_key_var": api_key_var},
        "sampling": sampling, "push": False, "rich": None, "output_dir": str(output_dir)})
    return asyncio.run(run_eval(config))


def traces_of(items: Iterable[Any]) -> list[Any]:
    """verifiers traces from episodes, traces, or the episode rows of a ``traces.jsonl`` (read back as
    verifiers' own ``WireTrace``)."""
    out = []
    for item in items:
        if isinstance(item, dict):
            out += [vf.WireTrace.model_validate(t) for t in item.get("traces", [item])]
        elif hasattr(item, "traces"):
            out += list(item.traces)
        else:
            out.append(item)
    return out


def trace_rows(items: Iterable[Any]) -> list[dict[str, Any]]:
    """Per rollout: the task's id and data, and the final reply."""
    rows = []
    for trace in traces_of(items):
        data = trace.task.data.model_dump()
        rows.append({"id": data["id"], "data": data, "reply": trace.last_reply})
    return rows


def awarl_metrics(traces: Iterable[Any], rollout: RolloutSettings | None = None) -> Metrics:
    """awarl's precision, accuracy, RA-F1, refusal rate and abstain-recall over a run's rollouts
    (episodes, traces or ``traces.jsonl`` rows), by the one scorer (`awarl.protocol.score`)."""
    from awarl.protocol import parse_final

    rollout = rollout or RolloutSettings()
    rows = trace_rows(traces)
    scores = [score(parse_final(r["reply"], rollout.phrases), r["data"]["answers"],
                    answerable=r["data"]["answerable"], metric=rollout.metric) for r in rows]
    return compute_metrics(scores, [r["data"]["answerable"] for r in rows])


def predictions(traces: Iterable[Any], rollout: RolloutSettings | None = None) -> list[dict[str, Any]]:
    """awarl prediction rows (``{id, answer, abstained, citations}``) of a run's rollouts, for
    ``awarl eval score``."""
    from awarl.protocol import parse_final

    rollout = rollout or RolloutSettings()
    out = []
    for row in trace_rows(traces):
        parsed = parse_final(row["reply"], rollout.phrases)
        out.append({"id": row["id"], "answer": parsed.answer or "", "abstained": parsed.abstained,
                    "citations": list(parsed.citations)})
    return out


def main(argv: Sequence[str] | None = None) -> None:
    """``vf-eval`` with the ``awarl-search`` taskset available; the search tool's server when verifiers
    starts this module with ``VF_CONFIG`` set."""
    import os

    if "VF_CONFIG" in os.environ:
        SearchToolset.run()
        return
    from verifiers.v1.cli.eval.main import main as vf_eval

    register()
    vf_eval(list(argv) if argv is not None else None)


if __name__ == "__main__":
    main()
