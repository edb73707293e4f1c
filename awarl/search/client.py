"""Clients with the `Retriever` interface: an index in this process, or a retrieval server.

`open_retriever` picks one from a string: an ``http://`` / ``https://`` URL gives an
`HttpRetriever`; an index folder is opened in-process, and a ``corpus.jsonl`` is indexed with
BM25 in memory (no server, no network). Both answer ``search(queries, k, allowed)`` and ``get_passage(id)`` the same way,
so SearchEnv, evaluation and the chatbot never care where the index lives.

`HttpRetriever` keeps one pooled `httpx.Client` (connections are reused across calls and
threads), applies a timeout to every request, retries connection errors, timeouts and 5xx/429
answers with exponential backoff and jitter, never retries other 4xx (the request itself is
wrong), and raises `SearchUnavailable` naming the URL and the last error when it gives up.
"""

from __future__ import annotations

import random
import time
from pathlib import Path
from urllib.parse import quote
from dataclasses import dataclass
from typing import Any

import httpx

from awarl.data.records import Passage
from awarl.errors import ConfigError
from awarl.search.retriever import Hit, Retriever, SearchError, UnknownPassageError, check_request


class SearchUnavailable(SearchError):
    """The retrieval server could not be reached or kept failing after every retry."""


@dataclass(frozen=True)
class HttpSettings:
    """Timeouts and retry policy of `HttpRetriever`."""

    timeout_s: float = 30.0  # per request (connect, read, write, pool)
    connect_timeout_s: float = 5.0
    retries: int = 4  # extra attempts after the first
    backoff_s: float = 0.2  # first wait; doubles every retry
    max_backoff_s: float = 5.0
    max_connections: int = 32  # pooled connections, shared by threads

    def __post_init__(self) -> None:
        if self.timeout_s <= 0 or self.connect_timeout_s <= 0 or self.retries < 0 or self.backoff_s < 0:
            raise ConfigError("timeouts must be > 0, retries and backoff_s >= 0")


class HttpRetriever:
    """A `Retriever` backed by an awarl (or any Search-R1-compatible) retrieval server."""

    kind = "http"

    def __init__(self, url: str, settings: HttpSettings | None = None, transport: httpx.BaseTransport | None = None):
        self.url = url.rstrip("/")
        self.settings = settings or HttpSettings()
        s = self.settings
        self._http = httpx.Client(
            base_url=self.url,
            timeout=httpx.Timeout(s.timeout_s, connect=s.connect_timeout_s),
            limits=httpx.Limits(max_connections=s.max_connections, max_keepalive_connections=s.max_connections),
            transport=transport,
        )
        self._size: int | None = None

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> "HttpRetriever":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def health(self) -> dict[str, Any]:
        return self._request("GET", "/health").json()

    def __len__(self) -> int:
        if self._size is None:
            self._size = int(self.health()["passages"])
        return self._size

    def get_passage(self, pid: str) -> Passage:
        resp = self._request("GET", f"/passages/{quote(pid, safe='')}", allow_status=(404,))
        if resp.status_code == 404:
            raise UnknownPassageError(pid, where=f"the index served at {self.url}")
        return Passage.from_dict(resp.json(), path=self.url, where=f"/passages/{pid}")

    def search(self, queries: list[str], k: int, allowed: list[list[str]] | None = None) -> list[list[Hit]]:
        check_request(queries, k, allowed)
        body: dict[str, Any] = {"queries": list(queries), "topk": k, "return_scores": True}
        if allowed is not None:
            body["allowed"] = [list(a) for a in allowed]
        result = self._request("POST", "/retrieve", json=body).json()["result"]
        return [[_hit(item) for item in row] for row in result]

    def _request(self, method: str, path: str, allow_status: tuple[int, ...] = (), **kwargs: Any) -> httpx.Response:
        s = self.settings
        last = ""
        for attempt in range(s.retries + 1):
            if attempt:
                wait = min(s.max_backoff_s, s.backoff_s * 2 ** (attempt - 1))
                time.sleep(wait * random.uniform(0.5, 1.0))  # jitter spreads out clients retrying together
            try:
                resp = self._http.request(method, path, **kwargs)
            except httpx.TransportError as exc:  # refused, reset, timed out, DNS
                last = f"{type(exc).__name__}: {exc}"
                continue
            if resp.status_code < 400 or resp.status_code in allow_status:
                return resp
            if resp.status_code >= 500 or resp.status_code == 429:
                last = f"HTTP {resp.status_code}: {_error_text(resp)}"
                continue
            raise SearchError(f"{method} {self.url}{path} was rejected (HTTP {resp.status_code}): {_error_text(resp)}")
        raise SearchUnavailable(
            f"retrieval server at {self.url} unavailable: {method} {path} failed {s.retries + 1} times; last error: {last}. "
            f"Is `awarl search serve` running there?"
        )


def _hit(item: dict[str, Any]) -> Hit:
    doc = item["document"]
    if "title" in doc and "text" in doc:
        title, text = doc["title"], doc["text"]
    else:  # a plain Search-R1 server: contents = '"Title"\ntext'
        head, _, text = doc.get("contents", "").partition("\n")
        title = head.strip().strip('"')
    return Hit(Passage(str(doc.get("id", "")), title, text), float(item.get("score", 0.0)))


def _error_text(resp: httpx.Response) -> str:
    try:
        body = resp.json()
    except ValueError:
        return resp.text[:300]
    if isinstance(body, dict) and "error" in body:
        detail = body.get("detail")
        return f"{body['error']}" + (f" {detail}" if detail else "")
    return str(body)[:300]


def open_retriever(spec: str | Path, **options: Any) -> Retriever:
    """The one way to open a retriever from a string:

    - an ``http://`` / ``https://`` URL of ``awarl search serve`` (or any Search-R1 server): an
      `HttpRetriever` (``options`` go to it, e.g. ``settings=HttpSettings(...)``);
    - a saved index folder (``awarl index build``): loaded memory-mapped (``options`` go to
      `awarl.search.index.load_index`, e.g. ``encoder`` for dense, ``scorer`` for BM25);
    - a ``corpus.jsonl`` file: a BM25 index built in memory (``options`` go to
      `awarl.search.bm25.BM25Index.build`, e.g. ``settings``).

    A path that does not exist, or a folder that is not an index, is a `SearchError` that says
    which of the three was expected; a file that is not JSON lines fails naming its line.
    """
    text = str(spec)
    if text.startswith(("http://", "https://")):
        return HttpRetriever(text, **options)
    if "://" in text:
        raise SearchError(f"{text!r}: only http:// and https:// retrieval servers are supported")
    from awarl.search.folder import META_FILE, resolve

    path = Path(text)
    folder = resolve(path)
    if folder.is_dir():
        if not (folder / META_FILE).exists():
            raise SearchError(f"{text}: a folder without {META_FILE}, so not an awarl index folder; build one with "
                              f"`awarl index build --corpus corpus.jsonl --out {text}`, or give a corpus.jsonl or a server URL")
        from awarl.search.index import load_index

        return load_index(folder, **options)
    if path.is_file():  # a corpus in JSON lines, whatever its name; a file that is not one fails naming its line
        from awarl.data.records import load_corpus
        from awarl.search.bm25 import BM25Index

        return BM25Index.build(load_corpus(path), **{"source": path, **options})
    raise SearchError(f"{text}: no such index folder or corpus file (give an index folder, a corpus.jsonl, "
                      "or the http(s) URL of `awarl search serve`)")
