"""Training configuration: documented dataclasses loaded from a YAML recipe.

A recipe has one section per concern::

    model:   the base checkpoint and the LoRA settings
    data:    records (with the capability column ``p``), corpus / index / retrieval server, eval split
    rollout: the agent (`awarl.agent.settings.RolloutSettings`): prompt, search tool, budgets,
             correctness metric, refusal phrases — the very settings p_i and evaluation use
    reward:  `awarl.rewards.config.RewardConfig` (AWA reward, baselines, citation reward)
    grpo:    TRL ``GRPOConfig`` fields, passed through (checked against GRPOConfig)
    sft:     the cold-start SFT stage and TRL ``SFTConfig`` fields
    logging: tensorboard / wandb, summary line

Any field can be overridden on the command line with ``--set section.field=value`` (the value is
parsed as YAML, so ``--set reward.gamma=0.3`` is a float and ``--set grpo.report_to=[tensorboard]``
a list). Every field's type is enforced when the recipe loads (`awarl.config_fields`); `awarl train
check` and every training command run the same validation. Loading never imports torch;
`TrainConfig.check_trainer_fields` imports TRL to check the pass-through sections.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Literal

import yaml

from awarl.agent.settings import RECIPE_FILE, RolloutSettings, check_recipe_layout
from awarl.config_fields import ConfigError, build, check_type, closest, load_yaml, read_yaml_file
from awarl.config_fields import doc as _doc
from awarl.rewards.config import RewardConfig

log = logging.getLogger(__name__)

__all__ = ["ConfigError", "DataConfig", "LoggingConfig", "ModelConfig", "SFTSection", "TrainConfig", "apply_override",
           "load_yaml"]


def header_script(recipe: str | Path) -> str:
    """The Python script a recipe's header comment holds (the lines between ``#   python - <<'EOF'`` and
    ``#   EOF``, comment marks removed), e.g. configs/smollm2_world.yaml's world step; scripts and tests
    run this one copy."""
    import textwrap

    text = Path(recipe).read_text()
    start, end = "#   python - <<'EOF'\n", "#   EOF\n"
    if start not in text or end not in text:
        raise ConfigError(f"{recipe}: its header holds no `python - <<'EOF'` script")
    lines = text[text.index(start): text.index(end)].splitlines()[1:]
    return textwrap.dedent("\n".join(line.removeprefix("#") for line in lines))


@dataclass
class ModelConfig:
    """The checkpoint training starts from."""

    path: str = _doc("Hugging Face model id or local folder (weights, tokenizer, chat template).", default="")
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = _doc(
        "Weights dtype when loading; 'auto' = bfloat16 on CUDA, float32 on CPU.", default="auto")
    attn_implementation: str | None = _doc("e.g. 'sdpa' or 'flash_attention_2'; None = transformers' default.",
                                           default=None)
    lora: bool = _doc("Train LoRA adapters instead of all weights (merge them with `awarl export`).", default=False)
    lora_r: int = _doc("LoRA rank.", default=16)
    lora_alpha: int = _doc("LoRA scaling numerator (scale = alpha / r).", default=32)
    lora_dropout: float = _doc("Dropout on the LoRA branch.", default=0.05)
    lora_target_modules: list[str] = _doc(
        "Linear layers that get adapters (Qwen2 names).",
        default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"])
    quantization: Literal["nf4", "fp4"] | None = _doc(
        "QLoRA: load the frozen base in 4 bits with bitsandbytes (the `qlora` extra; its CPU backend runs too) "
        "and train LoRA adapters on it; needs model.lora. The final model merges the adapters into the "
        "full-precision base. None = no quantization.", default=None)

    def __post_init__(self) -> None:
        if self.lora and self.lora_r <= 0:
            raise ConfigError(f"model.lora_r must be > 0 when model.lora is on, got {self.lora_r}")
        if self.quantization and not self.lora:
            raise ConfigError(f"model.quantization {self.quantization!r} trains adapters on a frozen 4-bit base: "
                              f"it needs model.lora: true")


@dataclass
class DataConfig:
    """Training questions, their capability estimates and the passages the tool searches."""

    records: str = _doc("records.jsonl from `awarl data prepare` (QARecord rows).", default="")
    capability: str | None = _doc(
        "Optional JSONL of {id, p} from `awarl capability estimate`, joined to the records by id. Without it "
        "the records themselves must carry the `p` field.", default=None)
    p_field: str = _doc("Name of the capability field in the records / capability file.", default="p")
    corpus: str | None = _doc("corpus.jsonl the search tool indexes (BM25, built at start).", default=None)
    index: str | None = _doc("A saved index folder (`awarl index build`); used instead of `corpus` when set.",
                             default=None)
    retriever_url: str | None = _doc("URL of a running `awarl search serve` (one per node on a cluster); "
                                     "overrides corpus/index.", default=None)
    limit: int | None = _doc("Use only the first N records (smoke runs).", default=None)
    eval_records: str | None = _doc("Held-out records.jsonl evaluated during GRPO (set grpo.eval_strategy and "
                                    "grpo.eval_steps); the penalty is frozen while it runs.", default=None)
    eval_capability: str | None = _doc("Capability file of eval_records (same checkpoint and rollout settings as "
                                       "data.capability); needed by the AWA reward.", default=None)
    eval_limit: int | None = _doc("Use only the first N eval records.", default=None)

    def __post_init__(self) -> None:
        for name in ("limit", "eval_limit"):
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise ConfigError(f"{name} must be a positive number or null, got {value}")


@dataclass
class SFTSection:
    """Cold-start SFT: where the trajectories come from, and TRL ``SFTConfig`` fields."""

    enabled: bool | None = _doc("The recipe has an SFT stage: GRPO (and p_i) then start from its output "
                                "(<sft.output_dir>/final). null = true when sft.args is set.", default=None)
    init_from: str | None = _doc("Model SFT starts from; null = model.path.", default=None)
    output_dir: str | None = _doc("Where SFT writes; None = <output_dir>/sft. The model lands in <it>/final.",
                                  default=None)
    source: Literal["gold", "trajectories"] = _doc(
        "'gold': build search -> passages -> cited answer (or abstain) from the supporting passages; "
        "'trajectories': filtered runner trajectories (JSONL with `record_id`, `messages`).", default="gold")
    trajectories: str | None = _doc("Runner / `awarl capability --trajectories` output (JSONL rows with `record_id` "
                                    "and `messages`) when source is 'trajectories'.",
                                    default=None)
    abstain_share: float = _doc(
        "Gold source: share of answerable records shown only distractors and ending in an abstention (teaches "
        "the model to abstain when the evidence is missing).", default=0.2)
    keep_outcomes: list[str] = _doc(
        "Trajectories kept for SFT: outcomes from the protocol scorer ('correct', and 'abstain' only on "
        "unanswerable questions — see `abstain_only_unanswerable`).", default_factory=lambda: ["correct", "abstain"])
    abstain_only_unanswerable: bool = _doc("Keep an abstaining trajectory only when the question is unanswerable.",
                                           default=True)
    args: dict[str, Any] = _doc("TRL SFTConfig fields (learning_rate, max_steps, …), checked against SFTConfig.",
                                default_factory=dict)

    def __post_init__(self) -> None:
        if self.enabled is None:
            self.enabled = bool(self.args)
        if not 0.0 <= self.abstain_share < 1.0:
            raise ConfigError(f"sft.abstain_share must be in [0, 1), got {self.abstain_share}")
        if self.source == "trajectories" and not self.trajectories:
            raise ConfigError("sft.source is 'trajectories' but sft.trajectories is empty: set it to the runner's "
                              "JSONL output, or use sft.source: gold")
        from typing import get_args

        from awarl.protocol import Outcome

        outcomes = get_args(Outcome)  # the protocol scorer's
        bad = [o for o in self.keep_outcomes if o not in outcomes]
        if bad:
            hint = closest(bad[0], outcomes)
            raise ConfigError(f"sft.keep_outcomes: {', '.join(map(repr, bad))} is not an outcome; choose from "
                              f"{', '.join(outcomes)}" + (f" (did you mean {hint!r}?)" if hint else ""))
        if self.args.get("assistant_only_loss") is False:
            raise ConfigError("sft.args.assistant_only_loss must stay true: tool results must not be trained on")


@dataclass
class LoggingConfig:
    """Where metrics go."""

    report_to: list[str] | None = _doc(
        "Trainer integrations; None = tensorboard, plus wandb when it is installed.", default=None)
    wandb_project: str = _doc("wandb project name.", default="awarl")
    wandb_mode: Literal["offline", "online", "disabled"] = _doc(
        "wandb mode; 'offline' writes runs locally (sync later with `wandb sync`).", default="offline")
    summary: bool = _doc("Print one rich summary line per logging step.", default=True)


@dataclass
class TrainConfig:
    """A whole training recipe. ``output_dir`` and ``seed`` are copied into the TRL sections."""

    model: ModelConfig = _doc("Model section.", default_factory=ModelConfig)
    data: DataConfig = _doc("Data section.", default_factory=DataConfig)
    rollout: RolloutSettings = _doc("The agent: prompt, search tool, budgets, metric, refusal phrases "
                                    "(awarl.agent.settings.RolloutSettings).", default_factory=RolloutSettings)
    reward: RewardConfig = _doc("Reward section (awarl.rewards.config.RewardConfig).", default_factory=RewardConfig)
    grpo: dict[str, Any] = _doc("TRL GRPOConfig fields, passed through.", default_factory=dict)
    sft: SFTSection = _doc("Cold-start SFT section.", default_factory=SFTSection)
    logging: LoggingConfig = _doc("Logging section.", default_factory=LoggingConfig)
    output_dir: str = _doc("Where checkpoints, logs and the final model go.", default="runs/awarl")
    seed: int = _doc("Seed for data order, sampling and initialisation.", default=0)
    source: str | None = _doc("The YAML file this was loaded from (set by the loader).", default=None)

    # -- loading ---------------------------------------------------------------------------------------------
    @classmethod
    def from_dict(cls, raw: dict[str, Any], *, source: str | None = None) -> "TrainConfig":
        where = source or "<config>"
        if not isinstance(raw, dict):
            raise ConfigError(f"{where}: the recipe must be a YAML mapping, got {type(raw).__name__}")
        raw = dict(raw)
        check_recipe_layout(raw, where)
        raw.pop("source", None)
        nested = {name: (lambda value, at, c=c: build(c, value, at)) for name, c in _SECTIONS.items()}
        nested["reward"] = lambda value, at: RewardConfig.from_dict(value or {}, at)
        nested["rollout"] = lambda value, at: RolloutSettings.from_dict(value or {}, at)
        nested["grpo"] = lambda value, at: _mapping(value, at)
        cfg = build(cls, raw, f"{where}:", nested=nested)
        cfg.source = source
        try:
            cfg.validate()
        except ConfigError as exc:
            raise ConfigError(f"{where}: {exc}") from None
        return cfg

    @classmethod
    def from_yaml(cls, path: str | Path, overrides: list[str] | None = None) -> "TrainConfig":
        """Load a recipe and apply ``section.field=value`` overrides."""
        raw = read_yaml_file(path) or {}
        for item in overrides or []:
            apply_override(raw, item)
        return cls.from_dict(raw, source=str(path))

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out.pop("source", None)
        out["rollout"] = self.rollout.to_dict()
        return out

    def save(self, folder: str | Path) -> Path:
        """Write the resolved recipe (``awarl_recipe.yaml``) and the rollout settings (``rollout.json``)
        into ``folder``, so a checkpoint says how it was trained and is served under the same agent."""
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / RECIPE_FILE
        header = f"# resolved recipe{f' from {self.source}' if self.source else ''}\n"
        path.write_text(header + yaml.safe_dump(self.to_dict(), sort_keys=False, allow_unicode=True),
                        encoding="utf-8")
        self.rollout.save(folder)
        return path

    def sft_final(self) -> Path:
        """Where the SFT stage writes its model."""
        return Path(self.sft.output_dir or Path(self.output_dir) / "sft") / "final"

    def grpo_start(self) -> str:
        """The checkpoint GRPO starts from (and p_i must be measured on): the SFT stage's output when the
        recipe has one, else model.path."""
        return str(self.sft_final()) if self.sft.enabled else self.model.path

    def sampling_temperature(self) -> float:
        """The temperature GRPO samples its rollouts at (``grpo.temperature``, TRL's default 1.0): p_i is
        measured at it too, so that it describes the policy training samples from."""
        return grpo_temperature(self.grpo)

    def hyperparameters(self) -> dict[str, Any]:
        """Flat ``section/field`` values for tensorboard / wandb hparams and reports."""
        flat: dict[str, Any] = {}
        for section in ("reward", "rollout"):
            for key, value in getattr(self, section).to_dict().items():
                if isinstance(value, (int, float, str, bool)) and key != "system_prompt":
                    flat[f"{section}/{key}"] = value
        for key in ("learning_rate", "num_generations", "per_device_train_batch_size", "steps_per_generation",
                    "temperature", "max_steps", "beta", "loss_type"):
            if key in self.grpo:
                flat[f"grpo/{key}"] = self.grpo[key]
        flat["model/path"] = self.grpo_start()
        flat["seed"] = self.seed
        return flat

    # -- checks ----------------------------------------------------------------------------------------------
    def validate(self) -> None:
        """Cross-section checks that need no torch."""
        if not self.model.path:
            raise ConfigError("model.path is empty: set it to a local model folder or a hub id you have cached")
        for key, kind in (("num_generations", int), ("save_steps", int), ("gradient_accumulation_steps", int),
                          ("steps_per_generation", int), ("num_iterations", int), ("beta", float),
                          ("learning_rate", float), ("max_steps", int), ("temperature", float)):
            value = self.grpo.get(key)
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float) if kind is float else int)):
                raise ConfigError(f"grpo.{key} must be {'a number' if kind is float else 'a whole number'}, got {value!r}")
        warning = self.rollout.budget_warning()
        if warning:
            log.warning(warning)
        if self.model.lora and self.grpo.get("beta", 0.0) and self.grpo.get("sync_ref_model"):
            raise ConfigError("grpo.sync_ref_model does not work with model.lora (the reference is the model with "
                              "adapters disabled): turn one of them off")
        if self.grpo.get("use_vllm") and self.grpo.get("vllm_mode") == "server" and self.rollout.max_searches > 1:
            # docs/training.md: processes run different numbers of tool rounds, and server mode
            # synchronises inside every generate call, so a multi-process run can hang.
            log.warning("grpo.vllm_mode 'server' with multi-turn tool calls can hang when several training "
                        "processes generate; the safe setting is vllm_mode 'colocate' with "
                        "vllm_tensor_parallel_size 1 (see docs/training.md)")
        save_steps = self.grpo.get("save_steps")
        accumulation = self.grpo.get("gradient_accumulation_steps", 1)
        # TRL generates once every steps_per_generation * num_iterations micro-batches.
        every = self.grpo.get("steps_per_generation") or accumulation
        every *= self.grpo.get("num_iterations", 1)
        if isinstance(save_steps, int) and isinstance(every, int) and (save_steps * accumulation) % every:
            # A checkpoint inside a generation batch would make a resumed run generate that batch anew.
            raise ConfigError(
                f"grpo.save_steps ({save_steps}) must end on a generation batch: one generation batch lasts "
                f"steps_per_generation x num_iterations / gradient_accumulation_steps = {every}/{accumulation} "
                f"optimizer steps; pick save_steps as a multiple of it so a resumed run continues exactly")
        gen = self.grpo.get("num_generations")
        if gen is not None and gen < 2:
            raise ConfigError(f"grpo.num_generations must be >= 2 for group-relative advantages, got {gen}")
        for section, values in (("grpo", self.grpo), ("sft.args", self.sft.args)):
            steps = values.get("max_steps")
            if isinstance(steps, int) and not isinstance(steps, bool) and steps < 1 and steps != -1:
                raise ConfigError(f"{section}.max_steps must be >= 1 (or -1: num_train_epochs decides), got {steps}")

    def check_model_path(self) -> None:
        """``model.path`` must be a local folder or a model in the local Hugging Face cache, so a run
        finds out before it loads data (or tries a download on an offline node) that its base is missing."""
        path = self.model.path
        if Path(path).is_dir():
            return
        try:
            from huggingface_hub import try_to_load_from_cache

            cached = try_to_load_from_cache(path, "config.json")
        except Exception:  # not a valid hub id (e.g. a local path with several folders): not cached
            cached = None
        if isinstance(cached, str):
            return
        raise ConfigError(f"model.path {path!r}: no such folder, and no model of that name in the Hugging Face "
                          f"cache; build or download it first (`hf download {path}`), or fix the path")

    def check_trainer_fields(self) -> None:
        """Check the pass-through sections against TRL's config classes (imports TRL)."""
        from trl import GRPOConfig, SFTConfig

        for section, cls, values in (("grpo", GRPOConfig, self.grpo), ("sft.args", SFTConfig, self.sft.args)):
            names = {f.name for f in fields(cls)}
            bad = sorted(set(values) - names)
            if bad:
                hints = {b: closest(b, names) for b in bad}
                raise ConfigError(f"{self.source or '<config>'}: {section} has field(s) that {cls.__name__} does "
                                  f"not know: " + ", ".join(f"{b!r} (did you mean {h!r}?)" if h else repr(b)
                                                             for b, h in hints.items()))
            reserved = {"output_dir", "seed"} & set(values)
            if reserved:
                raise ConfigError(f"{section}: set {sorted(reserved)} at the top level of the recipe, not here")
            annotations = {f.name: f.type for f in fields(cls)}
            for name, value in values.items():
                # The pass-through field must fit TRL's own annotation (`learning_rate: abc` is refused here,
                # not deep inside the trainer); string annotations are left to TRL.
                if not isinstance(annotations[name], str):
                    check_type(value, annotations[name], f"{self.source or '<config>'}: {section}.{name}")


_SECTIONS: dict[str, type] = {}  # filled below, once every section class exists


def _mapping(value: Any, where: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ConfigError(f"{where} must be a mapping of fields, got {type(value).__name__}")
    return dict(value)


def apply_override(raw: dict[str, Any], item: str) -> None:
    """Apply one ``a.b.c=value`` override to a raw recipe mapping (value parsed as YAML).

    >>> raw = {"reward": {"gamma": 0.5}}
    >>> apply_override(raw, "reward.gamma=0.3"); raw["reward"]["gamma"]
    0.3
    >>> apply_override(raw, "grpo.report_to=[tensorboard]"); raw["grpo"]["report_to"]
    ['tensorboard']
    >>> apply_override(raw, "grpo.save_strategy=no"); raw["grpo"]["save_strategy"]
    'no'

    """
    if "=" not in item:
        raise ConfigError(f"override {item!r} must look like section.field=value")
    key, _, text = item.partition("=")
    parts = [p for p in key.strip().split(".") if p]
    if not parts:
        raise ConfigError(f"override {item!r} has an empty key")
    try:
        value = load_yaml(text) if text.strip() else None
    except yaml.YAMLError as exc:
        raise ConfigError(f"override {item!r}: value is not valid YAML ({exc})") from None
    node = raw
    for part in parts[:-1]:
        nxt = node.setdefault(part, {})
        if not isinstance(nxt, dict):
            raise ConfigError(f"override {item!r}: {part!r} is not a section")
        node = nxt
    node[parts[-1]] = value


_SECTIONS.update({"model": ModelConfig, "data": DataConfig, "sft": SFTSection, "logging": LoggingConfig})


def grpo_temperature(grpo: dict[str, Any]) -> float:
    """The sampling temperature of a recipe's ``grpo:`` section (TRL's default 1.0): the one reading
    behind `TrainConfig.sampling_temperature` and the demo's p_i stage."""
    return float(grpo.get("temperature", 1.0))
