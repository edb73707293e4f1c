"""The in-process transformers backend on the tiny offline model."""

from __future__ import annotations

import pytest

from awarl.llm.base import SamplingParams
from awarl.llm.spec import load_backend


@pytest.fixture(scope="module")
def backend(tiny_model_dir):
    return load_backend(str(tiny_model_dir), device="cpu", batch_size=4)


def _prompts(backend, n):
    tok = backend.tokenizer
    texts = [f"question number {i} " * (1 + i % 3) for i in range(n)]
    return [tok.apply_chat_template([{"role": "user", "content": t}], add_generation_prompt=True,
                                    tokenize=True, return_dict=False) for t in texts]


def test_batched_left_padded_greedy_equals_one_at_a_time(backend):
    prompts = _prompts(backend, 6)  # different lengths, split over two micro-batches
    params = SamplingParams(temperature=0.0, max_new_tokens=12)
    batched = backend.generate(prompts, params)
    single = [backend.generate([p], params)[0] for p in prompts]
    assert [g.token_ids for g in batched] == [g.token_ids for g in single]
    assert all(g.prompt_tokens == len(p) for g, p in zip(batched, prompts))


def test_turns_end_at_the_first_end_of_turn_token(backend):
    gens = backend.generate(_prompts(backend, 4), SamplingParams(temperature=1.0, max_new_tokens=40, seed=1))
    eos = set(backend.eos_token_ids)
    assert backend.tokenizer.convert_tokens_to_ids("<|im_end|>") == backend.eos_token_ids[0]
    for g in gens:
        assert 1 <= len(g.token_ids) <= 40
        assert not eos & set(g.token_ids[:-1])
        assert (g.finish_reason == "stop") == (g.token_ids[-1] in eos)


def test_seeded_sampling_is_reproducible(tiny_model_dir):
    params = SamplingParams(temperature=1.0, max_new_tokens=10, seed=7)
    runs = []
    for _ in range(2):
        backend = load_backend(str(tiny_model_dir), device="cpu")
        runs.append([g.token_ids for g in backend.generate(_prompts(backend, 3), params)])
    assert runs[0] == runs[1]


@pytest.mark.gpu
def test_cuda_bf16_generation(tiny_model_dir):
    import torch

    backend = load_backend(str(tiny_model_dir), device="cuda", dtype="bfloat16", batch_size=4)
    assert backend.model.dtype == torch.bfloat16 and backend.device.type == "cuda"
    gens = backend.generate(_prompts(backend, 6), SamplingParams(temperature=1.0, max_new_tokens=16, seed=0))
    assert len(gens) == 6 and all(1 <= len(g.token_ids) <= 16 for g in gens)
