"""The Z3 decision procedure that turns a translation into a finding (docs/verify.md, "Results").

With R = the policy's rules, P = premises and C = claims:

1. R ∧ P unsat        → IMPOSSIBLE, contradicting rules = the (minimised) unsat core;
2. R ∧ P ∧ ¬C unsat   → VALID, supporting rules = the core, a claims-true scenario;
3. R ∧ P ∧ C unsat    → INVALID, contradicting rules = the core (and a claims-false scenario);
4. otherwise          → SATISFIABLE, a claims-true and a claims-false scenario reduced to the
                        variables whose values differ (the false one chosen closest to the true one);

a solver ``unknown`` (timeout, nonlinear arithmetic …) → TOO_COMPLEX; nothing translated →
NO_TRANSLATIONS. Rules enter the solver guarded by one indicator literal each, so an unsat core
names rules; cores are minimised by deletion. Every policy has its own Z3 context, rules keep
their declared order, and the solver seed is fixed, so the same input gives the same finding.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Sequence

import z3

from awarl.verify.equivalence import equivalent
from awarl.verify.findings import (
    Ambiguity,
    Finding,
    LogicWarning,
    LogicWarningType,
    Result,
    RuleRef,
    Scenario,
    Statement,
    Translation,
)
from awarl.verify.policy import Policy
from awarl.verify.translate import TranslationTimeout, Translator

__all__ = ["Reasoner", "check", "equivalent"]  # equivalent lives in awarl.verify.equivalence


class _OutOfTime(Exception):
    pass


class _Clock:
    """The per-finding time budget shared by all the solver calls of one check."""

    def __init__(self, budget_ms: int):
        self.deadline = time.monotonic() + budget_ms / 1000.0

    def left_ms(self) -> int:
        return max(0, int((self.deadline - time.monotonic()) * 1000))


class Reasoner:
    """Checks translations against one policy.

    ``timeout_ms`` bounds the whole check of one finding (all its solver calls together); when
    it runs out before the result is decided the finding is TOO_COMPLEX. Core minimisation and
    the closest-scenario search stop early when time is short, keeping correct but larger answers.
    """

    def __init__(self, policy: Policy, *, timeout_ms: int = 5000, minimize_cores: bool = True, policy_arn: str = ""):
        if timeout_ms <= 0:
            raise ValueError(f"timeout_ms must be positive, got {timeout_ms}")
        self.policy = policy
        self.timeout_ms = timeout_ms
        self.minimize_cores = minimize_cores
        self.policy_arn = policy_arn
        ctx = policy.ctx
        # Names start with "__": policy names must start with a letter, so they cannot collide.
        self._lits = [z3.Bool(f"__rule_{i}", ctx) for i in range(len(policy.rules))]
        self._index = {lit.get_id(): i for i, lit in enumerate(self._lits)}
        self._lit_asts = [lit.as_ast() for lit in self._lits]
        self._guarded = [z3.Implies(lit, policy.compiled[r.id]) for lit, r in zip(self._lits, policy.rules)]
        self._guarded_asts = [g.as_ast() for g in self._guarded]
        # One literal per variable: "keep this variable's value" in the closest-scenario search.
        self._keep = [z3.Bool(f"__keep_{i}", ctx) for i in range(len(policy.variables))]
        self._keep_index = {lit.get_id(): i for i, lit in enumerate(self._keep)}
        self._alone_solver: z3.Solver | None = None

    # -- public --------------------------------------------------------------------------------
    def check(self, item: Translation | Ambiguity) -> Finding:
        if isinstance(item, Ambiguity):
            return self._ambiguous(item)
        if item.is_empty:
            return Finding(Result.NO_TRANSLATIONS, translation=item, detail="nothing maps to the policy's variables")
        premises = [self.policy.parse(s.logic, f"premise {i}") for i, s in enumerate(item.premises)]
        claims = [self.policy.parse(s.logic, f"claim {i}") for i, s in enumerate(item.claims)]
        clock = _Clock(self.timeout_ms)
        try:
            return self._decide(item, premises, claims, clock)
        except _OutOfTime as exc:
            return Finding(Result.TOO_COMPLEX, translation=item, detail=str(exc))

    def check_expressions(self, premises: Sequence[str], claims: Sequence[str]) -> Finding:
        """Check SMT-LIB premises and claims given directly (as ``awarl verify check --premise``)."""
        return self.check(Translation(premises=[Statement(p) for p in premises], claims=[Statement(c) for c in claims]))

    # -- the decision procedure ------------------------------------------------------------
    def _decide(self, t: Translation, premises: list[z3.BoolRef], claims: list[z3.BoolRef], clock: _Clock) -> Finding:
        warning = self._logic_warning(t, premises, claims, clock)
        # A fresh solver per check: a reused one keeps learned lemmas, which changes models and
        # cores from one call to the next; determinism is worth the few ms of re-adding rules.
        return self._decide_in(self._solver(), t, premises, claims, warning, clock)

    def _decide_in(
        self, s: z3.Solver, t: Translation, premises: list[z3.BoolRef], claims: list[z3.BoolRef],
        warning: LogicWarning | None, clock: _Clock,
    ) -> Finding:
        ctx = self.policy.ctx
        s.add(*premises)
        if self._run(s, clock, "rules and premises") == z3.unsat:
            core = self._core(s, clock)
            return Finding(Result.IMPOSSIBLE, translation=t, contradicting_rules=self._refs(core), logic_warning=warning)
        if not claims:
            return Finding(Result.NO_TRANSLATIONS, translation=t, logic_warning=warning, detail="no claims to check")
        claim = z3.And(*claims) if len(claims) > 1 else claims[0]

        s.push()
        s.add(z3.Not(claim, ctx))
        negated = self._run(s, clock, "rules, premises and negated claims")
        core = self._core(s, clock) if negated == z3.unsat else []
        false_model = s.model() if negated == z3.sat else None
        s.pop()
        if negated == z3.unsat:
            s.add(claim)
            self._run(s, clock, "claims-true scenario")
            shown = self._relevant(premises, claims, core)
            return Finding(
                Result.VALID, translation=t, supporting_rules=self._refs(core),
                claims_true_scenario=self._scenario(s.model(), shown), logic_warning=warning,
            )

        s.push()
        s.add(claim)
        if self._run(s, clock, "rules, premises and claims") == z3.unsat:
            core = self._core(s, clock)
            shown = self._relevant(premises, claims, core)
            return Finding(
                Result.INVALID, translation=t, contradicting_rules=self._refs(core),
                claims_false_scenario=self._scenario(false_model, shown), logic_warning=warning,
            )
        true_model = s.model()
        s.pop()
        false_model = self._closest(s, z3.Not(claim, ctx), true_model, clock) or false_model
        differ = [
            v.name for v in self.policy.variables
            if self.policy.model_value(true_model, v.name) != self.policy.model_value(false_model, v.name)
        ]
        return Finding(
            Result.SATISFIABLE, translation=t,
            claims_true_scenario=self._scenario(true_model, differ),
            claims_false_scenario=self._scenario(false_model, differ),
            logic_warning=warning,
        )

    def _ambiguous(self, amb: Ambiguity) -> Finding:
        """TRANSLATION_AMBIGUOUS with up to two scenarios where the leading options disagree."""
        ctx = self.policy.ctx
        options = amb.options[:2]
        formulas = []
        for k, opt in enumerate(options):
            parts = [self.policy.parse(s.logic, f"option {k}") for t in opt for s in (*t.premises, *t.claims)]
            formulas.append(z3.And(*parts) if parts else z3.BoolVal(True, ctx))
        scenarios: list[Scenario] = []
        if len(formulas) == 2:
            shown = self.policy.variables_in(formulas)
            clock = _Clock(self.timeout_ms)
            for a, b in ((0, 1), (1, 0)):
                s = self._solver()
                s.add(formulas[a], z3.Not(formulas[b], ctx))
                try:
                    if self._run(s, clock, "difference scenario") == z3.sat:
                        scenarios.append(self._scenario(s.model(), shown))
                except _OutOfTime:
                    break
        return Finding(
            Result.TRANSLATION_AMBIGUOUS, options=[list(opt) for opt in options], difference_scenarios=scenarios,
            detail=f"translation confidence {amb.confidence:.2f}",
        )

    # -- helpers ---------------------------------------------------------------------------
    def _solver(self) -> z3.Solver:
        s = z3.Solver(ctx=self.policy.ctx)
        s.set("random_seed", 0)
        ref = self.policy.ctx.ref()
        for ast in self._guarded_asts:  # the C API: z3py's per-argument casts cost 5x the asserts
            z3.Z3_solver_assert(ref, s.solver, ast)
        return s

    def _check(self, s: z3.Solver, rule_indexes: Sequence[int], extra: Sequence[z3.BoolRef] = ()) -> z3.CheckSatResult:
        """``s.check(*lits, *extra)`` through Z3's C API: z3py's per-argument casts cost more than the
        check itself on a policy of a hundred rules."""
        lits = [*(self._lit_asts[i] for i in rule_indexes), *(e.as_ast() for e in extra)]
        asts = (z3.Ast * len(lits))(*lits)
        return z3.CheckSatResult(z3.Z3_solver_check_assumptions(self.policy.ctx.ref(), s.solver, len(lits), asts))

    def _run(self, s: z3.Solver, clock: _Clock, what: str, assume: Sequence[z3.BoolRef] | None = None) -> z3.CheckSatResult:
        left = clock.left_ms()
        if left <= 0:
            raise _OutOfTime(f"time budget of {self.timeout_ms} ms spent before checking {what}")
        s.set("timeout", left)
        result = self._check(s, range(len(self._lits))) if assume is None else s.check(*assume)
        if result == z3.unknown:
            raise _OutOfTime(f"solver returned unknown on {what} ({s.reason_unknown()})")
        return result

    def _core(self, s: z3.Solver, clock: _Clock) -> list[int]:
        """Rule indexes of the unsat core, minimised by deletion while time allows."""
        core = sorted(self._index[c.get_id()] for c in s.unsat_core() if c.get_id() in self._index)
        if not self.minimize_cores:
            return core
        i = 0
        while i < len(core):
            left = clock.left_ms()
            if left <= 0:
                break
            trial = core[:i] + core[i + 1 :]
            s.set("timeout", left)
            result = self._check(s, trial)
            if result == z3.unsat:
                smaller = {self._index[c.get_id()] for c in s.unsat_core() if c.get_id() in self._index}
                core = [j for j in trial if j in smaller]
            else:  # sat: rule i is needed; unknown: keep it, the core stays correct
                i += 1
        return core

    def _closest(self, s: z3.Solver, goal: z3.BoolRef, model: z3.ModelRef, clock: _Clock) -> z3.ModelRef | None:
        """A model of R ∧ P ∧ goal (``s`` holds R and P) that agrees with ``model`` on as many variables
        as possible, or None when time runs out first.

        Exact, core-guided (implicit hitting sets): keep every variable's value unless a smallest set
        of variables that hits every conflict found so far is let go; an unsat check names a new
        conflict (its core of kept values). A few checks on the solver at hand, where an
        ``Optimize`` rebuilt from the rules took ~50 ms a finding on a world policy."""
        s.push()
        try:
            s.add(goal)
            for lit, v in zip(self._keep, self.policy.variables):
                const = self.policy.consts[v.name]
                s.add(z3.Implies(lit, const == model.eval(const, model_completion=True)))
            conflicts: list[set[int]] = []
            while True:
                left = clock.left_ms()
                if left <= 0:
                    return None
                drop = _smallest_hitting_set(conflicts)
                s.set("timeout", left)
                result = self._check(s, range(len(self._lits)), [k for i, k in enumerate(self._keep) if i not in drop])
                if result == z3.sat:
                    return s.model()
                if result != z3.unsat:
                    return None
                conflict = {self._keep_index[c.get_id()] for c in s.unsat_core() if c.get_id() in self._keep_index}
                if not conflict:  # the goal fails whatever the values: no such scenario
                    return None
                conflicts.append(conflict)
        finally:
            s.pop()

    def _logic_warning(self, t: Translation, premises: list[z3.BoolRef], claims: list[z3.BoolRef], clock: _Clock) -> LogicWarning | None:
        """ALWAYS_FALSE / ALWAYS_TRUE when premises or claims are contradictions / tautologies alone."""
        found: dict[str, LogicWarningType] = {}
        for part, exprs in (("premises", premises), ("claims", claims)):
            if not exprs:
                continue
            conj = z3.And(*exprs) if len(exprs) > 1 else exprs[0]
            if self._alone(conj, clock) == z3.unsat:
                found[part] = LogicWarningType.ALWAYS_FALSE
            elif self._alone(z3.Not(conj, self.policy.ctx), clock) == z3.unsat:
                found[part] = LogicWarningType.ALWAYS_TRUE
        if not found:
            return None
        kind = LogicWarningType.ALWAYS_FALSE if LogicWarningType.ALWAYS_FALSE in found.values() else LogicWarningType.ALWAYS_TRUE
        return LogicWarning(
            type=kind,
            premises=list(t.premises) if found.get("premises") is kind else [],
            claims=list(t.claims) if found.get("claims") is kind else [],
        )

    def _alone(self, expr: z3.BoolRef, clock: _Clock) -> z3.CheckSatResult:
        """``expr`` without the rules, on one solver kept for these checks (push / pop): only sat or
        unsat is read here, which learned lemmas cannot change, and a fresh solver per check cost
        ~8 ms on a 120-person world (4 per finding: two thirds of a chat check's CPU)."""
        if self._alone_solver is None:
            self._alone_solver = z3.Solver(ctx=self.policy.ctx)
            self._alone_solver.set("random_seed", 0)
        s = self._alone_solver
        s.set("timeout", max(1, min(clock.left_ms(), self.timeout_ms // 10)))
        s.push()
        try:
            s.add(expr)
            return s.check()
        finally:
            s.pop()

    def _relevant(self, premises: list[z3.BoolRef], claims: list[z3.BoolRef], core: list[int]) -> list[str]:
        rules = [self.policy.compiled[self.policy.rules[i].id] for i in core]
        return self.policy.variables_in([*premises, *claims, *rules])

    def _scenario(self, model: z3.ModelRef, names: Sequence[str]) -> Scenario:
        return Scenario(assignments={n: self.policy.model_value(model, n) for n in names})

    def _refs(self, core: list[int]) -> list[RuleRef]:
        rules = [self.policy.rules[i] for i in core]
        return [RuleRef(identifier=r.id, policy_version_arn=self.policy_arn, description=r.description) for r in rules]


def check(policy: Policy, question: str, answer: str, translator: Translator, *, reasoner: Reasoner | None = None) -> list[Finding]:
    """Translate a question and answer and check every statement: one finding per statement.

    A translator that runs out of time (`TranslationTimeout`, e.g. a pattern regex past its
    budget) gives one TOO_COMPLEX finding.

    Nothing translated gives one NO_TRANSLATIONS finding; answer text that stays untranslated
    beside translated statements adds a NO_TRANSLATIONS finding listing it, since VALID covers
    only what was translated.
    """
    reasoner = reasoner or Reasoner(policy)
    try:
        items = translator.translate(question, answer, policy)
    except TranslationTimeout as exc:
        # The translation was cut short, so nothing about the answer is known: not VALID, not
        # "nothing to check" either.
        return [Finding(Result.TOO_COMPLEX, translation=Translation(untranslated_claims=[answer] if answer.strip() else []), detail=str(exc))]
    if not items:
        items = [Translation(untranslated_claims=[answer] if answer.strip() else [])]
    findings = [reasoner.check(item) for item in items]
    leftovers: list[str] = []
    for item in items:
        if isinstance(item, Translation) and not item.is_empty:
            leftovers.extend(c for c in item.untranslated_claims if c not in leftovers)
    if leftovers and any(f.result is not Result.NO_TRANSLATIONS for f in findings):
        findings.append(
            Finding(Result.NO_TRANSLATIONS, translation=Translation(untranslated_claims=leftovers), detail="part of the answer is not translated")
        )
    return findings


def _smallest_hitting_set(sets: Sequence[set[int]], budget: int = 20_000) -> set[int]:
    """A smallest set meeting every one of ``sets`` (the first in sorted order among equals), chosen from
    their union: the variables a closest scenario lets go. Past ``budget`` candidates (large conflicts
    on a policy of many variables) a greedy one: still a hitting set, so the scenario stays correct,
    only perhaps not the closest."""
    pool = sorted(set().union(*sets)) if sets else []
    tried = 0
    for size in range(len(pool) + 1):
        for pick in itertools.combinations(pool, size):
            chosen = set(pick)
            if all(chosen & s for s in sets):
                return chosen
            tried += 1
            if tried > budget:
                return _greedy_hitting_set(sets)
    return set(pool)


def _greedy_hitting_set(sets: Sequence[set[int]]) -> set[int]:
    """Repeatedly the element in the most sets not yet met (the smallest index among equals)."""
    chosen: set[int] = set()
    left = list(sets)
    while left:
        counts: dict[int, int] = {}
        for s in left:
            for i in s:
                counts[i] = counts.get(i, 0) + 1
        best = min(counts, key=lambda i: (-counts[i], i))
        chosen.add(best)
        left = [s for s in left if best not in s]
    return chosen
