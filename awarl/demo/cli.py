"""``awarl demo``: the command line of the demo."""

from __future__ import annotations

from pathlib import Path

import typer

from awarl.demo.recipe import DEFAULT_RECIPE
from awarl.demo.run import STAGES, run_demo


def demo_command(
    out: Path = typer.Option(None, "--out", help="Demo folder; rerunning resumes it.",
                             show_default="runs/demo, or runs/demo-quick with --quick"),
    quick: bool = typer.Option(False, "--quick", help="A smaller run (a few minutes): fewer steps and questions."),
    seed: int = typer.Option(0, "--seed", help="Seed of the world, the model and sampling."),
    recipe: Path = typer.Option(DEFAULT_RECIPE, "--recipe", help="Demo recipe (world, model, rollout, reward, SFT, GRPO).",
                                show_default="configs/demo_world.yaml"),
    until: str = typer.Option(None, "--until", help=f"Stop after this stage: {', '.join(STAGES)}."),
    no_progress: bool = typer.Option(False, "--no-progress", help="No progress display (stage lines only)."),
    workers: int = typer.Option(None, "--workers", min=1, help="Jobs of one stage (p_i shards, GRPO arms, evaluations) "
                                "run at once, each in its own process with its share of the CPUs; 1: all in this "
                                "process.", show_default="2 on a machine with 2 or more CPUs"),
    overrides: list[str] = typer.Option(None, "--set", help="Override a recipe field: section.field=value (repeatable; "
                                        "value is YAML), e.g. --set sft.args.max_steps=500."),
) -> None:
    """World -> tiny model -> SFT -> p_i -> GRPO with the AWA reward -> held-out evaluation -> report.
    Errors (`DemoError` and the rest of `awarl.errors`) end the command in `awarl.cli`."""
    if out is None:  # the two sizes never share a folder (a folder holds one world)
        out = Path("runs/demo-quick" if quick else "runs/demo")
    run_demo(out, quick=quick, seed=seed, recipe=recipe, progress=not no_progress, until=until,
             overrides=overrides or (), workers=workers)
