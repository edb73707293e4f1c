"""In-process transformers backend: batched, left-padded ``generate`` with the KV cache.

Prompts are token ids. Each row is cut after its first end-of-turn token (``<|im_end|>`` for
Qwen), the same rule TRL's GRPOTrainer applies, so a rollout here and a rollout in training see
the same tokens.

Sampling with per-prompt seeds (``SamplingParams.seeds``) draws each row's tokens from a
``torch.Generator`` of its own: one uniform number per row and step, turned into a token by the
inverse of the row's distribution (after the usual temperature and top-p warpers). A row's tokens
then depend only on its seed and its logits, never on its place in the batch or on the other rows.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from awarl.errors import ConfigError
from awarl.llm.base import BackendError, Generation, SamplingParams, cut_at_eos, eos_ids_like_trl


class HFGenerator:
    """Generate with a local transformers checkpoint.

    Args:
        model: a checkpoint directory (or a model id already in the local Hugging Face cache).
        device: ``"auto"`` (CUDA when available), ``"cpu"``, ``"cuda"``, ``"cuda:1"`` …
        dtype: ``"auto"`` (bf16 on CUDA, fp32 on CPU), ``"bfloat16"``, ``"float16"``, ``"float32"``.
        batch_size: most rows per ``generate`` call; larger batches are split.
        model_obj / tokenizer_obj: an already loaded model and tokenizer (skips loading ``model``;
            generation runs on the model's own device).
    """

    accepts: Literal["tokens"] = "tokens"

    def __init__(
        self,
        model: str | Path,
        *,
        device: str = "auto",
        dtype: str = "auto",
        batch_size: int = 32,
        model_obj: Any = None,
        tokenizer_obj: Any = None,
    ) -> None:
        import torch

        if batch_size < 1:
            raise ConfigError(f"batch_size must be >= 1, got {batch_size}")
        self.name = f"hf:{model}"
        self.batch_size = batch_size
        self.device = resolve_device(device)
        if model_obj is None or tokenizer_obj is None:
            model_obj, tokenizer_obj = _load(str(model), self.device, dtype)
        else:  # a model handed in (e.g. the one being trained) generates where it already is
            self.device = next(model_obj.parameters()).device
        self.model = model_obj.eval()
        self.tokenizer = tokenizer_obj
        if self.tokenizer.pad_token_id is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.eos_token_ids = eos_ids_like_trl(self.tokenizer, self.model.generation_config.eos_token_id)
        self.max_model_len: int | None = getattr(self.model.config, "max_position_embeddings", None)
        self._seed: int | None = None

    def generate(self, prompts: Sequence[Sequence[int]], params: SamplingParams) -> list[Generation]:
        """One completion per token-id prompt, in input order."""
        import torch

        if params.seeds is not None and len(params.seeds) != len(prompts):
            raise ValueError(f"{len(params.seeds)} seeds for {len(prompts)} prompts")
        if params.seeds is None and params.seed is not None and params.seed != self._seed:
            torch.manual_seed(params.seed)  # seeded once per seed value, so later turns keep drawing fresh samples
            self._seed = params.seed
        out: list[Generation | None] = [None] * len(prompts)
        # Longest first, so each micro-batch holds rows of similar length (less padding).
        order = sorted(range(len(prompts)), key=lambda i: -len(prompts[i]))
        for start in range(0, len(order), self.batch_size):
            chunk = order[start : start + self.batch_size]
            seeds = None if params.seeds is None else [params.seeds[i] for i in chunk]
            for i, gen in zip(chunk, self._generate_batch([prompts[i] for i in chunk], params, seeds)):
                out[i] = gen
        return [g for g in out if g is not None]

    def _generate_batch(self, prompts: list[Sequence[int]], params: SamplingParams,
                        seeds: list[int] | None) -> list[Generation]:
        import torch
        from transformers import GenerationConfig, LogitsProcessorList

        width = max(len(p) for p in prompts)
        pad = self.tokenizer.pad_token_id
        input_ids = torch.tensor([[pad] * (width - len(p)) + list(p) for p in prompts], device=self.device)
        mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts], device=self.device)
        processors = LogitsProcessorList()
        if params.greedy:
            sampling: dict[str, Any] = {"do_sample": False}
        elif seeds is not None:  # each row samples in _RowSampler; generate then takes the one token it left
            sampling = {"do_sample": False}
            processors.append(_RowSampler(seeds, params.temperature, params.top_p))
        else:
            sampling = {"do_sample": True, "temperature": params.temperature, "top_p": params.top_p, "top_k": 0}
        config = GenerationConfig(
            max_new_tokens=params.max_new_tokens,
            pad_token_id=pad,
            bos_token_id=self.tokenizer.bos_token_id,
            eos_token_id=self.eos_token_ids,
            use_cache=True,
            disable_compile=True,
            **sampling,
        )
        with torch.inference_mode():
            seqs = self.model.generate(input_ids=input_ids, attention_mask=mask, generation_config=config,
                                       logits_processor=processors)
        gens = []
        for row, prompt in zip(seqs[:, width:].tolist(), prompts):
            ids, stopped = cut_at_eos(row, self.eos_token_ids)
            gens.append(Generation(
                text=self.tokenizer.decode(ids, skip_special_tokens=True),
                token_ids=ids,
                finish_reason="stop" if stopped else "length",
                prompt_tokens=len(prompt),
                completion_tokens=len(ids),
            ))
        return gens

    def close(self) -> None:
        self.model = None


class _RowSampler:
    """A logits processor that samples every row from its own seeded stream and leaves only the drawn
    token (every other score ``-inf``), so greedy decoding takes exactly that token.

    The warpers are transformers' own (temperature, then top-p with top-k off, as ``do_sample``
    applies them); each step draws one uniform number per row, so the n-th token of a row always
    uses the n-th number of its stream."""

    def __init__(self, seeds: Sequence[int], temperature: float, top_p: float) -> None:
        import torch
        from transformers import TemperatureLogitsWarper, TopPLogitsWarper

        self.generators = [torch.Generator().manual_seed(int(s)) for s in seeds]
        self.warpers = [TemperatureLogitsWarper(temperature)] + ([TopPLogitsWarper(top_p)] if top_p < 1.0 else [])

    def __call__(self, input_ids: Any, scores: Any) -> Any:
        import torch

        for warper in self.warpers:
            scores = warper(input_ids, scores)
        cdf = torch.softmax(scores.float(), dim=-1).cumsum(dim=-1)
        u = torch.cat([torch.rand(1, generator=g) for g in self.generators]).to(cdf.device)
        # The first token whose cumulative probability exceeds u (a token of probability 0 is never drawn).
        drawn = torch.searchsorted(cdf, (u * cdf[:, -1]).unsqueeze(1), right=True).clamp(max=cdf.shape[1] - 1)
        out = torch.full_like(scores, float("-inf"))
        return out.scatter_(1, drawn, 0.0)


def resolve_device(device: str) -> Any:
    """``auto`` / ``cpu`` / ``cuda`` / ``cuda:N`` as a ``torch.device``, checked against this torch
    and machine, so a wrong ``--device`` is one clear `BackendError` instead of a traceback from
    deep inside model loading."""
    import torch

    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        parsed = torch.device(device)
    except (RuntimeError, TypeError):
        raise BackendError(f"unknown device {device!r}; use auto, cpu, cuda or cuda:N") from None
    if parsed.type == "cuda":
        if torch.version.cuda is None:
            raise BackendError(f"device {device!r}: this torch ({torch.__version__}) has no CUDA support (a CPU-only "
                               "build); use --device cpu, or install a CUDA build of torch")
        count = torch.cuda.device_count()
        if count == 0:
            raise BackendError(f"device {device!r}: this torch has CUDA {torch.version.cuda} but sees no GPU "
                               "(check the driver and CUDA_VISIBLE_DEVICES); use --device cpu")
        if parsed.index is not None and parsed.index >= count:
            raise BackendError(f"device {device!r}: only {count} GPU(s) visible (cuda:0 … cuda:{count - 1})")
    elif parsed.type == "mps":
        if not torch.backends.mps.is_available():
            raise BackendError(f"device {device!r}: this torch or machine has no Apple MPS; use --device cpu")
    elif parsed.type != "cpu":
        raise BackendError(f"device {device!r}: the transformers backend runs on cpu, cuda or mps; use auto, cpu, "
                           "cuda or cuda:N")
    return parsed


def _load(model: str, device: Any, dtype: str) -> tuple[Any, Any]:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = Path(model)
    if path.exists() and not (path / "config.json").exists():
        raise BackendError(f"model directory {model} has no config.json; is it a transformers checkpoint?")
    if dtype == "auto":
        torch_dtype = torch.bfloat16 if device.type == "cuda" and torch.cuda.is_bf16_supported() else torch.float32
    else:
        try:
            torch_dtype = getattr(torch, dtype)
        except AttributeError:
            raise BackendError(f"unknown dtype {dtype!r}; use auto, bfloat16, float16 or float32") from None
    try:
        tokenizer = AutoTokenizer.from_pretrained(model, padding_side="left")
        loaded = AutoModelForCausalLM.from_pretrained(model, dtype=torch_dtype)
    except OSError as exc:
        raise BackendError(f"cannot load model {model!r}: {exc}") from None
    tokenizer.padding_side = "left"
    return loaded.to(device), tokenizer
