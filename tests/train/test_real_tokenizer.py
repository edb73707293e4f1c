"""The protocol with a real pretrained model's tokenizer: SmolLM2-135M-Instruct's (tests/fixtures/smollm2_tokenizer).

SmolLM2's own template renders only role and content, so the search tool vanishes; the recipe's
``rollout.chat_template: qwen2_5`` gives it TRL's Qwen2.5 tool template, with SmolLM2's own
``<|im_start|>``/``<|im_end|>`` turn tokens. On a randomly initialised Llama with that tokenizer
(~0.8 M parameters, nearly all of them the 49,152-row embedding): SFT masks tool results out of the
loss, and a real GRPO step passes `awarl.train.rollout_checks` on every rollout (trained ids ==
sampled ids + tool suffixes, mask as long as the completion, the per-rollout budget) and logs
``env/truncated``. A random model never calls the tool, so generation gets a sequence bias towards
one tool call at the start of every assistant turn: the tool loop then runs for real, two rounds,
and ends with a call the turn budget leaves unanswered.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from awarl.agent.chat_template import renders_tools, use_chat_template  # noqa: E402
from awarl.config_fields import ConfigError  # noqa: E402
from awarl.train.rollout_checks import RolloutCheckError, check_batch  # noqa: E402

from .conftest import ROOT, TINY_RECIPE, tiny_overrides  # noqa: E402

SMOLLM2_TOKENIZER = ROOT / "tests" / "fixtures" / "smollm2_tokenizer"
TOOL_CALL = '<tool_call>\n{"name": "search", "arguments": {"query": "Ruvia capital"}}\n</tool_call>'


def _tokenizer():
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(SMOLLM2_TOKENIZER)


@pytest.fixture(scope="module")
def smollm2_random(tmp_path_factory) -> Path:
    """A 1-layer Llama with SmolLM2's config tokens and tokenizer (its own chat template kept)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    tok = _tokenizer()
    config = LlamaConfig(vocab_size=len(tok), hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=2048,
                         tie_word_embeddings=True, bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                         pad_token_id=tok.pad_token_id)
    torch.manual_seed(0)
    out = tmp_path_factory.mktemp("smollm2_random")
    LlamaForCausalLM(config).save_pretrained(out)
    tok.save_pretrained(out)
    return out


def test_own_template_has_no_tools_and_the_tool_template_needs_turn_tokens():
    tok = _tokenizer()
    assert not renders_tools(tok)
    with pytest.raises(ConfigError, match="does not render tool calls.*rollout.chat_template: qwen2_5"):
        use_chat_template(tok, "model", "SmolLM2")
    use_chat_template(tok, "qwen2_5", "SmolLM2")
    assert renders_tools(tok)
    from trl.chat_template_utils import qwen2_5_chat_template

    assert tok.chat_template == qwen2_5_chat_template  # byte-identical: TRL's tool loop recognises it
    gpt2_like = _tokenizer()
    gpt2_like.eos_token = "<|endoftext|>"
    with pytest.raises(ConfigError, match="eos token is '<\\|endoftext\\|>'"):
        use_chat_template(gpt2_like, "qwen2_5", "m")


def test_tool_call_round_trip_with_the_real_bpe():
    """What the model writes parses back into the call; the tool suffix is what TRL splices."""
    from trl.chat_template_utils import parse_response

    from awarl.agent.env import tool_schema
    from awarl.agent.runner import ChatTemplate
    from awarl.protocol import build_messages

    tok = use_chat_template(_tokenizer(), "qwen2_5")
    template = ChatTemplate(tok)
    prompt = tok.apply_chat_template(build_messages("Capital of Ruvia?"), tools=[tool_schema()],
                                     add_generation_prompt=True, tokenize=True, return_dict=False)
    call = tok.encode(TOOL_CALL, add_special_tokens=False) + [tok.eos_token_id]
    parsed = parse_response(tok, call, prefix=prompt, tools=[])
    assert parsed["tool_calls"][0]["function"] == {"name": "search", "arguments": {"query": "Ruvia capital"}}
    suffix = template.tool_suffix_ids([{"role": "tool", "name": "search", "content": "Ruvia: capital Vel. [d1]"}])
    assert tok.decode(suffix) == ("\n<|im_start|>user\n<tool_response>\nRuvia: capital Vel. [d1]\n</tool_response>"
                                  "<|im_end|>\n<|im_start|>assistant\n")


def _batch(tok):
    """One rollout of two turns around a search, as TRL's tool loop assembles it."""
    from awarl.agent.runner import ChatTemplate

    template = ChatTemplate(use_chat_template(tok, "qwen2_5"))
    tool = [{"role": "tool", "name": "search", "content": "Ruvia: capital Vel. [d1]"}]
    turn0 = tok.encode(TOOL_CALL, add_special_tokens=False) + [tok.eos_token_id]
    turn1 = tok.encode("<answer>Vel</answer> [d1]", add_special_tokens=False) + [tok.eos_token_id]
    suffix = template.tool_suffix_ids(tool)
    completion = turn0 + suffix + turn1
    mask = [1] * len(turn0) + [0] * len(suffix) + [1] * len(turn1)
    messages = [{"role": "assistant", "tool_calls": [{}], "content": ""}, *tool, {"role": "assistant", "content": "x"}]
    kw = {"tool_suffix": template.tool_suffix_ids, "stop_ids": [tok.eos_token_id], "decode": tok.decode}
    return completion, mask, messages, [[turn0], [turn1]], kw


def test_check_batch_accepts_a_faithful_rollout_and_names_each_corruption():
    tok = _tokenizer()
    completion, mask, messages, sampled, kw = _batch(tok)
    assert check_batch([completion], [mask], [messages], sampled, budget=len(completion), **kw) == [False]

    with pytest.raises(RolloutCheckError, match="rollout 0: tool_mask has .* entries for .* completion tokens"):
        check_batch([completion], [mask[:-1]], [messages], sampled, budget=512, **kw)
    with pytest.raises(RolloutCheckError, match="over the per-rollout budget max_completion_tokens=20"):
        check_batch([completion], [mask], [messages], sampled, budget=20, **kw)
    resampled = [sampled[0], [tok.encode("<answer>Vel </answer>", add_special_tokens=False) + [tok.eos_token_id]]]
    with pytest.raises(RolloutCheckError, match="turn 1: the trained tokens differ from the sampled ones"):
        check_batch([completion], [mask], [messages], resampled, budget=512, **kw)
    shifted = mask[:]
    first_tool = shifted.index(0)
    shifted[first_tool - 1] = 0  # the tool call's last token (<|im_end|>) masked as if it were the tool's
    with pytest.raises(RolloutCheckError, match="tool round 1: the masked tokens"):
        check_batch([completion], [shifted], [messages], sampled, budget=512, **kw)


def test_unaligned_generate_calls_skip_only_the_sampled_id_check(caplog):
    tok = _tokenizer()
    completion, mask, messages, sampled, kw = _batch(tok)
    with caplog.at_level("WARNING", logger="awarl.train.rollout_checks"):
        assert check_batch([completion], [mask], [messages], [sampled[0] * 2], budget=512, **kw) == [False]
    assert "the check that trained ids are the sampled ids is skipped" in caplog.text
    with pytest.raises(RolloutCheckError, match="tool_mask has"):  # the other checks still run
        check_batch([completion], [mask[1:]], [messages], [], budget=512, **kw)


def test_check_batch_flags_truncated_rollouts():
    tok = _tokenizer()
    completion, mask, messages, sampled, kw = _batch(tok)
    cut = len(completion) - 3  # the answer cut by the budget: a prefix of what was sampled, no EOS
    assert check_batch([completion[:cut]], [mask[:cut]], [messages], sampled, budget=cut, **kw) == [True]
    with pytest.raises(RolloutCheckError, match="turn 1"):  # a cut where the budget was not used up is no budget cut
        check_batch([completion[:cut]], [mask[:cut]], [messages], sampled, budget=cut + 1, **kw)
    pending = messages[:2] + [{"role": "assistant", "content": "", "tool_calls": [{"type": "function"}]}]
    assert check_batch([completion], [mask], [pending], sampled, budget=512, **kw) == [True]  # call left unanswered


def _recipe(model_dir: Path, files: dict, out: Path, *extra: str):
    from awarl.train.config import TrainConfig

    overrides = tiny_overrides(model_dir, files, out, max_steps=1, save_strategy="no", per_device_train_batch_size=4,
                               num_generations=4)
    return TrainConfig.from_yaml(TINY_RECIPE, [*overrides, "rollout.chat_template=qwen2_5", "data.limit=1",
                                               "rollout.max_completion_tokens=384", *extra])


def test_sft_masks_tool_results_with_the_real_tokenizer(smollm2_random, world_train_files, tmp_path):
    from awarl.train import sft

    cfg = _recipe(smollm2_random, world_train_files, tmp_path / "run", f"sft.init_from={smollm2_random}",
                  "sft.source=gold")
    trainer = sft.build_trainer(cfg, tmp_path / "sft")
    row = trainer.train_dataset[0]
    tok = trainer.processing_class
    trained = tok.decode([t for t, label in zip(row["input_ids"], row["labels"]) if label != -100])
    untrained = tok.decode([t for t, label in zip(row["input_ids"], row["labels"]) if label == -100])
    assert "<tool_call>" in trained and "<answer>" in trained and trained.count("<|im_end|>") >= 2
    assert "<tool_response>" in untrained and "<tool_response>" not in trained and "# Tools" not in trained


@pytest.mark.slow
def test_grpo_step_checks_every_rollout_with_the_real_tokenizer(smollm2_random, world_train_files, tmp_path):
    from awarl.train import grpo

    tok = _tokenizer()
    start = tok.encode("<|im_start|>assistant\n", add_special_tokens=False)
    call = tok.encode(TOOL_CALL, add_special_tokens=False) + [tok.eos_token_id]
    bias = [[start + call[: k + 1], 100.0] for k in range(len(call))]
    cfg = _recipe(smollm2_random, world_train_files, tmp_path / "run")
    cfg.grpo["generation_kwargs"] = {"sequence_bias": bias}
    trainer, _ = grpo.build_trainer(cfg, str(tmp_path / "run"))
    seen = []
    check = trainer._generate

    def spy(prompts):
        out = check(prompts)
        seen.append(out)
        return out

    trainer._generate = spy
    trainer.train()
    logs = trainer.state.log_history[0]
    assert logs["tools/call_frequency"] == 2.0  # two executed rounds per rollout
    assert logs["env/truncated"] == 1.0  # the third call hits max_searches=2 and stays unanswered
    _, completion_ids, tool_mask, completions = seen[0][:4]
    assert len(completion_ids) == 4 and all(len(m) == len(c) for m, c in zip(tool_mask, completion_ids))
    assert all(0 in m and c[-1] == tok.eos_token_id for m, c in zip(tool_mask, completion_ids))
    assert all(sum(1 for msg in conv if msg["role"] == "tool") == 2 for conv in completions)
    assert json.loads(json.dumps(logs))  # plain numbers


RECIPE = ROOT / "configs" / "smollm2_world.yaml"


def _awarl(*args: str, cwd: Path) -> str:
    done = subprocess.run([sys.executable, "-m", "awarl.cli", *args], cwd=cwd, capture_output=True, text=True,
                          env={**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")})
    assert done.returncode == 0, f"awarl {' '.join(args)} failed:\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}"
    return done.stdout


@pytest.mark.slow
def test_smollm2_recipe_end_to_end(smollm2_dir, tmp_path, monkeypatch):
    """configs/smollm2_world.yaml's own commands, shortened to what proves each stage runs on the real model: world
    data (the recipe's script), 1 LoRA SFT step on one conversation, p_i (K = 2) on 2 questions, 1 LoRA GRPO step on
    one group of 2 rollouts of at most 128 tokens with every rollout checked, a greedy evaluation on 2 questions.
    (The 135 M model's forward and backward passes are most of this test's time: the full recipe's sizes are timed
    in docs/training.md, not here.)"""
    from awarl.data.records import iter_jsonl, write_jsonl

    (tmp_path / "configs").mkdir()
    text = RECIPE.read_text()
    assert "max_completion_tokens: 384" in text
    (tmp_path / "configs" / RECIPE.name).write_text(text.replace("max_completion_tokens: 384", "max_completion_tokens: 128"))
    (tmp_path / "runs" / "smollm2").mkdir(parents=True)
    (tmp_path / "runs" / "smollm2" / "base").symlink_to(smollm2_dir.resolve())
    monkeypatch.chdir(tmp_path)  # the recipe's paths are relative
    from awarl.train.config import header_script

    exec(header_script(RECIPE), {"__name__": "recipe"})  # noqa: S102
    world = tmp_path / "runs" / "smollm2" / "world"
    assert (world / "sft_conversations.jsonl").exists()
    for split in ("rl", "eval"):
        write_jsonl(world / f"{split}_small.jsonl", [row for _, row in iter_jsonl(world / f"{split}_records.jsonl")][:2])
    quiet = ["--set", "logging.report_to=[none]"]
    cfg = ["--config", "configs/smollm2_world.yaml"]
    _awarl("train", "sft", *cfg, "--set", "data.records=runs/smollm2/world/sft_records.jsonl",
           "--set", "sft.args.max_steps=1", "--set", "sft.args.per_device_train_batch_size=1",
           "--set", "sft.args.gradient_accumulation_steps=1", *quiet, cwd=tmp_path)
    corpus = ["--corpus", "runs/smollm2/world/corpus.jsonl"]
    _awarl("capability", "estimate", *cfg, "--model", "runs/smollm2/sft/final", "--data",
           "runs/smollm2/world/rl_small.jsonl", *corpus, "--k", "2", "--out", "runs/smollm2/capability.jsonl",
           "--no-progress", cwd=tmp_path)
    _awarl("train", "grpo", *cfg, "--set", "data.records=runs/smollm2/world/rl_small.jsonl", "--set",
           "grpo.max_steps=1", "--set", "grpo.num_generations=2", "--set", "grpo.per_device_train_batch_size=2",
           "--set", "grpo.gradient_accumulation_steps=1", "--set", "grpo.steps_per_generation=1",
           "--set", "grpo.save_strategy=no",
           *quiet, cwd=tmp_path)
    _awarl("eval", "run", *cfg, "--model", "runs/smollm2/grpo/final", "--data", "runs/smollm2/world/eval_small.jsonl",
           *corpus, "--out", "runs/smollm2/eval/grpo", "--no-progress", cwd=tmp_path)
    final = tmp_path / "runs" / "smollm2" / "grpo" / "final"
    assert json.loads((final / "rollout.json").read_text())["chat_template"] == "qwen2_5"
    from trl.chat_template_utils import qwen2_5_chat_template

    assert (final / "chat_template.jinja").read_text() == qwen2_5_chat_template
    assert list((tmp_path / "runs" / "smollm2" / "eval" / "grpo").iterdir())
