"""The progress logs a training run appends to (metrics per step, the probe's rounds) read back
through one reader: a resumed run's rows win, a row torn by a kill is left out."""

from __future__ import annotations

from types import SimpleNamespace

from awarl.data.records import append_log_row
from awarl.train.callbacks import MetricsLog, read_metrics_log
from awarl.train.probe import read_probe_log


def test_metrics_rows_merge_per_step_and_a_resumed_run_wins(tmp_path):
    path = tmp_path / "run" / "metrics_log.jsonl"
    log = MetricsLog(path)
    state = SimpleNamespace(is_world_process_zero=True, global_step=1, max_steps=2)
    log.on_log(None, state, None, logs={"loss": 1.0})
    log.on_log(None, state, None, logs={"awa/refusal_rate": 0.5, "nan": float("nan")})
    state.global_step = 2
    log.on_log(None, state, None, logs={"loss": 0.9})
    with path.open("a") as f:
        f.write('{"step": 2, "loss": 0.')  # killed mid-write; the resumed run logs step 2 again
    log.on_log(None, state, None, logs={"loss": 0.8})
    log.on_log(None, state, None, logs={"train_runtime": 3.0})
    assert read_metrics_log(path) == [{"step": 1, "loss": 1.0, "awa/refusal_rate": 0.5}, {"step": 2, "loss": 0.8}]
    assert read_metrics_log(tmp_path / "absent.jsonl") == []


def test_probe_rounds_the_last_row_of_a_round_wins(tmp_path):
    path = tmp_path / "adaptive_p.jsonl"
    for row in ({"round": 2, "step": 4}, {"round": 1, "step": 2}, {"round": 2, "step": 5}):
        append_log_row(path, row)
    assert read_probe_log(path) == [{"round": 1, "step": 2}, {"round": 2, "step": 5}]


def test_the_penalty_state_is_in_a_checkpoint_before_the_trainer_writes_it(tmp_path):
    """A step that decides to save writes the penalty state first, so a run killed while the Trainer writes its
    checkpoint (after trainer_state.json, before on_save) never leaves one that cannot be resumed."""
    from awarl.rewards.penalty import DynamicPenalty
    from awarl.train.callbacks import PENALTY_STATE_FILE, PenaltyStateCallback, load_penalty_state

    penalty = DynamicPenalty()
    penalty.update(0.9, 0.3)
    callback = PenaltyStateCallback(penalty)
    args, state = SimpleNamespace(output_dir=str(tmp_path)), SimpleNamespace(is_world_process_zero=True, global_step=4)
    callback.on_step_end(args, state, SimpleNamespace(should_save=False))
    assert not (tmp_path / "checkpoint-4").exists()  # a step that does not save writes nothing
    callback.on_step_end(args, state, SimpleNamespace(should_save=True))
    assert (tmp_path / "checkpoint-4" / PENALTY_STATE_FILE).exists()
    restored = DynamicPenalty()
    assert load_penalty_state(restored, tmp_path / "checkpoint-4")["global_step"] == 4
    assert restored.state_dict() == penalty.state_dict() and restored.state_dict() != DynamicPenalty().state_dict()
