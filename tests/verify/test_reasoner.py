"""The Z3 decision procedure: each result type, its rules and scenarios, timeouts, determinism, properties."""

from __future__ import annotations

import time

import z3
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from awarl.verify.findings import Ambiguity, LogicWarningType, Result, Statement, Translation
from awarl.verify.policy import policy_from_dict
from awarl.verify.reasoner import Reasoner, equivalent

from .conftest import LOAN


def test_valid_with_minimal_supporting_rules_and_a_claims_true_scenario(loan):
    f = Reasoner(loan).check_expressions(["(= plan premium)", "(= income 30000)", "(not has_default)"], ["approved", "(= rate 3.5)"])
    assert f.result is Result.VALID
    assert [r.identifier for r in f.supporting_rules] == ["premium_approved", "premium_rate"]
    assert f.claims_true_scenario.assignments == {"plan": "premium", "income": 30000, "has_default": False, "approved": True, "rate": 3.5}
    assert f.logic_warning is None


def test_invalid_names_the_contradicting_rule_and_a_claims_false_scenario(loan):
    f = Reasoner(loan).check_expressions(["(= plan premium)", "has_default"], ["approved"])
    assert f.result is Result.INVALID
    assert [r.identifier for r in f.contradicting_rules] == ["default_blocks"]
    assert f.contradicting_rules[0].description == "A past default blocks approval."
    assert f.claims_false_scenario.assignments["approved"] is False
    assert f.claims_false_scenario.assignments["has_default"] is True


def test_satisfiable_scenarios_differ_only_where_they_must(loan):
    # Premium with unknown income and default history: approval depends on them.
    f = Reasoner(loan).check_expressions(["(= plan premium)"], ["approved"])
    assert f.result is Result.SATISFIABLE
    true, false = f.claims_true_scenario.assignments, f.claims_false_scenario.assignments
    assert set(true) == set(false) and "approved" in true
    assert true["approved"] is True and false["approved"] is False
    assert all(true[k] != false[k] for k in true)
    # The false scenario is the closest one: flipping approval needs one more change, not more.
    assert len(true) == 2 and set(true) - {"approved"} <= {"income", "has_default"}


def test_impossible_when_premises_contradict_the_policy(loan):
    f = Reasoner(loan).check_expressions(["(= plan premium)", "(= rate 6.0)"], ["approved"])
    assert f.result is Result.IMPOSSIBLE
    assert [r.identifier for r in f.contradicting_rules] == ["premium_rate"]


def test_impossible_premises_contradicting_each_other_carry_an_always_false_warning(loan):
    f = Reasoner(loan).check_expressions(["(> income 10)", "(< income 5)"], ["approved"])
    assert f.result is Result.IMPOSSIBLE and f.contradicting_rules == []
    assert f.logic_warning.type is LogicWarningType.ALWAYS_FALSE
    assert [s.logic for s in f.logic_warning.premises] == ["(> income 10)", "(< income 5)"] and f.logic_warning.claims == []


def test_tautological_claims_carry_an_always_true_warning(loan):
    f = Reasoner(loan).check_expressions(["(= plan basic)"], ["(or approved (not approved))"])
    assert f.result is Result.VALID and f.supporting_rules == []
    assert f.logic_warning.type is LogicWarningType.ALWAYS_TRUE
    assert [s.logic for s in f.logic_warning.claims] == ["(or approved (not approved))"]


def test_no_translations_for_an_empty_translation(loan):
    f = Reasoner(loan).check(Translation(untranslated_claims=["The weather is nice."]))
    assert f.result is Result.NO_TRANSLATIONS and f.translation.untranslated_claims == ["The weather is nice."]


def test_translation_ambiguous_gives_difference_scenarios(loan):
    a = Translation(premises=[Statement("(= plan premium)")], claims=[Statement("approved")])
    b = Translation(premises=[Statement("(= plan basic)")], claims=[Statement("approved")])
    f = Reasoner(loan).check(Ambiguity(options=[[a], [b]], confidence=0.6))
    assert f.result is Result.TRANSLATION_AMBIGUOUS
    assert f.options == [[a], [b]]
    assert len(f.difference_scenarios) == 2
    plans = {s.assignments["plan"] for s in f.difference_scenarios}
    assert plans == {"premium", "basic"}


NONLINEAR = {
    "variables": [{"name": n, "type": "int"} for n in "xyz"] + [{"name": "ok", "type": "bool"}],
    "rules": [{"id": "cubes", "expression": "(=> (= (+ (* x x x) (* y y y)) (* z z z)) ok)"}],
}


def test_solver_unknown_on_nonlinear_arithmetic_is_too_complex_within_the_budget():
    policy = policy_from_dict(NONLINEAR)
    start = time.monotonic()
    f = Reasoner(policy, timeout_ms=300).check_expressions(
        ["(> x 0)", "(> y 0)", "(> z 0)"], ["(not (= (+ (* x x x) (* y y y)) (* z z z)))"]
    )
    assert f.result is Result.TOO_COMPLEX and "unknown" in f.detail
    assert time.monotonic() - start < 2.0


def test_results_are_deterministic(loan):
    checks = [(["(= plan premium)"], ["approved"]), (["has_default"], ["approved"]), ([], ["(> rate 4.0)"])]
    first = [Reasoner(loan).check_expressions(p, c).to_dict() for p, c in checks]
    # A fresh policy object (its own Z3 context) and a reused reasoner give the same findings.
    fresh = policy_from_dict(LOAN)
    reasoner = Reasoner(fresh)
    for _ in range(2):
        assert [reasoner.check_expressions(p, c).to_dict() for p, c in checks] == first


def test_equivalence_is_logical_not_textual(loan):
    a = Translation(premises=[Statement("(>= income 20000)")], claims=[Statement("approved")])
    b = Translation(premises=[Statement("(not (< income 20000))")], claims=[Statement("(not (not approved))")])
    c = Translation(premises=[Statement("(> income 20000)")], claims=[Statement("approved")])
    assert equivalent(loan, a, b)
    assert not equivalent(loan, a, c)


# -- properties -------------------------------------------------------------------------------
SMALL = {
    "variables": [{"name": n, "type": "bool"} for n in ("a", "b", "c")] + [{"name": n, "type": "int"} for n in ("x", "y")],
    "rules": [],
}
atoms = st.one_of(
    st.sampled_from(["a", "b", "c", "(not a)", "(not b)", "(not c)"]),
    st.builds(lambda v, op, k: f"({op} {v} {k})", st.sampled_from(["x", "y"]), st.sampled_from(["<", "<=", "=", ">"]), st.integers(-2, 2)),
)
conditions = st.one_of(atoms, st.builds(lambda p, q: f"(and {p} {q})", atoms, atoms))
rules = st.builds(lambda cond, then: f"(=> {cond} {then})", conditions, atoms)
FAST = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _policy(rule_exprs):
    return policy_from_dict({**SMALL, "rules": [{"id": f"r{i}", "expression": e} for i, e in enumerate(rule_exprs)]})


@FAST
@given(st.lists(rules, max_size=5), st.lists(atoms, min_size=1, max_size=3), st.data())
def test_a_claim_that_is_a_premise_is_valid(rule_exprs, premises, data):
    claim = data.draw(st.sampled_from(premises))
    f = Reasoner(_policy(rule_exprs)).check_expressions(premises, [claim])
    assert f.result in (Result.VALID, Result.IMPOSSIBLE)


@FAST
@given(st.lists(rules, max_size=5), rules, st.lists(atoms, max_size=2), atoms)
def test_adding_a_rule_changes_results_only_through_that_rule(rule_exprs, extra, premises, claim):
    before = Reasoner(_policy(rule_exprs)).check_expressions(premises, [claim])
    after = Reasoner(_policy([*rule_exprs, extra])).check_expressions(premises, [claim])
    new_id = f"r{len(rule_exprs)}"
    if before.result is Result.INVALID:
        assert after.result in (Result.INVALID, Result.IMPOSSIBLE)
    if before.result is Result.VALID:
        assert after.result in (Result.VALID, Result.IMPOSSIBLE)
    if before.result is Result.SATISFIABLE and after.result is Result.VALID:
        assert new_id in [r.identifier for r in after.supporting_rules]
    if before.result is Result.SATISFIABLE and after.result is Result.INVALID:
        assert new_id in [r.identifier for r in after.contradicting_rules]
    if before.result is not Result.IMPOSSIBLE and after.result is Result.IMPOSSIBLE:
        assert new_id in [r.identifier for r in after.contradicting_rules]


@FAST
@given(st.lists(rules, min_size=1, max_size=6), st.lists(atoms, max_size=2), atoms)
def test_supporting_rules_are_sufficient_and_minimal(rule_exprs, premises, claim):
    f = Reasoner(_policy(rule_exprs)).check_expressions(premises, [claim])
    if f.result is not Result.VALID:
        return
    core = [int(r.identifier[1:]) for r in f.supporting_rules]
    assert Reasoner(_policy([rule_exprs[i] for i in core])).check_expressions(premises, [claim]).result is Result.VALID
    for drop in core:
        rest = [rule_exprs[i] for i in core if i != drop]
        assert Reasoner(_policy(rest)).check_expressions(premises, [claim]).result is not Result.VALID


@FAST
@given(st.lists(rules, max_size=5), st.lists(atoms, max_size=2), atoms)
def test_negating_the_claim_swaps_valid_and_invalid(rule_exprs, premises, claim):
    reasoner = Reasoner(_policy(rule_exprs))
    f = reasoner.check_expressions(premises, [claim])
    g = reasoner.check_expressions(premises, [f"(not {claim})"])
    swap = {Result.VALID: Result.INVALID, Result.INVALID: Result.VALID, Result.SATISFIABLE: Result.SATISFIABLE, Result.IMPOSSIBLE: Result.IMPOSSIBLE}
    assert g.result is swap[f.result]


@FAST
@given(st.lists(rules, max_size=5), st.lists(atoms, max_size=2), atoms)
def test_satisfiable_scenarios_really_make_the_claims_true_and_false(rule_exprs, premises, claim):
    policy = _policy(rule_exprs)
    f = Reasoner(policy).check_expressions(premises, [claim])
    if f.result is not Result.SATISFIABLE:
        return
    for scenario, want in ((f.claims_true_scenario, z3.sat), (f.claims_false_scenario, z3.sat)):
        s = z3.Solver(ctx=policy.ctx)
        s.add(*policy.compiled.values(), *[policy.parse(p) for p in premises])
        s.add(*[policy.parse(st_.logic) for st_ in scenario.statements])
        goal = policy.parse(claim)
        s.add(goal if scenario is f.claims_true_scenario else z3.Not(goal))
        assert s.check() == want


@FAST
@given(st.lists(rules, max_size=6), st.lists(atoms, max_size=2), atoms)
def test_the_closest_false_scenario_keeps_as_many_values_as_an_optimizer_can(rule_exprs, premises, claim):
    """The core-guided search of a SATISFIABLE finding's claims-false scenario is exact: it keeps as
    many of the claims-true model's values as z3's MaxSAT optimizer does, on the solver it is given."""
    from awarl.verify.reasoner import _Clock

    policy = _policy(rule_exprs)
    reasoner = Reasoner(policy)
    P, goal = [policy.parse(p) for p in premises], policy.parse(claim)
    s = reasoner._solver()
    s.add(*P, goal)
    if s.check(*reasoner._lits) != z3.sat:
        return
    true_model = s.model()
    base = reasoner._solver()
    base.add(*P)
    closest = reasoner._closest(base, z3.Not(goal), true_model, _Clock(5000))
    opt = z3.Optimize(ctx=policy.ctx)
    opt.add(*policy.compiled.values(), *P, z3.Not(goal))
    consts = [policy.consts[v.name] for v in policy.variables]
    for c in consts:
        opt.add_soft(c == true_model.eval(c, model_completion=True))
    if opt.check() != z3.sat:
        assert closest is None
        return

    def kept(m):
        return sum(z3.is_true(m.eval(c == true_model.eval(c, model_completion=True), model_completion=True)) for c in consts)

    assert closest is not None and z3.is_true(closest.eval(z3.Not(goal), model_completion=True))
    assert kept(closest) == kept(opt.model())
    assert base.num_scopes() == 0  # the search leaves the solver as it found it


def test_the_smallest_hitting_set_meets_every_conflict():
    from awarl.verify.reasoner import _smallest_hitting_set

    assert _smallest_hitting_set([]) == set()
    assert _smallest_hitting_set([{0, 1}, {1, 2}]) == {1}
    assert _smallest_hitting_set([{0}, {2, 3}, {3, 4}]) == {0, 3}
    many = [{i, i + 1} for i in range(0, 60, 2)]  # 30 disjoint pairs: the smallest set has 30 elements
    greedy = _smallest_hitting_set(many, budget=100)
    assert all(greedy & s for s in many) and len(greedy) == 30
