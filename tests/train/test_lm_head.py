"""The CPU fast path of `awarl.train.lm_head` against TRL's own fused head, on the tiny model."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("trl")

from trl.trainer.utils import FusedCausalLMOutput, add_fused_lm_head  # noqa: E402
from transformers import AutoModelForCausalLM  # noqa: E402

from awarl.train import lm_head  # noqa: E402

OUTPUTS = lm_head.FIELDS
SFT_OUTPUTS = ("log_probs", "entropy", "is_top1")  # what TRL 1.16's SFTTrainer asks for
GRPO_OUTPUTS = ("log_probs", "entropy")            # and its GRPOTrainer


def _pair(model_dir, temperature, outputs=OUTPUTS):
    """The tiny model twice, with the same weights: TRL's fused head, and that head behind awarl's."""
    models = []
    for plain in (False, True):
        torch.manual_seed(0)
        model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
        add_fused_lm_head(model, temperature=temperature, outputs=outputs)
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


@pytest.mark.parametrize("outputs", [SFT_OUTPUTS, GRPO_OUTPUTS, ("log_probs",)])
def test_plain_head_fills_the_fields_the_trainer_asked_for(tiny_model_dir, outputs):
    assert lm_head.FIELDS == tuple(f for f in FusedCausalLMOutput.__dataclass_fields__ if f in lm_head.FIELDS)
    trl_model, plain_model = _pair(tiny_model_dir, 0.7, outputs)
    ids, labels = _batch(trl_model.config.vocab_size)
    ref = trl_model(input_ids=ids, labels=labels, fused_lm_head=True)
    out = plain_model(input_ids=ids, labels=labels, fused_lm_head=True)
    for field in OUTPUTS:
        a, b = getattr(ref, field), getattr(out, field)
        if field in outputs:
            assert b is not None and torch.allclose(a.float(), b.float(), atol=1e-4, rtol=1e-4), field
        else:  # TRL leaves a field it was not asked for None; so does the fast path, which skips its cost
            assert a is None and b is None, field
    assert torch.allclose(ref.loss, out.loss, atol=1e-5)


def test_requested_fields_reads_what_trl_was_asked(tiny_model_dir):
    for outputs in (SFT_OUTPUTS, GRPO_OUTPUTS, OUTPUTS):
        model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
        add_fused_lm_head(model, outputs=outputs)
        assert lm_head.requested_fields(model.forward) == outputs
    # a forward TRL has not patched (or a TRL that names its closure otherwise): every field, none missing
    plain = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    assert lm_head.requested_fields(plain.forward) == OUTPUTS
    assert lm_head.requested_fields(len) == OUTPUTS


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
