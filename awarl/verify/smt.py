"""SMT-LIB terms: reading them and checking their sorts against a policy's declarations.

Z3's SMT-LIB parser coerces between sorts instead of rejecting a mismatch: with a bool
``discount``, ``(= discount 10)`` becomes ``(= (ite discount 1 0) 10)`` (always false), and an int
compared with a real is silently lifted. A policy (or a translation) that says that is wrong, and
the checker's verdicts on it would be wrong too, so every rule, premise and claim is read and
sort-checked here before Z3 sees it. The rules are SMT-LIB's, with one convenience most tools
share: an integer numeral may stand where a real is expected (``(>= total 50)``).

- sorts: ``bool``, ``int``, ``real`` and the policy's enumerated types (named as declared);
- ``and or xor => not`` take booleans; ``= distinct`` take arguments of one sort; ``< <= > >=``
  and ``+ - * abs`` take numbers of one sort; ``div mod`` ints; ``/`` reals; ``ite`` a boolean
  condition and two branches of one sort; ``to_real``, ``to_int``, ``is_int`` convert;
- ``let``, ``forall``/``exists`` (sorted variables: Bool, Int, Real or an enumerated type) and
  ``(! term :named n)`` annotations are understood;
- mixing an int term with a real term needs an explicit ``(to_real x)``; a decimal is never an int.

`read` and `check` raise `SmtError` with a problem text; `awarl.verify.policy` adds the file and
the rule (or premise, claim) it came from.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from awarl.errors import AwarlError

BOOL, INT, REAL = "bool", "int", "real"
NUMERIC = (INT, REAL)
MAX_DEPTH = 100  # deeper nesting is no policy a person writes; it would only exhaust the stack

# Words a policy may not use as a name: SMT-LIB's operators and binders.
OPERATORS = frozenset(
    "and or not => = distinct ite < <= > >= + - * / div mod abs true false xor to_real to_int is_int".split()
)
RESERVED = OPERATORS | {"let", "forall", "exists", "!", "as", "par", "_"}

_TOKEN_RE = re.compile(r"\(|\)|[^\s()]+")
_INT_RE = re.compile(r"^-?\d+$")
_DECIMAL_RE = re.compile(r"^-?\d+\.\d*$")
_SORT_NAMES = {"Bool": BOOL, "Int": INT, "Real": REAL, "bool": BOOL, "int": INT, "real": REAL}


class SmtError(AwarlError, ValueError):
    """A term that is malformed or ill-sorted (in a policy or given on the command line: exit code 2);
    the text names the operator and the argument."""

    exit_code = 2


Node = str | list  # an atom, or a list of nodes


def read(text: str) -> Node:
    """Read one SMT-LIB term into nested lists of atoms.

    >>> read("(=> member (> total 100))")
    ['=>', 'member', ['>', 'total', '100']]
    """
    stack: list[list[Node]] = [[]]
    for tok in _TOKEN_RE.findall(text):
        if tok == "(":
            if len(stack) > MAX_DEPTH:
                raise SmtError(f"bad SMT-LIB: nested deeper than {MAX_DEPTH} levels")
            stack.append([])
        elif tok == ")":
            if len(stack) == 1:
                raise SmtError("bad SMT-LIB: unbalanced ')'")
            done = stack.pop()
            stack[-1].append(done)
        else:
            stack[-1].append(tok)
    if len(stack) > 1:
        raise SmtError(f"bad SMT-LIB: {len(stack) - 1} unclosed '('")
    terms = stack[0]
    if len(terms) != 1:
        raise SmtError(f"bad SMT-LIB: expected one term, got {len(terms)}")
    return terms[0]


def show(node: Node) -> str:
    """SMT-LIB text of a node (for messages)."""
    return node if isinstance(node, str) else "(" + " ".join(show(n) for n in node) + ")"


@dataclass(frozen=True)
class Signature:
    """What a term may name: variables with their sorts, enumerated types and their values."""

    variables: Mapping[str, str]  # name -> bool | int | real | type name
    values: Mapping[str, str]  # enum value -> type name
    types: frozenset[str] = frozenset()


@dataclass
class Checked:
    """A checked term: its sort and the declarations it names (what Z3's parser must be given)."""

    sort: str
    variables: set[str] = field(default_factory=set)
    types: set[str] = field(default_factory=set)


@dataclass(frozen=True)
class _Typed:
    sort: str
    node: Node  # rendered only for an error message: rendering every subterm doubled the cost
    numeral: bool = False  # an int numeral, usable as a real

    @property
    def text(self) -> str:
        return show(self.node)

    def describe(self) -> str:
        return f"{self.sort} {self.text!r}"


def check(node: Node, signature: Signature) -> Checked:
    """Sort-check a term; the result says its sort and which variables and types it names."""
    out = Checked(sort=BOOL)
    out.sort = _Checker(signature, out).term(node, {}).sort
    return out


class _Checker:
    def __init__(self, sig: Signature, out: Checked):
        self.sig, self.out = sig, out

    def term(self, node: Node, scope: Mapping[str, str]) -> _Typed:
        if isinstance(node, str):
            return self.atom(node, scope)
        if not node:
            raise SmtError("bad SMT-LIB: empty '()'")
        head, args = node[0], node[1:]
        if not isinstance(head, str):
            raise SmtError(f"bad SMT-LIB: {show(node)!r} applies a term, not an operator")
        if head == "let":
            return self.let(node, scope)
        if head in ("forall", "exists"):
            return self.quantifier(node, scope)
        if head == "!":
            if not args:
                raise SmtError("bad SMT-LIB: '!' needs a term to annotate")
            return self.term(args[0], scope)
        if head in OPERATORS and head not in ("true", "false"):
            return self.apply(head, [self.term(a, scope) for a in args], node)
        if head in scope or head in self.sig.variables or head in self.sig.values:
            raise SmtError(f"bad SMT-LIB: {head!r} is a name, not an operator, in {show(node)!r}")
        raise SmtError(f"bad SMT-LIB: unknown operator {head!r} in {show(node)!r}")

    def atom(self, tok: str, scope: Mapping[str, str]) -> _Typed:
        if tok in scope:
            return _Typed(scope[tok], tok)
        if tok in self.sig.variables:
            sort = self.sig.variables[tok]
            self.out.variables.add(tok)
            if sort not in (BOOL, INT, REAL):
                self.out.types.add(sort)
            return _Typed(sort, tok)
        if tok in self.sig.values:
            self.out.types.add(self.sig.values[tok])
            return _Typed(self.sig.values[tok], tok)
        if tok in ("true", "false"):
            return _Typed(BOOL, tok)
        if _INT_RE.match(tok):
            return _Typed(INT, tok, numeral=True)
        if _DECIMAL_RE.match(tok):
            return _Typed(REAL, tok)
        if tok in OPERATORS:
            raise SmtError(f"bad SMT-LIB: operator {tok!r} used without arguments")
        if tok[0] in '|"#:' or tok[0].isdigit() or tok[0] in "-.":
            raise SmtError(f"bad SMT-LIB: {tok!r} is not a numeral, a variable or a value (quoted symbols, strings and bit-vectors are not supported)")
        raise SmtError(f"unknown variable {tok!r}")

    # -- operators -------------------------------------------------------------------------
    def apply(self, op: str, args: list[_Typed], node: list) -> _Typed:
        if op in ("and", "or"):
            self.arity(op, args, 1)
            self.booleans(op, args)
            return _Typed(BOOL, node)
        if op in ("xor", "=>"):
            self.arity(op, args, 2)
            self.booleans(op, args)
            return _Typed(BOOL, node)
        if op == "not":
            self.arity(op, args, 1, 1)
            self.booleans(op, args)
            return _Typed(BOOL, node)
        if op in ("=", "distinct"):
            self.arity(op, args, 2)
            self.same_sort(op, args)
            return _Typed(BOOL, node)
        if op in ("<", "<=", ">", ">="):
            self.arity(op, args, 2)
            self.numbers(op, args)
            return _Typed(BOOL, node)
        if op == "ite":
            self.arity(op, args, 3, 3)
            self.booleans(op, args[:1])
            sort = self.same_sort(op, args[1:])
            return _Typed(sort, node, numeral=all(a.numeral for a in args[1:]))
        if op in ("+", "*", "-", "abs"):
            if op == "abs":
                self.arity(op, args, 1, 1)
            else:
                self.arity(op, args, 1 if op == "-" else 2)
            sort = self.numbers(op, args)
            return _Typed(sort, node, numeral=all(a.numeral for a in args))
        if op in ("div", "mod"):
            self.arity(op, args, 2, 2 if op == "mod" else None)
            for i, a in enumerate(args):
                if a.sort != INT:
                    raise SmtError(f"type mismatch: {op!r} is integer division and needs ints; argument {i + 1} is {a.describe()} in {show(node)!r}")
            return _Typed(INT, node)
        if op == "/":
            self.arity(op, args, 2)
            for i, a in enumerate(args):
                if a.sort != REAL and not a.numeral:
                    hint = f"; use div for ints, or (to_real {a.text})" if a.sort == INT else ""
                    raise SmtError(f"type mismatch: '/' is real division and needs reals; argument {i + 1} is {a.describe()}{hint} in {show(node)!r}")
            return _Typed(REAL, node)
        if op in ("to_real", "to_int", "is_int"):
            self.arity(op, args, 1, 1)
            want = INT if op == "to_real" else REAL
            a = args[0]
            if a.sort != want and not (want == REAL and a.numeral):
                raise SmtError(f"type mismatch: {op!r} needs {'an int' if want == INT else 'a real'}; got {a.describe()} in {show(node)!r}")
            return _Typed({"to_real": REAL, "to_int": INT, "is_int": BOOL}[op], node)
        raise SmtError(f"bad SMT-LIB: unknown operator {op!r}")  # pragma: no cover (OPERATORS is exhaustive)

    @staticmethod
    def arity(op: str, args: list[_Typed], least: int, most: int | None = None) -> None:
        if len(args) < least or (most is not None and len(args) > most):
            want = str(least) if most == least else f"at least {least}" if most is None else f"{least} to {most}"
            raise SmtError(f"bad SMT-LIB: wrong number of arguments to {op!r}: {want} expected, {len(args)} given")

    @staticmethod
    def booleans(op: str, args: list[_Typed]) -> None:
        for i, a in enumerate(args):
            if a.sort != BOOL:
                raise SmtError(f"type mismatch: {op!r} needs booleans; argument {i + 1} is {a.describe()}")

    @staticmethod
    def numbers(op: str, args: list[_Typed]) -> str:
        """The common numeric sort of ``args``: int numerals count as reals beside reals; any
        other mix of int and real needs an explicit conversion."""
        for i, a in enumerate(args):
            if a.sort not in NUMERIC:
                raise SmtError(f"type mismatch: {op!r} needs numbers; argument {i + 1} is {a.describe()}")
        reals = [a for a in args if a.sort == REAL]
        if not reals:
            return INT
        ints = [a for a in args if a.sort == INT and not a.numeral]
        if ints:
            raise SmtError(
                f"type mismatch: {op!r} mixes {ints[0].describe()} with {reals[0].describe()}; "
                f"write (to_real {ints[0].text}) if that is meant"
            )
        return REAL

    def same_sort(self, op: str, args: list[_Typed]) -> str:
        if all(a.sort in NUMERIC for a in args):
            return self.numbers(op, args)
        first = args[0]
        for a in args[1:]:
            if a.sort != first.sort:
                raise SmtError(f"type mismatch: {op!r} compares {first.describe()} with {a.describe()}")
        return first.sort

    # -- binders ---------------------------------------------------------------------------
    def let(self, node: list, scope: Mapping[str, str]) -> _Typed:
        if len(node) != 3 or not isinstance(node[1], list) or not node[1]:
            raise SmtError(f"bad SMT-LIB: expected (let ((name term) ...) body), got {show(node)!r}")
        inner = dict(scope)
        for b in node[1]:
            if not (isinstance(b, list) and len(b) == 2 and isinstance(b[0], str)):
                raise SmtError(f"bad SMT-LIB: a let binding is (name term), got {show(b)!r}")
            self.binder_name(b[0])
            inner[b[0]] = self.term(b[1], scope).sort  # bindings are parallel: they see the outer scope
        return self.term(node[2], inner)

    def quantifier(self, node: list, scope: Mapping[str, str]) -> _Typed:
        if len(node) != 3 or not isinstance(node[1], list) or not node[1]:
            raise SmtError(f"bad SMT-LIB: expected ({node[0]} ((name Sort) ...) body), got {show(node)!r}")
        inner = dict(scope)
        for b in node[1]:
            if not (isinstance(b, list) and len(b) == 2 and isinstance(b[0], str) and isinstance(b[1], str)):
                raise SmtError(f"bad SMT-LIB: a sorted variable is (name Sort), got {show(b)!r}")
            self.binder_name(b[0])
            inner[b[0]] = self.sort_named(b[1])
        body = self.term(node[2], inner)
        if body.sort != BOOL:
            raise SmtError(f"type mismatch: the body of {node[0]!r} is {body.sort}, not boolean")
        return _Typed(BOOL, node)

    def binder_name(self, name: str) -> None:
        if name in RESERVED or not re.match(r"^[A-Za-z_][A-Za-z0-9_.-]*$", name):
            raise SmtError(f"bad SMT-LIB: {name!r} cannot name a bound variable")

    def sort_named(self, name: str) -> str:
        if name in _SORT_NAMES:
            return _SORT_NAMES[name]
        if name in self.sig.types:
            self.out.types.add(name)
            return name
        raise SmtError(f"unknown sort {name!r} (Bool, Int, Real or one of {sorted(self.sig.types)})")
