"""The rollout runner: many search conversations at once, each until answer, abstention or budget.

Capability estimation, evaluation and the chatbot all run the agent through here. With a token
backend (transformers, vLLM) the runner reproduces TRL's GRPOTrainer tool loop token for token:

- the prompt is ``build_messages(question)`` rendered by the tokenizer's chat template with the
  environment's public methods as tools (TRL's training template when the model's own is not
  prefix-preserving), ``add_generation_prompt=True``;
- each turn is cut after the first end-of-turn token and parsed with
  ``trl.chat_template_utils.parse_response`` (the same fallback for malformed tool calls);
- tool results become ``{"role": "tool", "name": …, "content": str(result)}`` messages (a tool
  exception becomes ``str({"error": message})``), and the next prompt is the previous ids plus the
  tool-suffix tokens TRL computes from a dummy conversation — no re-tokenisation;
- ``rollout.max_completion_tokens`` covers the whole trajectory, tool tokens included; a tool result that
  would overflow it (or the model's context) is rolled back and the conversation ends, and at
  most ``rollout.max_searches`` tool rounds run (TRL's ``max_tool_calling_iterations``).

With a chat backend (an OpenAI-compatible server doing its own templating and tool-call parsing)
the same loop sends message lists and tool schemas instead; token counts come from ``usage``.

Conversations run in a rolling pool of ``max_concurrent``: every generation step batches one turn
of every active conversation, and finished ones are replaced from the queue at once.

Sampling is seeded per rollout: rollout ``sample`` of record ``id`` in a run with seed ``seed``
draws from streams that depend only on ``(seed, id, sample)`` (`rollout_seed`; one stream per turn,
`turn_seed`), never on its place in the batch, its chunk or what else runs. The environment's
``reset`` receives the same number as ``rollout_seed`` (for anything random on the tool's side).
"""

from __future__ import annotations

import hashlib
import inspect
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from awarl.agent.settings import RolloutSettings
from awarl.data.records import QARecord
from awarl.errors import BackendError, ConfigError
from awarl.protocol import build_messages, parse_final, parse_results, score
from awarl.llm.base import ChatPrompt, Generation, Generator, SamplingParams

StopReason = Literal["answer", "abstain", "no_answer", "turn_budget", "token_budget"]


@dataclass
class RunnerConfig:
    """How rollouts are sampled: the agent itself (prompt, tool, budgets, metric) is ``rollout``.

    ``rollout.max_searches`` bounds the tool-calling rounds (TRL's ``max_tool_calling_iterations``)
    and ``rollout.max_completion_tokens`` the whole trajectory (TRL's ``max_completion_length``).
    """

    rollout: RolloutSettings = field(default_factory=RolloutSettings)
    """The agent: system prompt, search tool, budgets, correctness metric, refusal phrases."""
    temperature: float = 0.0
    """0 is greedy (evaluation); 1.0 samples (capability estimation, like GRPO's rollouts)."""
    top_p: float = 1.0
    """Nucleus sampling mass."""
    max_concurrent: int = 64
    """Conversations in flight at once; each generation step batches one turn of each."""
    seed: int | None = None
    """Run seed: each rollout samples from its own stream derived from (seed, record id, sample); None
    leaves the backend's random state alone."""
    chat_template_kwargs: dict[str, Any] = field(default_factory=dict)
    """Extra chat-template variables, as GRPOConfig's ``chat_template_kwargs`` (e.g. ``enable_thinking``)."""

    def __post_init__(self) -> None:
        if not isinstance(self.rollout, RolloutSettings):
            raise TypeError(f"rollout must be RolloutSettings, got {type(self.rollout).__name__}")
        if self.max_concurrent < 1:
            raise ConfigError(f"max_concurrent must be >= 1, got {self.max_concurrent}")
        if self.temperature < 0:
            raise ConfigError(f"temperature must be >= 0, got {self.temperature}")

    def sampling(self, max_new_tokens: int, seeds: Sequence[int] | None = None) -> SamplingParams:
        return SamplingParams(temperature=self.temperature, top_p=self.top_p, max_new_tokens=max_new_tokens,
                              seed=self.seed, seeds=None if seeds is None else tuple(seeds))


def rollout_seed(seed: int, record_id: str, sample: int) -> int:
    """The seed of one rollout: a 63-bit hash of (run seed, record id, sample), so the same rollout gets
    the same stream in every batch, chunk, shard and resumed run.

    >>> rollout_seed(0, "q1", 0) == rollout_seed(0, "q1", 0) != rollout_seed(0, "q1", 1)
    True
    """
    digest = hashlib.blake2b(f"{seed}\x1f{record_id}\x1f{sample}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") >> 1


def turn_seed(rollout: int, turn: int) -> int:
    """The seed of turn ``turn`` (0 = the first generation) of a rollout whose seed is ``rollout``."""
    digest = hashlib.blake2b(f"{rollout}\x1f{turn}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") >> 1


@dataclass
class Rollout:
    """One conversation to run: a record and which of its K samples this is."""

    record: QARecord
    sample: int = 0

    def seed(self, run_seed: int | None) -> int | None:
        """This rollout's seed in a run seeded with ``run_seed`` (None: unseeded)."""
        return None if run_seed is None else rollout_seed(run_seed, self.record.id, self.sample)


@dataclass
class ToolCall:
    name: str
    arguments: Any
    result: str
    failed: bool


@dataclass
class Turn:
    """One assistant turn and the tool calls it made."""

    content: str
    tool_calls: list[ToolCall] = field(default_factory=list)
    completion_tokens: int = 0


@dataclass
class Trajectory:
    """Everything one conversation did, and how it scored."""

    record_id: str
    dataset: str
    sample: int
    question: str
    turns: list[Turn]
    messages: list[dict[str, Any]]
    """The completion as TRL's reward functions see it: assistant and tool messages after the prompt."""
    queries: list[str]
    retrieved_ids: list[str]
    """Passage ids the search results showed, in order, without repeats."""
    final_text: str
    answer: str | None
    abstained: bool
    citations: list[str]
    stop_reason: StopReason
    outcome: str
    em: float
    f1: float
    prompt_tokens: int
    completion_tokens: int
    """Tokens the model generated (tool results excluded)."""
    tool_tokens: int
    seconds: float
    prompt_ids: list[int] = field(default_factory=list, repr=False)
    completion_ids: list[int] = field(default_factory=list, repr=False)
    tool_mask: list[int] = field(default_factory=list, repr=False)
    """1 for model tokens, 0 for tool-result tokens, aligned with ``completion_ids`` (TRL's ``tool_mask``)."""

    @property
    def searches(self) -> int:
        return len(self.queries)

    def to_dict(self, with_ids: bool = False) -> dict[str, Any]:
        row = asdict(self)
        if not with_ids:
            for key in ("prompt_ids", "completion_ids", "tool_mask"):
                row.pop(key)
        return row

    @classmethod
    def from_dict(cls, row: dict[str, Any]) -> "Trajectory":
        turns = [Turn(t["content"], [ToolCall(**c) for c in t.get("tool_calls", [])], t.get("completion_tokens", 0))
                 for t in row.get("turns", [])]
        known = {f for f in cls.__dataclass_fields__ if f != "turns"}
        return cls(turns=turns, **{k: v for k, v in row.items() if k in known})


def env_tools(env: Any) -> list[Callable]:
    """The tools an environment exposes, found the way TRL finds them: every public function of
    its class except ``reset`` and ``get_reward``, bound to the instance."""
    return [
        getattr(env, name)
        for name, _ in inspect.getmembers(type(env), predicate=inspect.isfunction)
        if name not in ("reset", "get_reward") and not name.startswith("_")
    ]


def result_ids(tool_result: str) -> list[str]:
    """Passage ids of the lines of a search result, in rank order (`awarl.protocol.parse_results`).

    >>> result_ids("Paris: capital [d1]\\nRome: city [d2]")
    ['d1', 'd2']
    """
    return [pid for pid, _, _ in parse_results(tool_result)]


class ChatTemplate:
    """Chat template rendering exactly as GRPOTrainer does it for a tokenizer."""

    def __init__(self, tokenizer: Any, chat_template_kwargs: dict[str, Any] | None = None) -> None:
        from trl.chat_template_utils import (
            add_response_schema,
            get_training_chat_template,
            is_chat_template_prefix_preserving,
        )

        if getattr(tokenizer, "response_template", None) is None and getattr(tokenizer, "response_schema", None) is None:
            add_response_schema(tokenizer)
        self.tokenizer = tokenizer
        # GRPOTrainer swaps in a prefix-preserving training template when the model's own is not one.
        self.template = None if is_chat_template_prefix_preserving(tokenizer) else get_training_chat_template(tokenizer)
        self.kwargs = dict(chat_template_kwargs or {})
        self._eos = tokenizer.eos_token_id

    def prompt_ids(self, messages: list[dict[str, Any]], tools: Sequence[Callable]) -> list[int]:
        """``GRPOTrainer._tokenize_prompts`` for one conversation (environment path)."""
        rendered = self.tokenizer.apply_chat_template(
            conversation=[messages], tools=list(tools) or None, chat_template=self.template,
            add_generation_prompt=True, tokenize=True, return_dict=True, **self.kwargs,
        )
        return list(rendered["input_ids"][0])

    def tool_suffix_ids(self, tool_messages: list[dict[str, Any]]) -> list[int]:
        """``GRPOTrainer._get_tool_suffix_ids``: the tokens that close the assistant turn's tool call
        and open the next assistant turn after the tool results, from a dummy conversation."""
        dummy = [
            {"role": "user", "content": "dummy"},
            {"role": "assistant", "content": "",
             "tool_calls": [{"type": "function", "function": {"name": tool_messages[0]["name"], "arguments": {}}}]},
        ]
        prefix = self.tokenizer.apply_chat_template(dummy, add_generation_prompt=False, tokenize=True,
                                                    chat_template=self.template, return_dict=False, **self.kwargs)
        full = self.tokenizer.apply_chat_template(dummy + tool_messages, add_generation_prompt=True, tokenize=True,
                                                  chat_template=self.template, return_dict=False, **self.kwargs)
        eos_at = [i for i, t in enumerate(prefix) if t == self._eos]
        if eos_at:
            prefix = prefix[: eos_at[-1] + 1]
        if full[: len(prefix)] != prefix:
            raise BackendError("chat template is not prefix-preserving around tool messages; cannot splice tool results")
        return list(full[len(prefix):])

    def parse(self, ids: list[int], prefix: list[int], tools: Sequence[Callable]) -> dict[str, Any]:
        from trl.chat_template_utils import parse_response

        return parse_response(self.tokenizer, ids, prefix=prefix, tools=list(tools))


@dataclass
class _Conversation:
    rollout: Rollout
    env: Any
    tools: list[Callable]
    prompt_messages: list[dict[str, Any]]
    started: float
    seed: int | None = None
    prompt_ids: list[int] = field(default_factory=list)
    completion_ids: list[int] = field(default_factory=list)
    tool_mask: list[int] = field(default_factory=list)
    messages: list[dict[str, Any]] = field(default_factory=list)
    turns: list[Turn] = field(default_factory=list)
    rounds: int = 0
    prompt_tokens: int = 0
    model_tokens: int = 0
    tool_tokens: int = 0
    stop: StopReason | None = None


class Runner:
    """Drive conversations through a backend and an environment.

    Args:
        backend: a `Generator` (see `awarl.llm.spec.load_backend`).
        env_factory: zero-argument callable returning an environment (TRL's ``environment_factory``
            contract: ``reset(**row)`` before each conversation, public methods are tools).
        config: sampling and budgets.
    """

    def __init__(self, backend: Generator, env_factory: Callable[[], Any], config: RunnerConfig | None = None) -> None:
        self.backend = backend
        self.env_factory = env_factory
        self.config = config or RunnerConfig()
        self.template = (ChatTemplate(backend.tokenizer, self.config.chat_template_kwargs)
                         if backend.accepts == "tokens" else None)
        self._pool: list[Any] = []

    def run(
        self,
        rollouts: Iterable[Rollout],
        on_done: Callable[[Trajectory], None] | None = None,
    ) -> list[Trajectory]:
        """Run every rollout; return trajectories in input order. ``on_done`` sees each one as it finishes."""
        queue = list(enumerate(rollouts))
        results: list[Trajectory | None] = [None] * len(queue)
        active: list[tuple[int, _Conversation]] = []
        cursor = 0
        while cursor < len(queue) or active:
            while cursor < len(queue) and len(active) < self.config.max_concurrent:
                index, rollout = queue[cursor]
                active.append((index, self._start(rollout)))
                cursor += 1
            self._step([conv for _, conv in active])
            still = []
            for index, conv in active:
                if conv.stop is None:
                    still.append((index, conv))
                    continue
                traj = self._finish(conv)
                results[index] = traj
                if on_done is not None:
                    on_done(traj)
            active = still
        return [t for t in results if t is not None]

    # -- one conversation's life ------------------------------------------------------------------------------

    def _start(self, rollout: Rollout) -> _Conversation:
        env = self._pool.pop() if self._pool else self.env_factory()
        messages = build_messages(rollout.record.question, self.config.rollout.prompt)
        seed = rollout.seed(self.config.seed)
        observation = env.reset(**{**rollout.record.to_dict(), "prompt": messages, "rollout_seed": seed})
        if isinstance(observation, str):  # TRL appends a reset() string to the last user message
            messages = messages[:-1] + [{**messages[-1], "content": messages[-1]["content"] + observation}]
        conv = _Conversation(rollout, env, env_tools(env), messages, started=time.perf_counter(), seed=seed)
        if self.template is not None:
            conv.prompt_ids = self.template.prompt_ids(messages, conv.tools)
            conv.prompt_tokens = len(conv.prompt_ids)
            limit = self.backend.max_model_len
            if limit is not None and conv.prompt_tokens >= limit:
                raise ConfigError(f"record {rollout.record.id!r}: the prompt has {conv.prompt_tokens} tokens, "
                                 f"the model's context is {limit}")
        return conv

    def _step(self, convs: list[_Conversation]) -> None:
        """One generation for every active conversation, then tools for those that called them."""
        budget = self.config.rollout.max_completion_tokens
        if self.template is not None:
            prompts: list[Any] = [c.prompt_ids + c.completion_ids for c in convs]
        else:
            schemas = [_tool_schemas(c.tools) for c in convs]
            prompts = [ChatPrompt(c.prompt_messages + c.messages, s) for c, s in zip(convs, schemas)]
        room = max(budget - self._used(c) for c in convs)
        seeds = None if self.config.seed is None else [turn_seed(c.seed, len(c.turns)) for c in convs]
        gens = self.backend.generate(prompts, self.config.sampling(max(1, room), seeds))
        for conv, prompt, gen in zip(convs, prompts, gens):
            self._take_turn(conv, prompt, gen)

    def _used(self, conv: _Conversation) -> int:
        return len(conv.completion_ids) if self.template is not None else conv.model_tokens + conv.tool_tokens

    def _take_turn(self, conv: _Conversation, prompt: Any, gen: Generation) -> None:
        room = self.config.rollout.max_completion_tokens - self._used(conv)
        if self.template is not None:
            ids = gen.token_ids[:room]
            truncated = len(ids) < len(gen.token_ids) or gen.finish_reason == "length"
            conv.completion_ids += ids
            conv.tool_mask += [1] * len(ids)
            conv.model_tokens += len(ids)
            message = self.template.parse(ids, prompt, conv.tools) if ids else {}
        else:
            truncated = gen.finish_reason == "length" or gen.completion_tokens >= room
            if not conv.turns:
                conv.prompt_tokens = gen.prompt_tokens
            conv.model_tokens += gen.completion_tokens
            # The server's prompt count grows by everything after the first prompt: earlier turns, tool results and
            # template glue; what is not model output is charged to the tools.
            used = gen.prompt_tokens + gen.completion_tokens - conv.prompt_tokens
            conv.tool_tokens = max(0, used - conv.model_tokens)
            message = dict(gen.message or {"role": "assistant", "content": gen.text})
        if message:
            conv.messages.append(message)
        calls = message.get("tool_calls") if message else None
        turn = Turn(content=(message or {}).get("content") or "", completion_tokens=len(gen.token_ids) or gen.completion_tokens)
        conv.turns.append(turn)
        if not calls:
            conv.stop = "token_budget" if truncated and not _has_answer(message) else _final_stop(message, self.config.rollout.phrases)
            return
        if conv.rounds >= self.config.rollout.max_searches:
            conv.stop = "turn_budget"
            return
        self._call_tools(conv, calls, turn)

    def _call_tools(self, conv: _Conversation, calls: list[dict[str, Any]], turn: Turn) -> None:
        tool_dict = {t.__name__: t for t in conv.tools}
        tool_messages = []
        for call in calls:
            name, failed = "unknown", False
            if call.get("type") == "function":
                fn = call["function"]
                name, args = fn["name"], fn.get("arguments", {})
                try:
                    if name not in tool_dict:
                        raise ValueError(f"Tool {name} not found.")
                    result: Any = tool_dict[name](**args)  # arguments that are not a JSON object fail here, visibly
                except Exception as exc:  # a tool error is a message to the model, as in TRL
                    result, failed = {"error": str(exc)}, True
            else:
                name, args = call.get("name", "unknown"), None
                result, failed = {"error": f"Unsupported tool call type: {call.get('type')}"}, True
            content = str(result)
            turn.tool_calls.append(ToolCall(name=name, arguments=args, result=content, failed=failed))
            message = {"role": "tool", "name": name, "content": content}
            if call.get("id"):
                message["tool_call_id"] = call["id"]
            tool_messages.append(message)
        if self.template is not None:
            suffix = self.template.tool_suffix_ids(tool_messages)
            total = len(conv.prompt_ids) + len(conv.completion_ids) + len(suffix)
            max_len = self.backend.max_model_len
            if len(conv.completion_ids) + len(suffix) > self.config.rollout.max_completion_tokens or (
                max_len is not None and total >= max_len
            ):
                turn.tool_calls.clear()  # rolled back: the model never sees these results
                conv.stop = "token_budget"
                return
            conv.completion_ids += suffix
            conv.tool_mask += [0] * len(suffix)
            conv.tool_tokens += len(suffix)
        conv.messages += tool_messages
        conv.rounds += 1

    def _finish(self, conv: _Conversation) -> Trajectory:
        record = conv.rollout.record
        parsed = parse_final(conv.messages, self.config.rollout.phrases)
        verdict = score(parsed, record.answers, answerable=record.answerable, metric=self.config.rollout.metric)
        queries: list[str] = []
        seen: dict[str, None] = {}
        for turn in conv.turns:
            for call in turn.tool_calls:
                if isinstance(call.arguments, dict) and isinstance(call.arguments.get("query"), str):
                    queries.append(call.arguments["query"])
                for pid in result_ids(call.result):
                    seen.setdefault(pid, None)
        self._pool.append(conv.env)
        assert conv.stop is not None
        return Trajectory(
            record_id=record.id, dataset=record.dataset, sample=conv.rollout.sample, question=record.question,
            turns=conv.turns, messages=conv.messages, queries=queries, retrieved_ids=list(seen),
            final_text=parsed.text, answer=parsed.answer, abstained=parsed.abstained, citations=parsed.citations,
            stop_reason=conv.stop, outcome=verdict.outcome, em=verdict.em, f1=verdict.f1,
            prompt_tokens=conv.prompt_tokens, completion_tokens=conv.model_tokens, tool_tokens=conv.tool_tokens,
            seconds=time.perf_counter() - conv.started,
            prompt_ids=conv.prompt_ids, completion_ids=conv.completion_ids, tool_mask=conv.tool_mask,
        )


def _has_answer(message: dict[str, Any] | None) -> bool:
    return bool(message) and parse_final([message]).parsable


def _final_stop(message: dict[str, Any] | None, phrases: Sequence[str]) -> StopReason:
    parsed = parse_final([message] if message else [], phrases)
    if parsed.abstained:
        return "abstain"
    return "answer" if parsed.parsable else "no_answer"


def _tool_schemas(tools: Sequence[Callable]) -> list[dict[str, Any]]:
    """Function schemas (name, description, parameters) from the tools' signatures and docstrings,
    as transformers renders them into the chat template."""
    from transformers.utils import get_json_schema

    return [get_json_schema(t)["function"] for t in tools]
