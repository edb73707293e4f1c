"""`awarl export`: a LoRA checkpoint becomes one merged model with tokenizer and chat template."""

from __future__ import annotations

import torch
from typer.testing import CliRunner

from awarl.cli import app


def test_export_merges_lora_and_keeps_the_chat_template(tiny_model_dir, tmp_path):
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl.chat_template_utils import qwen2_5_chat_template

    torch.manual_seed(0)
    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    peft = get_peft_model(base, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"],
                                           task_type="CAUSAL_LM"))
    with torch.no_grad():  # LoRA's B starts at zero; make the adapter do something
        for name, param in peft.named_parameters():
            if "lora_B" in name:
                param.normal_(0, 0.5)
    ckpt = tmp_path / "checkpoint-7"
    peft.save_pretrained(ckpt)
    AutoTokenizer.from_pretrained(tiny_model_dir).save_pretrained(ckpt)
    ids = torch.tensor([[5, 17, 42, 99, 7]])
    with torch.no_grad():
        expected = peft(input_ids=ids).logits

    result = CliRunner().invoke(app, ["export", str(ckpt), "--out", str(tmp_path / "merged")])
    assert result.exit_code == 0, result.output
    merged = AutoModelForCausalLM.from_pretrained(tmp_path / "merged")
    assert not any("lora" in name for name, _ in merged.named_parameters())
    with torch.no_grad():
        assert torch.allclose(merged(input_ids=ids).logits, expected, atol=1e-4)
    tok = AutoTokenizer.from_pretrained(tmp_path / "merged")
    assert tok.chat_template == qwen2_5_chat_template
    assert tok.convert_tokens_to_ids("<|im_end|>") in merged.generation_config.eos_token_id

    missing = CliRunner().invoke(app, ["export", str(tmp_path / "nope"), "--out", str(tmp_path / "x")])
    assert missing.exit_code == 2 and "not found" in missing.output

    # the adapter names its base relative to where training ran: found above the checkpoint, never downloaded
    import json
    import shutil

    shutil.copytree(tiny_model_dir, tmp_path / "sft" / "final")
    adapter = json.loads((ckpt / "adapter_config.json").read_text())
    (ckpt / "adapter_config.json").write_text(json.dumps({**adapter, "base_model_name_or_path": "sft/final"}))
    result = CliRunner().invoke(app, ["export", str(ckpt), "--out", str(tmp_path / "merged2")])
    assert result.exit_code == 0, result.output
    (ckpt / "adapter_config.json").write_text(json.dumps({**adapter, "base_model_name_or_path": "nowhere/model"}))
    result = CliRunner().invoke(app, ["export", str(ckpt), "--out", str(tmp_path / "merged3")])
    assert result.exit_code == 2 and "base model 'nowhere/model' is neither a model folder here" in result.output


def test_an_unknown_dtype_is_one_error_line(tiny_model_dir, tmp_path):
    from typer.testing import CliRunner

    from awarl.cli import app

    res = CliRunner().invoke(app, ["export", str(tiny_model_dir), "--out", str(tmp_path / "x"), "--dtype", "float64"])
    assert res.exit_code == 2 and "--dtype must be one of auto, float32, bfloat16, float16, got 'float64'" in res.output
    assert not (tmp_path / "x").exists()
