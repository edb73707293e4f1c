"""Courage sweep: one GRPO run per γ, then the evaluation report over their outputs.

Locally the runs go one after another in this process. On a cluster, `sweep_commands` prints
one ``accelerate launch`` command per γ (submit them as separate jobs); each writes to
``<output_dir>/gamma_<γ>``.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from awarl.train.config import ConfigError, TrainConfig


@dataclass(frozen=True)
class SweepRun:
    """One point of the sweep."""

    gamma: float
    output_dir: Path
    overrides: tuple[str, ...]


def plan(config_path: str | Path, gammas: Sequence[float], overrides: Sequence[str] = (),
         output_dir: str | None = None) -> list[SweepRun]:
    """The runs of a sweep; every γ is validated by building its config."""
    if not gammas:
        raise ConfigError("give at least one --gamma value")
    if len(set(gammas)) != len(gammas):
        raise ConfigError(f"--gamma values repeat: {list(gammas)}")
    base = TrainConfig.from_yaml(config_path, list(overrides))
    root = Path(output_dir or base.output_dir)
    runs = []
    for gamma in gammas:
        out = root / f"gamma_{gamma:g}"
        extra = (*overrides, f"reward.gamma={gamma}", f"output_dir={out}")
        TrainConfig.from_yaml(config_path, list(extra))  # raises on a bad γ before anything runs
        runs.append(SweepRun(gamma, out, tuple(extra)))
    return runs


def sweep_commands(config_path: str | Path, runs: Sequence[SweepRun], accelerate_config: str) -> list[str]:
    """One ``accelerate launch`` command per run, for a cluster scheduler."""
    cmds = []
    for run in runs:
        sets = " ".join(f"--set {shlex.quote(o)}" for o in run.overrides)
        cmds.append(f"accelerate launch --config_file {shlex.quote(accelerate_config)} -m awarl.cli train grpo "
                    f"--config {shlex.quote(str(config_path))} {sets}")
    return cmds


def report_command(runs: Sequence[SweepRun]) -> str:
    """The `awarl eval report` call over the sweep's final models' evaluation outputs."""
    inputs = " ".join(shlex.quote(str(r.output_dir / "eval")) for r in runs)
    labels = " ".join(f"--label gamma={r.gamma:g}" for r in runs)
    return f"awarl eval report {inputs} {labels}"


def run_sweep(config_path: str | Path, runs: Sequence[SweepRun],
              on_log: Callable[[str], None] | None = None) -> list[Path]:
    """Train every run in turn (this process); returns the final model folders."""
    from awarl.train import grpo

    finals = []
    for run in runs:
        if on_log:
            on_log(f"[sweep] gamma={run.gamma:g} -> {run.output_dir}")
        config = TrainConfig.from_yaml(config_path, list(run.overrides))
        finals.append(grpo.main(config, on_log=on_log))
    return finals
