"""The chat's agent generator samples a fresh answer for every request: sampling is seeded per
rollout id, so each request gets an id of its own (a resample of the same question must not repeat
the rejected answer)."""

from __future__ import annotations

from awarl.chat.generate import AgentGenerator
from awarl.data.records import Passage
from awarl.llm.base import Generation
from awarl.search.bm25 import BM25Index


class SeedRecorder:
    """A chat backend that answers at once and records the per-rollout seeds it was asked to use."""

    accepts, tokenizer, eos_token_ids, max_model_len, name = "messages", None, [], None, "recorder"

    def __init__(self):
        self.seeds: list[int] = []

    def generate(self, prompts, params):
        self.seeds += list(params.seeds or [])
        return [Generation(text="<answer>Paris</answer>", message={"role": "assistant", "content": "<answer>Paris</answer>"},
                           prompt_tokens=10, completion_tokens=5) for _ in prompts]

    def close(self):
        pass


def _answers(n):
    backend = SeedRecorder()
    gen = AgentGenerator(backend, BM25Index.build([Passage("d1", "Paris", "Paris is the capital of France.")]))
    try:
        replies = [gen.answer("What is the capital of France?", 1.0) for _ in range(n)]
    finally:
        gen.close()
    return backend.seeds, replies


def test_the_same_question_asked_again_is_sampled_with_another_seed():
    seeds, replies = _answers(3)
    assert [r.answer for r in replies] == ["Paris"] * 3
    assert len(seeds) == 3 and len(set(seeds)) == 3


def test_a_restarted_server_repeats_its_sequence_of_draws():
    assert _answers(2)[0] == _answers(2)[0]
