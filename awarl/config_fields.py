"""One way to declare, load and check a configuration section, shared by every config in awarl.

A section is a dataclass whose fields carry a one-line ``help`` (`doc`). `build` turns a plain
mapping (a YAML section, ``--set`` overrides) into that dataclass and enforces every field's
declared type — ``topk: 2.5``, ``seed: abc`` or ``scope: weird`` are a `ConfigError` naming the
section, the field, the value and the fix — before ``__post_init__`` checks ranges and
combinations. `load_yaml` is awarl's one YAML reader (recipes, chat configs, policies, tests
files): YAML 1.2 booleans and floats (``save_strategy: no`` and ``decisions: on`` stay strings,
``1e-5`` is a number), parsed by libyaml when PyYAML has it. This module imports only
`awarl.errors`, so every layer may use it.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import re
import types
import typing
from dataclasses import MISSING, field, fields
from pathlib import Path
from typing import Any, Literal, Union

import yaml

from awarl.errors import ConfigError


def doc(text: str, **kw: Any) -> Any:
    """A dataclass field with a one-line description (shown in ``--help`` and the docs)."""
    default = kw.get("default", MISSING)
    if isinstance(default, (list, dict)):  # mutable defaults become factories
        kw.pop("default")
        kw["default_factory"] = lambda: type(default)(default)
    return field(metadata={"help": text}, **kw)


def field_help(cls: type) -> dict[str, str]:
    """Field name -> one-line description."""
    return {f.name: f.metadata.get("help", "") for f in fields(cls) if f.init}


class _Yaml12Loader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]
    """YAML with 1.2 booleans and floats: only true/false are booleans and ``1e-5`` is a number.

    libyaml's parser (PyYAML's ``CSafeLoader``) when PyYAML was built with it: the pure-Python
    parser takes over a second on a 2,000-rule policy (docs/benchmarks.md). Plain scalars are
    still resolved by the Python resolver, so the 1.2 rules below hold with either parser."""


_Yaml12Loader.yaml_implicit_resolvers = {
    key: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:bool"]
    for key, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_Yaml12Loader.add_implicit_resolver("tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"),
                                    list("tTfF"))
_Yaml12Loader.add_implicit_resolver("tag:yaml.org,2002:float",
                                    re.compile(r"^[-+]?[0-9]+(?:\.[0-9]*)?[eE][-+]?[0-9]+$"), list("-+0123456789"))


def load_yaml(text: str) -> Any:
    """Parse YAML text with 1.2 booleans and floats.

    >>> load_yaml("a: no\\nb: 1e-5\\nc: true")
    {'a': 'no', 'b': 1e-05, 'c': True}
    """
    return yaml.load(text, Loader=_Yaml12Loader)  # noqa: S506 - a safe loader subclass


def read_yaml_file(path: str | Path, what: str = "recipe") -> Any:
    """Parse a YAML file; a missing file, a folder, non-UTF-8 bytes or broken YAML is a `ConfigError`
    naming the file (and the byte offset or YAML position)."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{path}: {what} not found" if not path.exists() else f"{path}: a folder, not a {what}")
    try:
        return load_yaml(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text (byte {exc.start})") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML ({exc})") from None


def closest(name: str, names: typing.Iterable[str]) -> str | None:
    found = difflib.get_close_matches(str(name), sorted(names), n=1, cutoff=0.7)
    return found[0] if found else None


def build(cls: type, values: Any, where: str, *, nested: dict[str, Any] | None = None) -> Any:
    """``cls(**values)`` with unknown keys named (and the closest known one suggested) and every
    value checked against its field's type; ``nested`` maps field names to builders of sub-sections.

    >>> from dataclasses import dataclass
    >>> @dataclass
    ... class S:
    ...     topk: int = doc("Passages per search.", default=3)
    >>> build(S, {"topk": 2}, "env").topk
    2
    >>> build(S, {"topk": 2.5}, "env")
    Traceback (most recent call last):
    ...
    awarl.errors.ConfigError: env.topk: expected a whole number, got 2.5
    """
    if isinstance(values, cls):
        return values
    if values is None:
        values = {}
    if not isinstance(values, dict):
        raise ConfigError(f"{where.rstrip(':')} must be a mapping of fields, got {type(values).__name__} ({values!r})")
    known = {f.name: f for f in fields(cls) if f.init}
    unknown = [k for k in values if k not in known]
    if unknown:
        hints = [f"{k!r}" + (f" (did you mean {h!r}?)" if (h := closest(k, known)) else "") for k in unknown]
        raise ConfigError(f"{where.rstrip(':')}: unknown field(s) {', '.join(hints)}; known: {', '.join(sorted(known))}")
    hints = typing.get_type_hints(cls)
    kwargs = {}
    for name, value in values.items():
        at = f"{where} {name}" if where.endswith(":") else f"{where}.{name}"
        if nested and name in nested:
            kwargs[name] = nested[name](value, at)
        else:
            kwargs[name] = check_type(value, hints[name], at)
    try:
        return cls(**kwargs)
    except (TypeError, ValueError) as exc:  # ConfigError included: a range or combination check
        raise ConfigError(f"{where.rstrip(':')}: {exc}") from None


def check_type(value: Any, hint: Any, where: str) -> Any:
    """``value`` if it fits ``hint`` (ints are accepted as floats; lists as tuples), else a `ConfigError`."""
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin in (Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        options = [a for a in args if a is not type(None)]
        errors = []
        for option in options:
            try:
                return check_type(value, option, where)
            except ConfigError as exc:
                errors.append(str(exc).split(": ", 1)[-1])
        allowed = " or ".join(_describe(o) for o in options) + (" or null" if type(None) in args else "")
        raise ConfigError(f"{where}: expected {allowed}, got {value!r}")
    if origin is Literal:
        if value in args and not (isinstance(value, bool) and not any(isinstance(a, bool) for a in args)):
            return value
        raise ConfigError(f"{where}: must be one of {', '.join(repr(a) for a in args)}, got {value!r}")
    if hint is Any:
        return value
    if hint is bool:
        if isinstance(value, bool):
            return value
        raise ConfigError(f"{where}: expected true or false, got {value!r}")
    if hint is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise ConfigError(f"{where}: expected a whole number, got {value!r}")
    if hint is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            return float(value)
        raise ConfigError(f"{where}: expected a finite number, got {value!r}")
    if hint is str:
        if isinstance(value, str):
            return value
        raise ConfigError(f"{where}: expected a string, got {value!r} (quote it in YAML)")
    if origin in (list, tuple):
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{where}: expected a list, got {value!r}")
        item = args[0] if args else Any
        items = [check_type(v, item, f"{where}[{i}]") for i, v in enumerate(value)]
        return tuple(items) if origin is tuple else items
    if origin is dict or hint is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{where}: expected a mapping, got {value!r}")
        return dict(value)
    if dataclasses.is_dataclass(hint):
        return build(hint, value, where)
    return value


def _describe(hint: Any) -> str:
    if hint is int:
        return "a whole number"
    if hint is float:
        return "a number"
    if hint is str:
        return "a string"
    if hint is bool:
        return "true/false"
    if typing.get_origin(hint) is Literal:
        return "one of " + ", ".join(repr(a) for a in typing.get_args(hint))
    return getattr(hint, "__name__", str(hint))


__all__ = ["ConfigError", "build", "check_type", "closest", "doc", "field_help", "load_yaml", "read_yaml_file"]
