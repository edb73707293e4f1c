"""The forced-answer probe behind adaptive p_i (``reward.adaptive_p``, docs/rewards.md "Adaptive p_i").

Every ``reward.adaptive_p_every`` generation batches, `AdaptiveCapabilityCallback` stops between two
optimizer steps and runs `ForcedAnswerProbe`: ``reward.adaptive_p_samples`` rollouts of the current
policy on each of ``reward.adaptive_p_questions`` RL questions (a rolling window, `CapabilityRatchet.subset`),
with the recipe's rollout settings (prompt, search tool, budgets, metric) and GRPO's sampling
temperature, through the one rollout runner (`awarl.agent.runner.Runner`) that p_i estimation and
evaluation use. "Forced" means the refusal phrases cannot be sampled: their token sequences are
banned during decoding, so the probe measures whether the policy *could* answer. The counts go to
the reward's `awarl.rewards.adaptive.CapabilityRatchet`, which raises p_i to a lower confidence
bound of the pooled counts.

- Every process probes its share of the window and the counts are gathered, so every process folds
  the same counts in and holds the same p_i.
- Probe rollouts never reach the reward: they feed no P_t, no batch rate and no gradient. They are
  compute, counted in the ratchet (``awa/probe_rollouts``) and in ``adaptive_p.jsonl`` beside the
  checkpoints (one row per round: step, rollouts, seconds, the p_i that rose).
- The probe generates with the training model itself (transformers ``generate``), so it needs the
  whole model on each process (DDP or ZeRO-2; not ZeRO-3).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from awarl.data.records import QARecord, append_log_row, read_log_rows
from awarl.train.callbacks import Callback

log = logging.getLogger(__name__)

PROBE_LOG_FILE = "adaptive_p.jsonl"
"""One row per probe round in the run's output folder: step, rollouts, seconds, raised p_i."""


def refusal_token_sequences(tokenizer: Any, phrases: Sequence[str]) -> list[list[int]]:
    """Token sequences that spell a refusal phrase after ``<answer>``, as the model would write them:
    each phrase in lower case and capitalised, right after the tag, after a space, and on its own."""
    prefix = tokenizer.encode("<answer>", add_special_tokens=False)
    out: dict[tuple[int, ...], None] = {}
    for phrase in phrases:
        for text in {phrase, phrase[:1].upper() + phrase[1:]}:
            joined = tokenizer.encode("<answer>" + text, add_special_tokens=False)
            if joined[: len(prefix)] == prefix and len(joined) > len(prefix):
                out.setdefault(tuple(joined[len(prefix):]), None)
            for variant in (text, " " + text):
                ids = tokenizer.encode(variant, add_special_tokens=False)
                if ids:
                    out.setdefault(tuple(ids), None)
    return [list(ids) for ids in out]


class _NoRefusal:
    """The model, with every refusal token sequence banned in ``generate`` (transformers'
    ``NoBadWordsLogitsProcessor``, placed before the sampler so a banned token is never drawn)."""

    def __init__(self, model: Any, banned: list[list[int]]):
        self._model, self._banned = model, banned

    def eval(self) -> "_NoRefusal":
        self._model.eval()
        return self

    def generate(self, *args: Any, logits_processor: Any = None, **kwargs: Any) -> Any:
        from transformers import LogitsProcessorList, NoBadWordsLogitsProcessor

        eos = kwargs["generation_config"].eos_token_id if "generation_config" in kwargs else None
        processors = LogitsProcessorList([NoBadWordsLogitsProcessor(self._banned, eos_token_id=eos)])
        processors.extend(logits_processor or [])
        return self._model.generate(*args, logits_processor=processors, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._model, name)


class ForcedAnswerProbe:
    """One probe round at a time over ``records`` (the RL questions), folding counts into ``reward.adaptive``."""

    def __init__(self, reward: Any, records: Sequence[QARecord], env_factory: Any, rollout: Any, *,
                 p_field: str = "p", temperature: float = 1.0, top_p: float = 1.0, seed: int = 0,
                 max_concurrent: int = 64, output_dir: str | Path | None = None):
        if reward.adaptive is None:
            raise ValueError("ForcedAnswerProbe needs a reward with reward.adaptive_p on")
        self.reward, self.env_factory, self.rollout = reward, env_factory, rollout
        self.records = {r.id: r for r in records}
        self.ids = [r.id for r in records]
        self.p_field = p_field
        self.temperature, self.top_p, self.seed, self.max_concurrent = temperature, top_p, seed, max_concurrent
        self.log_path = Path(output_dir) / PROBE_LOG_FILE if output_dir is not None else None
        cfg = reward.cfg
        self.samples, self.questions = cfg.adaptive_p_samples, cfg.adaptive_p_questions

    def base_p(self, query_id: str) -> float:
        value = self.records[query_id].meta.get(self.p_field)
        return float(value) if isinstance(value, (int, float)) else 0.0

    def run(self, model: Any, tokenizer: Any, *, step: int = 0, rank: int = 0, world: int = 1) -> list[Any]:
        """Probe the next window with ``model`` (restored to its train/eval mode after), fold the gathered
        counts into the ratchet, append the round to ``adaptive_p.jsonl`` (rank 0); returns the raised p_i."""
        from awarl.agent.runner import Rollout, Runner, RunnerConfig
        from awarl.llm.hf import HFGenerator
        from awarl.rewards.batch import gather_rows

        ratchet = self.reward.adaptive
        window = ratchet.subset(self.ids, self.questions)
        mine = window[rank::world]
        t0 = time.perf_counter()
        was_training = model.training
        banned = refusal_token_sequences(tokenizer, self.rollout.phrases)
        backend = HFGenerator("training-policy", model_obj=_NoRefusal(model, banned), tokenizer_obj=tokenizer)
        runner = Runner(backend, self.env_factory, RunnerConfig(
            rollout=self.rollout, temperature=self.temperature, top_p=self.top_p, seed=self.seed,
            max_concurrent=self.max_concurrent))
        first = ratchet.rounds * self.samples  # each round samples fresh, reproducible streams
        try:
            trajectories = runner.run([Rollout(self.records[i], first + k) for i in mine for k in range(self.samples)])
        finally:
            model.train(was_training)
        local = [(t.record_id, t.outcome == "correct", t.abstained) for t in trajectories]
        counts: dict[str, list[int]] = {i: [0, 0] for i in window}
        abstained = 0
        for query_id, correct, refused in gather_rows(local):
            counts[query_id][0] += int(correct)
            counts[query_id][1] += 1
            abstained += int(refused)
        seconds = max(gather_rows([time.perf_counter() - t0]))
        updates = ratchet.update({k: (c, n) for k, (c, n) in counts.items()}, {i: self.base_p(i) for i in window},
                                 seconds=seconds)
        if rank == 0 and self.log_path is not None:
            row = {"round": ratchet.rounds, "step": step, "questions": len(window),
                   "rollouts": sum(n for _, n in counts.values()), "seconds": round(seconds, 3),
                   "abstained": abstained, "correct": sum(c for c, _ in counts.values()),
                   "window_p": round(sum(ratchet.p(i, self.base_p(i)) for i in window) / max(len(window), 1), 4),
                   "raised": [vars(u) for u in updates]}
            append_log_row(self.log_path, row)
        log.info("adaptive p_i: round %d at step %d, %d rollouts in %.1f s, %d p_i raised", ratchet.rounds, step,
                 sum(n for _, n in counts.values()), seconds, len(updates))
        return updates


class AdaptiveCapabilityCallback(Callback):
    """Run the probe after every ``every_steps`` optimizer steps (``adaptive_p_every`` generation batches)."""

    def __init__(self, probe: ForcedAnswerProbe, every_steps: int):
        if every_steps < 1:
            raise ValueError(f"every_steps must be >= 1, got {every_steps}")
        self.probe, self.every_steps = probe, every_steps

    def on_step_end(self, args: Any, state: Any, control: Any, model: Any = None, processing_class: Any = None,
                    **kwargs: Any) -> None:
        if state.global_step % self.every_steps:
            return
        from awarl.rewards.batch import distributed_world

        rank, world = distributed_world()
        self.probe.run(model, processing_class, step=state.global_step, rank=rank, world=world)


def read_probe_log(path: str | Path) -> list[dict[str, Any]]:
    """The rows of ``adaptive_p.jsonl``, one per round (the last one written wins after a resume)."""
    rows = {row["round"]: row for row in read_log_rows(path)}
    return [rows[r] for r in sorted(rows)]
