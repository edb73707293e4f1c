"""`awarl model import-gguf` on tiny llama GGUF files written here by the ``gguf`` package itself.

A random 2-layer Llama and a small byte-level BPE tokenizer are written the way llama.cpp's
converter writes them (Q/K rows permuted, tokens + merges + token types, chat template), in F32,
F16 and Q8_0; the imported folder must load with plain ``from_pretrained`` and hold the same
weights (exactly for F32; within the format's rounding otherwise) and the same tokenizer.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("gguf")
torch = pytest.importorskip("torch")

from gguf import GGMLQuantizationType, GGUFWriter  # noqa: E402
from gguf.quants import quantize  # noqa: E402

from awarl.data.records import DataError  # noqa: E402
from awarl.train.gguf import import_gguf, read_info  # noqa: E402

TEMPLATE = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
            "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
TEXTS = ["Who wrote Hamlet? Shakespeare wrote Hamlet in 1600.", "The capital of France is Paris.",
         "search for the answer, then answer with citations [d1] [d2]."] * 10


def _tokenizer():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(TEXTS, trainers.BpeTrainer(vocab_size=320, special_tokens=SPECIALS, show_progress=False,
                                                       initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    return tok


def _permute(w: np.ndarray, n_head: int) -> np.ndarray:
    """llama.cpp's convert_hf_to_gguf ``LlamaModel.permute`` of Q/K rows (transformers undoes it on load)."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def write_tiny_gguf(path: Path, qtype: GGMLQuantizationType, *, arch: str = "llama") -> tuple[dict, object]:
    """A random tiny Llama + tokenizer as a GGUF file; returns the source state dict and tokenizer."""
    from transformers import LlamaConfig, LlamaForCausalLM

    tok = _tokenizer()
    vocab = tok.get_vocab()
    tokens = sorted(vocab, key=vocab.get)
    config = LlamaConfig(vocab_size=len(tokens), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                         rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=False)
    torch.manual_seed(0)
    model = LlamaForCausalLM(config)
    state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    w = GGUFWriter(str(path), arch)
    w.add_name("tiny-test-llama")
    w.add_license("apache-2.0")
    w.add_context_length(256)
    w.add_embedding_length(64)
    w.add_block_count(2)
    w.add_feed_forward_length(128)
    w.add_head_count(4)
    w.add_head_count_kv(2)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_freq_base(10000.0)
    w.add_rope_dimension_count(16)
    w.add_vocab_size(len(tokens))
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("smollm")
    w.add_token_list(tokens)
    w.add_token_types([3 if t in SPECIALS else 1 for t in tokens])
    w.add_token_merges([" ".join(m) if isinstance(m, tuple) else m for m in _merges(tok)])
    w.add_bos_token_id(vocab["<|im_start|>"])
    w.add_eos_token_id(vocab["<|im_end|>"])
    w.add_pad_token_id(vocab["<|endoftext|>"])
    w.add_add_bos_token(False)
    w.add_chat_template(TEMPLATE)
    names = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
             "lm_head.weight": "output.weight"}
    per_layer = {"self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
                 "self_attn.o_proj": "attn_output", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
                 "mlp.down_proj": "ffn_down", "input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm"}
    for key, tensor in state.items():
        array = tensor.numpy().astype(np.float32)
        if key in names:
            name = names[key]
        else:
            _, _, layer, *rest = key.split(".")
            module = ".".join(rest[:-1])
            name = f"blk.{layer}.{per_layer[module]}.weight"
            if module == "self_attn.q_proj":
                array = _permute(array, 4)
            elif module == "self_attn.k_proj":
                array = _permute(array, 2)
        if array.ndim == 1:  # llama.cpp keeps norms in F32 whatever the file type
            w.add_tensor(name, array)
        elif qtype == GGMLQuantizationType.F32:
            w.add_tensor(name, array)
        elif qtype == GGMLQuantizationType.F16:
            w.add_tensor(name, array.astype(np.float16))
        else:
            w.add_tensor(name, quantize(array, qtype), raw_dtype=qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return state, tok


def _merges(tok) -> list[str]:
    import json

    model = json.loads(tok.to_str())["model"]
    return [m if isinstance(m, str) else " ".join(m) for m in model["merges"]]


@pytest.mark.parametrize("qtype,atol", [(GGMLQuantizationType.F32, 0.0), (GGMLQuantizationType.F16, 1e-3),
                                        (GGMLQuantizationType.Q8_0, 2e-3)], ids=["F32", "F16", "Q8_0"])
def test_import_matches_source(tmp_path, qtype, atol):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    src = tmp_path / "tiny.gguf"
    state, tok = write_tiny_gguf(src, qtype)
    lines: list[str] = []
    out = import_gguf(src, tmp_path / "hf", on_log=lines.append)
    assert (out / "model.safetensors").exists() and (out / "tokenizer.json").exists()
    assert any("dequantizing" in line for line in lines)

    model = AutoModelForCausalLM.from_pretrained(out)  # a plain folder: no gguf_file, no gguf package needed
    loaded = model.state_dict()
    assert set(loaded) == set(state)
    for key, value in state.items():
        assert torch.allclose(loaded[key], value, atol=atol, rtol=0), key

    hf_tok = AutoTokenizer.from_pretrained(out)
    for text in TEXTS[:3] + ["<|im_start|>user\nHamlet?<|im_end|>"]:
        assert hf_tok.encode(text, add_special_tokens=False) == tok.encode(text).ids
        assert hf_tok.decode(tok.encode(text).ids) == text
    assert (hf_tok.eos_token, hf_tok.bos_token, hf_tok.pad_token) == ("<|im_end|>", "<|im_start|>", "<|endoftext|>")
    assert hf_tok.chat_template == TEMPLATE
    card = (out / "README.md").read_text()
    assert "tiny.gguf" in card and "license: apache-2.0" in card and qtype.name in card


def test_unsupported_architecture_is_refused(tmp_path):
    src = tmp_path / "gpt2.gguf"
    write_tiny_gguf(src, GGMLQuantizationType.F32, arch="gpt2")
    with pytest.raises(DataError, match="architecture 'gpt2' is not supported"):
        import_gguf(src, tmp_path / "hf")
    assert not (tmp_path / "hf").exists()


def test_unsupported_quantization_is_refused(tmp_path):
    src = tmp_path / "iq.gguf"
    write_tiny_gguf(src, GGMLQuantizationType.F32)
    data = bytearray(src.read_bytes())
    info = read_info(src)
    assert info.tensor_types == {"F32": 21}  # 9 per layer, embeddings, final norm, output
    # Relabel the first 2-D tensor as Q8_1 (an intermediate type gguf has no dequantizer for) in the header:
    # the type id sits right after the tensor's shape.
    from gguf import GGUFReader

    tensor = next(t for t in GGUFReader(str(src)).tensors if len(t.shape) == 2)
    type_at = tensor.field.offset + sum(p.nbytes for p in tensor.field.parts[:-2])
    assert int.from_bytes(data[type_at:type_at + 4], "little") == GGMLQuantizationType.F32
    data[type_at:type_at + 4] = int(GGMLQuantizationType.Q8_1).to_bytes(4, "little")
    src.write_bytes(bytes(data))
    with pytest.raises(DataError, match=rf"tensor '{tensor.name}'.*quantization Q8_1 cannot be dequantized"):
        read_info(src)


def test_not_a_gguf_file(tmp_path):
    bad = tmp_path / "x.gguf"
    bad.write_bytes(b"not a gguf file at all")
    with pytest.raises(DataError, match="x.gguf: not a readable GGUF file"):
        read_info(bad)
    with pytest.raises(DataError, match="no such file"):
        read_info(tmp_path / "missing.gguf")
