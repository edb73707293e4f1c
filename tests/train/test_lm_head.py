"""The CPU fast path of `awarl.train.lm_head` against TRL's own fused head, on the tiny model."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("trl")

from trl.trainer.utils import add_fused_lm_head  # noqa: E402
from transformers import AutoModelForCausalLM  # noqa: E402

from awarl.train import lm_head  # noqa: E402

OUTPUTS = ("log_probs", "entropy", "log_sum_sq_probs", "mean_logits", "is_top1")


def _pair(model_dir, temperature):
    """The tiny model twice, with the same weights: TRL's fused head, and that head behind awarl's."""
    models = []
    for plain in (False, True):
        torch.manual_seed(0)
        model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
        add_fused_lm_head(model, temperature=temperature, outputs=OUTPUTS)
        if plain:
            assert lm_head.use_plain_lm_head(model, temperature=temperature)
        models.append(model)
    return models


def _batch(vocab):
    gen = torch.Generator().manual_seed(1)
    ids = torch.randint(3, vocab, (3, 40), generator=gen)
    labels = ids.clone()
    labels[:, :12] = -100  # a prompt
    labels[2, 30:] = -100  # padding
    return ids, labels


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_plain_head_matches_trl_fields_and_gradients(tiny_model_dir, temperature):
    trl_model, plain_model = _pair(tiny_model_dir, temperature)
    ids, labels = _batch(trl_model.config.vocab_size)
    grads = []
    for model in (trl_model, plain_model):
        out = model(input_ids=ids, labels=labels, fused_lm_head=True)
        (out.loss + 0.1 * out.entropy.sum()).backward()
        grads.append({name: p.grad.clone() for name, p in model.named_parameters()})
        for field in OUTPUTS + ("loss", "label_mask"):
            setattr(model, f"_out_{field}", getattr(out, field).detach())
    for field in OUTPUTS + ("loss",):
        a, b = getattr(trl_model, f"_out_{field}"), getattr(plain_model, f"_out_{field}")
        assert a.shape == b.shape, field
        assert torch.allclose(a.float(), b.float(), atol=1e-4, rtol=1e-4), field
    assert torch.equal(trl_model._out_label_mask, plain_model._out_label_mask)
    assert trl_model._out_label_mask.sum() == (labels[:, 1:] != -100).sum()
    for name, g in grads[0].items():
        assert torch.allclose(g, grads[1][name], atol=1e-5, rtol=1e-3), name


def test_plain_head_leaves_other_calls_to_trl(tiny_model_dir, monkeypatch):
    trl_model, plain_model = _pair(tiny_model_dir, 1.0)
    ids, labels = _batch(trl_model.config.vocab_size)
    # an ordinary forward (generation's) still returns logits
    logits = plain_model(input_ids=ids).logits
    assert logits.shape == (*ids.shape, plain_model.config.vocab_size)
    # past the size bound, TRL's tiles answer: the same numbers
    monkeypatch.setattr(lm_head, "MAX_LOGITS", 10)
    big = plain_model(input_ids=ids, labels=labels, fused_lm_head=True)
    ref = trl_model(input_ids=ids, labels=labels, fused_lm_head=True)
    assert torch.allclose(big.log_probs, ref.log_probs)


def test_plain_head_stays_off_for_scaled_logits(tiny_model_dir):
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    add_fused_lm_head(model)
    model.config.final_logit_softcapping = 30.0
    assert not lm_head.use_plain_lm_head(model)
