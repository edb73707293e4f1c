"""`awarl verify lint`: conflicting rules, unused variables, rules that can never fire.

- **conflict**: the rules together are unsatisfiable (every input would be IMPOSSIBLE), or two
  implication rules whose conditions can hold together demand incompatible things; the
  message names the minimised set of rules involved.
- **never fires**: an implication ``(=> A B)`` whose condition A is impossible under the other
  rules, so the rule says nothing.
- **unused variable**: declared but named by no rule (translation can still set it, but no
  check can ever depend on it).
- **axiom** (info): a rule that is not an implication holds unconditionally; AWS's guidance is that
  axioms easily make inputs IMPOSSIBLE.
"""

from __future__ import annotations

from dataclasses import dataclass

import z3

from awarl.verify.policy import Policy


@dataclass(frozen=True)
class LintIssue:
    kind: str  # conflict | never_fires | unused_variable | axiom
    message: str
    rules: tuple[str, ...] = ()
    variable: str = ""

    @property
    def severity(self) -> str:
        return "info" if self.kind == "axiom" else "warning" if self.kind == "unused_variable" else "error"

    def to_dict(self) -> dict[str, object]:
        return {"kind": self.kind, "severity": self.severity, "message": self.message, "rules": list(self.rules), "variable": self.variable}


def lint(policy: Policy, timeout_ms: int = 2000) -> list[LintIssue]:
    issues: list[LintIssue] = []
    used = set(policy.variables_in(list(policy.compiled.values())))
    issues += [
        LintIssue("unused_variable", f"variable '{v.name}' is used by no rule", variable=v.name)
        for v in policy.variables if v.name not in used
    ]
    ctx = policy.ctx
    ids = [r.id for r in policy.rules]
    lits = [z3.Bool(f"__lint_{i}", ctx) for i in range(len(ids))]
    index = {lit.get_id(): i for i, lit in enumerate(lits)}
    s = z3.Solver(ctx=ctx)
    s.set("random_seed", 0)
    s.set("timeout", timeout_ms)
    for lit, rid in zip(lits, ids):
        s.add(z3.Implies(lit, policy.compiled[rid]))

    def core_of(assumptions: list[z3.BoolRef]) -> list[int] | None:
        """The minimised rule core when the assumptions are unsat, else None."""
        if s.check(*assumptions) != z3.unsat:
            return None
        core = sorted(index[c.get_id()] for c in s.unsat_core() if c.get_id() in index)
        extra = [a for a in assumptions if a.get_id() not in index]
        i = 0
        while i < len(core):
            trial = core[:i] + core[i + 1 :]
            if s.check(*[lits[j] for j in trial], *extra) == z3.unsat:
                keep = {index[c.get_id()] for c in s.unsat_core() if c.get_id() in index}
                core = [j for j in trial if j in keep]
            else:
                i += 1
        return core

    whole = core_of(lits)
    if whole is not None:
        names = tuple(ids[i] for i in whole)
        issues.append(LintIssue("conflict", f"rules {', '.join(names)} contradict each other: every input is IMPOSSIBLE", names))
        return issues  # with an inconsistent rule set the finer checks below say nothing

    conditions: dict[int, z3.BoolRef] = {}
    for i, rid in enumerate(ids):
        expr = policy.compiled[rid]
        if z3.is_app_of(expr, z3.Z3_OP_IMPLIES):
            conditions[i] = expr.arg(0)
        else:
            issues.append(LintIssue("axiom", f"rule '{rid}' is not an implication: it holds for every input", (rid,)))

    guards = {i: z3.Bool(f"__cond_{i}", ctx) for i in conditions}
    for i, g in guards.items():
        s.add(z3.Implies(g, conditions[i]))
    for i, g in guards.items():
        others = [lits[j] for j in range(len(ids)) if j != i]
        core = core_of([*others, g])
        if core is not None:
            because = f" given rules {', '.join(ids[j] for j in core)}" if core else " on its own"
            issues.append(LintIssue("never_fires", f"rule '{ids[i]}' can never fire: its condition is impossible{because}", (ids[i], *(ids[j] for j in core))))
    dead = {i for i in guards if any(x.rules[0] == ids[i] for x in issues if x.kind == "never_fires")}
    live = [i for i in guards if i not in dead]
    shared = {i: set(policy.variables_in([policy.compiled[ids[i]]])) for i in live}
    for a_pos, a in enumerate(live):
        for b in live[a_pos + 1 :]:
            if not shared[a] & shared[b]:
                continue
            core = core_of([*lits, guards[a], guards[b]])
            if core is not None and a in core and b in core:
                names = tuple(ids[j] for j in core)
                issues.append(LintIssue("conflict", f"rules {', '.join(names)} conflict when the conditions of '{ids[a]}' and '{ids[b]}' both hold", names))
    return issues
