"""Courage sweep: one GRPO run per γ, then the evaluation report over their outputs.

Locally the runs go one after another in this process; with evaluation data each final model is
evaluated (`awarl.eval.run`) into ``<run>/eval`` and `awarl.eval.report.build_report` compares
them in ``<root>/report``. On a cluster, `sweep_commands` prints one ``accelerate launch``
command per γ (submit them as separate jobs) and the evaluation and report commands to run
after them. Run i writes to ``<output_dir>/gamma_<γ>``.
"""

from __future__ import annotations

import json
import shlex
import sys
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
    # Every γ starts from the same checkpoint (the base recipe's SFT output), whatever its own output_dir.
    shared = (f"sft.output_dir={base.sft_final().parent}",) if base.sft.enabled else ()
    runs = []
    for gamma in gammas:
        out = root / f"gamma_{gamma:g}"
        extra = (*overrides, *shared, f"reward.gamma={gamma}", f"output_dir={out}")
        TrainConfig.from_yaml(config_path, list(extra))  # raises on a bad γ before anything runs
        runs.append(SweepRun(gamma, out, tuple(extra)))
    return runs


def _require_same_recipe(final: Path, config: TrainConfig) -> None:
    """Refuse a finished run whose saved recipe is not ``config``: reusing it (or its evaluation) would report
    another model under this sweep's settings."""
    from awarl.agent.settings import RECIPE_FILE
    from awarl.train.grpo import recipe_changes

    if not (final / RECIPE_FILE).is_file():
        raise ConfigError(f"{final.parent} holds a finished run with no saved recipe; sweep into another --out, or "
                          "delete it to train again")
    changed = recipe_changes(final / RECIPE_FILE, config)
    if changed:
        sections = sorted({c.split(".")[0].split(":")[0] for c in changed})
        raise ConfigError(f"{final.parent} holds a finished run trained with another recipe (sections differing: "
                          f"{', '.join(sections)}): {'; '.join(changed[:3])}; sweep into another --out, or delete "
                          "it to train again")


def sweep_commands(config_path: str | Path, runs: Sequence[SweepRun], accelerate_config: str) -> list[str]:
    """One ``accelerate launch`` command per run, for a cluster scheduler."""
    cmds = []
    for run in runs:
        sets = " ".join(f"--set {shlex.quote(o)}" for o in run.overrides)
        cmds.append(f"accelerate launch --config_file {shlex.quote(accelerate_config)} -m awarl.cli train grpo "
                    f"--config {shlex.quote(str(config_path))} {sets}")
    return cmds


def eval_commands(runs: Sequence[SweepRun], eval_data: str | Path, config: TrainConfig) -> list[str]:
    """`awarl eval run` per final model (under the rollout settings saved with it), then `awarl eval
    report` over all of them."""
    data = config.data
    search = (f"--retriever-url {shlex.quote(data.retriever_url)}" if data.retriever_url else
              f"--index {shlex.quote(data.index)}" if data.index else
              f"--corpus {shlex.quote(data.corpus)}" if data.corpus else "")
    cmds = [f"awarl eval run --model {shlex.quote(str(r.output_dir / 'final'))} --data {shlex.quote(str(eval_data))} "
            f"--out {shlex.quote(str(r.output_dir / 'eval'))} --name gamma={r.gamma:g} {search} "
            f"--config {shlex.quote(str(r.output_dir / 'final'))}".rstrip()
            for r in runs]
    root = runs[0].output_dir.parent if runs else Path(".")
    cmds.append("awarl eval report " + " ".join(shlex.quote(str(r.output_dir / "eval")) for r in runs)
                + f" --out {shlex.quote(str(root / 'report'))}")
    return cmds


def run_sweep(config_path: str | Path, runs: Sequence[SweepRun], *, eval_data: str | Path | None = None,
              eval_limit: int | None = None, on_log: Callable[[str], None] | None = None) -> list[Path]:
    """Train every run in turn (this process); with ``eval_data``, evaluate each final model and
    write the comparison report. Returns the final model folders (and the report folder last).

    Rerunning resumes: a run whose final model was trained under the same recipe is reused (its evaluation
    then resumes too), one stopped at a checkpoint continues from it, and a run folder trained under another
    recipe is refused, naming what changed, since its evaluation would describe the other model."""
    from awarl.train import grpo

    if eval_data is not None:  # a wrong file fails now, not after every γ has trained
        from awarl.data.records import load_records

        load_records(Path(eval_data))
    finals = []
    for run in runs:
        config = TrainConfig.from_yaml(config_path, list(run.overrides))
        final = Path(config.output_dir) / "final"
        if (final / "config.json").exists():
            _require_same_recipe(final, config)
            if on_log:
                on_log(f"[sweep] gamma={run.gamma:g}: finished in {run.output_dir}, reused")
            finals.append(final)
            continue
        resume = "latest" if grpo.started_run(config.output_dir) else None
        if on_log:
            on_log(f"[sweep] gamma={run.gamma:g} -> {run.output_dir}{' (resuming)' if resume else ''}")
        finals.append(grpo.main(config, resume=resume, on_log=on_log))
    if eval_data is None:
        return finals
    from awarl.eval.report import build_report
    from awarl.eval.run import EvalConfig, run_eval

    for run, final in zip(runs, finals):
        config = TrainConfig.from_yaml(config_path, list(run.overrides))
        data = config.data
        run_eval(EvalConfig(model=str(final), data=Path(eval_data), out=run.output_dir / "eval",
                            name=f"gamma={run.gamma:g}", limit=eval_limit, rollout=config.rollout,
                            index=Path(data.index) if data.index and not data.retriever_url else None,
                            corpus=Path(data.corpus) if data.corpus and not (data.index or data.retriever_url) else None,
                            retriever_url=data.retriever_url), progress=on_log is not None)
    report = runs[0].output_dir.parent / "report"
    paths = build_report([r.output_dir / "eval" for r in runs], report)
    for warning in json.loads(paths["json"].read_text(encoding="utf-8"))["warnings"]:  # as `awarl eval report` does
        if on_log:
            on_log(f"[sweep] warning: {warning}")
        else:
            print(f"warning: {warning}", file=sys.stderr)
    return [*finals, report]
