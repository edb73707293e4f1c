"""The one `awarl` command: a sub-command group per pipeline stage.

Every group lives next to the code it drives (``awarl/<stage>/cli.py``) and imports heavy
libraries (torch, trl, transformers) inside its commands, so ``awarl --help`` stays fast.
"""

from __future__ import annotations

import typer

from awarl import __version__
from awarl.capability import app as capability_app
from awarl.data.cli import app as data_app
from awarl.eval.cli import app as eval_app
from awarl.search.cli import index_app, search_app
from awarl.train.cli import app as train_app
from awarl.train.cli import export_command, sweep_command
from awarl.verify.cli import app as verify_app

app = typer.Typer(
    name="awarl",
    help="AWA-RL: train, evaluate and serve search agents that know when to abstain.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
app.add_typer(data_app, name="data", help="Prepare official benchmark files into records + corpus.")
app.add_typer(index_app, name="index", help="Build and inspect retrieval indexes.")
app.add_typer(search_app, name="search", help="Query an index or serve it over HTTP.")
app.add_typer(capability_app, name="capability", help="Estimate per-query capability p_i.")
app.add_typer(eval_app, name="eval", help="Score predictions, run evaluations, build reports.")
app.add_typer(train_app, name="train", help="SFT cold start and AWA-RL GRPO training.")
app.add_typer(verify_app, name="verify", help="Automated-reasoning and citation checks.")
app.command("sweep", help="Run one training per courage factor gamma, then report.")(sweep_command)
app.command("export", help="Export a trained checkpoint (merging LoRA adapters).")(export_command)


def _version_callback(value: bool) -> None:
    if value:
        typer.echo(f"awarl {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=_version_callback, is_eager=True, help="Print the version."),
) -> None:
    """AWA-RL: train, evaluate and serve search agents that know when to abstain."""


def main() -> None:
    app()


if __name__ == "__main__":
    main()
