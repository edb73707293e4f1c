"""The one `awarl` command: a sub-command group per pipeline stage.

Every group lives next to the code it drives (``awarl/<stage>/cli.py``) and imports heavy
libraries (torch, trl, transformers) inside its commands, so ``awarl --help`` stays fast.
"""

from __future__ import annotations

import logging
import os
from typing import Any

import typer
from typer.core import TyperGroup

from awarl import __version__
from awarl.capability import app as capability_app
from awarl.chat.cli import audit_app, chat_app
from awarl.data.cli import app as data_app
from awarl.demo import demo_command
from awarl.errors import AwarlError
from awarl.eval.cli import app as eval_app
from awarl.integrations.cli import export_dataset_command
from awarl.search.cli import index_app, search_app
from awarl.train.cli import app as train_app
from awarl.train.cli import export_command, sweep_command
from awarl.train.model_cli import app as model_app
from awarl.verify.cli import app as verify_app


class _Awarl(TyperGroup):
    """The root command: whatever sub-command runs, an `AwarlError` (or an OS or decoding error)
    leaving it ends the command one way, in one place — a single ``error:`` line on stderr and the
    error's exit code (1: bad data or a failed run; 2: a bad recipe, config or command line).
    ``AWARL_DEBUG=1`` lets the traceback through instead, for bug reports."""

    def invoke(self, ctx: Any) -> Any:
        from awarl.cli_errors import print_error

        try:
            return super().invoke(ctx)
        except (AwarlError, OSError, UnicodeError) as exc:
            if os.environ.get("AWARL_DEBUG"):
                raise
            print_error(_one_line(exc))
            raise typer.Exit(exc.exit_code if isinstance(exc, AwarlError) else 1) from None


app = typer.Typer(
    cls=_Awarl,
    name="awarl",
    help="AWA-RL: train, evaluate and serve search agents that know when to abstain.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
app.add_typer(data_app, name="data", help="Prepare official benchmark files into records + corpus.")
app.add_typer(index_app, name="index", help="Build retrieval indexes (BM25 or dense).")
app.add_typer(search_app, name="search", help="Query an index or serve it over HTTP.")
app.add_typer(capability_app, name="capability", help="Estimate per-query capability p_i.")
app.add_typer(eval_app, name="eval", help="Score predictions, run evaluations, build reports.")
app.add_typer(train_app, name="train", help="SFT cold start and AWA-RL GRPO training.")
app.add_typer(model_app, name="model", help="Import models (GGUF files) as Hugging Face folders.")
app.add_typer(verify_app, name="verify", help="Automated-reasoning and citation checks.")
app.add_typer(chat_app, name="chat", help="Serve the verify-and-rewrite chatbot (REST API + web UI).")
app.add_typer(audit_app, name="audit", help="Verify the chatbot's hash-chained audit log.")
app.command("demo", help="AWA-RL end to end on a synthetic world, on a laptop CPU (start here).")(demo_command)
app.command("sweep", help="Run one training per courage factor gamma, then report.")(sweep_command)
app.command("export", help="Export a trained checkpoint (merging LoRA adapters).")(export_command)
app.command("export-dataset", help="Write a p_i table or an evaluation run as a Hugging Face dataset.")(
    export_dataset_command)


def _version_callback(value: bool) -> None:
    if value:
        typer.echo(f"awarl {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=_version_callback, is_eager=True, help="Print the version."),
) -> None:
    """AWA-RL: train, evaluate and serve search agents that know when to abstain."""


def _flags_take_no_value(command: Any, parent: Any = None, name: str | None = None) -> None:
    """Show flags (``--help``, ``--version``, ``--json`` …) without a value placeholder.

    Typer's rich help prints every option's type, so a flag reads ``--help <bool>`` as if it took
    a value. An empty metavar tells the help renderer there is nothing to show; the help option
    itself is built lazily per command, so it is created here to set the same. Duck-typed:
    Typer ships its own copy of click's classes.
    """
    ctx = command.context_class(command, info_name=name or command.name, parent=parent)
    for param in command.params:
        if getattr(param, "is_flag", False) and param.metavar is None:
            param.metavar = ""
    help_option = command.get_help_option(ctx)
    if help_option is not None and help_option.metavar is None:
        help_option.metavar = ""
    for sub_name, sub in (getattr(command, "commands", None) or {}).items():
        _flags_take_no_value(sub, ctx, sub_name)


class _WarningLine(logging.Handler):
    """Library warnings (``log.warning``: an empty input, a recovered folder) as ``warning:`` lines."""

    def emit(self, record: logging.LogRecord) -> None:
        from awarl.cli_errors import warn

        warn(record.getMessage())


def _one_line(exc: BaseException) -> str:
    """The ``error:`` line: an awarl error's message (it names the file, field or request), the
    file an OS error names, or the error itself."""
    if isinstance(exc, AwarlError):
        return str(exc)
    if isinstance(exc, OSError) and exc.filename is not None:
        return f"{exc.filename}: {exc.strerror or exc}"
    return f"{type(exc).__name__}: {exc}"


def main(argv: list[str] | None = None) -> Any:
    """Entry point of the ``awarl`` script: help without value placeholders on flags, library
    warnings as ``warning:`` lines; errors end every command the same way (`_Awarl`)."""
    command = typer.main.get_command(app)
    _flags_take_no_value(command)
    # bitsandbytes (installed with the qlora extra) warns on import, on CPUs with AVX512-BF16, that its
    # optional hub-downloaded kernel is missing; awarl runs offline and bitsandbytes' own CPU path is used.
    logging.getLogger("bitsandbytes.backends.cpu.ops").setLevel(logging.ERROR)
    logger = logging.getLogger("awarl")
    if not any(isinstance(h, _WarningLine) for h in logger.handlers):
        handler = _WarningLine(logging.WARNING)
        logger.addHandler(handler)
    return command.main(args=argv, prog_name="awarl", standalone_mode=True)


if __name__ == "__main__":
    main()
