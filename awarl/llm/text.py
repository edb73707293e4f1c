"""Text in, text out over any generation backend: the one adapter the LLM translator, the support
judges, the citation reward's judge and the chat loop's rewrites call a model through.

`TextModel` wraps an `awarl.llm` backend (in-process transformers, vLLM offline, an
OpenAI-compatible endpoint) and asks it for plain completions of a conversation: no tools. Token
backends get the conversation rendered with their chat template; chat backends get the messages.
`TextModel.openai` builds one over awarl's HTTP chat client (`OpenAIChatGenerator`: a timeout on
every request, retries with backoff for timeouts, connection errors, 408/409/429 and 5xx, no retry
for other 4xx); ``n`` completions of one conversation are asked for in one request there.

    >>> class Echo:
    ...     accepts, name = "messages", "echo"
    ...     def generate(self, prompts, params):
    ...         from awarl.llm.base import Generation
    ...         return [Generation(text=p.messages[-1]["content"].upper()) for p in prompts]
    >>> TextModel(Echo()).generate(["yes", "no"], n=2)
    [['YES', 'YES'], ['NO', 'NO']]
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from awarl.llm.base import ChatPrompt, Generator, SamplingParams
from awarl.llm.openai_chat import OpenAIChatGenerator, RetriesExhausted

Messages = Sequence[dict[str, Any]]


class TextModel:
    """``chat(messages, n, temperature) -> n texts`` and ``generate(prompts, n, temperature)`` (each
    prompt a one-message conversation) over ``backend``; at most ``max_new_tokens`` per completion.

    A request that failed through every retry raises `RetriesExhausted` (a `BackendError`) naming the
    URL, the attempts and the last error; ``reason`` says which kind (``timeout``, ``connection``,
    ``http_<status>``)."""

    def __init__(self, backend: Generator, *, max_new_tokens: int = 512):
        self.backend, self.max_new_tokens = backend, max_new_tokens

    @classmethod
    def openai(cls, base_url: str, model: str, *, api_key: str | None = None, timeout_s: float = 60.0,
               retries: int = 3, backoff_s: float = 0.5, max_new_tokens: int = 512, concurrency: int = 1,
               extra_body: dict[str, Any] | None = None) -> "TextModel":
        """Over ``POST {base_url}/chat/completions`` (``base_url`` is the API root, e.g.
        ``http://127.0.0.1:8000/v1``). ``retries`` are attempts after the first; ``backoff_s`` is the
        first retry delay, doubling each retry. The server is not contacted until the first request."""
        client = OpenAIChatGenerator(base_url, model, api_key=api_key, timeout=timeout_s, max_retries=retries,
                                     backoff=backoff_s, concurrency=concurrency, check=False, extra_body=extra_body)
        return cls(client, max_new_tokens=max_new_tokens)

    @property
    def name(self) -> str:
        return getattr(self.backend, "name", type(self.backend).__name__)

    @property
    def requests(self) -> int:
        """HTTP attempts made so far (0 for in-process backends)."""
        return getattr(self.backend, "requests", 0)

    @property
    def retries(self) -> int:
        """Of those, the retries."""
        return getattr(self.backend, "retries", 0)

    def chat(self, messages: Messages, n: int = 1, temperature: float = 0.0) -> list[str]:
        """``n`` completions of one conversation."""
        return self._complete([list(messages)], n, temperature)[0]

    def generate(self, prompts: Sequence[str], n: int = 1, temperature: float = 0.0) -> list[list[str]]:
        """``n`` completions of each prompt, sent as a user message; in prompt order."""
        return self._complete([[{"role": "user", "content": p}] for p in prompts], n, temperature)

    def close(self) -> None:
        if hasattr(self.backend, "close"):
            self.backend.close()

    def _complete(self, conversations: list[list[dict[str, Any]]], n: int, temperature: float) -> list[list[str]]:
        if n < 1:
            raise ValueError(f"n must be >= 1, got {n}")
        params = SamplingParams(temperature=temperature, max_new_tokens=self.max_new_tokens)
        try:
            if n > 1 and hasattr(self.backend, "sample"):  # one request asks for all n
                return [[_text(g) for g in self.backend.sample(ChatPrompt(messages=c), params, n=n)]
                        for c in conversations]
            gens = self.backend.generate([self._prompt(c) for c in conversations for _ in range(n)], params)
        except RetriesExhausted as exc:
            url = getattr(self.backend, "base_url", self.name)
            raise RetriesExhausted(f"{url}/chat/completions: failed after {exc.attempts} attempts; last error: "
                                   f"{exc.last_error}", attempts=exc.attempts, last_error=exc.last_error,
                                   reason=exc.reason) from exc
        texts = [_text(g) for g in gens]
        return [texts[i * n : (i + 1) * n] for i in range(len(conversations))]

    def _prompt(self, messages: list[dict[str, Any]]) -> Any:
        if self.backend.accepts == "messages":
            return ChatPrompt(messages=messages)
        tokenizer = self.backend.tokenizer
        text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        return tokenizer(text, add_special_tokens=False)["input_ids"]


def _text(generation: Any) -> str:
    return (generation.message or {}).get("content") or generation.text
