"""AWA-RL GRPO: TRL's ``GRPOTrainer`` with the search tool, the AWA reward and checkpointed penalty.

`main` reads top to bottom in named stages:

1. `load_training_records` — records with the capability column ``p`` (refuses to start, with
   the fix, when the reward needs ``p`` and it is missing, or when the capability file was
   measured on another checkpoint or under other rollout settings than this recipe's);
2. `build_dataset` — one row per question: the protocol's prompt plus the columns the rewards
   and the environment read (answers, answerable, supporting, passages, p, id);
3. `env_factory` — ``SearchEnv`` instances over the run's retriever, with the recipe's rollout settings;
4. `build_rewards` — `awarl.rewards.build_reward_funcs`, the stateful answer/abstain reward first;
5. `grpo_args` — TRL ``GRPOConfig`` from the recipe's ``grpo`` section plus awarl's defaults;
6. the trainer, with the penalty-state, summary and collapse-warning callbacks (and, with
   ``reward.adaptive_p``, the forced-answer probe of `awarl.train.probe`; with ``reward.forced_answer``, a
   forced-answer rollout in every all-abstain group, `awarl.train.forced`); the penalty is frozen while
   TRL evaluates on the held-out split; `resume_checkpoint` restores the penalty state (and the adaptive
   p_i ratchet) before TRL restores weights, optimizer, RNG and data position;
7. the final model saved with its tokenizer, chat template and the resolved recipe
   (``awarl_recipe.yaml``, ``rollout.json``), so it is evaluated and served as it was trained.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from awarl.protocol import build_messages
from awarl.data.records import DataError, QARecord, capability_value, iter_jsonl, load_records
from awarl.llm.spec import checkpoint_folder
from awarl.train.config import ConfigError, TrainConfig

log = logging.getLogger(__name__)


# -- stage 1: records ----------------------------------------------------------------------------------------
def load_training_records(config: TrainConfig, *, split: str = "train") -> list[QARecord]:
    """Records with ``meta[p_field]`` set from the records themselves or the capability file
    (``split`` "eval" reads ``data.eval_records`` / ``data.eval_capability``)."""
    data = config.data
    path, cap_path, limit = ((data.records, data.capability, data.limit) if split == "train"
                             else (data.eval_records, data.eval_capability, data.eval_limit))
    field_name = "data.records" if split == "train" else "data.eval_records"
    if not path:
        raise ConfigError(f"{field_name} is empty: set it to records.jsonl from `awarl data prepare`")
    records = load_records(path)
    if limit:
        records = records[:limit]
    if not records:
        raise DataError(path, "-", "no records")
    if cap_path:
        capability = read_capability(cap_path, config)
        for rec in records:
            if rec.id in capability:
                rec.meta[data.p_field] = capability[rec.id]
    needs_p = config.reward.needs_p
    missing = [r.id for r in records if not isinstance(r.meta.get(data.p_field), (int, float))]
    if missing and needs_p:
        source = cap_path or path
        raise ConfigError(
            f"{source}: {len(missing)} of {len(records)} records have no capability '{data.p_field}' "
            f"(first: {missing[:3]}). The reward reads it (reward.kind {config.reward.kind}, or the attempt "
            f"bonus). Fix: run `awarl capability estimate --config "
            f"{config.source or 'RECIPE'} --model {config.grpo_start()}` on these records and point "
            f"{'data.capability' if split == 'train' else 'data.eval_capability'} at its output, or train a "
            f"baseline that does not read p (reward.kind {'/'.join(_kinds_without_p())}).")
    return records


def _kinds_without_p() -> list[str]:
    from awarl.rewards.kinds import KINDS

    return [name for name, spec in KINDS.items() if not spec.needs_p]


def read_capability(path: str, config: TrainConfig) -> dict[str, float]:
    """``{id: p}`` from a capability file, refusing rows measured on another checkpoint than the one GRPO
    starts from or under other rollout settings than the recipe's (the paper's p_i is the starting
    policy's capability under the training rollout settings)."""
    p_field = config.data.p_field
    out: dict[str, float] = {}
    for lineno, row in iter_jsonl(path):
        if not isinstance(row.get("id"), str):
            raise DataError(path, f"line {lineno}", "expected a string id", "id")
        p = capability_value(path, f"line {lineno}", row.get(p_field, row.get("p_i")), p_field)
        measured = row.get("capability")
        if isinstance(measured, dict):
            _check_measured(path, lineno, measured, config)
        out[row["id"]] = p
    return out


def _check_measured(path: str, lineno: int, measured: dict[str, Any], config: TrainConfig) -> None:
    fix = (f"Re-estimate with `awarl capability estimate --config {config.source or 'RECIPE'} --model "
           f"{config.grpo_start()} ...` (a new --out), or change the recipe back.")
    diff = config.rollout.mismatch(measured.get("rollout"))
    if diff:
        raise ConfigError(f"{path}, line {lineno}: p_i was measured under other rollout settings than this recipe's "
                          f"({'; '.join(diff)}; recipe vs measured). {fix}")
    temperature = measured.get("temperature")
    if isinstance(temperature, (int, float)) and not isinstance(temperature, bool) \
            and abs(float(temperature) - config.sampling_temperature()) > 1e-9:
        raise ConfigError(f"{path}, line {lineno}: p_i was sampled at temperature {temperature:g}, but GRPO samples at "
                          f"grpo.temperature {config.sampling_temperature():g}. Re-estimate with --temperature "
                          f"{config.sampling_temperature():g} (a new --out), or change the recipe back.")
    model = measured.get("model")
    if isinstance(model, str) and not same_checkpoint(model, config.grpo_start()):
        raise ConfigError(f"{path}, line {lineno}: p_i was measured on {model!r}, but GRPO starts from "
                          f"{config.grpo_start()!r}. p_i must describe the starting checkpoint. {fix}")


def same_checkpoint(spec: str, path: str) -> bool:
    """Whether a backend spec (PATH, hf:PATH, vllm:PATH, openai:URL#MODEL) names the checkpoint ``path``;
    an OpenAI-compatible endpoint cannot be compared and counts as the same."""
    if spec.startswith(("openai:", "http://", "https://")):
        return True
    if spec.split(":", 1)[-1] == path or spec == path:
        return True
    folder = checkpoint_folder(spec)
    return folder is not None and Path(path).exists() and folder.resolve() == Path(path).resolve()


# -- stage 2: dataset ----------------------------------------------------------------------------------------
def build_dataset(records: Sequence[QARecord], config: TrainConfig):
    """A ``datasets.Dataset``: ``prompt`` (system + question) and the columns rewards and
    environment read. ``p`` is NaN-free: absent only when no reward needs it."""
    from datasets import Dataset

    p_field = config.data.p_field
    rows = []
    for rec in records:
        row = {
            "prompt": build_messages(rec.question, config.rollout.prompt),
            "id": rec.id,
            "answers": list(rec.answers),
            "answerable": rec.answerable,
            "supporting": list(rec.supporting),
            "passages": list(rec.passages),
            "dataset": rec.dataset,
        }
        if isinstance(rec.meta.get(p_field), (int, float)):
            row["p"] = float(rec.meta[p_field])
        rows.append(row)
    if len({("p" in r) for r in rows}) > 1:
        rows = [{k: v for k, v in r.items() if k != "p"} for r in rows]  # a partial column would hold nulls
    return Dataset.from_list(rows)


# -- stage 3: environment ------------------------------------------------------------------------------------
def env_factory(config: TrainConfig) -> Callable[[], Any]:
    """TRL's ``environment_factory``: `SearchEnv` instances over the run's retriever (server, index or
    corpus), with the recipe's rollout settings (scope, top-k, passage words, search budget)."""
    from awarl.agent.env import search_env_factory
    from awarl.agent.setup import resolve_retriever

    data = config.data
    if not (data.retriever_url or data.index or data.corpus):
        raise ConfigError("the search tool needs data.corpus, data.index or data.retriever_url")
    url = data.retriever_url
    retriever = resolve_retriever(None if url else data.index, None if (url or data.index) else data.corpus, url)
    return search_env_factory(retriever, config.rollout)


# -- stage 4: rewards ----------------------------------------------------------------------------------------
def build_rewards(config: TrainConfig) -> tuple[list[Callable], list[float], Any]:
    """Reward functions, their weights, and the stateful answer/abstain reward whose penalty
    state is checkpointed."""
    from awarl.rewards import answer_abstain_reward, build_reward_funcs

    funcs, weights = build_reward_funcs(config.reward, config.rollout)
    return funcs, weights, answer_abstain_reward(funcs)


# -- stage 5: trainer arguments ------------------------------------------------------------------------------
def grpo_args(config: TrainConfig, output_dir: str | None = None, reward_weights: list[float] | None = None):
    """TRL ``GRPOConfig``: awarl's defaults, overridden by the recipe's ``grpo`` section."""
    import torch
    from trl import GRPOConfig

    from awarl.train.callbacks import report_to

    on_gpu = torch.cuda.is_available() and not config.grpo.get("use_cpu", False)
    kwargs: dict[str, Any] = {
        "output_dir": output_dir or config.output_dir,
        "seed": config.seed,
        "data_seed": config.seed,
        "report_to": report_to(config.logging),
        "logging_steps": 1,
        # The agent's budgets come from the rollout settings only (validate() refuses them in grpo:).
        "max_tool_calling_iterations": config.rollout.max_searches,
        "max_completion_length": config.rollout.max_completion_tokens,
        "bf16": on_gpu,  # TRL's default bf16=True means CPU autocast on a CPU box
        "use_cpu": not on_gpu,
        # TRL turns gradient checkpointing on by default; transformers >= 5.18 renames the flag
        # (activation_checkpointing), so set it only through the recipe.
        "gradient_checkpointing": False,
    }
    if reward_weights is not None:
        kwargs["reward_weights"] = reward_weights
    kwargs.update(config.grpo)
    return GRPOConfig(**kwargs)


# -- model ---------------------------------------------------------------------------------------------------
def load_model_and_tokenizer(config: TrainConfig, path: str | None = None):
    """The starting checkpoint and its tokenizer (the chat template must be present)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from awarl.agent.chat_template import use_chat_template

    path = path or config.grpo_start()
    if not path:
        raise ConfigError("model.path is empty: set it to a model folder or hub id")
    if config.sft.enabled and path == str(config.sft_final()) and not Path(path).exists():
        raise ConfigError(f"{path}: the recipe has an SFT stage and GRPO starts from its output, which does not "
                          f"exist yet; run `awarl train sft --config {config.source or 'RECIPE'}` first (or set "
                          f"sft.enabled: false to start from model.path)")
    kwargs: dict[str, Any] = {"dtype": load_dtype(config)}
    if config.model.attn_implementation:
        kwargs["attn_implementation"] = config.model.attn_implementation
    try:
        tokenizer = AutoTokenizer.from_pretrained(path)
    except OSError as exc:
        raise ConfigError(f"{path}: cannot load a tokenizer: not a local model folder, and not a hub id in the local "
                          f"cache (runs here are offline): {str(exc).splitlines()[0]}") from None
    use_chat_template(tokenizer, config.rollout.chat_template, path)  # the same template in SFT, p_i, GRPO, eval, chat
    if config.model.quantization:
        kwargs.update(quantized_loading(config, kwargs["dtype"]))
    model = AutoModelForCausalLM.from_pretrained(path, **kwargs)
    if config.model.quantization:
        from peft import prepare_model_for_kbit_training

        # Norms and embeddings to float32 and input gradients on; TRL's own gradient checkpointing
        # (grpo / sft.args gradient_checkpointing) stays the trainer's to switch.
        model = prepare_model_for_kbit_training(model, use_gradient_checkpointing=False)
    return model, tokenizer


def load_dtype(config: TrainConfig) -> Any:
    """``model.dtype`` as a torch dtype ('auto': bfloat16 on CUDA, float32 on CPU)."""
    import torch

    dtype = config.model.dtype
    if dtype == "auto":
        dtype = "bfloat16" if torch.cuda.is_available() else "float32"
    return getattr(torch, dtype)


def quantized_loading(config: TrainConfig, compute_dtype: Any) -> dict[str, Any]:
    """``from_pretrained`` arguments for QLoRA: a bitsandbytes 4-bit base on this process's device."""
    import torch
    from transformers import BitsAndBytesConfig

    try:
        import bitsandbytes  # noqa: F401
    except ImportError:
        raise ConfigError(f"model.quantization {config.model.quantization!r} needs bitsandbytes: "
                          f"pip install 'awarl[qlora]'") from None
    on_cpu = not torch.cuda.is_available() or config.grpo.get("use_cpu") or config.sft.args.get("use_cpu")
    if on_cpu:
        device: Any = "cpu"
    else:
        from accelerate import PartialState

        device = PartialState().local_process_index  # each process quantizes its own copy onto its GPU
    quant = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type=config.model.quantization,
                               bnb_4bit_compute_dtype=compute_dtype)
    return {"quantization_config": quant, "device_map": {"": device}}


def peft_config(config: TrainConfig):
    """A peft ``LoraConfig`` when ``model.lora`` is on, else None."""
    if not config.model.lora:
        return None
    from peft import LoraConfig

    m = config.model
    return LoraConfig(r=m.lora_r, lora_alpha=m.lora_alpha, lora_dropout=m.lora_dropout,
                      target_modules=list(m.lora_target_modules), task_type="CAUSAL_LM")


# -- resume --------------------------------------------------------------------------------------------------
_CHECKPOINT_RE = re.compile(r"^checkpoint-(\d+)$")


def resume_checkpoint(resume: str | None, output_dir: str | Path) -> Path | None:
    """``None`` (fresh run), ``"latest"`` (the newest checkpoint in ``output_dir``) or a path."""
    if not resume:
        return None
    if resume != "latest":
        path = Path(resume)
        if not (path / "trainer_state.json").exists():
            raise ConfigError(f"--resume {resume}: not a training checkpoint (no trainer_state.json)")
        return path
    found = sorted((int(m.group(1)), p) for p in Path(output_dir).glob("checkpoint-*")
                   if (m := _CHECKPOINT_RE.match(p.name)) and (p / "trainer_state.json").exists())
    if not found:
        raise ConfigError(f"--resume latest: no checkpoint-N folder in {output_dir}; start without --resume")
    return found[-1][1]


def started_run(output_dir: str | Path) -> list[str]:
    """What of a run ``output_dir`` holds (its checkpoints and final model): a fresh start there would delete
    them, so `main` refuses it without ``resume``."""
    out = Path(output_dir)
    held = sorted((p for p in out.glob("checkpoint-*") if _CHECKPOINT_RE.match(p.name)
                   and (p / "trainer_state.json").exists()),  # one killed while saving is no run (as `--resume` reads)
                  key=lambda p: int(_CHECKPOINT_RE.match(p.name).group(1)))  # type: ignore[union-attr]
    names = [p.name for p in held]
    if (out / "final" / "config.json").exists():
        names.append("final")
    return names


RESUME_SAME = ("reward", "rollout")
"""The recipe sections a resumed run must keep: the checkpoint was trained under them, and the saved recipe
(``awarl_recipe.yaml``) says so for the whole run."""


def recipe_changes(saved_path: Path, config: TrainConfig, sections: Sequence[str] | None = None) -> list[str]:
    """How ``config`` differs from the recipe saved at ``saved_path`` (``"section.key: saved -> now"``), in
    ``sections`` (default all). Both go through `TrainConfig`, defaults filled in, so a field added to awarl
    since the run started is no change."""
    from awarl.config_fields import read_yaml_file

    saved = TrainConfig.from_dict(read_yaml_file(saved_path) or {}, source=str(saved_path)).to_dict()
    now = config.to_dict()
    before, after = (json.loads(json.dumps(d, default=str)) for d in (saved, now))
    changed = []
    for section in sections or sorted(set(before) | set(after)):
        a, b = before.get(section), after.get(section)
        if isinstance(a, dict) and isinstance(b, dict):
            changed += [f"{section}.{k}: {a.get(k)!r} -> {b.get(k)!r}" for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]
        elif a != b:
            changed.append(f"{section}: {a!r} -> {b!r}")
    return changed


def check_same_agent(output_dir: str | Path, config: TrainConfig, checkpoint: Path) -> None:
    """Refuse to resume ``checkpoint`` under another reward or other rollout settings than the run's saved
    recipe: the run would change its reward mid-way and its recipe would then claim the new one throughout."""
    from awarl.agent.settings import RECIPE_FILE

    saved_path = Path(output_dir) / RECIPE_FILE
    changed = recipe_changes(saved_path, config, RESUME_SAME) if saved_path.is_file() else []
    if changed:
        raise ConfigError(f"--resume {checkpoint}: the run was trained under {saved_path}, and this recipe changes "
                          f"{'; '.join(changed[:4])}{' …' if len(changed) > 4 else ''}; resume with the same reward and "
                          "rollout settings, or start a new output_dir")


# -- main ----------------------------------------------------------------------------------------------------
def build_trainer(config: TrainConfig, output_dir: str | None = None, extra_callbacks: Sequence[Any] = (),
                  on_log: Callable[[str], None] | None = None):
    """Stages 1-5 and the trainer; returns ``(trainer, stateful_reward)``."""
    from trl import GRPOTrainer

    from awarl.train.callbacks import (
        CollapseWarningCallback,
        HyperparameterCallback,
        PenaltyStateCallback,
        SummaryCallback,
        configure_logging,
    )
    from awarl.train.forced import force_answers
    from awarl.train.lm_head import use_plain_lm_head
    from awarl.train.rollout_checks import guard_rollouts

    config.check_trainer_fields()
    out = output_dir or config.output_dir
    configure_logging(config.logging, out)
    records = load_training_records(config)
    dataset = build_dataset(records, config)
    eval_dataset = build_dataset(load_training_records(config, split="eval"), config) if config.data.eval_records else None
    funcs, weights, stateful = build_rewards(config)
    args = grpo_args(config, out, weights)
    if eval_dataset is not None and args.eval_strategy == "no":
        log.warning("data.eval_records is set but grpo.eval_strategy is 'no': set grpo.eval_strategy: steps and "
                    "grpo.eval_steps to evaluate during training")
    model, tokenizer = load_model_and_tokenizer(config)
    environments = env_factory(config)
    config.save(out)  # the resolved recipe beside the checkpoints, once its inputs opened, before the first step
    callbacks = [PenaltyStateCallback(stateful), HyperparameterCallback(config.hyperparameters()),
                 CollapseWarningCallback(stateful, printer=on_log), *extra_callbacks]
    if config.reward.adaptive_p:
        callbacks.append(adaptive_p_callback(config, records, stateful, environments, args, out))
    if config.logging.summary:
        callbacks.append(SummaryCallback(printer=on_log))
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=funcs,
        args=args,
        train_dataset=dataset,
        eval_dataset=eval_dataset,
        processing_class=tokenizer,
        environment_factory=environments,
        peft_config=peft_config(config),
        callbacks=callbacks,
    )
    # on CPU: TRL's tiled head is most of a tiny model's training forward and backward
    for scored in (trainer.model, trainer.ref_model):
        if scored is not None:
            use_plain_lm_head(scored, temperature=trainer.temperature)
    freeze_penalty_during_evaluation(trainer, stateful)
    if config.reward.adaptive_p:
        _check_probe_can_generate(trainer)
    guard_rollouts(trainer)  # trained ids == sampled ids + tool suffixes, per-rollout budget; logs env/truncated
    if config.reward.forced_answer:
        _check_forced_answers_can_generate(trainer)
        force_answers(trainer, config.rollout.phrases)  # after the guard, so forced rollouts are checked too
    return trainer, stateful


def adaptive_p_callback(config: TrainConfig, records: Sequence[QARecord], stateful: Any, environments: Any,
                        args: Any, output_dir: str):
    """The forced-answer probe of adaptive p_i (`awarl.train.probe`), every ``reward.adaptive_p_every``
    generation batches, with GRPO's sampling settings; probe rollouts never reach the reward."""
    from awarl.train.probe import AdaptiveCapabilityCallback, ForcedAnswerProbe

    probe = ForcedAnswerProbe(stateful, records, environments, config.rollout, p_field=config.data.p_field,
                              temperature=args.temperature, top_p=args.top_p, seed=config.seed,
                              output_dir=output_dir)
    # TRL generates every steps_per_generation * num_iterations micro-batches; an optimizer step takes
    # gradient_accumulation_steps of them.
    per_batch = args.steps_per_generation * args.num_iterations / args.gradient_accumulation_steps
    return AdaptiveCapabilityCallback(probe, max(1, round(config.reward.adaptive_p_every * per_batch)))


def _check_probe_can_generate(trainer: Any) -> None:
    """The adaptive p_i probe generates with each process's copy of the model: ZeRO-3 shards it."""
    plugin = getattr(trainer.accelerator.state, "deepspeed_plugin", None)
    if plugin is not None and getattr(plugin, "zero_stage", None) == 3:
        raise ConfigError("reward.adaptive_p: the forced-answer probe needs the whole model on every process, and "
                          "DeepSpeed ZeRO-3 shards it; use DDP or ZeRO-2 (configs/accelerate), or reward.adaptive_p: "
                          "false")


def _check_forced_answers_can_generate(trainer: Any) -> None:
    """Forced answers ban the refusal through the transformers generation config, which vLLM does not read."""
    if trainer.use_vllm:
        raise ConfigError("reward.forced_answer: forced-answer rollouts ban the refusal phrases in transformers "
                          "generation, and this recipe generates with vLLM (grpo.use_vllm); set grpo.use_vllm: false "
                          "or reward.forced_answer: false")


def freeze_penalty_during_evaluation(trainer: Any, stateful: Any) -> None:
    """TRL scores evaluation batches with the same reward functions; without this an evaluation would
    move the penalty state (Ē, P_t) of training. ``Trainer`` calls ``self.evaluate`` both from the training
    loop and from users, so wrapping the bound method covers both."""
    evaluate = trainer.evaluate

    def frozen_evaluate(*args: Any, **kwargs: Any) -> Any:
        was, stateful.frozen = stateful.frozen, True
        try:
            return evaluate(*args, **kwargs)
        finally:
            stateful.frozen = was

    trainer.evaluate = frozen_evaluate


def main(config: TrainConfig, *, resume: str | None = None, output_dir: str | None = None,
         on_log: Callable[[str], None] | None = None, extra_callbacks: Sequence[Any] = ()) -> Path:
    """Train; returns the folder of the final model (weights, tokenizer, chat template)."""
    from awarl.train.callbacks import load_penalty_state

    out = Path(output_dir or config.output_dir)
    checkpoint = resume_checkpoint(resume, out)  # a bad --resume fails before the folder's recipe is rewritten
    if checkpoint is None:
        held = started_run(out)
        if held:
            raise ConfigError(f"{out} already holds a run ({', '.join(held)}); continue it with --resume latest, or "
                              "train into another output_dir (or delete that one) to start over")
    else:
        check_same_agent(out, config, checkpoint)
    trainer, stateful = build_trainer(config, str(out), extra_callbacks, on_log=on_log)
    if checkpoint is not None:
        saved = load_penalty_state(stateful, checkpoint)
        log.info("resuming from %s (step %s, penalty %s)", checkpoint, saved["global_step"], saved["penalty"])
    trainer.train(resume_from_checkpoint=str(checkpoint) if checkpoint else None)
    return save_final(trainer, config, out / "final")


def merge_into_base(trainer: Any, config: TrainConfig, final: Path) -> None:
    """QLoRA's final model: the adapters (trained on the 4-bit base) merged into the full-precision base
    they were trained from, so p_i, evaluation, export and serving load a plain checkpoint. The adapters
    stay beside it in ``final/adapter``."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    from awarl.train.export import save_model

    adapter = final / "adapter"
    model = trainer.accelerator.unwrap_model(trainer.model)
    model.save_pretrained(adapter)
    base = AutoModelForCausalLM.from_pretrained(model.peft_config["default"].base_model_name_or_path,
                                                dtype=load_dtype(config))
    save_model(PeftModel.from_pretrained(base, str(adapter)), trainer.processing_class, final, merge_lora=True)


def save_final(trainer: Any, config: TrainConfig, final: Path) -> Path:
    """The trained model, its tokenizer and chat template, and the resolved recipe, into ``final`` (LoRA
    adapters merged). Every process calls it: ZeRO-3 gathers the shards inside ``save_model``."""
    from awarl.train.export import save_model

    if config.model.lora:
        if trainer.accelerator.is_main_process:
            if config.model.quantization:
                merge_into_base(trainer, config, final)
            else:
                save_model(trainer.accelerator.unwrap_model(trainer.model), trainer.processing_class, final,
                           merge_lora=True)
    else:
        trainer.save_model(str(final))
    if trainer.accelerator.is_main_process:
        config.save(final)  # evaluation and serving of this checkpoint then default to the same agent
    trainer.accelerator.wait_for_everyone()
    return final
