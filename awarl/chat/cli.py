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
    audit: Optional[str] = typer.Option(None, "--audit", help="Audit log (JSON lines); default: the config's, or with "
                                        "--db and no --config, one log per database: audit.jsonl beside a chat.sqlite, "
                                        "NAME.audit.jsonl beside NAME.sqlite."),
    generator: Optional[str] = typer.Option(None, "--generator", help="Backend spec to serve (hf:PATH, vllm:PATH, openai:URL#MODEL)."),
    workers: Optional[int] = typer.Option(None, "--workers", help="Threads processed at once."),
    admin_token: Optional[str] = typer.Option(None, "--admin-token", help="The admin token (default: "
                                              "$AWARL_CHAT_ADMIN_TOKEN, else <db>.admin-token, generated at first start)."),
) -> None:
    """Serve the chatbot: REST API under /api, web UI at /."""
    from awarl.chat.config import ChatConfigError, default_settings, load_chat_config

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if db and not audit and not config:  # a new database gets its own log, not the default one another server keeps
        audit = audit_beside(Path(db))
    overrides = {"host": host, "port": port, "db": db, "audit": audit, "generator": generator, "workers": workers,
                 "admin_token": admin_token}
    try:
        settings = load_chat_config(config, **overrides) if config else default_settings(demo, **overrides)
    except (ChatConfigError, ValueError, OSError) as exc:
        fail(exc, 2)
    if not settings.policy:
        fail("no policy to check against: pass --config configs/chat/<name>.yaml", 2)
    _lint_policy(settings.policy)
    import sqlite3

    import uvicorn

    from awarl.chat.app import create_app
    from awarl.chat.store import DatabaseInUse, StoreError

    try:  # bad corrections or prompt files, an unwritable database: an error line, not a traceback
        app = create_app(settings)
    except (DatabaseInUse, StoreError) as exc:  # held by another server, or damaged: nothing recovered or served
        fail(exc, 1)
    except (ValueError, OSError, sqlite3.Error) as exc:
        fail(exc, 2)
    auth = app.state.auth
    if auth.generated is not None:  # printed this once; afterwards it is only in the 0600 file
        typer.echo(f"admin token (shown once; kept in {auth.generated}, mode 0600): {auth.admin_token}", err=True)
    if not auth.loopback:
        warn(f"binding {settings.host}: every route needs a token (admin, reviewer or a thread's own); Host must be one "
             f"of {', '.join(sorted(auth.allowed_hosts))} (set allowed_hosts for the names clients use)")
    manager = app.state.manager  # the mode it serves, as GET /api/config reports it (a saved choice included)
    typer.echo(f"awarl chat on http://{settings.host}:{settings.port}/ — {manager.mode} mode: {manager.mode_note}")
    uvicorn.run(app, host=settings.host, port=settings.port, log_level="info")


def _lint_policy(path: str) -> None:
    """The served policy is linted before the server starts: conflicting rules (every answer would be
    IMPOSSIBLE, or rules demand incompatible things) stop it; other findings are warnings."""
    from awarl.verify.lint import lint
    from awarl.verify.policy import load_policy

    try:
        policy = load_policy(path)
    except ValueError as exc:  # PolicyError names the file and the element
        fail(exc, 2)
    issues = lint(policy, budget_s=30.0)
    conflicts = [i for i in issues if i.kind == "conflict"]
    for issue in issues:
        if issue.severity == "warning" or (issue.severity == "error" and issue.kind != "conflict"):
            warn(f"{path}: {issue.kind}: {issue.message}")
    if conflicts:
        fail(f"{path}: the policy's rules conflict, so checks against it mean nothing: {conflicts[0].message} "
             f"(rules {', '.join(conflicts[0].rules)}); `awarl verify lint {path}` lists every issue", 2)


def audit_beside(db: Path) -> str:
    """The audit log that goes with a database, named as the shipped configs name theirs: ``audit.jsonl``
    beside a ``chat.sqlite``, else ``<name>.audit.jsonl`` beside ``<name>.sqlite`` (`verify` pairs them back).

    >>> audit_beside(Path("runs/chat/chat.sqlite")), audit_beside(Path("/srv/pricing.sqlite"))
    ('runs/chat/audit.jsonl', '/srv/pricing.audit.jsonl')
    """
    return str(db.parent / "audit.jsonl") if db.name == "chat.sqlite" else str(db.with_suffix(".audit.jsonl"))


@audit_app.command("verify")
def verify(
    file: Optional[Path] = typer.Argument(None, help="The audit log (JSON lines) to check (default: the config's `audit`)."),
    config: Optional[Path] = typer.Option(None, "--config", help="The chat config the server ran with: its audit log, "
                                          "database (the chain's head) and key file are used."),
    db: Optional[Path] = typer.Option(None, "--db", help="The chat SQLite file holding the chain's head (default: the "
                                      "config's `db`; without a config, the one `serve --db` pairs with the log: NAME.sqlite for "
                                      "NAME.audit.jsonl, chat.sqlite for audit.jsonl)."),
    secret_env: Optional[str] = typer.Option(None, "--secret-env", help="Environment variable with the HMAC key (default: "
                                             "the config's audit_secret_env); else the key file beside the database."),
) -> None:
    """Check the hash chain: edited, removed, reordered, forged or cut-off lines (exit 1 when any).

    The head (last seq and hash) comes from the server's database; when it cannot be found the
    check fails, since a log cut at the end or wiped looks clean on its own."""
    from awarl.chat.audit import key_path, verify_audit
    from awarl.chat.config import ChatConfigError, ChatSettings, load_chat_config

    env = secret_env
    if config is not None:
        try:
            settings = load_chat_config(config)
        except (ChatConfigError, ValueError, OSError) as exc:
            fail(exc, 2)
        file, db, env = file or Path(settings.audit), db or Path(settings.db), env or settings.audit_secret_env
    elif file is None:
        defaults = ChatSettings(policy="-")
        file, db = Path(defaults.audit), db or Path(defaults.db)
    db = db or (file.with_name(file.name.removesuffix(".audit.jsonl") + ".sqlite") if file.name.endswith(".audit.jsonl")
                else file.parent / "chat.sqlite")
    if not file.exists():
        fail(f"{file}: file not found", 2)
    head = _audit_head(db, file)
    env = env or "AWARL_AUDIT_SECRET"
    secret = os.environ.get(env, "").encode("utf-8") or None
    if secret is None and key_path(db).exists():
        secret = key_path(db).read_text(encoding="utf-8").strip().encode("utf-8")
    report = verify_audit(file, head, secret)
    for problem in report.problems:
        typer.echo(f"TAMPERED {problem}")
    keyed = f"{report.keyed} keyed" if report.keyed else "unkeyed"
    typer.echo(f"{report.lines} line(s) ({keyed}), {len(report.problems)} problem(s); checked against the head in {db}")
    if not report.ok:
        raise typer.Exit(1)


def _audit_head(db: Path, file: Path) -> tuple[int, str]:
    """The chain's head for ``file`` in ``db`` (read-only), or an error saying why it cannot be found."""
    import sqlite3

    if not db.exists():
        fail(f"{db}: no such database, so the end of {file} cannot be checked (a cut or wiped log would look clean); "
             "pass the server's --config or --db", 1)
    try:
        conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
        try:
            row = conn.execute("SELECT seq, hash FROM audit_head WHERE log=?", (str(file.resolve()),)).fetchone()
        finally:
            conn.close()
    except sqlite3.Error as exc:
        fail(f"{db}: cannot read the audit head ({exc})", 1)
    if row is None:
        fail(f"{db} holds no head for {file.resolve()}: the end of the log cannot be checked; is this the database the "
             "server wrote it with (pass its --config), or was the log moved?", 1)
    return int(row[0]), str(row[1])
