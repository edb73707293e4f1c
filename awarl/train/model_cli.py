"""`awarl model import-gguf`: bring a model that travels as a GGUF file into the pipeline.

torch and transformers are imported inside the command, so ``awarl --help`` stays fast.
"""

from __future__ import annotations

from pathlib import Path

import typer

from awarl.cli_errors import fail

app = typer.Typer(no_args_is_help=True)


@app.command("import-gguf")
def import_gguf_command(
    file: Path = typer.Argument(..., help="A llama-family .gguf file (weights and tokenizer)."),
    out: Path = typer.Option(..., "--out", help="Folder for the float32 safetensors model, tokenizer and model card."),
    license: str = typer.Option(None, "--license", help="Licence for the model card when the file declares none "
                                                        "(general.license)."),
) -> None:
    """Dequantize a GGUF model into a plain Hugging Face folder (reads the file once; minutes on a CPU)."""
    from awarl.config_fields import ConfigError
    from awarl.data.records import DataError
    from awarl.train.gguf import import_gguf

    try:
        folder = import_gguf(file, out, license=license, on_log=typer.echo)
    except ConfigError as exc:
        fail(exc, 2)
    except DataError as exc:
        fail(exc, 1)
    typer.echo(f"model folder: {folder}")
