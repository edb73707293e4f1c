"""A small client for OpenAI-compatible chat-completions endpoints (vLLM, llama.cpp, hosted APIs).

Used by the LLM translator and the LLM support judge. Every request has a timeout; transport
errors, 429 and 5xx answers are retried with exponential backoff; what finally fails raises
`BackendError` naming the URL, the status and the body.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import httpx


class BackendError(RuntimeError):
    """The endpoint could not give an answer after all retries."""


@dataclass
class OpenAIChatBackend:
    """``generate(prompts, n, temperature) -> list[list[str]]`` over ``POST {base_url}/chat/completions``.

    ``base_url`` is the API root, e.g. ``http://127.0.0.1:8000/v1``.
    """

    base_url: str
    model: str
    api_key: str | None = None
    timeout_s: float = 60.0
    retries: int = 3
    backoff_s: float = 0.5
    max_tokens: int = 512

    def generate(self, prompts: list[str], n: int = 1, temperature: float = 0.0) -> list[list[str]]:
        return [self.chat([{"role": "user", "content": p}], n=n, temperature=temperature) for p in prompts]

    def chat(self, messages: list[dict[str, str]], n: int = 1, temperature: float = 0.0) -> list[str]:
        """``n`` completions of one conversation; servers that ignore ``n`` are asked again."""
        out: list[str] = []
        while len(out) < n:
            body = {
                "model": self.model, "messages": messages, "n": n - len(out),
                "temperature": temperature, "max_tokens": self.max_tokens,
            }
            choices = self._post(body).get("choices")
            if not isinstance(choices, list) or not choices:
                raise BackendError(f"{self._url}: response has no 'choices'")
            for c in choices:
                content = (c.get("message") or {}).get("content") if isinstance(c, dict) else None
                if not isinstance(content, str):
                    raise BackendError(f"{self._url}: a choice has no message content: {c!r}")
                out.append(content)
        return out[:n]

    @property
    def _url(self) -> str:
        return self.base_url.rstrip("/") + "/chat/completions"

    def _post(self, body: dict[str, Any]) -> dict[str, Any]:
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        last = ""
        for attempt in range(self.retries + 1):
            if attempt:
                time.sleep(self.backoff_s * 2 ** (attempt - 1))
            try:
                resp = httpx.post(self._url, json=body, headers=headers, timeout=self.timeout_s)
            except httpx.TransportError as exc:
                last = f"{type(exc).__name__}: {exc}"
                continue
            if resp.status_code == 429 or resp.status_code >= 500:
                last = f"HTTP {resp.status_code}: {resp.text[:200]}"
                continue
            if resp.status_code != 200:
                raise BackendError(f"{self._url}: HTTP {resp.status_code}: {resp.text[:500]}")
            try:
                return resp.json()
            except ValueError:
                raise BackendError(f"{self._url}: response is not JSON: {resp.text[:200]!r}") from None
        raise BackendError(f"{self._url}: failed after {self.retries + 1} attempts; last error: {last}")
