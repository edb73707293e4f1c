"""Rendering search results for the model: one line per passage, cut to a token budget."""

from __future__ import annotations

import pytest

from awarl.protocol import extract_citations
from awarl.data.records import Passage
from awarl.search.retriever import Hit, check_request, render, truncate_words, SearchError


def test_render_lines_follow_the_protocol():
    hits = [Hit(Passage("d1", "Paris", "Paris is the capital of France."), 2.0),
            Hit(Passage("d2", "Seine", "The Seine  flows\nthrough Paris."), 1.0)]
    text = render(hits)
    assert text.splitlines() == ["Paris: Paris is the capital of France. [d1]", "Seine: The Seine flows through Paris. [d2]"]
    # the ids the model reads are the ids the citation parser accepts
    assert extract_citations(text) == ["d1", "d2"]


def test_render_truncates_each_passage_to_the_budget():
    long = Passage("d9", "Long", " ".join(f"w{i}" for i in range(500)))
    [line] = render([Hit(long, 1.0)], max_tokens=20).splitlines()
    assert line.startswith("Long: w0 w1") and line.endswith("w19 … [d9]")
    assert len(line.split()) == 1 + 20 + 1 + 1  # "Long:", 20 words, "…", "[d9]"
    assert render([], max_tokens=5) == ""


def test_truncate_words_keeps_short_text():
    assert truncate_words("a b c", 3) == "a b c"
    assert truncate_words("a b c", None) == "a b c"


@pytest.mark.parametrize("queries,k,allowed,message", [
    ("one string", 3, None, "list of strings"),
    (["q"], 0, None, "positive integer"),
    (["q"], True, None, "positive integer"),
    (["q", "r"], 3, [["d1"]], "one list per query"),
])
def test_check_request(queries, k, allowed, message):
    with pytest.raises(SearchError, match=message):
        check_request(queries, k, allowed)
