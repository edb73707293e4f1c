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


def test_per_prompt_seeds_sample_the_same_tokens_in_any_batch(backend):
    """With one seed per prompt, a prompt's sample depends on its seed alone: not on the batch, its
    place in it, the micro-batch it lands in, or max_new_tokens beyond its own length."""
    prompts = _prompts(backend, 6)
    seeds = (11, 12, 13, 14, 15, 16)
    params = SamplingParams(temperature=1.0, max_new_tokens=16, seeds=seeds)
    batched = [g.token_ids for g in backend.generate(prompts, params)]
    alone = [backend.generate([p], SamplingParams(temperature=1.0, max_new_tokens=16, seeds=(s,)))[0].token_ids
             for p, s in zip(prompts, seeds)]
    reordered = backend.generate(prompts[::-1], SamplingParams(temperature=1.0, max_new_tokens=16, seeds=seeds[::-1]))
    assert batched == alone == [g.token_ids for g in reordered][::-1]
    other = backend.generate(prompts, SamplingParams(temperature=1.0, max_new_tokens=16, seeds=(21, 22, 23, 24, 25, 26)))
    assert [g.token_ids for g in other] != batched  # another seed, another sample
    same_prompt = backend.generate([prompts[0]] * 4, SamplingParams(temperature=1.0, max_new_tokens=16, seeds=(1, 2, 3, 4)))
    assert len({tuple(g.token_ids) for g in same_prompt}) > 1  # K rollouts of one prompt are K samples
    with pytest.raises(ValueError, match="2 seeds for 6 prompts"):
        backend.generate(prompts, SamplingParams(temperature=1.0, max_new_tokens=4, seeds=(1, 2)))


def test_per_prompt_sampling_follows_the_distribution(backend):
    """The seeded sampler draws from softmax(logits / T) (top-p applied): over many seeds the first
    token's frequencies match the model's probabilities."""
    import torch

    prompt = _prompts(backend, 1)[0]
    with torch.inference_mode():
        logits = backend.model(torch.tensor([prompt])).logits[0, -1]
    probs = torch.softmax(logits / 1.5, dim=-1)
    n = 400
    gens = backend.generate([prompt] * n, SamplingParams(temperature=1.5, max_new_tokens=1, seeds=tuple(range(n))))
    first = torch.tensor([g.token_ids[0] for g in gens])
    top = torch.topk(probs, 3).indices
    for token in top:
        share = (first == token).float().mean().item()
        p = probs[token].item()
        assert abs(share - p) < 4 * (p * (1 - p) / n) ** 0.5 + 0.01
    nucleus = backend.generate([prompt] * 50, SamplingParams(temperature=1.0, top_p=1e-6, max_new_tokens=1,
                                                             seeds=tuple(range(50))))
    assert {g.token_ids[0] for g in nucleus} == {int(torch.argmax(logits))}  # top-p this small keeps the top token
