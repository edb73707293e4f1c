"""Policies: typed variables and SMT-LIB rules, loaded from awarl's YAML or Bedrock's JSON.

Both files use the field names of Bedrock's policy definition::

    version: "1.0"
    types:     [{name, description, values: [{value, description}]}]
    variables: [{name, type: bool | int | real | <type name>, description}]
    rules:     [{id, expression: "(=> (and member (> total 100)) (= discount 10))", description}]

Bedrock's export calls a rule's reading ``alternateExpression`` and may wrap everything in
``policyDefinition``; both are accepted. awarl's YAML may add, per variable, ``patterns`` for the
offline pattern translator (see `Pattern`) and a ``role`` (premise, claim or any).

Every rule is read and sort-checked against the declared sorts (`awarl.verify.smt`) before Z3
builds it, so a bad policy fails at load time with an error naming the file, the rule id and the
problem; premises and claims go through the same check. Loading is linear in the policy's size:
each expression is handed to Z3 with only the declarations it names.

Pattern regexes run on the third-party ``regex`` module under a time limit (see
`awarl.verify.translate.PatternTranslator`), and a regex that repeats a group which itself holds a
repeat (``(a+)+``, the classic catastrophic-backtracking shape) is refused at load time.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import json
import math
import re
from fractions import Fraction
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import regex
import yaml
import z3

from awarl.config_fields import load_yaml
from awarl.errors import PolicyError
from awarl.verify import smt
from awarl.verify.regex_source import nested_repeat, required_literal

_BUILTIN_SORTS = {"bool": "bool", "boolean": "bool", "int": "int", "integer": "int", "real": "real"}
_NAME_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")
_ROLES = ("any", "premise", "claim")
# SMT-LIB words a policy name may not be (operators and binders).
_SMT_WORDS = smt.RESERVED


@dataclass(frozen=True)
class TypeValue:
    value: str
    description: str = ""


@dataclass(frozen=True)
class PolicyType:
    """A custom enumerated type."""

    name: str
    description: str = ""
    values: tuple[TypeValue, ...] = ()


@dataclass(frozen=True)
class Pattern:
    """How the pattern translator reads a variable from text.

    Exactly one of ``phrase`` (case-insensitive words), ``regex`` or ``extract`` (a regex whose
    first group is a number). ``phrase`` and ``regex`` set ``value``; ``extract`` sets the number
    times ``scale``. Patterns are tried in order and the first match in a sentence wins, so list
    "not eligible" before "eligible".
    """

    phrase: str | None = None
    regex: str | None = None
    extract: str | None = None
    value: Any = None
    scale: float = 1.0

    def source(self) -> str:
        """The regex this pattern runs (a phrase becomes a whole-word, whitespace-tolerant regex)."""
        if self.phrase is not None:
            words = r"\s+".join(re.escape(w) for w in self.phrase.split())
            return rf"(?<![\w-]){words}(?![\w-])"
        return self.regex if self.regex is not None else self.extract or ""

    def compiled(self) -> regex.Pattern:
        """The compiled, case-insensitive regex (``regex`` module: its ``search`` takes a ``timeout``)."""
        return _compile(self.source())

    def literal(self) -> str:
        """Casefolded text every match contains ("" when none is known): the translator skips the
        regex on a sentence that lacks it, which is exact and saves most searches."""
        return required_literal(self.source())


@functools.lru_cache(maxsize=4096)
def _compile(source: str) -> regex.Pattern:
    return regex.compile(source, regex.IGNORECASE | regex.VERSION0)


@dataclass(frozen=True)
class Variable:
    name: str
    type: str  # bool, int, real or a custom type's name
    description: str = ""
    role: str = "any"
    patterns: tuple[Pattern, ...] = ()


@dataclass(frozen=True)
class Rule:
    id: str
    expression: str
    description: str = ""


@dataclass
class Policy:
    """A loaded policy: its definition plus the Z3 declarations and compiled rules.

    Each policy owns a Z3 context, so policies never share Z3 state (and checks stay
    deterministic whatever else the process has parsed). Lookups by name (`variable`, `kind`,
    `rule`) are dictionary lookups built at construction: treat the lists as read-only afterwards.
    """

    version: str
    types: list[PolicyType]
    variables: list[Variable]
    rules: list[Rule]
    source: str = "<policy>"
    ctx: z3.Context = field(default_factory=z3.Context, repr=False)
    sorts: dict[str, z3.SortRef] = field(default_factory=dict, repr=False)
    consts: dict[str, z3.ExprRef] = field(default_factory=dict, repr=False)
    enum_values: dict[str, str] = field(default_factory=dict, repr=False)  # value name -> type name
    compiled: dict[str, z3.BoolRef] = field(default_factory=dict, repr=False)
    rule_variables: dict[str, frozenset[str]] = field(default_factory=dict, repr=False)
    """The variables each rule names (by rule id), read by the sort checker at load time."""
    _parsed: dict[str, z3.BoolRef] = field(default_factory=dict, init=False, repr=False)
    _variable: dict[str, Variable] = field(default_factory=dict, init=False, repr=False)
    _kind: dict[str, str] = field(default_factory=dict, init=False, repr=False)
    _rule: dict[str, Rule] = field(default_factory=dict, init=False, repr=False)
    _signature: smt.Signature | None = field(default=None, init=False, repr=False)
    _enum: dict[str, dict[str, z3.ExprRef]] = field(default_factory=dict, init=False, repr=False)
    """Each enum type's values as Z3 constants (by value name), kept from the declaration."""

    def __post_init__(self) -> None:
        self._declare()
        variables: set[str] = set()
        types: set[str] = set()
        for i, rule in enumerate(self.rules):
            where = f"rule '{rule.id}'" if rule.id else f"rules[{i}]"
            if not rule.id or not _NAME_RE.match(rule.id.replace("-", "_").replace(".", "_")):
                raise PolicyError(self.source, where, f"bad rule id {rule.id!r} (letters, digits, _ - .)")
            if rule.id in self._rule:
                raise PolicyError(self.source, where, "duplicate rule id")
            self._rule[rule.id] = rule
            checked = self._check(rule.expression, where)
            self.rule_variables[rule.id] = frozenset(checked.variables)
            variables |= checked.variables
            types |= checked.types
        self._build_rules(variables, types)

    def _build_rules(self, variables: set[str], types: set[str]) -> None:
        """Build every (already sort-checked) rule with one call to Z3's parser: a call costs
        ~0.4 ms whatever its size, so one per rule was most of the load time of a large policy."""
        if not self.rules:
            return
        text = "\n".join(f"(assert {r.expression})" for r in self.rules)
        try:
            terms = z3.parse_smt2_string(
                text, sorts={t: self.sorts[t] for t in types}, decls={v: self.consts[v] for v in variables}, ctx=self.ctx,
            )
        except z3.Z3Exception:
            terms = None  # Z3 refused what the checker passed: parse one by one to name the rule
        if terms is None or len(terms) != len(self.rules):
            for r in self.rules:
                self.compiled[r.id] = self.parse(r.expression, where=f"rule '{r.id}'")
            return
        for r, term in zip(self.rules, terms):
            self.compiled[r.id] = term
            self._parsed.setdefault(r.expression, term)

    # -- declarations ------------------------------------------------------------------------
    def _declare(self) -> None:
        names: dict[str, str] = {}
        for i, t in enumerate(self.types):
            where = f"type '{t.name}'" if t.name else f"types[{i}]"
            if not _NAME_RE.match(t.name or ""):
                raise PolicyError(self.source, where, "a type name must start with a letter (letters, digits, _)")
            if t.name in self.sorts or t.name.lower() in _BUILTIN_SORTS or t.name in _SMT_WORDS:
                raise PolicyError(self.source, where, "duplicate or reserved type name")
            if not t.values:
                raise PolicyError(self.source, where, "a type needs at least one value")
            for v in t.values:
                if not _NAME_RE.match(v.value) or v.value in _SMT_WORDS:
                    raise PolicyError(self.source, where, f"bad value name {v.value!r}")
                if v.value in names:
                    raise PolicyError(self.source, where, f"value {v.value!r} already names {names[v.value]}")
                names[v.value] = f"a value of type '{t.name}'"
                self.enum_values[v.value] = t.name
            sort, values = z3.EnumSort(t.name, [v.value for v in t.values], ctx=self.ctx)
            self.sorts[t.name] = sort
            self._enum[t.name] = {v.value: c for v, c in zip(t.values, values)}
        for i, var in enumerate(self.variables):
            where = f"variable '{var.name}'" if var.name else f"variables[{i}]"
            if not _NAME_RE.match(var.name or "") or var.name in _SMT_WORDS:
                raise PolicyError(self.source, where, "a variable name must start with a letter (letters, digits, _)")
            if var.name in names:
                raise PolicyError(self.source, where, f"name already used by {names[var.name]}")
            names[var.name] = f"variable '{var.name}'"
            kind = _BUILTIN_SORTS.get(var.type.lower()) if var.type else None
            if kind == "bool":
                self.consts[var.name] = z3.Bool(var.name, self.ctx)
            elif kind == "int":
                self.consts[var.name] = z3.Int(var.name, self.ctx)
            elif kind == "real":
                self.consts[var.name] = z3.Real(var.name, self.ctx)
            elif var.type in self.sorts:
                kind = var.type
                self.consts[var.name] = z3.Const(var.name, self.sorts[var.type])
            else:
                raise PolicyError(self.source, where, f"unknown type {var.type!r} (bool, int, real or one of {sorted(self.sorts)})")
            self._variable[var.name] = var
            self._kind[var.name] = kind
            if var.role not in _ROLES:
                raise PolicyError(self.source, where, f"role must be one of {list(_ROLES)}, got {var.role!r}")
            for j, p in enumerate(var.patterns):
                self._check_pattern(var, p, f"{where}, patterns[{j}]")
        self._signature = smt.Signature(variables=self._kind, values=self.enum_values, types=frozenset(self.sorts))

    def _check_pattern(self, var: Variable, p: Pattern, where: str) -> None:
        given = [k for k in ("phrase", "regex", "extract") if getattr(p, k) is not None]
        if len(given) != 1:
            raise PolicyError(self.source, where, "give exactly one of phrase, regex, extract")
        if not isinstance(getattr(p, given[0]), str) or not getattr(p, given[0]).strip():
            raise PolicyError(self.source, where, f"'{given[0]}' must be a non-empty string")
        try:
            rx = p.compiled()
        except (regex.error, re.error) as exc:
            raise PolicyError(self.source, where, f"bad regex: {exc}") from None
        risky = nested_repeat(p.source())
        if risky is not None:
            raise PolicyError(
                self.source, where,
                f"regex repeats a group that itself repeats, {risky!r}: it can take exponential time on text that "
                "almost matches; repeat the inner part possessively ('+' after its quantifier, e.g. '\\s++') or rewrite it",
            )
        if p.extract is not None:
            if self.kind(var.name) not in ("int", "real"):
                raise PolicyError(self.source, where, "extract needs an int or real variable")
            if rx.groups < 1:
                raise PolicyError(self.source, where, "an extract regex needs a group around the number")
            if not (isinstance(p.scale, (int, float)) and not isinstance(p.scale, bool) and math.isfinite(p.scale)):
                raise PolicyError(self.source, where, f"scale must be a finite number, got {p.scale!r}")
        else:
            try:
                self.value_expr(var.name, p.value)
            except ValueError as exc:
                raise PolicyError(self.source, where, str(exc)) from None

    # -- expressions -------------------------------------------------------------------------
    def kind(self, name: str) -> str:
        """bool, int, real, or the custom type's name."""
        return self._kind[name]

    def variable(self, name: str) -> Variable:
        return self._variable[name]

    def rule(self, rule_id: str) -> Rule:
        return self._rule[rule_id]

    def parse(self, expression: str, where: str = "expression") -> z3.BoolRef:
        """Read, sort-check and build one SMT-LIB boolean term over the policy's variables.

        Z3's parser is given only the declarations the term names: handing it every declaration
        on every call made loading quadratic (a 2,000-rule policy took 17 s).
        """
        if isinstance(expression, str) and expression in self._parsed:
            return self._parsed[expression]
        checked = self._check(expression, where)
        decls = {name: self.consts[name] for name in checked.variables}
        sorts = {name: self.sorts[name] for name in checked.types}
        try:
            terms = z3.parse_smt2_string(f"(assert {expression})", sorts=sorts, decls=decls, ctx=self.ctx)
        except z3.Z3Exception as exc:
            raise PolicyError(self.source, where, _z3_problem(exc, expression)) from None
        self._parsed[expression] = terms[0]
        return terms[0]

    def _check(self, expression: str, where: str) -> smt.Checked:
        """Read and sort-check a boolean term; a `PolicyError` names ``where`` and the problem."""
        if not isinstance(expression, str) or not expression.strip():
            raise PolicyError(self.source, where, "empty expression")
        assert self._signature is not None
        try:
            checked = smt.check(smt.read(expression), self._signature)
        except smt.SmtError as exc:
            raise PolicyError(self.source, where, f"{exc} in {expression!r}") from None
        if checked.sort != smt.BOOL:
            raise PolicyError(self.source, where, f"type mismatch: the expression is {checked.sort}, not boolean: {expression!r}")
        return checked

    def value_expr(self, name: str, value: Any) -> z3.ExprRef:
        """The Z3 value ``value`` for variable ``name``; a ValueError names a type mismatch."""
        kind = self.kind(name)
        if kind == "bool":
            if not isinstance(value, bool):
                raise ValueError(f"variable {name!r} is bool; got {value!r}")
            return z3.BoolVal(value, self.ctx)
        if kind in ("int", "real"):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise ValueError(f"variable {name!r} is {kind}; got {value!r}")
            if kind == "int":
                if float(value) != int(value):
                    raise ValueError(f"variable {name!r} is int; got {value!r}")
                return z3.IntVal(int(value), self.ctx)
            return z3.RealVal(value, self.ctx)
        if not isinstance(value, str) or value not in self._enum[kind]:
            raise ValueError(f"variable {name!r} is of type {kind}; {value!r} is not one of its values")
        return self._enum[kind][value]  # a lookup: scanning the constructors made loading a 500-value world O(n^2)

    def assignment(self, name: str, value: Any) -> str:
        """SMT-LIB ``(= name value)`` (or ``name`` / ``(not name)`` for booleans)."""
        expr = self.value_expr(name, value)
        if self.kind(name) == "bool":
            return name if value else f"(not {name})"
        return f"(= {name} {_smt_text(expr)})"

    def _type(self, name: str) -> PolicyType:
        return next(t for t in self.types if t.name == name)  # a handful of types: a scan is fine

    def model_value(self, model: z3.ModelRef, name: str) -> bool | int | float | str:
        """A variable's value in a Z3 model, as a plain Python value (complete model)."""
        val = model.eval(self.consts[name], model_completion=True)
        if z3.is_true(val) or z3.is_false(val):
            return z3.is_true(val)
        if z3.is_int_value(val):
            return val.as_long()
        if z3.is_rational_value(val):
            return float(val.as_fraction())
        if z3.is_algebraic_value(val):
            return float(val.approx(12).as_fraction())
        if z3.is_app(val) and val.num_args() == 0 and val.decl().kind() == z3.Z3_OP_DT_CONSTRUCTOR:
            value = val.decl().name()  # an enum value: its name, without z3's printer (0.25 ms a call)
            if value.isidentifier():
                return value
        return str(val)

    def variables_in(self, exprs: Sequence[z3.ExprRef]) -> list[str]:
        """Names of the policy variables that occur in ``exprs``, in declaration order."""
        found: set[str] = set()
        stack = list(exprs)
        seen: set[int] = set()
        while stack:
            e = stack.pop()
            if e.get_id() in seen:
                continue
            seen.add(e.get_id())
            if z3.is_const(e) and e.decl().name() in self.consts and e.decl().kind() == z3.Z3_OP_UNINTERPRETED:
                found.add(e.decl().name())
            stack.extend(e.children())
        return [v.name for v in self.variables if v.name in found]

    # -- serialisation -----------------------------------------------------------------------
    def to_definition(self) -> dict[str, Any]:
        """Bedrock's policy-definition JSON (rule readings as ``alternateExpression``)."""
        return {
            "version": self.version,
            "types": [
                {"name": t.name, "description": t.description, "values": [{"value": v.value, "description": v.description} for v in t.values]}
                for t in self.types
            ],
            "variables": [{"name": v.name, "type": v.type, "description": v.description} for v in self.variables],
            "rules": [{"id": r.id, "expression": r.expression, "alternateExpression": r.description} for r in self.rules],
        }


def _smt_text(expr: z3.ExprRef) -> str:
    """SMT-LIB text of a numeral or enum value: ``12``, ``(- 3)``, ``2.5``, ``(/ 1 3)``, ``Gold``."""
    if z3.is_int_value(expr) or z3.is_rational_value(expr):
        frac = Fraction(expr.as_long()) if z3.is_int_value(expr) else expr.as_fraction()
        mag = abs(frac)
        if z3.is_int_value(expr):
            text = str(mag.numerator)
        elif mag.denominator == 1:
            text = f"{mag.numerator}.0"
        elif (10**12 % mag.denominator) == 0:
            text = repr(float(mag))
        else:
            text = f"(/ {mag.numerator} {mag.denominator})"
        return f"(- {text})" if frac < 0 else text
    return expr.sexpr()


def _z3_problem(exc: z3.Z3Exception, expression: str) -> str:
    raw = exc.value.decode() if isinstance(exc.value, bytes) else str(exc.value)
    msg = " ".join(re.sub(r'^\(error "line \d+ column \d+: ', "", raw.strip()).rstrip('")\n ').split())
    if "unknown constant" in msg:
        name = (msg.split("unknown constant", 1)[1].split() or ["?"])[0]
        if name in _SMT_WORDS:
            return f"bad SMT-LIB: wrong arguments to '{name}' in {expression!r}"
        return f"unknown variable {name!r} in {expression!r}"
    if "not Boolean" in msg:
        return f"type mismatch: the expression is not boolean: {expression!r}"
    if "ort mismatch" in msg or "incompatible" in msg or "invalid function application" in msg:
        return f"type mismatch: {msg} in {expression!r}"
    return f"bad SMT-LIB: {msg} in {expression!r}"


# -- loading -----------------------------------------------------------------------------------
_DEFINITION_KEYS = ("version", "types", "variables", "rules")


def load_policy(path: str | Path) -> Policy:
    """Load a policy from awarl's YAML or Bedrock's exported JSON (chosen by content, not suffix).

    Every problem with the file is a `PolicyError` naming it: missing, a folder, not UTF-8 (with
    the byte offset), not YAML/JSON (with the line), not a policy (with what is missing).
    """
    return policy_from_dict(read_document(path), source=str(path))


def read_document(path: str | Path) -> Any:
    """The parsed YAML or JSON document in ``path`` (JSON when the text starts with ``{``);
    a missing or unreadable file, bad encoding or bad syntax is a `PolicyError` naming it."""
    path = Path(path)
    source = str(path)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise PolicyError(source, "file", "file not found") from None
    except IsADirectoryError:
        raise PolicyError(source, "file", "is a folder; give a YAML or JSON file") from None
    except OSError as exc:
        raise PolicyError(source, "file", f"cannot read: {exc.strerror or exc}") from None
    key = hashlib.sha256(raw).digest()
    if key in _DOCUMENTS:  # the chat server loads one policy copy per worker: parse the file once
        return copy.deepcopy(_DOCUMENTS[key])
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise PolicyError(source, f"byte {exc.start}", f"not UTF-8 text (byte 0x{raw[exc.start]:02x}); save the file as UTF-8") from None
    document = _read_document(text, source)
    if len(_DOCUMENTS) >= 32:
        _DOCUMENTS.pop(next(iter(_DOCUMENTS)))
    _DOCUMENTS[key] = copy.deepcopy(document)
    return document


_DOCUMENTS: dict[bytes, Any] = {}
"""Parsed documents by the SHA-256 of their bytes (the 32 latest): a changed file is parsed anew."""


def _read_document(text: str, source: str) -> Any:
    try:
        if text.lstrip().startswith("{"):
            return json.loads(text)
        return load_yaml(text)  # awarl's one YAML reader (YAML 1.2, libyaml-fast on 2,000-rule files)
    except json.JSONDecodeError as exc:
        raise PolicyError(source, f"line {exc.lineno}", f"not valid JSON: {exc.msg} (column {exc.colno})") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark is not None else "file"
        problem = getattr(exc, "problem", None) or str(exc)
        raise PolicyError(source, where, f"not valid YAML: {problem}") from None
    except RecursionError:
        raise PolicyError(source, "file", "not a policy: nested too deeply to read") from None


def policy_from_dict(data: Any, source: str = "<policy>") -> Policy:
    """Build a policy from a parsed definition (awarl's YAML shape or Bedrock's JSON, optionally
    wrapped in ``policyDefinition``). A document that is no policy (a corrections or tests file,
    ``foo: 1``) is an error naming what is missing."""
    if isinstance(data, Mapping) and isinstance(data.get("policyDefinition"), Mapping):
        data = data["policyDefinition"]
    if data is None:
        raise PolicyError(source, "file", "not a policy: the file is empty")
    if not isinstance(data, Mapping):
        raise PolicyError(source, "file", f"not a policy: expected a mapping with {', '.join(_DEFINITION_KEYS)}, got {type(data).__name__}")
    missing = [k for k in ("variables", "rules") if k not in data]
    if missing:
        found = ", ".join(repr(str(k)) for k in list(data)[:5]) or "nothing"
        hint = ""
        if "tests" in data:
            hint = " (this looks like a policy tests file)"
        elif "corrections" in data:
            hint = " (this looks like a corrections file)"
        raise PolicyError(source, "file", f"not a policy: missing {' and '.join(repr(k) for k in missing)}; found {found}{hint}")
    types = [_type_from(t, source, i) for i, t in enumerate(_list(data, "types", source))]
    variables = [_variable_from(v, source, i) for i, v in enumerate(_list(data, "variables", source))]
    rules = [_rule_from(r, source, i) for i, r in enumerate(_list(data, "rules", source))]
    version = data.get("version", "1.0")
    if not isinstance(version, (str, int, float)) or isinstance(version, bool):
        raise PolicyError(source, "version", f"expected a version string such as \"1.0\", got {version!r}")
    return Policy(version=str(version), types=types, variables=variables, rules=rules, source=source)


def _list(data: Mapping[str, Any], key: str, source: str, where: str = "") -> list[Any]:
    """The optional list ``data[key]`` of the element ``where`` (the file's top level when empty)."""
    value = data.get(key)
    if value is None:
        return []
    if not isinstance(value, list):
        raise PolicyError(source, f"{where}, {key}" if where else key, f"expected a list, got {type(value).__name__}")
    return value


def _mapping(item: Any, source: str, where: str, required: Sequence[str]) -> Mapping[str, Any]:
    if not isinstance(item, Mapping):
        raise PolicyError(source, where, f"expected a mapping, got {type(item).__name__}")
    for key in required:
        if not isinstance(item.get(key), str) or not item[key].strip():
            raise PolicyError(source, where, f"missing or empty field '{key}'")
    return item


def _text(item: Mapping[str, Any], source: str, where: str, *keys: str) -> str:
    """An optional free-text field (the first of ``keys`` that is set): a string, or a scalar written
    without quotes (a YAML number or date); anything else is an error."""
    for key in keys:
        value = item.get(key)
        if value is None:
            continue
        if isinstance(value, (list, Mapping)):
            raise PolicyError(source, where, f"field '{key}' must be text, got {type(value).__name__}")
        if value != "":
            return str(value)
    return ""


def _type_from(item: Any, source: str, i: int) -> PolicyType:
    t = _mapping(item, source, f"types[{i}]", ["name"])
    where = f"type '{t['name']}'"
    values = []
    for j, v in enumerate(_list(t, "values", source, where)):
        if isinstance(v, str):
            values.append(TypeValue(v))
        else:
            v = _mapping(v, source, f"{where}, values[{j}]", ["value"])
            values.append(TypeValue(v["value"], _text(v, source, f"{where}, values[{j}]", "description")))
    return PolicyType(t["name"], _text(t, source, where, "description"), tuple(values))


def _variable_from(item: Any, source: str, i: int) -> Variable:
    v = _mapping(item, source, f"variables[{i}]", ["name", "type"])
    where = f"variable '{v['name']}'"
    patterns = []
    for j, p in enumerate(_list(v, "patterns", source, where)):
        p = _mapping(p, source, f"{where}, patterns[{j}]", [])
        unknown = set(p) - {"phrase", "regex", "extract", "value", "scale"}
        if unknown:
            raise PolicyError(source, f"{where}, patterns[{j}]", f"unknown keys {sorted(map(str, unknown))}")
        scale = p.get("scale", 1.0)
        if isinstance(scale, bool) or not isinstance(scale, (int, float)):
            raise PolicyError(source, f"{where}, patterns[{j}]", f"scale must be a number, got {scale!r}")
        patterns.append(
            Pattern(phrase=p.get("phrase"), regex=p.get("regex"), extract=p.get("extract"), value=p.get("value"), scale=float(scale))
        )
    role = v.get("role", "any")
    return Variable(v["name"], v["type"], _text(v, source, where, "description"), role if isinstance(role, str) else repr(role), tuple(patterns))


def _rule_from(item: Any, source: str, i: int) -> Rule:
    r = _mapping(item, source, f"rules[{i}]", ["id"])
    if not isinstance(r.get("expression"), str) or not r["expression"].strip():
        raise PolicyError(source, f"rule '{r['id']}'", "missing or empty field 'expression'")
    return Rule(r["id"], r["expression"], _text(r, source, f"rule '{r['id']}'", "description", "alternateExpression"))
