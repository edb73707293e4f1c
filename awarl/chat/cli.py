"""``awarl chat serve`` and ``awarl audit verify``.

FastAPI and uvicorn are imported inside the commands, so ``awarl --help`` stays fast.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Optional

import typer

from awarl.cli_errors import fail, warn

chat_app = typer.Typer(no_args_is_help=True, help="The verify-and-rewrite chatbot.")
audit_app = typer.Typer(no_args_is_help=True, help="Check the chatbot's audit log.")


@chat_app.command("serve")
def serve(
    config: Optional[Path] = typer.Option(None, "--config", help="Chat config YAML (configs/chat/*.yaml). Without it: the "
                                          "synthetic-world demo's agent from --demo, or validate-only mode."),
    demo: Path = typer.Option(Path("runs/demo"), "--demo", help="Folder of `awarl demo --out` (its demo.json) for the default."),
    host: Optional[str] = typer.Option(None, "--host", help="Address to bind (default 127.0.0.1: this machine only)."),
    port: Optional[int] = typer.Option(None, "--port", help="Port (default 8080)."),
    db: Optional[str] = typer.Option(None, "--db", help="SQLite file of threads, reviews and the audit head."),
    audit: Optional[str] = typer.Option(None, "--audit", help="Audit log (JSON lines)."),
    generator: Optional[str] = typer.Option(None, "--generator", help="Backend spec to serve (hf:PATH, vllm:PATH, openai:URL#MODEL)."),
    workers: Optional[int] = typer.Option(None, "--workers", help="Threads processed at once."),
) -> None:
    """Serve the chatbot: REST API under /api, web UI at /."""
    from awarl.chat.config import ChatConfigError, default_settings, load_chat_config

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    overrides = {"host": host, "port": port, "db": db, "audit": audit, "generator": generator, "workers": workers}
    try:
        settings = load_chat_config(config, **overrides) if config else default_settings(demo, **overrides)
    except (ChatConfigError, ValueError, OSError) as exc:
        fail(exc, 2)
    if not settings.policy:
        fail("no policy to check against: pass --config configs/chat/<name>.yaml", 2)
    import sqlite3

    import uvicorn

    from awarl.chat.app import create_app
    from awarl.chat.store import DatabaseInUse

    try:  # bad corrections or prompt files, an unwritable database: an error line, not a traceback
        app = create_app(settings)
    except DatabaseInUse as exc:  # another server holds the database: nothing was recovered or served
        fail(exc, 1)
    except (ValueError, OSError, sqlite3.Error) as exc:
        fail(exc, 2)
    if settings.host not in ("127.0.0.1", "localhost", "::1"):
        warn(f"binding {settings.host}: the chat API has no authentication; anyone who can reach this port can use it")
    typer.echo(f"awarl chat on http://{settings.host}:{settings.port}/ — {settings.mode_note or settings.generator}")
    uvicorn.run(app, host=settings.host, port=settings.port, log_level="info")


@audit_app.command("verify")
def verify(
    file: Path = typer.Argument(..., help="The audit log (JSON lines) to check."),
    db: Optional[Path] = typer.Option(None, "--db", help="The chat SQLite file holding the chain's head (default: "
                                      "chat.sqlite beside the log); without it truncation at the end cannot be seen."),
    secret_env: str = typer.Option("AWARL_AUDIT_SECRET", "--secret-env", help="Environment variable with the HMAC key, if the log was keyed."),
) -> None:
    """Check the hash chain: edited, removed, reordered or cut-off lines (exit 1 when any)."""
    from awarl.chat.audit import verify_audit
    from awarl.chat.store import Store

    if not file.exists():
        fail(f"{file}: file not found", 2)
    head = None
    db = db or file.parent / "chat.sqlite"
    if db.exists():
        store = Store(db)
        head = store.audit_head(str(file.resolve()))
        store.close()
    secret = os.environ.get(secret_env)
    report = verify_audit(file, head, secret.encode("utf-8") if secret else None)
    for problem in report.problems:
        typer.echo(f"TAMPERED {problem}")
    end = "checked against the head in " + str(db) if head else "no database head found: truncation at the end cannot be detected"
    typer.echo(f"{report.lines} line(s), {len(report.problems)} problem(s); {end}")
    if not report.ok:
        raise typer.Exit(1)
