"""Policies: typed variables and SMT-LIB rules, loaded from awarl's YAML or Bedrock's JSON.

Both files use the field names of Bedrock's policy definition::

    version: "1.0"
    types:     [{name, description, values: [{value, description}]}]
    variables: [{name, type: bool | int | real | <type name>, description}]
    rules:     [{id, expression: "(=> (and member (> total 100)) (= discount 10))", description}]

Bedrock's export calls a rule's reading ``alternateExpression`` and may wrap everything in
``policyDefinition``; both are accepted. awarl's YAML may add, per variable, ``patterns`` for the
offline pattern translator (see `Pattern`) and a ``role`` (premise, claim or any).

Every rule is parsed by Z3 against the declared sorts, so a bad policy fails at load time with
an error naming the file, the rule id and the problem.
"""

from __future__ import annotations

import json
import re
from fractions import Fraction
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
import z3

_BUILTIN_SORTS = {"bool": "bool", "boolean": "bool", "int": "int", "integer": "int", "real": "real"}
_NAME_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")
_ROLES = ("any", "premise", "claim")
# SMT-LIB words a rule may use besides the policy's own names.
_SMT_WORDS = frozenset(
    "and or not => = distinct ite < <= > >= + - * / div mod abs true false xor to_real to_int is_int".split()
)
_NUMERAL_RE = re.compile(r"^-?\d+(\.\d+)?$")
_TOKEN_RE = re.compile(r"\(|\)|[^\s()]+")


class PolicyError(ValueError):
    """A bad policy or expression; the message names the source, the element and the problem."""

    def __init__(self, source: str, where: str, problem: str):
        self.source, self.where, self.problem = source, where, problem
        super().__init__(f"{source}, {where}: {problem}")


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

    def compiled(self) -> re.Pattern[str]:
        if self.phrase is not None:
            words = r"\s+".join(re.escape(w) for w in self.phrase.split())
            return re.compile(rf"(?<![\w-]){words}(?![\w-])", re.I)
        return re.compile(self.regex if self.regex is not None else self.extract or "", re.I)


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
    deterministic whatever else the process has parsed).
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
    _parsed: dict[str, z3.BoolRef] = field(default_factory=dict, init=False, repr=False)  # parsing costs ~2 ms

    def __post_init__(self) -> None:
        self._declare()
        seen: set[str] = set()
        for i, rule in enumerate(self.rules):
            where = f"rule '{rule.id}'" if rule.id else f"rules[{i}]"
            if not rule.id or not _NAME_RE.match(rule.id.replace("-", "_").replace(".", "_")):
                raise PolicyError(self.source, where, f"bad rule id {rule.id!r} (letters, digits, _ - .)")
            if rule.id in seen:
                raise PolicyError(self.source, where, "duplicate rule id")
            seen.add(rule.id)
            self.compiled[rule.id] = self.parse(rule.expression, where=where)

    # -- declarations ------------------------------------------------------------------------
    def _declare(self) -> None:
        names: dict[str, str] = {}
        for i, t in enumerate(self.types):
            where = f"type '{t.name}'" if t.name else f"types[{i}]"
            if not _NAME_RE.match(t.name or ""):
                raise PolicyError(self.source, where, "a type name must start with a letter (letters, digits, _)")
            if t.name in self.sorts or t.name.lower() in _BUILTIN_SORTS:
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
            sort, _ = z3.EnumSort(t.name, [v.value for v in t.values], ctx=self.ctx)
            self.sorts[t.name] = sort
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
                self.consts[var.name] = z3.Const(var.name, self.sorts[var.type])
            else:
                raise PolicyError(self.source, where, f"unknown type {var.type!r} (bool, int, real or one of {sorted(self.sorts)})")
            if var.role not in _ROLES:
                raise PolicyError(self.source, where, f"role must be one of {list(_ROLES)}, got {var.role!r}")
            for j, p in enumerate(var.patterns):
                self._check_pattern(var, p, f"{where}, patterns[{j}]")

    def _check_pattern(self, var: Variable, p: Pattern, where: str) -> None:
        given = [k for k in ("phrase", "regex", "extract") if getattr(p, k) is not None]
        if len(given) != 1:
            raise PolicyError(self.source, where, "give exactly one of phrase, regex, extract")
        try:
            rx = p.compiled()
        except re.error as exc:
            raise PolicyError(self.source, where, f"bad regex: {exc}") from None
        if p.extract is not None:
            if self.kind(var.name) not in ("int", "real"):
                raise PolicyError(self.source, where, "extract needs an int or real variable")
            if rx.groups < 1:
                raise PolicyError(self.source, where, "an extract regex needs a group around the number")
        else:
            try:
                self.value_expr(var.name, p.value)
            except ValueError as exc:
                raise PolicyError(self.source, where, str(exc)) from None

    # -- expressions -------------------------------------------------------------------------
    def kind(self, name: str) -> str:
        """bool, int, real, or the custom type's name."""
        var = self.variable(name)
        return _BUILTIN_SORTS.get(var.type.lower(), var.type)

    def variable(self, name: str) -> Variable:
        for v in self.variables:
            if v.name == name:
                return v
        raise KeyError(name)

    def rule(self, rule_id: str) -> Rule:
        for r in self.rules:
            if r.id == rule_id:
                return r
        raise KeyError(rule_id)

    def parse(self, expression: str, where: str = "expression") -> z3.BoolRef:
        """Parse one SMT-LIB boolean term over the policy's variables."""
        if isinstance(expression, str) and expression in self._parsed:
            return self._parsed[expression]
        if not isinstance(expression, str) or not expression.strip():
            raise PolicyError(self.source, where, "empty expression")
        tokens = _TOKEN_RE.findall(expression)
        depth, top_terms = 0, 0
        for tok in tokens:
            if tok == "(":
                top_terms += depth == 0
                depth += 1
            elif tok == ")":
                depth -= 1
                if depth < 0:
                    raise PolicyError(self.source, where, f"bad SMT-LIB: unbalanced ')' in {expression!r}")
            elif depth == 0:
                top_terms += 1
        if depth != 0:
            raise PolicyError(self.source, where, f"bad SMT-LIB: {depth} unclosed '(' in {expression!r}")
        if top_terms != 1:
            raise PolicyError(self.source, where, f"bad SMT-LIB: expected one term, got {top_terms} in {expression!r}")
        if not any(t in ("let", "forall", "exists", "!") for t in tokens):
            for tok in tokens:
                if tok in "()" or tok in _SMT_WORDS or _NUMERAL_RE.match(tok):
                    continue
                if tok not in self.consts and tok not in self.enum_values:
                    raise PolicyError(self.source, where, f"unknown variable {tok!r} in {expression!r}")
        try:
            terms = z3.parse_smt2_string(f"(assert {expression})", sorts=self.sorts, decls=self.consts, ctx=self.ctx)
        except z3.Z3Exception as exc:
            raise PolicyError(self.source, where, _z3_problem(exc, expression)) from None
        self._parsed[expression] = terms[0]
        return terms[0]

    def value_expr(self, name: str, value: Any) -> z3.ExprRef:
        """The Z3 value ``value`` for variable ``name``; a ValueError names a type mismatch."""
        kind, const = self.kind(name), self.consts[name]
        if kind == "bool":
            if not isinstance(value, bool):
                raise ValueError(f"variable {name!r} is bool; got {value!r}")
            return z3.BoolVal(value, self.ctx)
        if kind in ("int", "real"):
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ValueError(f"variable {name!r} is {kind}; got {value!r}")
            if kind == "int":
                if float(value) != int(value):
                    raise ValueError(f"variable {name!r} is int; got {value!r}")
                return z3.IntVal(int(value), self.ctx)
            return z3.RealVal(value, self.ctx)
        if value not in {v.value for v in self._type(kind).values}:
            raise ValueError(f"variable {name!r} is of type {kind}; {value!r} is not one of its values")
        return _enum_const(const.sort(), value)

    def assignment(self, name: str, value: Any) -> str:
        """SMT-LIB ``(= name value)`` (or ``name`` / ``(not name)`` for booleans)."""
        expr = self.value_expr(name, value)
        if self.kind(name) == "bool":
            return name if value else f"(not {name})"
        return f"(= {name} {_smt_text(expr)})"

    def _type(self, name: str) -> PolicyType:
        return next(t for t in self.types if t.name == name)

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


def _enum_const(sort: z3.DatatypeSortRef, value: str) -> z3.ExprRef:
    for i in range(sort.num_constructors()):
        if sort.constructor(i).name() == value:
            return sort.constructor(i)()
    raise ValueError(f"{value!r} is not a value of {sort.name()}")


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
def load_policy(path: str | Path) -> Policy:
    """Load a policy from awarl's YAML or Bedrock's exported JSON (chosen by content, not suffix)."""
    path = Path(path)
    if not path.exists():
        raise PolicyError(str(path), "-", "file not found")
    text = path.read_text(encoding="utf-8")
    try:
        data = json.loads(text) if text.lstrip().startswith("{") else yaml.safe_load(text)
    except (json.JSONDecodeError, yaml.YAMLError) as exc:
        raise PolicyError(str(path), "-", f"not valid YAML/JSON: {exc}") from None
    return policy_from_dict(data, source=str(path))


def policy_from_dict(data: Any, source: str = "<policy>") -> Policy:
    if isinstance(data, Mapping) and isinstance(data.get("policyDefinition"), Mapping):
        data = data["policyDefinition"]
    if not isinstance(data, Mapping):
        raise PolicyError(source, "-", f"expected a mapping with version/types/variables/rules, got {type(data).__name__}")
    types = [_type_from(t, source, i) for i, t in enumerate(_list(data, "types", source))]
    variables = [_variable_from(v, source, i) for i, v in enumerate(_list(data, "variables", source))]
    rules = [_rule_from(r, source, i) for i, r in enumerate(_list(data, "rules", source))]
    return Policy(version=str(data.get("version", "1.0")), types=types, variables=variables, rules=rules, source=source)


def _list(data: Mapping[str, Any], key: str, source: str) -> list[Any]:
    value = data.get(key) or []
    if not isinstance(value, list):
        raise PolicyError(source, key, f"expected a list, got {type(value).__name__}")
    return value


def _mapping(item: Any, source: str, where: str, required: Sequence[str]) -> Mapping[str, Any]:
    if not isinstance(item, Mapping):
        raise PolicyError(source, where, f"expected a mapping, got {type(item).__name__}")
    for key in required:
        if not isinstance(item.get(key), str) or not item[key].strip():
            raise PolicyError(source, where, f"missing or empty field '{key}'")
    return item


def _type_from(item: Any, source: str, i: int) -> PolicyType:
    t = _mapping(item, source, f"types[{i}]", ["name"])
    values = []
    for j, v in enumerate(t.get("values") or []):
        if isinstance(v, str):
            values.append(TypeValue(v))
        else:
            v = _mapping(v, source, f"type '{t['name']}', values[{j}]", ["value"])
            values.append(TypeValue(v["value"], v.get("description", "") or ""))
    return PolicyType(t["name"], t.get("description", "") or "", tuple(values))


def _variable_from(item: Any, source: str, i: int) -> Variable:
    v = _mapping(item, source, f"variables[{i}]", ["name", "type"])
    where = f"variable '{v['name']}'"
    patterns = []
    for j, p in enumerate(v.get("patterns") or []):
        p = _mapping(p, source, f"{where}, patterns[{j}]", [])
        unknown = set(p) - {"phrase", "regex", "extract", "value", "scale"}
        if unknown:
            raise PolicyError(source, f"{where}, patterns[{j}]", f"unknown keys {sorted(unknown)}")
        patterns.append(
            Pattern(
                phrase=p.get("phrase"), regex=p.get("regex"), extract=p.get("extract"),
                value=p.get("value"), scale=float(p.get("scale", 1.0)),
            )
        )
    return Variable(v["name"], v["type"], v.get("description", "") or "", v.get("role", "any"), tuple(patterns))


def _rule_from(item: Any, source: str, i: int) -> Rule:
    r = _mapping(item, source, f"rules[{i}]", ["id"])
    if not isinstance(r.get("expression"), str) or not r["expression"].strip():
        raise PolicyError(source, f"rule '{r['id']}'", "missing or empty field 'expression'")
    description = r.get("description") or r.get("alternateExpression") or ""
    return Rule(r["id"], r["expression"], description)
