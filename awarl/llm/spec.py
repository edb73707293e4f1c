"""Choose a generation backend from one spec string.

=====================================  =============================================
spec                                   backend
=====================================  =============================================
``PATH`` or ``hf:PATH``                in-process transformers (`HFGenerator`)
``vllm:PATH``                          vLLM offline engine (`VLLMGenerator`)
``openai:http://HOST:PORT/v1#MODEL``   OpenAI-compatible chat endpoint; ``#MODEL``
                                       optional (the first served model)
=====================================  =============================================

``PATH`` is a checkpoint directory; a ``org/name`` model id is accepted when it is not a local
path (it must already be in the local Hugging Face cache on offline machines).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, fields
from pathlib import Path

from awarl.llm.base import BackendError, Generator

_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


@dataclass
class BackendOptions:
    """Settings each backend takes what it needs from."""

    device: str = "auto"
    """transformers: ``auto``, ``cpu``, ``cuda``, ``cuda:N``."""
    dtype: str = "auto"
    """transformers / vLLM weights dtype."""
    batch_size: int = 32
    """transformers: most rows per ``generate`` call."""
    seed: int = 0
    """vLLM engine seed."""
    tensor_parallel_size: int = 1
    """vLLM: GPUs per engine."""
    gpu_memory_utilization: float = 0.85
    """vLLM: share of GPU memory to use."""
    max_model_len: int | None = None
    """vLLM: context length cap."""
    timeout: float = 120.0
    """OpenAI endpoint: seconds per request."""
    max_retries: int = 4
    """OpenAI endpoint: retries for timeouts, connection errors, 429 and 5xx."""
    concurrency: int = 8
    """OpenAI endpoint: most requests in flight."""
    api_key: str | None = None
    """OpenAI endpoint: bearer token (default ``$OPENAI_API_KEY``)."""


@dataclass(frozen=True)
class BackendSpec:
    kind: str  # "hf" | "vllm" | "openai"
    target: str  # a path / model id, or a base URL
    model: str | None = None  # served model name for "openai"


def parse_spec(spec: str) -> BackendSpec:
    """Split a spec string; unknown schemes and empty targets are errors.

    >>> parse_spec("openai:http://127.0.0.1:8000/v1#agent")
    BackendSpec(kind='openai', target='http://127.0.0.1:8000/v1', model='agent')
    >>> parse_spec("vllm:/ckpt").kind, parse_spec("/ckpt").kind
    ('vllm', 'hf')
    """
    spec = spec.strip()
    if not spec:
        raise BackendError("empty model spec; use PATH, hf:PATH, vllm:PATH or openai:URL#MODEL")
    if spec.startswith(("http://", "https://")):
        spec = "openai:" + spec
    kind, sep, rest = spec.partition(":")
    if not sep or kind not in ("hf", "vllm", "openai"):
        if sep and re.fullmatch(r"[a-z][a-z0-9+]*", kind) and not Path(spec).exists():
            raise BackendError(f"unknown backend {kind!r} in model spec {spec!r}; use hf:, vllm: or openai:")
        return BackendSpec("hf", spec)
    if not rest:
        raise BackendError(f"model spec {spec!r} names no model after '{kind}:'")
    if kind == "openai":
        url, _, model = rest.partition("#")
        if not url.startswith(("http://", "https://")):
            raise BackendError(f"model spec {spec!r}: expected openai:http(s)://HOST:PORT/v1[#MODEL]")
        return BackendSpec("openai", url, model or None)
    return BackendSpec(kind, rest)


def checkpoint_folder(spec: str) -> Path | None:
    """The local folder a spec names (``PATH``, ``hf:PATH``, ``vllm:PATH``), or None (an endpoint, a hub id,
    a bad spec): where the settings saved with a checkpoint are looked up.

    >>> checkpoint_folder("openai:http://127.0.0.1:8000/v1#agent") is None
    True
    """
    try:
        parsed = parse_spec(spec)
    except BackendError:
        return None
    if parsed.kind == "openai" or not Path(parsed.target).is_dir():
        return None
    return Path(parsed.target)


def load_backend(spec: str, options: BackendOptions | None = None, **overrides: object) -> Generator:
    """Build the backend a spec names; ``overrides`` set `BackendOptions` fields by name."""
    opts = options or BackendOptions()
    known = {f.name for f in fields(BackendOptions)}
    unknown = set(overrides) - known
    if unknown:
        raise TypeError(f"unknown backend options {sorted(unknown)}; known: {sorted(known)}")
    for key, value in overrides.items():
        setattr(opts, key, value)
    parsed = parse_spec(spec)
    if parsed.kind == "openai":
        from awarl.llm.openai_chat import OpenAIChatGenerator

        return OpenAIChatGenerator(parsed.target, parsed.model, api_key=opts.api_key, timeout=opts.timeout,
                                   max_retries=opts.max_retries, concurrency=opts.concurrency)
    _check_model_path(parsed.target)
    if parsed.kind == "vllm":
        from awarl.llm.vllm_engine import VLLMGenerator

        return VLLMGenerator(parsed.target, tensor_parallel_size=opts.tensor_parallel_size,
                             gpu_memory_utilization=opts.gpu_memory_utilization,
                             max_model_len=opts.max_model_len, dtype=opts.dtype, seed=opts.seed)
    from awarl.llm.hf import HFGenerator

    return HFGenerator(parsed.target, device=opts.device, dtype=opts.dtype, batch_size=opts.batch_size)


def _check_model_path(target: str) -> None:
    path = Path(target).expanduser()
    if path.exists():
        if not path.is_dir() or not (path / "config.json").exists():
            raise BackendError(f"model path {target} is not a checkpoint directory (no config.json)")
        return
    if not _HUB_ID.match(target) or target.startswith((".", "/", "~")):
        raise BackendError(f"model path {target} does not exist")
