"""One generation interface for every backend.

A backend takes a batch of prompts and returns one `Generation` per prompt. Token backends
(in-process transformers, vLLM offline) take token-id prompts and own a tokenizer, so the rollout
runner renders the chat template and parses tool calls itself, exactly as TRL's training loop
does. Chat backends (an OpenAI-compatible endpoint) take message lists plus tool schemas and let
the server render and parse; they return the parsed assistant message.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

from awarl.errors import BackendError

FinishReason = Literal["stop", "length", "error"]


@dataclass(frozen=True)
class SamplingParams:
    """How to sample one turn. ``temperature == 0`` means greedy decoding.

    ``seed`` seeds the backend once for a whole batch; ``seeds`` (one per prompt, in prompt order)
    gives each prompt a random stream of its own, so a prompt samples the same tokens whatever else
    is in the batch (the runner derives them per rollout and turn: `awarl.agent.runner.rollout_seed`).
    """

    temperature: float = 0.0
    top_p: float = 1.0
    max_new_tokens: int = 512
    seed: int | None = None
    seeds: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0

    def for_prompt(self, i: int) -> "SamplingParams":
        """The parameters of prompt ``i`` alone: its own seed when ``seeds`` are given (for backends
        that take one seed per request)."""
        if self.seeds is None:
            return self
        return SamplingParams(self.temperature, self.top_p, self.max_new_tokens, seed=self.seeds[i])


@dataclass(frozen=True)
class ChatPrompt:
    """A message-list prompt for chat backends: the conversation so far and the tool schemas."""

    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class Generation:
    """One generated turn.

    ``token_ids`` end with the end-of-turn token when ``finish_reason == "stop"`` (token backends
    cut after the first one, as TRL does). ``message`` is the parsed assistant message
    (``content`` and, when the model called tools, ``tool_calls`` with dict arguments); chat
    backends always fill it, token backends leave it to the runner.
    """

    text: str
    token_ids: list[int] = field(default_factory=list)
    finish_reason: FinishReason = "stop"
    message: dict[str, Any] | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0


@runtime_checkable
class Generator(Protocol):
    """What the runner needs from a backend.

    ``accepts == "tokens"``: prompts are ``list[int]``; the backend exposes ``tokenizer``
    (a transformers tokenizer), ``eos_token_ids`` and ``max_model_len``.
    ``accepts == "messages"``: prompts are `ChatPrompt`; ``tokenizer`` is None.
    """

    name: str
    accepts: Literal["tokens", "messages"]
    tokenizer: Any
    eos_token_ids: list[int]
    max_model_len: int | None

    def generate(self, prompts: Sequence[Any], params: SamplingParams) -> list[Generation]: ...

    def close(self) -> None: ...


def eos_ids_like_trl(tokenizer: Any, generation_eos: int | list[int] | None) -> list[int]:
    """End-of-turn ids as TRL's GRPOTrainer computes them: the tokenizer's eos first, then the
    model's generation-config eos ids."""
    ids = [] if generation_eos is None else [generation_eos] if isinstance(generation_eos, int) else list(generation_eos)
    if tokenizer.eos_token_id is not None and tokenizer.eos_token_id not in ids:
        ids = [tokenizer.eos_token_id, *ids]
    return ids


def cut_at_eos(ids: Sequence[int], eos_ids: Sequence[int]) -> tuple[list[int], bool]:
    """Keep tokens up to and including the first end-of-turn token; say whether one was found.

    >>> cut_at_eos([5, 6, 2, 7], [2])
    ([5, 6, 2], True)
    >>> cut_at_eos([5, 6], [2])
    ([5, 6], False)
    """
    eos = set(eos_ids)
    for i, t in enumerate(ids):
        if t in eos:
            return list(ids[: i + 1]), True
    return list(ids), False
