"""What the text of a regex says before it runs: whether it can backtrack catastrophically
(`nested_repeat`, refused when a policy loads) and what text every match must hold
(`required_literal`, the pattern translator's prefilter)."""

from __future__ import annotations

import functools
import re
from typing import Any

_GLOBAL_FLAGS_RE = re.compile(r"\(\?[a-zA-Z-]+\)")


@functools.lru_cache(maxsize=4096)
def required_literal(source: str) -> str:
    r"""The longest run of literal characters outside every group, class and quantifier of regex
    ``source``, casefolded: text that every match holds. "" when there is none, when a top-level
    ``|`` makes every run optional, or when global inline flags (``(?x)``) change how the text reads.

    >>> required_literal(r"(?P<subject>\b\w+ \w+) lives in Dorin\b"), required_literal("ab?c|d")
    (' lives in dorin', '')
    """
    if _GLOBAL_FLAGS_RE.search(source):
        return ""
    runs: list[str] = []
    run: list[str] = []
    depth, i, n = 0, 0, len(source)

    def end() -> None:
        if run:
            runs.append("".join(run))
            run.clear()

    while i < n:
        c = source[i]
        if c == "\\":
            nxt = source[i + 1 : i + 2]
            if nxt and not nxt.isalnum():
                if depth == 0:
                    run.append(nxt)
                i += 2
                continue
            end()
            i += 2
            if nxt in ("x", "u", "U"):  # \xhh, \uhhhh, \Uhhhhhhhh
                i += {"x": 2, "u": 4, "U": 8}[nxt]
            elif nxt in ("p", "P", "N", "g") and i < n and source[i] in "{<":
                close = source.find("}" if source[i] == "{" else ">", i)
                i = n if close < 0 else close + 1
            elif nxt.isdigit():  # a back reference or an octal escape
                while i < n and source[i].isdigit():
                    i += 1
            continue
        if c == "[":  # a character class: skip to its closing bracket
            end()
            i = _after_class(source, i)
            continue
        unbounded, width = _repeat_at(source, i)
        if width or c == "{":  # a quantifier makes the character before it optional or repeated
            if run:
                run.pop()
            end()
            i += max(width, 1)
            continue
        if c in "()":
            end()
            depth += 1 if c == "(" else -1
        elif c == "|":
            if depth == 0:
                return ""
        elif c in ".^$":
            end()
        elif depth == 0:
            run.append(c)
        i += 1
    end()
    return max(runs, key=len, default="").casefold()


def nested_repeat(source: str) -> str | None:
    """The first group of ``source`` that is repeated without bound and itself holds an unbounded
    repeat, e.g. ``(a+)+`` or ``(\\w+\\s?)*``: on a near-miss such a regex tries exponentially many
    ways to split the text (catastrophic backtracking). None when there is none. Possessive
    repeats (``a++``) and atomic groups (``(?>…)``) do not backtrack and are allowed.

    >>> nested_repeat("(a+)+b"), nested_repeat("(ab)+c"), nested_repeat("(a++)+b")
    ('(a+)+', None, None)
    """
    # One frame per open group: [start offset, holds an unbounded repeat, atomic].
    frames: list[list[Any]] = [[0, False, False]]
    i, n = 0, len(source)
    last_group: tuple[int, bool] | None = None  # (start, holds a repeat) of a group that just closed
    while i < n:
        c = source[i]
        closed, last_group = last_group, None
        if c == "\\":
            i += 2
            continue
        if c == "[":  # a character class: skip to its closing bracket
            i = _after_class(source, i)
            continue
        if c == "(":
            frames.append([i, False, source.startswith("(?>", i)])
            i += 1
            continue
        if c == ")" and len(frames) > 1:
            start, holds, atomic = frames.pop()
            last_group = (start, holds and not atomic)
            if holds and not atomic:
                frames[-1][1] = True
            i += 1
            continue
        unbounded, width = _repeat_at(source, i)
        if width:
            possessive = source.startswith("+", i + width)
            if unbounded and not possessive:
                if closed is not None and closed[1]:
                    return source[closed[0] : i + width]
                frames[-1][1] = True
            i += width + (1 if i + width < n and source[i + width] in "+?" else 0)
            continue
        i += 1
    return None


def _after_class(source: str, i: int) -> int:
    """The index just past the character class that opens at ``source[i]`` (``[``)."""
    n, j = len(source), i + 1
    if j < n and source[j] == "^":
        j += 1
    if j < n and source[j] == "]":
        j += 1
    while j < n and source[j] != "]":
        j += 2 if source[j] == "\\" else 1
    return j + 1


def _repeat_at(source: str, i: int) -> tuple[bool, int]:
    """(unbounded, length) of the quantifier at ``source[i]``; length 0 when there is none."""
    c = source[i]
    if c in "*+":
        return True, 1
    if c == "?":
        return False, 1
    if c == "{":
        m = re.match(r"\{(\d*)(,?)(\d*)\}", source[i:])
        if m and (m.group(1) or m.group(3)):
            return bool(m.group(2)) and not m.group(3), m.end()
    return False, 0


__all__ = ["nested_repeat", "required_literal"]
