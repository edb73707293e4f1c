"""Training configuration: documented dataclasses loaded from a YAML recipe.

A recipe has one section per concern::

    model:   the checkpoint to start from and the LoRA settings
    data:    records (with the capability column ``p``), corpus or index, retrieval scope
    env:     the search tool (top-k, search budget, result token budget)
    reward:  `awarl.rewards.config.RewardConfig` (AWA reward, baselines, citation reward)
    grpo:    TRL ``GRPOConfig`` fields, passed through unchanged (checked against GRPOConfig)
    sft:     the cold-start SFT data source and TRL ``SFTConfig`` fields
    logging: tensorboard / wandb, summary line

Any field can be overridden on the command line with ``--set section.field=value`` (the value is
parsed as YAML, so ``--set reward.gamma=0.3`` is a float and ``--set grpo.report_to=[tensorboard]``
a list). Loading never imports torch; `TrainConfig.check_trainer_fields` imports TRL to check the
pass-through sections.
"""

from __future__ import annotations

import dataclasses
import logging
import re
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Literal

import yaml

from awarl.rewards.config import RewardConfig


log = logging.getLogger(__name__)


class ConfigError(ValueError):
    """A recipe that cannot run; the message names the field, the problem and the fix."""


class _Yaml12Loader(yaml.SafeLoader):
    """YAML with 1.2 booleans and floats: only true/false are booleans (``save_strategy: no``
    stays "no") and ``1e-5`` is a number."""


_Yaml12Loader.yaml_implicit_resolvers = {
    key: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:bool"]
    for key, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_Yaml12Loader.add_implicit_resolver("tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"),
                                    list("tTfF"))
# YAML 1.2 floats also include 1e-5 (1.1 needs a dot: 1.0e-5).
_Yaml12Loader.add_implicit_resolver("tag:yaml.org,2002:float", re.compile(r"^[-+]?[0-9]+(?:\.[0-9]*)?[eE][-+]?[0-9]+$"),
                                    list("-+0123456789"))


def load_yaml(text: str) -> Any:
    """Parse YAML text with 1.2 booleans (`_Yaml12Loader`)."""
    return yaml.load(text, Loader=_Yaml12Loader)  # noqa: S506 - a SafeLoader subclass


def _doc(text: str, **kw: Any) -> Any:
    return field(metadata={"help": text}, **kw)


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

    def __post_init__(self) -> None:
        if self.lora and self.lora_r <= 0:
            raise ConfigError(f"model.lora_r must be > 0 when model.lora is on, got {self.lora_r}")


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
    scope: Literal["global", "closed"] = _doc(
        "'global': one index over all passages; 'closed': each question searches only its own passages.",
        default="global")
    limit: int | None = _doc("Use only the first N records (smoke runs).", default=None)
    system_prompt: str | None = _doc("Replace the protocol's system prompt (None = awarl.protocol's).",
                                     default=None)

    def __post_init__(self) -> None:
        if self.limit is not None and self.limit <= 0:
            raise ConfigError(f"data.limit must be a positive number or null, got {self.limit}")


@dataclass
class EnvConfig:
    """The search tool the agent calls during rollouts."""

    topk: int = _doc("Passages returned per search.", default=3)
    max_searches: int = _doc("Search budget per rollout; also TRL's max_tool_calling_iterations unless set there.",
                             default=4)
    max_passage_words: int = _doc("Words kept of each returned passage (keeps results inside "
                                  "grpo.max_completion_length, which counts tool results).", default=100)

    def __post_init__(self) -> None:
        for name in ("topk", "max_searches", "max_passage_words"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"env.{name} must be > 0, got {getattr(self, name)}")


@dataclass
class SFTSection:
    """Cold-start SFT: where the trajectories come from, and TRL ``SFTConfig`` fields."""

    init_from: str | None = _doc("Model SFT starts from; None = model.path (GRPO then starts from SFT's output).",
                                 default=None)
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
        if not 0.0 <= self.abstain_share < 1.0:
            raise ConfigError(f"sft.abstain_share must be in [0, 1), got {self.abstain_share}")
        if self.source == "trajectories" and not self.trajectories:
            raise ConfigError("sft.source is 'trajectories' but sft.trajectories is empty: set it to the runner's "
                              "JSONL output, or use sft.source: gold")


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
    env: EnvConfig = _doc("Search tool section.", default_factory=EnvConfig)
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
        sections = {"model": ModelConfig, "data": DataConfig, "env": EnvConfig, "reward": RewardConfig,
                    "sft": SFTSection, "logging": LoggingConfig}
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(raw) - known)
        if unknown:
            raise ConfigError(f"{where}: unknown top-level key(s) {unknown}; known: {sorted(known - {'source'})}")
        kwargs: dict[str, Any] = {}
        for name, value in raw.items():
            if name in sections:
                kwargs[name] = _build_section(sections[name], value or {}, f"{where}: {name}")
            elif name == "grpo":
                if not isinstance(value or {}, dict):
                    raise ConfigError(f"{where}: grpo must be a mapping of GRPOConfig fields")
                kwargs[name] = dict(value or {})
            else:
                kwargs[name] = value
        try:
            cfg = cls(**kwargs, source=source)
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"{where}: {exc}") from None
        try:
            cfg.validate()
        except ConfigError as exc:
            raise ConfigError(f"{where}: {exc}") from None
        return cfg

    @classmethod
    def from_yaml(cls, path: str | Path, overrides: list[str] | None = None) -> "TrainConfig":
        """Load a recipe and apply ``section.field=value`` overrides."""
        path = Path(path)
        if not path.exists():
            raise ConfigError(f"{path}: recipe not found")
        try:
            raw = load_yaml(path.read_text(encoding="utf-8")) or {}
        except yaml.YAMLError as exc:
            raise ConfigError(f"{path}: not valid YAML ({exc})") from None
        for item in overrides or []:
            apply_override(raw, item)
        return cls.from_dict(raw, source=str(path))

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out.pop("source", None)
        return out

    # -- checks ----------------------------------------------------------------------------------------------
    def validate(self) -> None:
        """Cross-section checks that need no torch."""
        if self.model.lora and self.grpo.get("beta", 0.0) and self.grpo.get("sync_ref_model"):
            raise ConfigError("grpo.sync_ref_model does not work with model.lora (the reference is the model with "
                              "adapters disabled): turn one of them off")
        if self.grpo.get("use_vllm") and self.grpo.get("vllm_mode") == "server" and self.env.max_searches > 1:
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
        if isinstance(save_steps, int) and (save_steps * accumulation) % every:
            # A checkpoint inside a generation batch would make a resumed run generate that batch anew.
            raise ConfigError(
                f"grpo.save_steps ({save_steps}) must end on a generation batch: one generation batch lasts "
                f"steps_per_generation x num_iterations / gradient_accumulation_steps = {every}/{accumulation} "
                f"optimizer steps; pick save_steps as a multiple of it so a resumed run continues exactly")
        gen = self.grpo.get("num_generations")
        if gen is not None and gen < 2:
            raise ConfigError(f"grpo.num_generations must be >= 2 for group-relative advantages, got {gen}")

    def check_trainer_fields(self) -> None:
        """Check the pass-through sections against TRL's config classes (imports TRL)."""
        from trl import GRPOConfig, SFTConfig

        for section, cls, values in (("grpo", GRPOConfig, self.grpo), ("sft.args", SFTConfig, self.sft.args)):
            names = {f.name for f in fields(cls)}
            bad = sorted(set(values) - names)
            if bad:
                hints = {b: _closest(b, names) for b in bad}
                raise ConfigError(f"{self.source or '<config>'}: {section} has field(s) that {cls.__name__} does "
                                  f"not know: " + ", ".join(f"{b!r} (did you mean {h!r}?)" if h else repr(b)
                                                             for b, h in hints.items()))
            reserved = {"output_dir", "seed"} & set(values)
            if reserved:
                raise ConfigError(f"{section}: set {sorted(reserved)} at the top level of the recipe, not here")


def _build_section(cls: type, value: Any, where: str) -> Any:
    if isinstance(value, cls):
        return value
    if not isinstance(value, dict):
        raise ConfigError(f"{where} must be a mapping, got {type(value).__name__}")
    if cls is RewardConfig:
        try:
            return RewardConfig.from_dict(value)
        except ValueError as exc:
            raise ConfigError(f"{where}: {exc}") from None
    names = {f.name for f in fields(cls)}
    unknown = sorted(set(value) - names)
    if unknown:
        hints = [f"{u!r}" + (f" (did you mean {h!r}?)" if (h := _closest(u, names)) else "") for u in unknown]
        raise ConfigError(f"{where}: unknown field(s) {', '.join(hints)}")
    try:
        return cls(**value)
    except ConfigError as exc:
        raise ConfigError(f"{where}: {exc}") from None
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{where}: {exc}") from None


def _closest(name: str, names: set[str]) -> str | None:
    import difflib

    found = difflib.get_close_matches(name, sorted(names), n=1, cutoff=0.7)
    return found[0] if found else None


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
