"""Outcome reward: what an answered rollout earns, from the one scorer in `awarl.protocol`.

- correct (EM, the default): ``r_correct``; with ``outcome: f1`` an answer earns
  ``r_wrong + (r_correct − r_wrong) · F1`` instead, so partial answers get partial credit, except
  a hedged answer (longer than the gold it matches, `awarl.protocol.hedges`), which earns ``r_wrong``;
- wrong, no parsable answer, or any answer to an unanswerable question: ``r_wrong``.

Abstentions are not scored here: their reward is the refusal shaping's (or a baseline's).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from awarl.protocol import DEFAULT_REFUSAL_PHRASES, ParsedAnswer, Score, parse_final, score


@dataclass(frozen=True)
class Verdict:
    """One rollout, parsed and scored."""

    parsed: ParsedAnswer
    score: Score
    answerable: bool = True

    @property
    def abstained(self) -> bool:
        return self.score.outcome == "abstain"

    @property
    def answered(self) -> bool:
        return self.score.answered


def judge_completion(completion, golds: Sequence[str], *, answerable: bool = True, metric: str = "em",
                     phrases: Iterable[str] = DEFAULT_REFUSAL_PHRASES) -> Verdict:
    """Parse and score one completion (text or message list) with the protocol's scorer.

    >>> judge_completion("<answer>Paris</answer>", ["Paris"]).score.outcome
    'correct'
    >>> judge_completion("Paris", ["Paris"]).score.outcome
    'unparsable'
    """
    parsed = parse_final(completion, phrases)
    return Verdict(parsed, score(parsed, golds, answerable=answerable, metric=metric), answerable)


def outcome_reward(verdict_score: Score, *, r_correct: float = 1.0, r_wrong: float = 0.0,
                   outcome: str = "em") -> float:
    """Reward of an answered (or unparsable) rollout; an abstention is a ValueError.

    >>> from awarl.protocol import Score
    >>> outcome_reward(Score("correct", 1.0, 1.0))
    1.0
    >>> outcome_reward(Score("wrong", 0.0, 0.5), outcome="f1")
    0.5
    """
    if verdict_score.outcome == "abstain":
        raise ValueError("outcome_reward scores answers; an abstention's reward comes from refusal shaping")
    if verdict_score.outcome == "unparsable":
        return r_wrong
    if outcome == "f1":
        if verdict_score.hedged:  # F1 reached only by listing candidates: no partial credit (protocol.hedges)
            return r_wrong
        return r_wrong + (r_correct - r_wrong) * verdict_score.f1
    return r_correct if verdict_score.outcome == "correct" else r_wrong
