"""OpenAI-compatible chat-completions backend with native tool calling.

Meant for ``vllm serve CHECKPOINT --enable-auto-tool-choice --tool-call-parser hermes`` (the
server renders the chat template and parses ``<tool_call>`` blocks), or any endpoint that speaks
``POST /v1/chat/completions`` with ``tools`` and returns ``message.tool_calls``.

Every request has a timeout; connection errors, timeouts, 408/409/429 and 5xx answers are retried
with exponential backoff (honouring ``Retry-After``); other 4xx answers fail at once with the
server's message. Requests of one batch run concurrently up to ``concurrency``.
"""

from __future__ import annotations

import json
import os
import random
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Literal

import httpx

from awarl.llm.base import BackendError, ChatPrompt, Generation, SamplingParams

RETRY_STATUS = frozenset({408, 409, 429, 500, 502, 503, 504})


class RetriesExhausted(BackendError):
    """A retryable failure (timeout, connection error, 408/409/429/5xx) lasted through every attempt.
    ``reason`` is a short category: ``timeout``, ``connection`` or ``http_<status>``."""

    def __init__(self, message: str, *, attempts: int, last_error: str, reason: str = "unknown") -> None:
        super().__init__(message)
        self.attempts, self.last_error, self.reason = attempts, last_error, reason


class RequestRejected(BackendError):
    """The server refused the request with a status that retrying cannot fix (a 4xx other than 408/409/429)."""

    def __init__(self, message: str, *, status: int) -> None:
        super().__init__(message)
        self.status, self.reason = status, f"http_{status}"


class OpenAIChatGenerator:
    """Chat completions over HTTP.

    Args:
        base_url: the API root, e.g. ``http://127.0.0.1:8000/v1``.
        model: the served model name; None asks ``GET /models`` and takes the first.
        api_key: sent as a bearer token; defaults to ``$OPENAI_API_KEY`` (a local vLLM server needs none).
        timeout: seconds per request (connecting: at most 10 s).
        max_retries: retries after the first attempt for retryable failures.
        backoff: first retry delay in seconds; doubles each retry (with jitter), capped at 30 s.
        concurrency: most requests in flight at once.
        check: contact the server at construction, so an unreachable endpoint fails early and clearly.
        extra_body: fields added to every request body (e.g. ``{"response_format": {"type": "json_object"}}``).

    ``requests`` and ``retries`` count the HTTP attempts made over the client's lifetime.
    """

    accepts: Literal["messages"] = "messages"
    tokenizer = None
    eos_token_ids: list[int] = []
    max_model_len: int | None = None

    def __init__(
        self,
        base_url: str,
        model: str | None = None,
        *,
        api_key: str | None = None,
        timeout: float = 120.0,
        max_retries: int = 4,
        backoff: float = 0.5,
        concurrency: int = 8,
        check: bool = True,
        extra_body: dict[str, Any] | None = None,
    ) -> None:
        if concurrency < 1:
            raise ValueError(f"concurrency must be >= 1, got {concurrency}")
        self.base_url = base_url.rstrip("/")
        self.extra_body = dict(extra_body or {})
        self.requests = self.retries = 0
        self._count = threading.Lock()
        self.max_retries, self.backoff, self.concurrency = max_retries, backoff, concurrency
        key = api_key if api_key is not None else os.environ.get("OPENAI_API_KEY")
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        self._client = httpx.Client(
            base_url=self.base_url,
            headers=headers,
            timeout=httpx.Timeout(timeout, connect=min(timeout, 10.0)),
            limits=httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency),
        )
        self.model = model
        if check or model is None:
            served = self.served_models()
            if model is None:
                if not served:
                    raise BackendError(f"{self.base_url}/models lists no models; name one with '#MODEL' in the spec")
                self.model = served[0]
            elif served and model not in served:
                raise BackendError(f"model {model!r} is not served at {self.base_url}; it serves {served}")
        self.name = f"openai:{self.base_url}#{self.model}"

    def served_models(self, retries: int = 1) -> list[str]:
        """Model ids from ``GET /models`` (few retries: a wrong URL should fail fast at load)."""
        body = self._request("GET", "/models", retries=min(retries, self.max_retries))
        return [m.get("id") for m in body.get("data", []) if isinstance(m, dict) and m.get("id")]

    def generate(self, prompts: Sequence[ChatPrompt], params: SamplingParams) -> list[Generation]:
        """One assistant turn per conversation, requests running concurrently, results in input order."""
        if len(prompts) <= 1 or self.concurrency == 1:
            return [self._complete(p, params.for_prompt(i)) for i, p in enumerate(prompts)]
        with ThreadPoolExecutor(max_workers=min(self.concurrency, len(prompts))) as pool:
            return list(pool.map(lambda i: self._complete(prompts[i], params.for_prompt(i)), range(len(prompts))))

    def sample(self, prompt: ChatPrompt, params: SamplingParams, n: int = 1) -> list[Generation]:
        """``n`` assistant turns for one conversation, asked for in one request (``"n"`` in the
        body); a server that returns fewer choices is asked again for the rest. A request's token
        usage is counted on its first choice."""
        if n < 1:
            raise ValueError(f"n must be >= 1, got {n}")
        out: list[Generation] = []
        while len(out) < n:
            payload = self._payload(prompt, params)
            payload["n"] = n - len(out)
            body = self._request("POST", "/chat/completions", json=payload)
            choices = body.get("choices") if isinstance(body, dict) else None
            if not isinstance(choices, list) or not choices:
                raise BackendError(f"POST {self.base_url}/chat/completions returned no choices: {str(body)[:300]}")
            usage = body.get("usage") or {}
            out.extend(self._generation(body, c, usage if i == 0 else {}) for i, c in enumerate(choices))
        return out[:n]

    def _complete(self, prompt: ChatPrompt, params: SamplingParams) -> Generation:
        body = self._request("POST", "/chat/completions", json=self._payload(prompt, params))
        try:
            choice = body["choices"][0]
        except (KeyError, IndexError, TypeError) as exc:
            raise BackendError(
                f"POST {self.base_url}/chat/completions returned an unexpected body (missing {exc}): {str(body)[:300]}"
            ) from None
        return self._generation(body, choice, body.get("usage") or {})

    def _payload(self, prompt: ChatPrompt, params: SamplingParams) -> dict[str, Any]:
        payload: dict[str, Any] = {
            "model": self.model,
            "messages": to_openai_messages(prompt.messages),
            "temperature": params.temperature,
            "top_p": params.top_p,
            "max_tokens": params.max_new_tokens,
        }
        if params.seed is not None:
            payload["seed"] = params.seed
        if prompt.tools:
            payload["tools"] = [{"type": "function", "function": schema} for schema in prompt.tools]
            payload["tool_choice"] = "auto"
        payload.update(self.extra_body)
        return payload

    def _generation(self, body: dict[str, Any], choice: Any, usage: dict[str, Any]) -> Generation:
        try:
            message = from_openai_message(choice["message"])
        except (KeyError, IndexError, TypeError) as exc:
            raise BackendError(
                f"POST {self.base_url}/chat/completions returned an unexpected body (missing {exc}): {str(body)[:300]}"
            ) from None
        return Generation(
            text=message.get("content") or "",
            finish_reason="length" if choice.get("finish_reason") == "length" else "stop",
            message=message,
            prompt_tokens=int(usage.get("prompt_tokens") or 0),
            completion_tokens=int(usage.get("completion_tokens") or 0),
        )

    def _request(self, method: str, path: str, retries: int | None = None, **kwargs: Any) -> dict[str, Any]:
        url = f"{self.base_url}{path}"
        retries = self.max_retries if retries is None else retries
        last, reason = "", "unknown"
        for attempt in range(retries + 1):
            retry_after: float | None = None
            with self._count:
                self.requests += 1
                self.retries += attempt > 0
            try:
                response = self._client.request(method, path, **kwargs)
            except httpx.TimeoutException as exc:
                last, reason = f"timed out ({type(exc).__name__})", "timeout"
            except httpx.TransportError as exc:
                last, reason = f"cannot connect ({exc})", "connection"
            else:
                if response.status_code < 400:
                    try:
                        return response.json()
                    except ValueError:
                        raise BackendError(f"{method} {url} returned non-JSON: {response.text[:300]!r}") from None
                last, reason = f"HTTP {response.status_code}: {response.text[:300]}", f"http_{response.status_code}"
                if response.status_code not in RETRY_STATUS:
                    raise RequestRejected(f"{method} {url} failed with {last}", status=response.status_code)
                retry_after = _retry_after(response)
            if attempt < retries:
                delay = retry_after if retry_after is not None else self.backoff * 2**attempt * (1 + random.random())
                time.sleep(min(delay, 30.0))
        raise RetriesExhausted(f"{method} {url} failed after {retries + 1} attempts: {last}", attempts=retries + 1,
                               last_error=last, reason=reason)

    def close(self) -> None:
        self._client.close()


def _retry_after(response: httpx.Response) -> float | None:
    try:
        return max(0.0, float(response.headers["retry-after"]))
    except (KeyError, ValueError):
        return None


def to_openai_messages(messages: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Runner messages (TRL style: tool-call arguments as dicts, tool results by name) to the
    chat-completions shape (arguments as JSON strings, each tool result tied to its call id).

    >>> msgs = [{"role": "user", "content": "q"},
    ...         {"role": "assistant", "content": "", "tool_calls": [
    ...             {"type": "function", "function": {"name": "search", "arguments": {"query": "x"}}}]},
    ...         {"role": "tool", "name": "search", "content": "T: x [d1]"}]
    >>> out = to_openai_messages(msgs)
    >>> out[1]["tool_calls"][0]["function"]["arguments"], out[2]["tool_call_id"]
    ('{"query": "x"}', 'call_1_0')
    """
    out: list[dict[str, Any]] = []
    pending: list[str] = []  # call ids of the last assistant turn not yet answered by a tool message
    for n, msg in enumerate(messages):
        role = msg.get("role")
        if role == "assistant" and msg.get("tool_calls"):
            calls = []
            for j, call in enumerate(msg["tool_calls"]):
                fn = call.get("function", {})
                args = fn.get("arguments", {})
                calls.append({
                    "id": call.get("id") or f"call_{n}_{j}",
                    "type": "function",
                    "function": {"name": fn.get("name", ""), "arguments": args if isinstance(args, str) else json.dumps(args)},
                })
            pending = [c["id"] for c in calls]
            out.append({"role": "assistant", "content": msg.get("content") or None, "tool_calls": calls})
        elif role == "tool":
            call_id = msg.get("tool_call_id") or (pending.pop(0) if pending else f"call_{n}")
            out.append({"role": "tool", "tool_call_id": call_id, "content": str(msg.get("content", ""))})
        else:
            out.append({"role": role, "content": msg.get("content", "")})
    return out


def from_openai_message(message: dict[str, Any]) -> dict[str, Any]:
    """A chat-completions assistant message in runner form: arguments parsed from JSON to a dict
    (kept as the raw string when it is not valid JSON, so calling the tool fails visibly)."""
    out: dict[str, Any] = {"role": "assistant", "content": message.get("content") or ""}
    calls = []
    for call in message.get("tool_calls") or []:
        fn = call["function"]
        raw = fn.get("arguments") or "{}"
        try:
            args: Any = json.loads(raw) if isinstance(raw, str) else raw
        except ValueError:
            args = raw
        calls.append({"id": call.get("id"), "type": call.get("type", "function"),
                      "function": {"name": fn["name"], "arguments": args}})
    if calls:
        out["tool_calls"] = calls
    return out
