"""A plain LM head for TRL's trainers on CPU.

TRL 1.16's `SFTTrainer` and `GRPOTrainer` patch the model with a fused LM head
(`trl.trainer.utils.add_fused_lm_head`): per-token log-probabilities are computed in tiles without
building the ``(batch, seq_len, vocab)`` logits. On CUDA the tiles run a Triton kernel and score
only the positions with a label. Elsewhere the kernel falls back to torch ops over *every*
position, with several passes per tile; on the tiny world model that fallback took about two
thirds of an SFT step (docs/benchmarks.md, "SFT step on CPU").

`use_plain_lm_head` keeps TRL's patched forward and adds a fast path in front of it, for CPU
only: project the labelled positions in one matrix product, take one ``log_softmax``, and return
the `FusedCausalLMOutput` fields the trainer asked `add_fused_lm_head` for (its ``outputs``: SFT's
log-probabilities, entropy and top-1 hits, GRPO's log-probabilities and entropy), the others None
as TRL's head leaves them, so TRL's losses and metrics read it unchanged. The entropy keeps its
gradient (GRPO's entropy bonus); the metric fields have none. Calls it cannot serve
exactly the same way go to TRL's forward: logit soft-capping or scaling, MoE router losses, and
batches whose labelled logits would exceed `MAX_LOGITS` elements (a large vocabulary times a
long batch), where TRL's tiles keep memory bounded.
"""

from __future__ import annotations

import inspect
import logging
import types
from typing import Any

log = logging.getLogger(__name__)

# Labelled positions x vocabulary above which the fast path hands the call to TRL's tiled head:
# 2^25 float32 logits are 128 MiB, and the log-softmax and its gradient hold two more of them.
MAX_LOGITS = 1 << 25

# The per-token fields of TRL's `FusedCausalLMOutput`, in the order `add_fused_lm_head`'s ``outputs`` names them
FIELDS = ("log_probs", "entropy", "log_sum_sq_probs", "mean_logits", "is_top1")

_SCALE_FIELDS = ("final_logit_softcapping", "logit_scale", "output_multiplier", "lm_head_multiplier",
                 "logits_scaling")


def use_plain_lm_head(model: Any, *, temperature: float = 1.0) -> bool:
    """Put the CPU fast path in front of the fused head TRL patched onto ``model`` (call it after the
    trainer is built, with the ``temperature`` the trainer gave `add_fused_lm_head`). It fills the
    fields the trainer asked for (`requested_fields`). Returns False, changing nothing, off CPU or
    for a model whose logits are scaled or soft-capped."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model  # PEFT wraps the model
    if next(base.parameters()).device.type != "cpu":
        return False
    text_config = base.config.get_text_config()
    if any(getattr(text_config, name, None) is not None for name in _SCALE_FIELDS):
        return False
    fused_forward = base.forward  # TRL's patched forward: the fallback for every call the fast path declines
    fields = requested_fields(fused_forward)

    def forward(self, *args, fused_lm_head=False, labels=None, shift_labels=None, num_items_in_batch=None,
                **kwargs):
        targets = None
        if fused_lm_head and not kwargs.get("output_router_logits") \
                and not getattr(text_config, "output_router_logits", False):
            targets = labels[:, 1:] if shift_labels is None else shift_labels
            vocab = self.get_output_embeddings().weight.shape[0]
            if int((targets != -100).sum()) * vocab > MAX_LOGITS:
                targets = None
        if targets is None:
            return fused_forward(*args, fused_lm_head=fused_lm_head, labels=labels, shift_labels=shift_labels,
                                 num_items_in_batch=num_items_in_batch, **kwargs)
        kwargs["use_cache"] = False
        hidden = self.base_model(*args, **kwargs).last_hidden_state
        if shift_labels is None:
            hidden = hidden[:, :-1]
        return _score(self.get_output_embeddings(), hidden, targets, temperature, num_items_in_batch, fields)

    base.forward = types.MethodType(forward, base)
    log.debug("plain LM head on CPU (temperature %s, fields %s)", temperature, ", ".join(fields))
    return True


def requested_fields(fused_forward: Any) -> tuple[str, ...]:
    """The fields TRL's patched ``fused_forward`` computes: the ``outputs`` its trainer gave
    `add_fused_lm_head`, read from the forward's closure. Every field where that cannot be read (a
    TRL that names it otherwise): slower, never missing one a trainer reads."""
    try:
        asked = inspect.getclosurevars(fused_forward).nonlocals.get("outputs")
    except TypeError:  # not a Python function: no closure to read
        asked = None
    if not isinstance(asked, tuple) or "log_probs" not in asked or not set(asked) <= set(FIELDS):
        log.debug("plain LM head: TRL's requested outputs not readable (%r); computing every field", asked)
        return FIELDS
    return tuple(field for field in FIELDS if field in asked)


def _score(lm_head: Any, hidden: Any, targets: Any, temperature: float, num_items_in_batch: Any,
           fields: tuple[str, ...] = FIELDS) -> Any:
    """`FusedCausalLMOutput` for ``targets`` (-100: not scored) from ``hidden`` (one row per target):
    the labelled rows through the head at once, log-probabilities under ``logits / temperature``;
    of the other `FIELDS`, those in ``fields`` (the rest None)."""
    import torch
    from trl.trainer.utils import FusedCausalLMOutput

    mask = targets != -100
    rows = hidden[mask].to(lm_head.weight.dtype)
    logits = torch.nn.functional.linear(rows, lm_head.weight, lm_head.bias).float() / temperature
    log_all = torch.log_softmax(logits, dim=-1)
    chosen = targets[mask]

    def spread(values: Any) -> Any:
        # `masked_scatter` keeps the output connected to the model even when no position is scored
        return values.new_zeros(mask.shape).masked_scatter(mask, values)

    log_probs = spread(log_all.gather(-1, chosen.unsqueeze(-1)).squeeze(-1))
    entropy = spread(-(log_all.exp() * log_all).sum(-1)) if "entropy" in fields else None
    log_sum_sq = mean_logits = is_top1 = None
    with torch.no_grad():
        if "log_sum_sq_probs" in fields:
            log_sum_sq = spread(torch.logsumexp(2 * log_all, dim=-1))
        if "mean_logits" in fields:
            mean_logits = spread(logits.mean(-1))
        if "is_top1" in fields:
            is_top1 = spread(logits.argmax(-1) == chosen)  # the first maximum, as TRL's kernel counts ties
    count = mask.sum().clamp(min=1) if num_items_in_batch is None else num_items_in_batch
    return FusedCausalLMOutput(loss=-log_probs.sum() / count, log_probs=log_probs, entropy=entropy,
                               log_sum_sq_probs=log_sum_sq, mean_logits=mean_logits, is_top1=is_top1,
                               label_mask=mask, aux_loss=None)
