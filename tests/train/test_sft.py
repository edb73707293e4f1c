"""Cold-start SFT: tool results and prompts carry no loss; the model trains and saves with its template."""

from __future__ import annotations

import pytest
import torch

from awarl.train import sft
from awarl.train.config import TrainConfig

from .conftest import TINY_RECIPE


def test_gold_conversations_cite_support_and_abstain(hotpot_prepared):
    records, passages = hotpot_prepared
    data = sft.gold_conversations(records[:10], {p.id: p for p in passages}, topk=3, abstain_share=0.3, seed=1)
    assert len(data.conversations) == 10 and not data.skipped
    for rec, conv in zip(records, data.conversations):
        assert [m["role"] for m in conv[:4]] == ["system", "user", "assistant", "tool"]
        final = conv[-1]["content"]
        shown = " ".join(m["content"] for m in conv if m["role"] == "tool")
        if "not enough information" in final:
            assert not any(f"[{pid}]" in shown for pid in rec.supporting)  # evidence really missing
        else:
            assert final.startswith(f"<answer>{rec.answers[0]}</answer>")
            assert all(f"[{pid}]" in final and f"[{pid}]" in shown for pid in rec.supporting)


def test_sft_masks_tool_results_and_trains(tiny_model_dir, train_files, tmp_path):
    cfg = TrainConfig.from_yaml(TINY_RECIPE, [
        f"sft.init_from={tiny_model_dir}", f"data.records={train_files['records']}",
        f"data.corpus={train_files['corpus']}", "data.limit=8", "logging.report_to=[none]",
        "sft.args.max_steps=2", "sft.args.per_device_train_batch_size=4",
    ])
    trainer = sft.build_trainer(cfg, tmp_path)
    tok = trainer.processing_class
    row = trainer.train_dataset[0]
    ids, labels = row["input_ids"], trainer.data_collator([row])["labels"][0].tolist()
    trained = tok.decode([t for t, lab in zip(ids, labels) if lab != -100])
    masked = tok.decode([t for t, lab in zip(ids, labels) if lab == -100])
    # the tool call and the final answer are trained on ...
    assert "<tool_call>" in trained and "<answer>" in trained and "<|im_end|>" in trained
    # ... the tool results, the question and the system prompt are not
    assert "<tool_response>" in masked and "<tool_response>" not in trained
    assert "Use the search tool" in masked and "Use the search tool" not in trained
    first_result = next(m["content"] for m in row["messages"] if m["role"] == "tool").splitlines()[0]
    assert first_result[:40] in masked and first_result[:40] not in trained

    before = {k: v.clone() for k, v in trainer.model.state_dict().items()}
    trainer.train()
    after = trainer.model.state_dict()
    assert any(not torch.equal(before[k], after[k]) for k in before)
    trainer.save_model(str(tmp_path / "final"))  # what `sft.main` does after training
    from transformers import AutoTokenizer
    from trl.chat_template_utils import qwen2_5_chat_template

    saved = AutoTokenizer.from_pretrained(tmp_path / "final")
    assert saved.chat_template == qwen2_5_chat_template and saved.eos_token == "<|im_end|>"


def test_trajectories_are_rescored_and_filtered(hotpot_prepared, tmp_path):
    from awarl.protocol import format_final, tool_call_message, tool_result_message
    from awarl.data.records import DataError, write_jsonl

    records, _ = hotpot_prepared
    rec = records[0]
    unanswerable = type(rec)(**{**rec.to_dict(), "id": "u1", "answerable": False})

    def traj(record_id, final):  # the runner's Trajectory rows: the completion only
        return {"record_id": record_id, "question": "ignored", "outcome": "stale",
                "messages": [tool_call_message("q"), tool_result_message("T: text [d1]"),
                             {"role": "assistant", "content": final}]}

    rows = [traj(rec.id, format_final(rec.answers[0], ["d1"])),   # correct -> kept
            traj(rec.id, format_final("someone else")),          # wrong -> dropped
            traj(rec.id, format_final("not enough information")),  # abstains on answerable -> dropped
            traj("u1", format_final("not enough information")),    # abstains on unanswerable -> kept
            traj(rec.id, "no answer tags")]                          # unparsable -> dropped
    write_jsonl(tmp_path / "traj.jsonl", rows)
    data = sft.trajectory_conversations(tmp_path / "traj.jsonl", [rec, unanswerable])
    assert len(data.conversations) == 2
    assert data.skipped == {"outcome wrong": 1, "outcome abstain": 1, "outcome unparsable": 1}
    kept = data.conversations[0]
    assert [m["role"] for m in kept] == ["system", "user", "assistant", "tool", "assistant"]
    assert kept[1]["content"] == rec.question  # the prompt is rebuilt from the record, not the row

    write_jsonl(tmp_path / "bad.jsonl", [traj("nope", "x")])
    with pytest.raises(DataError, match="line 1.*record_id"):
        sft.trajectory_conversations(tmp_path / "bad.jsonl", [rec])


def test_train_sft_resume_without_a_checkpoint_is_one_error_and_writes_nothing(tmp_path):
    from typer.testing import CliRunner

    from awarl.cli import app

    res = CliRunner().invoke(app, ["train", "sft", "--config", str(TINY_RECIPE), "--out", str(tmp_path / "sft"),
                                   "--resume", "latest"])
    assert res.exit_code == 2 and "--resume latest: no checkpoint-N folder" in res.output
    assert not (tmp_path / "sft").exists()


def test_an_sft_model_written_elsewhere_is_reported_as_sft(tiny_model_dir, train_files, tmp_path):
    """`awarl train sft --out DIR`: the recipe saved with the model names DIR, so a report of DIR/final says
    "SFT only", not the reward the recipe names for GRPO."""
    from awarl.eval.run import checkpoint_hyperparameters

    cfg = TrainConfig.from_yaml(TINY_RECIPE, [
        f"sft.init_from={tiny_model_dir}", f"data.records={train_files['records']}",
        f"data.corpus={train_files['corpus']}", "data.limit=4", "logging.report_to=[none]",
        "sft.args.max_steps=1", "sft.args.per_device_train_batch_size=2", "sft.args.save_strategy=no",
    ])
    final = sft.main(cfg, output_dir=str(tmp_path / "mysft"))
    saved = checkpoint_hyperparameters(str(final))
    assert saved["stage"] == "sft" and "reward/kind" not in saved
    assert cfg.sft.output_dir != str(tmp_path / "mysft")  # the caller's recipe is left as it was
