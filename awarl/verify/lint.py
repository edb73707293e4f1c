"""`awarl verify lint`: conflicting rules, unused variables, rules that can never fire.

- **conflict**: the rules together are unsatisfiable (every input would be IMPOSSIBLE), a rule
  contradicts itself through other rules, or two implication rules whose conditions can hold
  together (alone, and under the rules without either of the two) demand incompatible things; the
  message names the minimised set of rules involved.
- **never fires**: an implication ``(=> A B)`` whose condition A is impossible under the other
  rules, so the rule says nothing. When A is possible under the other rules but not under all
  of them (the rule's conclusion leads back to ``not A``), that is a conflict.
- **unused variable**: declared but named by no rule (translation can still set it, but no
  check can ever depend on it).
- **axiom** (info): a rule that is not an implication holds unconditionally; AWS's guidance is that
  axioms easily make inputs IMPOSSIBLE.
- **too complex** (warning): what the time budget or the solver could not decide, so a clean
  report never hides an unfinished check.

The pairwise conflict check is quadratic in the worst case, so most of the work is skipped by
models: one model of "the rules, A's condition, and any of the other conditions" clears every
rule whose condition it makes true (those conditions can hold together), and only the pairs no
model clears get their own solver call. The whole lint runs under one time budget.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import z3

from awarl.verify.policy import Policy

Progress = Callable[[str, int, int], None]  # (stage, done, total)


@dataclass(frozen=True)
class LintIssue:
    kind: str  # conflict | never_fires | unused_variable | axiom | too_complex
    message: str
    rules: tuple[str, ...] = ()
    variable: str = ""

    @property
    def severity(self) -> str:
        if self.kind == "axiom":
            return "info"
        return "warning" if self.kind in ("unused_variable", "too_complex") else "error"

    def to_dict(self) -> dict[str, object]:
        return {"kind": self.kind, "severity": self.severity, "message": self.message, "rules": list(self.rules), "variable": self.variable}


class _OutOfTime(Exception):
    """The budget or one solver call ran out; ``open`` lists the candidates left undecided."""

    def __init__(self, why: str, open_: Sequence[int] = ()):
        super().__init__(why)
        self.why, self.open = why, list(open_)


def lint(policy: Policy, timeout_ms: int = 2000, *, budget_s: float | None = 60.0, progress: Progress | None = None) -> list[LintIssue]:
    """Lint a policy. ``timeout_ms`` bounds each solver call, ``budget_s`` the whole lint (None:
    no limit); what either leaves undecided is reported as a ``too_complex`` issue.
    ``progress(stage, done, total)`` is called as the checks advance."""
    if timeout_ms <= 0:
        raise ValueError(f"timeout_ms must be positive, got {timeout_ms}")
    if budget_s is not None and budget_s <= 0:
        raise ValueError(f"budget_s must be positive, got {budget_s}")
    return _Linter(policy, timeout_ms, budget_s, progress or (lambda stage, done, total: None)).run()


class _Linter:
    def __init__(self, policy: Policy, timeout_ms: int, budget_s: float | None, progress: Progress):
        self.policy, self.timeout_ms, self.budget_s, self.progress = policy, timeout_ms, budget_s, progress
        self.deadline = None if budget_s is None else time.monotonic() + budget_s
        ctx = policy.ctx
        self.ids = [r.id for r in policy.rules]
        self.lits = [z3.Bool(f"__lint_{i}", ctx) for i in range(len(self.ids))]
        self.index = {lit.get_id(): i for i, lit in enumerate(self.lits)}
        self.s = self.solver()
        for lit, rid in zip(self.lits, self.ids):
            self.s.add(z3.Implies(lit, policy.compiled[rid]))
        self.bare = self.solver()  # the conditions only, no rules
        self.issues: list[LintIssue] = []

    # -- the stages ------------------------------------------------------------------------
    def run(self) -> list[LintIssue]:
        policy = self.policy
        used = set(policy.variables_in(list(policy.compiled.values())))
        self.issues += [
            LintIssue("unused_variable", f"variable '{v.name}' is used by no rule", variable=v.name)
            for v in policy.variables if v.name not in used
        ]
        self.progress("consistency", 0, 1)
        try:
            whole = self.core_of(self.lits)
        except _OutOfTime as exc:
            self.too_complex(f"could not decide whether the rules are consistent ({exc.why}); nothing else was checked", self.ids)
            return self.issues
        self.progress("consistency", 1, 1)
        if whole is not None:
            names = tuple(self.ids[i] for i in whole)
            self.issues.append(LintIssue("conflict", f"rules {', '.join(names)} contradict each other: every input is IMPOSSIBLE", names))
            return self.issues  # with an inconsistent rule set the finer checks below say nothing

        conditions: dict[int, z3.BoolRef] = {}
        for i, rid in enumerate(self.ids):
            expr = policy.compiled[rid]
            if z3.is_app_of(expr, z3.Z3_OP_IMPLIES):
                conditions[i] = expr.arg(0)
            else:
                self.issues.append(LintIssue("axiom", f"rule '{rid}' is not an implication: it holds for every input", (rid,)))
        self.conditions = conditions
        self.guards = {i: z3.Bool(f"__cond_{i}", policy.ctx) for i in conditions}
        for i, g in self.guards.items():
            self.s.add(z3.Implies(g, conditions[i]))
            self.bare.add(z3.Implies(g, conditions[i]))
        dead = self.never_fires(list(conditions))
        self.conflicts([i for i in conditions if i not in dead])
        return self.issues

    def never_fires(self, candidates: list[int]) -> set[int]:
        """Implications whose condition is impossible under the other rules."""
        total = len(candidates)
        try:
            # A condition true in some model of all the rules can fire: clear those in bulk.
            left = self.cleared_by_models(self.s, self.lits, candidates, "never_fires", total)
        except _OutOfTime as exc:
            why = "" if self.out_of_budget() else f" ({exc.why})"
            self.too_complex(f"{len(exc.open)} rule(s) not checked for never firing{why}", [self.ids[i] for i in exc.open])
            return set()
        dead: set[int] = set()
        for k, i in enumerate(left):
            self.progress("never_fires", total - len(left) + k, total)
            others = [self.lits[j] for j in range(len(self.ids)) if j != i]
            try:
                core = self.core_of([*others, self.guards[i]])
            except _OutOfTime as exc:
                if self.out_of_budget():
                    rest = left[k:]
                    self.too_complex(f"{len(rest)} rule(s) not checked for never firing", [self.ids[j] for j in rest])
                    break
                self.too_complex(f"could not decide whether rule '{self.ids[i]}' can fire ({exc.why})", [self.ids[i]])
                continue
            if core is not None:
                dead.add(i)
                because = f" given rules {', '.join(self.ids[j] for j in core)}" if core else " on its own"
                self.issues.append(LintIssue(
                    "never_fires", f"rule '{self.ids[i]}' can never fire: its condition is impossible{because}",
                    (self.ids[i], *(self.ids[j] for j in core)),
                ))
                continue
            # Its condition can hold under the other rules but not under all of them: the rule's
            # own conclusion, through other rules, contradicts its condition.
            try:
                core = self.core_of([*self.lits, self.guards[i]])
            except _OutOfTime as exc:
                self.too_complex(f"could not decide whether rule '{self.ids[i]}' contradicts itself ({exc.why})", [self.ids[i]])
                continue
            if core is not None:
                dead.add(i)
                names = tuple(self.ids[j] for j in core)
                self.issues.append(LintIssue(
                    "conflict", f"rules {', '.join(names)} contradict each other whenever the condition of '{self.ids[i]}' holds", names,
                ))
        self.progress("never_fires", total, total)
        return dead

    def conflicts(self, live: list[int]) -> None:
        """Pairs of implications whose conditions can hold together alone but not under the rules."""
        variables = {i: set(self.policy.variables_in([self.policy.compiled[self.ids[i]]])) for i in live}
        total = len(live)
        for pos, a in enumerate(live):
            self.progress("conflicts", pos, total)
            partners = [b for b in live[pos + 1 :] if variables[a] & variables[b]]
            try:
                # Conditions some model of the rules makes true together make no conflict; nor do
                # conditions that exclude each other on their own (the minimised core would hold
                # no rule). Only the pairs in between need a core. Rules first: they clear most.
                apart = self.cleared_by_models(self.s, [*self.lits, self.guards[a]], partners, "conflicts", None)
                excluded = set(self.cleared_by_models(self.bare, [self.guards[a]], apart, "conflicts", None))
                for b in apart:
                    if b not in excluded:
                        self.pair(a, b)
            except _OutOfTime as exc:
                if self.out_of_budget():
                    rest = live[pos:]
                    self.too_complex(
                        f"conflicts of {len(rest)} rule(s) with the rules after them not checked", [self.ids[j] for j in rest]
                    )
                    return
                self.too_complex(f"could not decide the conflicts of rule '{self.ids[a]}' ({exc.why})", [self.ids[a]])
        self.progress("conflicts", total, total)

    def pair(self, a: int, b: int) -> None:
        """A conflict when both rules are needed for the contradiction (without either one, the
        two conditions can hold together): a test that does not depend on which of several
        minimal cores the solver happens to find. Every core then holds both; one names them."""
        guards = [self.guards[a], self.guards[b]]
        for k in (a, b):
            without = [lit for j, lit in enumerate(self.lits) if j != k]
            result = self.check([*without, *guards])
            if result == z3.unknown:
                raise _OutOfTime(f"the solver returned unknown ({self.s.reason_unknown()})")
            if result == z3.unsat:
                return
        core = self.core_of([*self.lits, *guards])
        if core is not None:
            names = tuple(self.ids[j] for j in core)
            self.issues.append(LintIssue(
                "conflict", f"rules {', '.join(names)} conflict when the conditions of '{self.ids[a]}' and '{self.ids[b]}' both hold", names,
            ))

    # -- solver helpers --------------------------------------------------------------------
    def cleared_by_models(self, s: z3.Solver, assumptions: list[z3.BoolRef], candidates: list[int], stage: str, total: int | None) -> list[int]:
        """The candidates whose condition no model of ``s`` under ``assumptions`` makes true.

        Each round asks for a model in which at least one remaining condition holds and drops
        every condition that model makes true; unsat means the rest are impossible. On time out
        `_OutOfTime` carries the candidates still open.
        """
        left = list(candidates)
        while left:
            if total is not None:
                self.progress(stage, total - len(left), total)
            s.push()
            s.add(z3.Or(*[self.conditions[i] for i in left]))
            try:
                result = self.check(assumptions, s)
                model = s.model() if result == z3.sat else None
                why = s.reason_unknown() if result == z3.unknown else ""
            except _OutOfTime as exc:
                raise _OutOfTime(exc.why, left) from None
            finally:
                s.pop()
            if result == z3.unknown:
                raise _OutOfTime(f"the solver returned unknown ({why})", left)
            if model is None:
                return left
            left = [i for i in left if not z3.is_true(model.eval(self.conditions[i], model_completion=True))]
        return left

    def core_of(self, assumptions: Sequence[z3.BoolRef]) -> list[int] | None:
        """The minimised rule core when the assumptions are unsat, else None. Minimisation stops
        (keeping a correct, larger core) when time runs short."""
        result = self.check(assumptions)
        if result == z3.unknown:
            raise _OutOfTime(f"the solver returned unknown ({self.s.reason_unknown()})", [])
        if result != z3.unsat:
            return None
        index = self.index
        core = sorted(index[c.get_id()] for c in self.s.unsat_core() if c.get_id() in index)
        extra = [a for a in assumptions if a.get_id() not in index]
        i = 0
        while i < len(core):
            trial = core[:i] + core[i + 1 :]
            try:
                result = self.check([*(self.lits[j] for j in trial), *extra])
            except _OutOfTime:
                break
            if result == z3.unsat:
                keep = {index[c.get_id()] for c in self.s.unsat_core() if c.get_id() in index}
                core = [j for j in trial if j in keep]
            else:  # sat: rule i is needed; unknown: keep it, the core stays correct
                i += 1
        return core

    def solver(self) -> z3.Solver:
        s = z3.Solver(ctx=self.policy.ctx)
        s.set("random_seed", 0)
        return s

    def check(self, assumptions: Sequence[z3.BoolRef], s: z3.Solver | None = None) -> z3.CheckSatResult:
        """``s.check(*assumptions)`` through Z3's C API: z3py's per-argument casts cost more than
        the check itself when every rule is an assumption."""
        s = s or self.s
        s.set("timeout", self.call_ms())
        asts = (z3.Ast * len(assumptions))(*[a.as_ast() for a in assumptions])
        return z3.CheckSatResult(z3.Z3_solver_check_assumptions(self.policy.ctx.ref(), s.solver, len(assumptions), asts))

    def call_ms(self) -> int:
        if self.deadline is None:
            return self.timeout_ms
        left = int((self.deadline - time.monotonic()) * 1000)
        if left <= 0:
            raise _OutOfTime(f"the time budget of {self.budget_s:g} s is spent", [])
        return min(self.timeout_ms, left)

    def out_of_budget(self) -> bool:
        return self.deadline is not None and time.monotonic() >= self.deadline - 0.001

    def too_complex(self, what: str, rules: Sequence[str]) -> None:
        budget = f" within the time budget of {self.budget_s:g} s" if self.out_of_budget() else ""
        shown = ", ".join(rules[:5]) + (f" and {len(rules) - 5} more" if len(rules) > 5 else "")
        tail = f" ({shown})" if shown and len(rules) > 1 else ""
        self.issues.append(LintIssue("too_complex", f"{what}{budget}{tail}", tuple(rules)))
