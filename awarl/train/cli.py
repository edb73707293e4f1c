"""`awarl train sft|grpo|check`, `awarl sweep`, `awarl export`.

torch, TRL and transformers are imported inside the commands, so ``awarl --help`` stays fast.
"""

from __future__ import annotations

from pathlib import Path

import typer

app = typer.Typer(no_args_is_help=True)

_CONFIG = typer.Option(..., "--config", "-c", help="YAML recipe (see configs/).")
_SET = typer.Option(None, "--set", help="Override a field: section.field=value (repeatable; value is YAML).")


def _load(config: Path, overrides: list[str] | None):
    from awarl.train.config import TrainConfig

    return TrainConfig.from_yaml(config, overrides or [])


@app.command("check")
def check_command(config: Path = _CONFIG, overrides: list[str] = _SET) -> None:
    """Parse and validate a recipe (TRL field names included) without training; the base model
    (model.path) must exist."""
    cfg = _load(config, overrides)
    cfg.check_trainer_fields()
    cfg.check_model_path()
    r = cfg.rollout
    typer.echo(f"{config}: ok (GRPO starts from {cfg.grpo_start()}, reward {cfg.reward.kind}, gamma {cfg.reward.gamma}; "
               f"rollout: scope {r.scope}, topk {r.topk}, {r.passage_words} words, {r.max_searches} searches, "
               f"{r.max_completion_tokens} tokens, metric {r.metric})")
    warning = r.budget_warning()
    if warning:
        typer.echo(f"warning: {warning}")


@app.command("sft")
def sft_command(
    config: Path = _CONFIG,
    overrides: list[str] = _SET,
    out: Path = typer.Option(None, "--out", help="Output folder (default: sft.output_dir or <output_dir>/sft)."),
    resume: str = typer.Option(None, "--resume", help="'latest' or a checkpoint folder: continue a run that saved "
                                                       "checkpoints (sft.args.save_strategy: steps) from its step."),
) -> None:
    """Cold-start SFT on agent trajectories (tool results masked from the loss)."""
    from awarl.train import sft

    cfg = _load(config, overrides)
    final = sft.main(cfg, output_dir=str(out) if out else None, on_log=typer.echo, resume=resume)
    typer.echo(f"SFT model saved to {final}")


@app.command("grpo")
def grpo_command(
    config: Path = _CONFIG,
    overrides: list[str] = _SET,
    resume: str = typer.Option(None, "--resume", help="'latest' or a checkpoint folder: continue a run with "
                                                       "the same step, penalty state and data order."),
    out: Path = typer.Option(None, "--out", help="Output folder (default: output_dir of the recipe)."),
) -> None:
    """AWA-RL GRPO with the search tool (TRL GRPOTrainer + environment_factory)."""
    from awarl.train import grpo

    cfg = _load(config, overrides)
    final = grpo.main(cfg, resume=resume, output_dir=str(out) if out else None, on_log=typer.echo)
    typer.echo(f"model saved to {final}")


def sweep_command(
    config: Path = _CONFIG,
    gamma: list[float] = typer.Option(..., "--gamma", help="Courage factors, e.g. --gamma 0.3 0.5 0.7 1.0."),
    more_gammas: list[float] = typer.Argument(None, metavar="[GAMMA]...", show_default=False,
                                              help="Further γ values (so `--gamma 0.3 0.5 0.7` works)."),
    overrides: list[str] = _SET,
    out: Path = typer.Option(None, "--out", help="Root folder; run i goes to <out>/gamma_<γ>."),
    print_commands: bool = typer.Option(False, "--print-commands",
                                        help="Print one accelerate command per γ (cluster) instead of running."),
    accelerate_config: str = typer.Option("configs/accelerate/zero2.yaml", "--accelerate-config",
                                          help="accelerate config used in the printed commands."),
    eval_data: Path = typer.Option(None, "--eval-data", help="records.jsonl to evaluate every final model on; "
                                                             "then `awarl eval report` compares them."),
    eval_limit: int = typer.Option(None, "--eval-limit", help="Evaluate only the first N questions per data set."),
) -> None:
    """Run one training per courage factor gamma, then report."""
    from awarl.train import sweep

    runs = sweep.plan(config, [*gamma, *(more_gammas or [])], overrides or [], str(out) if out else None)
    if print_commands:
        for cmd in sweep.sweep_commands(config, runs, accelerate_config):
            typer.echo(cmd)
        typer.echo("# when every run has finished:")
        for cmd in sweep.eval_commands(runs, eval_data or "EVAL_RECORDS.jsonl", _load(config, overrides)):
            typer.echo(cmd)
        return
    results = sweep.run_sweep(config, runs, eval_data=eval_data, eval_limit=eval_limit, on_log=typer.echo)
    for run, final in zip(runs, results):
        typer.echo(f"gamma={run.gamma:g}: {final}")
    if eval_data is not None:
        typer.echo(f"report: {results[-1]}")
    else:
        typer.echo("evaluate and compare the runs with:")
        for cmd in sweep.eval_commands(runs, "EVAL_RECORDS.jsonl", _load(config, overrides)):
            typer.echo(cmd)


def export_command(
    checkpoint: Path = typer.Argument(..., help="Checkpoint folder (full weights or a LoRA adapter)."),
    out: Path = typer.Option(..., "--out", help="Folder for the merged model + tokenizer + chat template."),
    base_model: str = typer.Option(None, "--base-model", help="Base model of a LoRA adapter (default: the one "
                                                              "recorded in adapter_config.json)."),
    dtype: str = typer.Option("auto", "--dtype", help="auto, float32, bfloat16 or float16."),
    eval_runs: list[Path] = typer.Option(None, "--eval-run", help="An `awarl eval run` folder of this checkpoint "
                                                                   "(repeatable): its scores go into the model card."),
) -> None:
    """Export a trained checkpoint (merging LoRA adapters) so `vllm serve` and the runner load it."""
    from awarl.train.export import export_checkpoint

    final = export_checkpoint(checkpoint, out, base_model=base_model, dtype=dtype, eval_runs=eval_runs or [])
    typer.echo(f"exported to {final}")
