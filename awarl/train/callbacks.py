"""Trainer callbacks: penalty state in every checkpoint, a summary line per log, logging backends.

The callbacks follow transformers' ``TrainerCallback`` protocol without importing it at module
level (that would import torch): `Callback` answers every ``on_*`` event with a no-op, and the
subclasses override the events they need.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from awarl.data.records import append_log_row, read_log_rows
from awarl.train.config import LoggingConfig

PENALTY_STATE_FILE = "awa_penalty_state.json"
"""File in each ``checkpoint-N`` folder that holds the dynamic-penalty state (Ē, P, step …)."""


class Stateful(Protocol):
    """What the reward module's dynamic penalty offers for checkpointing."""

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...


class Callback:
    """A ``transformers.TrainerCallback`` look-alike: every event is a no-op unless overridden."""

    def __getattr__(self, name: str) -> Callable[..., None]:
        if name.startswith("on_"):
            return _noop
        raise AttributeError(name)


def _noop(*args: Any, **kwargs: Any) -> None:
    return None


# -- penalty state -------------------------------------------------------------------------------------------
class PenaltyStateCallback(Callback):
    """Write the dynamic-penalty state into every checkpoint folder (main process only: the
    state is computed from the global batch, so every process holds the same one).

    It is written when the step decides to save, before the Trainer writes the checkpoint (and again on
    save): a run killed while it saves leaves no checkpoint with a ``trainer_state.json`` but no penalty
    state, which no rerun could resume from once the older checkpoints are rotated away."""

    def __init__(self, penalty: Stateful):
        self.penalty = penalty

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if control.should_save:
            self.on_save(args, state, control)

    def on_epoch_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if control.should_save:
            self.on_save(args, state, control)

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if not state.is_world_process_zero:
            return
        folder = Path(args.output_dir) / f"checkpoint-{state.global_step}"
        save_penalty_state(self.penalty, folder, state.global_step)


def save_penalty_state(penalty: Stateful, folder: str | Path, global_step: int) -> Path:
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / PENALTY_STATE_FILE
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"global_step": global_step, "penalty": penalty.state_dict()}, indent=2))
    tmp.replace(path)
    return path


def load_penalty_state(penalty: Stateful, checkpoint: str | Path) -> dict[str, Any]:
    """Restore the penalty from ``checkpoint``; a checkpoint without the file is an error, since
    resuming with a fresh penalty would silently change the reward."""
    path = Path(checkpoint) / PENALTY_STATE_FILE
    if not path.exists():
        raise FileNotFoundError(f"{path}: no penalty state in this checkpoint; it was not written by `awarl train "
                                f"grpo`, or the run used a different reward. Start without --resume.")
    saved = json.loads(path.read_text())
    penalty.load_state_dict(saved["penalty"])
    return saved


class CollapseWarningCallback(Callback):
    """Hand the reward's collapse warnings (`AnswerAbstainReward.collapse_message` for a refusal collapse,
    ``format_message`` for a format collapse, both computed from the global batch) to ``printer`` — the display
    of a run whose terminal is quiet, like the demo's — when one starts and again every ``collapse_warn_batches``
    batches while it lasts. Without a printer the reward's own ``logging`` warning is what the console shows."""

    WATCHES = (("collapse_message", "collapse_streak"), ("format_message", "format_streak"))

    def __init__(self, reward: Any, printer: Callable[[str], None] | None = None):
        self.reward = reward
        self.printer = printer
        self._shown: dict[str, int | None] = {message: None for message, _ in self.WATCHES}

    def on_log(self, args: Any, state: Any, control: Any, logs: dict | None = None, **kwargs: Any) -> None:
        if self.printer is None or not state.is_world_process_zero:
            return
        for key, streak_key in self.WATCHES:
            message, streak = getattr(self.reward, key, None), getattr(self.reward, streak_key, 0)
            if message is None:
                continue
            shown = self._shown[key]
            if shown is not None and streak < shown:  # a new collapse after a recovery
                shown = None
            if shown is not None and streak - shown < self.reward.cfg.collapse_warn_batches:
                continue
            self._shown[key] = streak
            self.printer(f"[grpo] {message}")


# -- summary line --------------------------------------------------------------------------------------------
SUMMARY_KEYS: tuple[tuple[str, str, str], ...] = (
    # (metric key, label, format)
    ("loss", "loss", "{:.4f}"),
    ("reward", "reward", "{:.3f}"),
    ("awa/refusal_rate", "refuse", "{:.2f}"),
    ("awa/expected_refusal_rate", "exp", "{:.2f}"),
    ("awa/E", "E", "{:+.3f}"),
    ("awa/E_ema", "Ē", "{:+.3f}"),
    ("awa/penalty", "P", "{:+.2f}"),
    ("awa/accuracy", "acc", "{:.2f}"),
    ("awa/precision", "prec", "{:.2f}"),
    ("awa/ra_f1", "RA-F1", "{:.2f}"),
    ("awa/all_abstain_groups", "all-abst", "{:.2f}"),
    ("awa/unparsable", "unpars", "{:.2f}"),
    ("awa/zero_advantage_groups", "zero-adv", "{:.2f}"),
    ("awa/three_outcome_groups", "3-out", "{:.2f}"),
    ("env/searches_per_rollout", "search", "{:.1f}"),
    ("tools/call_frequency", "calls", "{:.2f}"),
)


def summary_line(logs: dict[str, Any], step: int, max_steps: int, seconds_per_step: float | None) -> str:
    """One line for a logging step; metrics absent from ``logs`` are left out.

    >>> summary_line({"loss": 0.5, "awa/penalty": 0.1}, 3, 10, 2.0)
    'step 3/10 | loss 0.5000 | P +0.10 | 2.00 s/step'
    """
    parts = [f"step {step}/{max_steps}"]
    for key, label, fmt in SUMMARY_KEYS:
        value = logs.get(key)
        if isinstance(value, (int, float)) and not (isinstance(value, float) and math.isnan(value)):
            parts.append(f"{label} {fmt.format(value)}")
    if seconds_per_step is not None:
        parts.append(f"{seconds_per_step:.2f} s/step")
    return " | ".join(parts)


class SummaryCallback(Callback):
    """Print `summary_line` on every log event of the main process (rich markup when available)."""

    def __init__(self, prefix: str = "grpo", printer: Callable[[str], None] | None = None):
        self.prefix = prefix
        self.printer = printer
        self._last: tuple[float, int] | None = None

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._last = (time.perf_counter(), state.global_step)

    def on_log(self, args: Any, state: Any, control: Any, logs: dict | None = None, **kwargs: Any) -> None:
        if not state.is_world_process_zero or not logs or "train_runtime" in logs:
            return
        now = time.perf_counter()
        per_step = None
        if self._last is not None and state.global_step > self._last[1]:
            per_step = (now - self._last[0]) / (state.global_step - self._last[1])
        self._last = (now, state.global_step)
        line = f"[{self.prefix}] " + summary_line(logs, state.global_step, state.max_steps, per_step)
        if self.printer is not None:
            self.printer(line)
        else:
            from rich.console import Console

            Console(highlight=False, soft_wrap=True).print(line, markup=False)


class StepTimer(Callback):
    """Wall time of each optimizer step (benchmarks)."""

    def __init__(self) -> None:
        self.times: list[float] = []
        self._t0 = 0.0

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._t0 = time.perf_counter()

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.times.append(time.perf_counter() - self._t0)


# -- logging backends ----------------------------------------------------------------------------------------
def report_to(cfg: LoggingConfig) -> list[str]:
    """Trainer integrations: the recipe's list, else tensorboard plus wandb when installed."""
    if cfg.report_to is not None:
        return list(cfg.report_to)
    backends = ["tensorboard"] if importlib.util.find_spec("tensorboard") else []
    if importlib.util.find_spec("wandb") and cfg.wandb_mode != "disabled":
        backends.append("wandb")
    return backends or ["none"]


def configure_logging(cfg: LoggingConfig, output_dir: str | Path) -> None:
    """Environment for the backends: wandb offline by default (works without network), runs
    stored next to the checkpoints. Variables the user already set win."""
    os.environ.setdefault("WANDB_MODE", cfg.wandb_mode)
    os.environ.setdefault("WANDB_PROJECT", cfg.wandb_project)
    os.environ.setdefault("WANDB_DIR", str(Path(output_dir)))
    Path(output_dir).mkdir(parents=True, exist_ok=True)


# -- hyperparameters -----------------------------------------------------------------------------------------
class HyperparameterCallback(Callback):
    """Log the recipe's hyperparameters (γ, p_clip, β, τ, δ, rollout settings …) once at the start: as
    tensorboard hparams and text in the run's logging folder, and into ``wandb.config`` when a wandb
    run is active, so runs are comparable by their settings and not only by their folder names."""

    def __init__(self, hparams: dict[str, Any]):
        self.hparams = dict(hparams)

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if not state.is_world_process_zero:
            return
        report = list(getattr(args, "report_to", None) or [])
        if "tensorboard" in report:
            from torch.utils.tensorboard import SummaryWriter

            # transformers 5.x dropped TrainingArguments.logging_dir in some versions; its tensorboard
            # callback then writes under <output_dir>/runs, so the hparams go there too.
            log_dir = getattr(args, "logging_dir", None) or str(Path(args.output_dir) / "runs")
            writer = SummaryWriter(log_dir=log_dir)
            try:
                writer.add_hparams(self.hparams, {"hparams/logged": 1.0}, run_name=".")
                writer.add_text("awarl/hyperparameters",
                                "\n".join(f"    {k}: {v}" for k, v in sorted(self.hparams.items())))
            finally:
                writer.close()
        if "wandb" in report:
            import wandb

            if wandb.run is not None:
                wandb.config.update(self.hparams, allow_val_change=True)


# -- a clean terminal ----------------------------------------------------------------------------------------
class MetricsLog(Callback):
    """Append every log dict of the main process to a JSONL file (the demo's plots read it) and
    hand it to ``on_log`` (a progress display). A resumed run appends again; readers keep the last
    row of each step (`read_metrics_log`)."""

    def __init__(self, path: str | Path, on_log: Callable[[int, int, dict[str, Any]], None] | None = None):
        self.path = Path(path)
        self.on_log_fn = on_log

    def on_log(self, args: Any, state: Any, control: Any, logs: dict | None = None, **kwargs: Any) -> None:
        if not state.is_world_process_zero or not logs:
            return
        row = {"step": state.global_step, **{k: v for k, v in logs.items() if _jsonable(v)}}
        append_log_row(self.path, row)
        if self.on_log_fn is not None:
            self.on_log_fn(state.global_step, state.max_steps, row)


def _jsonable(value: Any) -> bool:
    return isinstance(value, (str, int, bool)) or (isinstance(value, float) and math.isfinite(value))


def read_metrics_log(path: str | Path) -> list[dict[str, Any]]:
    """Rows of a `MetricsLog` file, one per step (the last one written wins), in step order;
    the end-of-training summary row (``train_runtime``) is left out."""
    by_step: dict[int, dict[str, Any]] = {}
    for row in read_log_rows(path):
        if "train_runtime" not in row:
            by_step.setdefault(row["step"], {}).update(row)
    return [by_step[s] for s in sorted(by_step)]


class quiet_terminal:
    """Send everything written to file descriptors 1 and 2 (TRL's per-step dicts, transformers'
    warnings and progress bars, C-level output) to ``log_path``, and hand back a file object on the
    real terminal for the one display the user watches.

    File-descriptor level on purpose: loggers created at import time hold the old ``sys.stderr``
    object, so swapping ``sys.stdout`` alone would let their lines through.
    """

    def __init__(self, log_path: str | Path):
        self.log_path = Path(log_path)

    def __enter__(self) -> Any:
        import sys

        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        sys.stdout.flush()
        sys.stderr.flush()
        self._saved = (os.dup(1), os.dup(2))
        self._log = self.log_path.open("a", encoding="utf-8", buffering=1)  # line-buffered: `tail -f` shows progress
        os.dup2(self._log.fileno(), 1)
        os.dup2(self._log.fileno(), 2)
        self.terminal = os.fdopen(os.dup(self._saved[1]), "w", buffering=1, encoding="utf-8")
        # Also the Python-level streams, for hosts where they are not fds 1/2 (notebooks, test capture).
        self._streams = (sys.stdout, sys.stderr)
        sys.stdout = sys.stderr = self._log
        return self.terminal

    def __exit__(self, *exc: object) -> None:
        import sys

        sys.stdout.flush()
        sys.stderr.flush()
        sys.stdout, sys.stderr = self._streams
        os.dup2(self._saved[0], 1)
        os.dup2(self._saved[1], 2)
        for fd in self._saved:
            os.close(fd)
        self._log.close()
        self.terminal.close()
