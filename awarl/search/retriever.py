"""The one retrieval interface every index, client and environment shares.

A `Retriever` answers a batch of queries with ranked `Hit`s. ``allowed`` restricts each query
to its own list of passage ids: that is the ``closed`` scope (each question searches only the
paragraphs of its record, as in HotpotQA's distractor setting); ``None`` is the ``global``
scope (the whole corpus). `render` turns hits into the text the model reads.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, Protocol, runtime_checkable

from awarl.protocol import render_passage
from awarl.data.records import Passage
from awarl.errors import SearchError

Scope = Literal["global", "closed"]
SCOPES: tuple[str, ...] = ("global", "closed")


@dataclass(frozen=True)
class Hit:
    """One retrieved passage and its score (higher is better; scales differ between indexes)."""

    passage: Passage
    score: float


class UnknownPassageError(SearchError, KeyError):
    """A passage id that is not in the index."""

    def __init__(self, pid: str, where: str = "the index"):
        self.pid = pid
        super().__init__(f"unknown passage id {pid!r}: not in {where}")

    def __str__(self) -> str:  # KeyError would quote the whole message
        return self.args[0]


@runtime_checkable
class Retriever(Protocol):
    """What SearchEnv, the server and the CLI need from an index or a client."""

    def search(self, queries: list[str], k: int, allowed: list[list[str]] | None = None) -> list[list[Hit]]:
        """Top-``k`` hits per query, best first. ``allowed[i]`` (closed scope) limits query ``i``
        to those passage ids. Passages sharing no term with the query are left out, so a query
        may get fewer than ``k`` hits."""
        ...

    def get_passage(self, pid: str) -> Passage:
        """The passage with id ``pid``; `UnknownPassageError` when there is none."""
        ...

    def __len__(self) -> int:
        """Number of passages."""
        ...


def check_request(queries: Sequence[str], k: int, allowed: Sequence[Sequence[str]] | None) -> None:
    """Reject malformed search calls with a message that says what is wrong."""
    if isinstance(queries, str) or not all(isinstance(q, str) for q in queries):
        raise SearchError("queries must be a list of strings")
    if not isinstance(k, int) or isinstance(k, bool) or k < 1:
        raise SearchError(f"k must be a positive integer, got {k!r}")
    if allowed is not None and len(allowed) != len(queries):
        raise SearchError(f"allowed has {len(allowed)} lists for {len(queries)} queries; give one list per query")


def truncate_words(text: str, max_tokens: int | None) -> str:
    """Keep the first ``max_tokens`` whitespace tokens of ``text``, marking a cut with "…";
    runs of whitespace (newlines too) become one space, so a passage stays on one line.

    Whitespace tokens stand in for model tokens (a model tokenizer gives about 1.3 per word
    in English prose), so a budget stays meaningful whatever model reads the results.

    >>> truncate_words("one two three four", 2)
    'one two …'
    >>> truncate_words("one   two", None)
    'one two'
    """
    words = text.split()
    if max_tokens is None or len(words) <= max_tokens:
        return " ".join(words)
    return " ".join(words[:max_tokens]) + " …"


def render(hits: Sequence[Hit], max_tokens: int | None = None) -> str:
    """One line per hit, ``<title>: <text> [<id>]`` (`awarl.protocol.render_passage`),
    each text cut to ``max_tokens`` words.

    >>> render([Hit(Passage("d1", "Paris", "Paris is the capital of France."), 3.2)], max_tokens=3)
    'Paris: Paris is the … [d1]'
    """
    lines = []
    for hit in hits:
        p = hit.passage
        lines.append(render_passage(p.id, p.title, truncate_words(p.text, max_tokens)))
    return "\n".join(lines)
