"""Command-line options generated from `RolloutSettings`, so every command that runs the agent
(``awarl capability estimate``, ``awarl eval run``, the chatbot) offers the same options with the
same help, and ``--config recipe.yaml`` reads the very ``rollout:`` section training reads.

    @app.command("run")
    @rollout_options
    def run_command(model: str = typer.Option(...), rollout: RolloutSettings = ROLLOUT) -> None: ...

The decorated command gets ``rollout``: the recipe's section (or the defaults), with any option
given on the command line applied on top; a value of the wrong type or range is a `ConfigError`
(one ``error:`` line, exit code 2, like every recipe error).
"""

from __future__ import annotations

import functools
import inspect
import logging
from dataclasses import fields
from pathlib import Path
from typing import Any

import typer

from awarl.agent.settings import RolloutSettings, check_recipe_layout, load_rollout, option_help
from awarl.config_fields import ConfigError, read_yaml_file
from awarl.llm.spec import checkpoint_folder

log = logging.getLogger(__name__)

ROLLOUT: Any = None
"""Placeholder default of the ``rollout`` parameter of a `rollout_options` command."""

# How each field appears on the command line: (option name, python type for typer).
_OPTION_TYPES: dict[str, tuple[str, Any]] = {
    "system_prompt": ("--system-prompt", str),
    "scope": ("--scope", str),
    "topk": ("--topk", int),
    "passage_words": ("--passage-words", int),
    "max_searches": ("--max-searches", int),
    "max_completion_tokens": ("--max-completion-tokens", int),
    "metric": ("--metric", str),
    "refusal_phrases": ("--refusal-phrase", list[str]),
    "chat_template": ("--chat-template", str),
    "world_noise": ("--world-noise", str),
}

_NULLABLE = ("system_prompt", "world_noise")
"""Fields whose option takes ``null`` for "none" (the protocol's prompt, no search noise)."""


def rollout_from(config: Path | None, given: dict[str, Any], checkpoint: str | None = None) -> RolloutSettings:
    """The recipe's ``rollout:`` section (else the settings saved with ``checkpoint``, else the
    defaults) with the options ``given`` on top."""
    base = RolloutSettings()
    if config is not None:
        base = recipe_rollout(config)
    elif checkpoint and (folder := checkpoint_folder(checkpoint)) is not None:
        try:
            base = load_rollout(folder)
            log.info("%s: using the rollout settings saved with the checkpoint", folder)
        except ConfigError:
            pass  # a checkpoint from elsewhere: the defaults, unless options say otherwise
    changes = {k: v for k, v in given.items() if v is not None and v != []}
    nulls = [k for k in _NULLABLE if isinstance(changes.get(k), str) and changes[k].strip().lower() == "null"]
    if "passage_words" in changes and changes["passage_words"] == 0:
        changes["passage_words"] = None  # 0 on the command line: whole passages
    if config is not None and changes:
        log.warning("%s: overriding the recipe's rollout settings (%s); p_i, training and evaluation then "
                    "describe different agents", config, ", ".join(f"{k}={v!r}" for k, v in changes.items()))
    merged = {**base.to_dict(), **changes, **{k: None for k in nulls}}  # "null" on the command line: no value
    settings = RolloutSettings.from_dict(merged, "rollout options" if config is None else f"{config}: rollout")
    if settings.world_noise is not None:  # read it now, before a command writes anything: a bad path is one error line
        from awarl.data.world_noise import load_noise

        load_noise(settings.world_noise)
    return settings


def recipe_rollout(path: Path) -> RolloutSettings:
    """The ``rollout:`` section of a recipe file, checked exactly as training checks it; a checkpoint
    folder gives the settings saved with it."""
    path = Path(path)
    if path.is_dir():
        return load_rollout(path)
    raw = read_yaml_file(path) or {}
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: a recipe is a YAML mapping, got {type(raw).__name__}")
    check_recipe_layout(raw, str(path))
    return RolloutSettings.from_dict(raw.get("rollout") or {}, f"{path}: rollout")


def rollout_options(func: Any = None, *, checkpoint_param: str | None = None) -> Any:
    """Decorate a Typer command that takes ``rollout: RolloutSettings``: adds ``--config`` and one
    option per `RolloutSettings` field, and hands the command the merged settings. With
    ``checkpoint_param`` (the name of the command's model parameter), a checkpoint folder's saved
    settings are the base when no ``--config`` is given."""
    if func is None:
        return functools.partial(rollout_options, checkpoint_param=checkpoint_param)
    sig = inspect.signature(func)
    if "rollout" not in sig.parameters:
        raise TypeError(f"{func.__name__} needs a 'rollout' parameter to use @rollout_options")
    helps = option_help()
    defaults = RolloutSettings()
    added = [inspect.Parameter("config", inspect.Parameter.KEYWORD_ONLY, annotation=Path, default=typer.Option(
        None, "--config", help="Recipe YAML whose 'rollout:' section defines the agent (the one training reads), "
                               "or a checkpoint folder with its saved settings; options below override it.", rich_help_panel="Rollout settings"))]
    for f in fields(RolloutSettings):
        flag, kind = _OPTION_TYPES[f.name]
        default = getattr(defaults, f.name)
        shown = "the protocol's" if default is None or default == () else default
        extra = " 0 = whole passages." if f.name == "passage_words" else ""
        extra += " Repeat for several." if f.name == "refusal_phrases" else ""
        added.append(inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY, annotation=kind, default=typer.Option(
            None, flag, help=f"{helps[f.name]}{extra} [default: {shown}, or the recipe's]", show_default=False,
            rich_help_panel="Rollout settings")))
    params = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for name, p in sig.parameters.items() if name != "rollout"]

    @functools.wraps(func)
    def wrapper(**kwargs: Any) -> Any:
        config = kwargs.pop("config", None)
        given = {f.name: kwargs.pop(f.name, None) for f in fields(RolloutSettings)}
        rollout = rollout_from(config, given, kwargs.get(checkpoint_param) if checkpoint_param else None)
        return func(rollout=rollout, **kwargs)

    wrapper.__signature__ = sig.replace(parameters=params + added)  # type: ignore[attr-defined]
    return wrapper


BACKEND: Any = None
"""Placeholder default of the ``backend_options`` parameter of a `backend_options` command."""
RETRIEVAL: Any = None
"""Placeholder default of the ``retrieval`` parameter of a `retrieval_options` command."""

_BACKEND_OPTIONS = [
    ("batch_size", int, 32, "--batch-size", "transformers backend: rows per generate call."),
    ("device", str, "auto", "--device", "transformers backend: auto, cpu, cuda, cuda:N."),
    ("dtype", str, "auto", "--dtype", "Weights dtype: auto (bf16 on CUDA, fp32 on CPU), bfloat16, float16, float32."),
    ("tensor_parallel_size", int, 1, "--tensor-parallel-size", "vLLM backend: GPUs per engine."),
]
_RETRIEVAL_OPTIONS = [
    ("index", Path, None, "--index", "Saved index folder to search (`awarl index build`)."),
    ("corpus", Path, None, "--corpus", "corpus.jsonl to index with BM25 at start (default: the one beside --data)."),
    ("retriever_url", str, None, "--retriever-url", "URL of a running `awarl search serve`."),
]


def backend_options(func: Any) -> Any:
    """Add the generation backend's options; the command gets ``backend_options: dict`` for
    `awarl.llm.spec.load_backend`."""
    return _grouped(func, "backend_options", _BACKEND_OPTIONS, "Backend", lambda values: values)


def retrieval_options(func: Any) -> Any:
    """Add ``--index / --corpus / --retriever-url``; the command gets ``retrieval: dict`` with those keys."""
    return _grouped(func, "retrieval", _RETRIEVAL_OPTIONS, "Retrieval", lambda values: values)


def _grouped(func: Any, target: str, options: list[tuple[str, Any, Any, str, str]], panel: str, make: Any) -> Any:
    sig = inspect.signature(func)
    if target not in sig.parameters:
        raise TypeError(f"{func.__name__} needs a {target!r} parameter")
    added = [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, annotation=kind,
                               default=typer.Option(default, flag, help=text, rich_help_panel=panel))
             for name, kind, default, flag, text in options]
    params = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for name, p in sig.parameters.items() if name != target]

    @functools.wraps(func)
    def wrapper(**kwargs: Any) -> Any:
        values = {name: kwargs.pop(name) for name, *_ in options}
        return func(**{target: make(values)}, **kwargs)

    wrapper.__signature__ = sig.replace(parameters=params + added)  # type: ignore[attr-defined]
    return wrapper


__all__ = ["BACKEND", "RETRIEVAL", "ROLLOUT", "backend_options", "recipe_rollout", "retrieval_options",
           "rollout_from", "rollout_options"]
