"""The agent protocol: one prompt builder, one answer parser, one scorer.

Training rewards, capability estimation, evaluation and the chatbot all call this module, so
they can never disagree about what the model answered or whether it was right.

A final message looks like ``<answer>Ronald Shusett</answer> [d3f2a91c0b] [d91c0aa210]``:
the answer inside ``<answer>`` tags, citations as passage ids in square brackets. The answer
"not enough information" is an abstention. The tool the model calls is ``search(query)``;
its JSON schema comes from the docstring of `awarl.agent.env.SearchEnv.search`, the one
definition TRL, the runner and the SFT data all use.
"""

from __future__ import annotations

import functools
import json
import re
import string
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Literal

ABSTAIN_PHRASE = "not enough information"
"""What the agent answers when the evidence does not settle the question."""

DEFAULT_REFUSAL_PHRASES: tuple[str, ...] = (
    ABSTAIN_PHRASE,
    "there is not enough information",
    "not enough information to answer",
    "insufficient information",
    "i don't know",
    "i do not know",
    "cannot be determined",
    "unanswerable",
)
"""Answers (after SQuAD normalisation) that count as abstentions. An answer must *be* one of
these, not merely contain one: "not enough information about X, but Y" is an answer."""

SYSTEM_PROMPT = (
    "Answer the user's question. Use the search tool to find evidence; you may search several "
    "times. Finish with the answer inside <answer></answer>, followed by the ids of the passages "
    "that support it in square brackets, e.g. <answer>Paris</answer> [d11651935d5]. If the "
    f"passages do not contain the answer, reply <answer>{ABSTAIN_PHRASE}</answer>."
)

Outcome = Literal["correct", "wrong", "abstain", "unparsable"]

_ANSWER_RE = re.compile(r"<answer>(.*?)</answer>", re.S | re.I)
_OPEN_TAG_RE = re.compile(r"<answer>", re.I)
_CITATION_RE = re.compile(r"\[([A-Za-z0-9][A-Za-z0-9_\-.:#]{0,63})\]")


def build_messages(question: str, system_prompt: str | None = None) -> list[dict[str, str]]:
    """The conversation a rollout starts from: system instructions, then the question.

    >>> [m["role"] for m in build_messages("Who wrote Hamlet?")]
    ['system', 'user']
    """
    return [
        {"role": "system", "content": SYSTEM_PROMPT if system_prompt is None else system_prompt},
        {"role": "user", "content": question},
    ]


def render_passage(pid: str, title: str, text: str) -> str:
    """One search result line, as the model sees it: ``<title>: <text> [<id>]``, the passage followed by
    its id, as an answer is followed by its citations. The id comes last so that it follows the words
    an answer repeats: a small model learns to copy it from there (an induction pattern: the answer's
    word, then what followed that word in the results), and not from the start of the line
    (docs/benchmarks.md, "Citing what it read").

    >>> render_passage("d1", "Paris", "Capital of France.")
    'Paris: Capital of France. [d1]'
    """
    return f"{title}: {text} [{pid}]"


_RESULT_LINE_RE = re.compile(r"^(.*?): (.*) \[([^\]\s]+)\]$", re.M)


def parse_results(rendered: str) -> list[tuple[str, str, str]]:
    """The ``(id, title, text)`` of each line of a rendered search result: the inverse of `render_passage`,
    the one place that reads its format (the runner's retrieved ids, the chatbot's trace premises and the
    world's gold conversations and audit all call it). The title ends at the line's first ``": "``; a
    title that holds one itself is split there, which the caller can mend with the title it knows.

    >>> parse_results("Paris: Capital of France. [d1]\\n(no passage matched)\\nRome: A city: old [1]. [d2]")
    [('d1', 'Paris', 'Capital of France.'), ('d2', 'Rome', 'A city: old [1].')]
    """
    return [(pid, title, text) for title, text, pid in _RESULT_LINE_RE.findall(rendered or "")]


def format_final(answer: str, citations: Sequence[str] = ()) -> str:
    """The final message: ``<answer>…</answer>`` then the cited ids.

    >>> format_final("Paris", ["d1", "d2"])
    '<answer>Paris</answer> [d1] [d2]'
    """
    cites = "".join(f" [{c}]" for c in citations)
    return f"<answer>{answer}</answer>{cites}"


def tool_call_message(query: str) -> dict:
    """An assistant turn that calls ``search(query)``, in the chat-template message format."""
    call = {"type": "function", "function": {"name": "search", "arguments": {"query": query}}}
    return {"role": "assistant", "content": "", "tool_calls": [call]}


def tool_result_message(content: str) -> dict:
    """The tool turn that carries search results back to the model."""
    return {"role": "tool", "name": "search", "content": content}


def final_text(completion: str | Sequence[dict]) -> str:
    """The text of the final assistant message of a completion (a string or a message list)."""
    if isinstance(completion, str):
        return completion
    for message in reversed(completion):
        if message.get("role", "assistant") == "assistant":
            return message.get("content") or ""
    return ""


def extract_answer(text: str) -> str | None:
    """The content of the last ``<answer>`` block, stripped; None when there is none, or when that block
    holds another ``<answer>`` tag (``<answer><answer>Paris</answer>``: malformed, so no reader — the
    reward, the evaluation, the chatbot's checker — has to guess what it says).

    >>> extract_answer("think <answer>a</answer> then <answer> Paris </answer>")
    'Paris'
    >>> extract_answer("Paris") is None, extract_answer("<answer><answer>Paris</answer> who") is None
    (True, True)
    """
    found = _ANSWER_RE.findall(text or "")
    if not found or _OPEN_TAG_RE.search(found[-1]):
        return None
    return found[-1].strip()


def extract_citations(text: str) -> list[str]:
    """Passage ids cited in square brackets, in order of first appearance, without repeats.

    >>> extract_citations("<answer>x</answer> [d1] [d2][d1]")
    ['d1', 'd2']
    """
    seen: dict[str, None] = {}
    for cid in _CITATION_RE.findall(text or ""):
        seen.setdefault(cid, None)
    return list(seen)


def normalize_answer(text: str) -> str:
    """SQuAD normalisation: lower case, drop punctuation and articles, squeeze whitespace.

    >>> normalize_answer("The  Eiffel Tower!")
    'eiffel tower'
    """
    text = text.lower()
    text = "".join(ch for ch in text if ch not in _PUNCT)
    text = re.sub(r"\b(a|an|the)\b", " ", text)
    return " ".join(text.split())


_PUNCT = set(string.punctuation) | {"\u2018", "\u2019", "\u201c", "\u201d", "\u2013", "\u2014"}


def is_abstention(answer: str | None, phrases: Iterable[str] = DEFAULT_REFUSAL_PHRASES) -> bool:
    """True when the answer is a refusal phrase. An empty or missing answer is not an abstention.

    >>> is_abstention("Not enough information.")
    True
    >>> is_abstention("")
    False
    >>> is_abstention("Not enough information about his mother, but his father was Tom")
    False
    """
    if not answer:
        return False
    norm = normalize_answer(answer)
    return bool(norm) and norm in _normalized_phrases(tuple(phrases))


@functools.lru_cache(maxsize=32)
def _normalized_phrases(phrases: tuple[str, ...]) -> frozenset[str]:
    # Rewards call is_abstention for every rollout of a batch: normalise the phrase set once.
    return frozenset(normalize_answer(p) for p in phrases)


def exact_match(prediction: str, golds: Sequence[str]) -> float:
    """1.0 when the normalised prediction equals any normalised gold answer."""
    pred = normalize_answer(prediction)
    return float(any(pred == normalize_answer(g) for g in golds))


def token_f1(prediction: str, golds: Sequence[str]) -> float:
    """Best SQuAD/HotpotQA token F1 over the gold answers. As in HotpotQA's official script, a
    yes / no / noanswer prediction or gold only scores when both are the same word."""
    return max((_f1(prediction, g) for g in golds), default=0.0)


def _f1(prediction: str, gold: str) -> float:
    pred, ref = normalize_answer(prediction), normalize_answer(gold)
    special = {"yes", "no", "noanswer"}
    if (pred in special or ref in special) and pred != ref:
        return 0.0
    p_toks, r_toks = pred.split(), ref.split()
    common = Counter(p_toks) & Counter(r_toks)
    same = sum(common.values())
    if same == 0:
        return 0.0
    precision, recall = same / len(p_toks), same / len(r_toks)
    return 2 * precision * recall / (precision + recall)


@dataclass(frozen=True)
class ParsedAnswer:
    """What the model said in its final message."""

    text: str
    answer: str | None
    abstained: bool
    citations: list[str] = field(default_factory=list)

    @property
    def parsable(self) -> bool:
        return self.answer is not None


def parse_final(completion: str | Sequence[dict], phrases: Iterable[str] = DEFAULT_REFUSAL_PHRASES) -> ParsedAnswer:
    """Parse a completion (text or message list) into answer, abstention and citations."""
    text = final_text(completion)
    answer = extract_answer(text)
    return ParsedAnswer(text=text, answer=answer, abstained=is_abstention(answer, phrases),
                        citations=extract_citations(text))


@dataclass(frozen=True)
class Score:
    """The verdict on one answer. ``correct`` follows the chosen metric (EM by default)."""

    outcome: Outcome
    em: float
    f1: float
    hedged: bool = False  # F1 reached the threshold only by naming more than the gold answer (metric f1)

    @property
    def correct(self) -> bool:
        return self.outcome == "correct"

    @property
    def answered(self) -> bool:
        """Everything but an abstention: an unparsable reply did not abstain, so it counts as a
        wrong answer (a model that babbles cannot raise its precision that way)."""
        return self.outcome != "abstain"


def score(
    parsed: ParsedAnswer,
    golds: Sequence[str],
    *,
    answerable: bool = True,
    metric: Literal["em", "f1"] = "em",
    f1_threshold: float = 0.5,
) -> Score:
    """Score a parsed answer against the gold answers.

    - abstained → ``abstain`` (EM = F1 = 0);
    - no ``<answer>`` block → ``unparsable`` (a wrong answer for every metric);
    - an answer to an unanswerable question → ``wrong`` (it can only be a guess);
    - else ``correct`` when EM = 1 (metric ``em``) or, with metric ``f1``, when F1 ≥ ``f1_threshold``
      and the answer does not hedge (`hedges`: it is longer than every gold answer it overlaps, like
      "Morland Ruvia" for "Morland", F1 0.67); a hedged answer is ``wrong`` and earns no partial credit.

    >>> score(parse_final("<answer>Morland Ruvia</answer>"), ["Morland"], metric="f1")
    Score(outcome='wrong', em=0.0, f1=0.6666666666666666, hedged=True)
    """
    if parsed.abstained:
        return Score("abstain", 0.0, 0.0)
    if parsed.answer is None:
        return Score("unparsable", 0.0, 0.0)
    if not answerable:
        return Score("wrong", 0.0, 0.0)
    em, f1 = exact_match(parsed.answer, golds), token_f1(parsed.answer, golds)
    if metric == "em":
        return Score("correct" if em == 1.0 else "wrong", em, f1)
    hedged = f1 > 0.0 and hedges(parsed.answer, golds)
    return Score("correct" if f1 >= f1_threshold and not hedged else "wrong", em, f1, hedged)


def hedges(prediction: str, golds: Sequence[str]) -> bool:
    """True when the prediction has more (normalised) tokens than every gold answer it shares a token
    with: the extra tokens can only be other candidates, so under metric ``f1`` it may not count as
    correct nor earn partial credit (listing candidates would otherwise beat committing to one).

    >>> hedges("Morland Ruvia", ["Morland"]), hedges("Morland Ruvia Pelaria", ["Morland"])
    (True, True)
    >>> hedges("Shusett", ["Ronald Shusett"]), hedges("Ronald Shusett", ["Ronald Shusett"])
    (False, False)
    """
    size = len(normalize_answer(prediction).split())
    return not any(_f1(prediction, g) > 0.0 and size <= len(normalize_answer(g).split()) for g in golds)


def score_text(
    completion: str | Sequence[dict],
    golds: Sequence[str],
    *,
    answerable: bool = True,
    metric: Literal["em", "f1"] = "em",
    phrases: Iterable[str] = DEFAULT_REFUSAL_PHRASES,
) -> Score:
    """`parse_final` then `score`: the one call rewards and evaluation make."""
    return score(parse_final(completion, phrases), golds, answerable=answerable, metric=metric)


# -- text from users and corpora inside a prompt -----------------------------------------------------
def one_line(text: str) -> str:
    """``text`` with every run of whitespace (newlines included) made one space: text from a user or a corpus
    then cannot open a line of its own in a prompt (a forged "Corrections on record" block, a DECISION line).
    A text already on one line with single spaces (every question the worlds generate) is unchanged, so a
    trained input format stays what it was."""
    return " ".join(str(text).split())


def quote(text: str) -> str:
    """One JSON string of ``one_line(text)``: quotes and control characters escaped, so quoted data stays one
    visibly delimited line that a prompt can call data, never instructions."""
    return json.dumps(one_line(text), ensure_ascii=False)

