"""vLLM offline engine backend (extra ``vllm``): batched token prompts on GPUs.

vLLM is imported when the backend is built, never at module import, so this file loads on any
machine; building it without vLLM installed is a `BackendError` that says how to install it.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from awarl.llm.base import BackendError, Generation, SamplingParams, cut_at_eos, eos_ids_like_trl


def import_vllm() -> Any:
    """The ``vllm`` module, or a `BackendError` naming the extra to install."""
    try:
        import vllm
    except ImportError as exc:
        raise BackendError(
            f"the vLLM backend needs the 'vllm' package ({exc}); install it with "
            "`pip install 'awarl[vllm]'` on a machine with a CUDA GPU, or use the transformers backend (hf:PATH)"
        ) from None
    return vllm


class VLLMGenerator:
    """Generate with ``vllm.LLM`` from token-id prompts.

    Args:
        model: checkpoint directory (or model id in the local cache).
        tensor_parallel_size: GPUs per engine; 1 is the safe default for multi-turn tool use.
        gpu_memory_utilization: share of GPU memory vLLM may take.
        max_model_len: context length cap (None: the model's own).
        dtype: ``"auto"``, ``"bfloat16"``, ``"float16"`` …
        seed: engine seed, for calls without per-prompt seeds. With ``SamplingParams.seeds`` each request
            carries its own seed (vLLM gives it a generator of its own), so a rollout samples the same
            tokens in any batch; the runner derives a different one for each of a query's K rollouts.
    """

    accepts: Literal["tokens"] = "tokens"

    def __init__(
        self,
        model: str | Path,
        *,
        tensor_parallel_size: int = 1,
        gpu_memory_utilization: float = 0.85,
        max_model_len: int | None = None,
        dtype: str = "auto",
        seed: int = 0,
    ) -> None:
        vllm = import_vllm()
        from transformers import AutoTokenizer

        self.name = f"vllm:{model}"
        kwargs: dict[str, Any] = {
            "model": str(model),
            "tensor_parallel_size": tensor_parallel_size,
            "gpu_memory_utilization": gpu_memory_utilization,
            "dtype": dtype,
            "seed": seed,
        }
        if max_model_len is not None:
            kwargs["max_model_len"] = max_model_len
        try:
            self.tokenizer = AutoTokenizer.from_pretrained(str(model), padding_side="left")
            self.llm = vllm.LLM(**kwargs)
        except OSError as exc:
            raise BackendError(f"cannot load model {model!r} with vLLM: {exc}") from None
        self._vllm = vllm
        generation_eos = None
        try:
            from transformers import GenerationConfig

            generation_eos = GenerationConfig.from_pretrained(str(model)).eos_token_id
        except OSError:
            pass  # no generation_config.json: the tokenizer's eos alone ends a turn
        self.eos_token_ids = eos_ids_like_trl(self.tokenizer, generation_eos)
        self.max_model_len: int | None = self.llm.llm_engine.model_config.max_model_len

    def generate(self, prompts: Sequence[Sequence[int]], params: SamplingParams) -> list[Generation]:
        """One completion per token-id prompt, in input order (vLLM batches them internally)."""
        def sampling(seed: int | None) -> Any:
            return self._vllm.SamplingParams(
                n=1,
                temperature=params.temperature,
                top_p=params.top_p,
                max_tokens=params.max_new_tokens,
                stop_token_ids=self.eos_token_ids,
                skip_special_tokens=True,
                seed=seed,
            )

        sampling_params = (sampling(None) if params.seeds is None
                           else [sampling(params.for_prompt(i).seed) for i in range(len(prompts))])
        requests = [{"prompt_token_ids": list(p)} for p in prompts]  # vllm.inputs.TokensPrompt is a TypedDict
        outputs = self.llm.generate(requests, sampling_params=sampling_params, use_tqdm=False)
        return [self._to_generation(out, len(p)) for out, p in zip(outputs, prompts)]

    def _to_generation(self, request_output: Any, prompt_len: int) -> Generation:
        completion = request_output.outputs[0]
        ids = list(completion.token_ids)
        stopped = completion.finish_reason == "stop"
        # When a stop token id ends generation, vLLM reports it in stop_reason; make sure it is the last id, as in
        # the transformers backend, so the runner's turn boundaries match TRL's.
        if stopped and isinstance(completion.stop_reason, int) and (not ids or ids[-1] != completion.stop_reason):
            ids.append(completion.stop_reason)
        ids, found = cut_at_eos(ids, self.eos_token_ids)
        return Generation(
            text=completion.text,
            token_ids=ids,
            finish_reason="stop" if found or stopped else "length",
            prompt_tokens=prompt_len,
            completion_tokens=len(ids),
        )

    def close(self) -> None:
        self.llm = None
