"""The verify-side face of awarl's one OpenAI-compatible chat client (vLLM, llama.cpp, hosted APIs).

Used by the LLM translator and the LLM support judge. `OpenAIChatBackend` is a thin adapter over
`awarl.llm.openai_chat.OpenAIChatGenerator`, which owns the HTTP: a timeout on every request,
retries with backoff (honouring ``Retry-After``) for transport errors, 408/409/429 and 5xx,
no retry for other 4xx. What finally fails raises `BackendError` (the `awarl.llm.base` class)
naming the URL, the status and the body.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from awarl.llm.base import BackendError, ChatPrompt, SamplingParams
from awarl.llm.openai_chat import OpenAIChatGenerator, RetriesExhausted

__all__ = ["BackendError", "OpenAIChatBackend"]


@dataclass
class OpenAIChatBackend:
    """``generate(prompts, n, temperature) -> list[list[str]]`` over ``POST {base_url}/chat/completions``.

    ``base_url`` is the API root, e.g. ``http://127.0.0.1:8000/v1``. ``retries`` are attempts
    after the first; ``backoff_s`` is the first retry delay, doubling each retry. The server is
    not contacted until the first request.
    """

    base_url: str
    model: str
    api_key: str | None = None
    timeout_s: float = 60.0
    retries: int = 3
    backoff_s: float = 0.5
    max_tokens: int = 512
    _client: OpenAIChatGenerator = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self._client = OpenAIChatGenerator(
            self.base_url, self.model, api_key=self.api_key, timeout=self.timeout_s,
            max_retries=self.retries, backoff=self.backoff_s, concurrency=1, check=False,
        )

    def generate(self, prompts: list[str], n: int = 1, temperature: float = 0.0) -> list[list[str]]:
        return [self.chat([{"role": "user", "content": p}], n=n, temperature=temperature) for p in prompts]

    def chat(self, messages: list[dict[str, str]], n: int = 1, temperature: float = 0.0) -> list[str]:
        """``n`` completions of one conversation in one request; servers that ignore ``n`` are asked again."""
        params = SamplingParams(temperature=temperature, max_new_tokens=self.max_tokens)
        try:
            gens = self._client.sample(ChatPrompt(messages=list(messages)), params, n=n)
        except RetriesExhausted as exc:
            raise BackendError(
                f"{self._client.base_url}/chat/completions: failed after {exc.attempts} attempts; last error: {exc.last_error}"
            ) from exc
        return [g.text for g in gens]

    def close(self) -> None:
        self._client.close()
