"""Sort checking: rules, premises and claims that mix sorts are refused with the rule (or
premise, claim) named, instead of being coerced by Z3 into a different meaning."""

from __future__ import annotations

import copy
import json

import pytest
import z3
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from awarl.verify import smt
from awarl.verify.findings import Result
from awarl.verify.policy import PolicyError, load_policy, policy_from_dict
from awarl.verify.reasoner import Reasoner
from awarl.verify.translate import LLMTranslator

from .conftest import LOAN  # plan: Plan (basic|premium), income: int, has_default: bool, approved: bool, rate: real


def _with_rule(expression: str) -> dict:
    data = copy.deepcopy(LOAN)
    data["rules"].append({"id": "extra.rule-1", "expression": expression})
    return data


@pytest.mark.parametrize(
    "expression, problem",
    [
        # bool vs numbers: Z3 would read these as (ite approved 1 0)
        ("(=> has_default (= approved 1))", "'=' compares bool 'approved' with int '1'"),
        ("(=> (> approved 0) has_default)", "'>' needs numbers; argument 1 is bool 'approved'"),
        ("(= (+ has_default 1) 2)", "'+' needs numbers; argument 1 is bool 'has_default'"),
        ("(=> (= income true) approved)", "'=' compares int 'income' with bool 'true'"),
        # int vs real: no silent lifting of a variable, no decimal for an int
        ("(=> (= income 20000.5) approved)", "'=' mixes int 'income' with real '20000.5'"),
        ("(=> (< income rate) approved)", "write (to_real income)"),
        ("(=> (= (/ income 2) 10) approved)", "'/' is real division"),
        ("(=> (= (div rate 2) 1) approved)", "'div' is integer division and needs ints; argument 1 is real 'rate'"),
        ("(=> (is_int income) approved)", "'is_int' needs a real"),
        # enum values
        ("(=> (= plan 1) approved)", "'=' compares Plan 'plan' with int '1'"),
        ("(=> (= plan approved) approved)", "'=' compares Plan 'plan' with bool 'approved'"),
        ("(=> (> plan basic) approved)", "'>' needs numbers"),
        # boolean connectives
        ("(and approved income)", "'and' needs booleans; argument 2 is int 'income'"),
        ("(ite has_default 1 approved)", "'ite' compares int '1' with bool 'approved'"),
        ("(ite income approved has_default)", "'ite' needs booleans"),
        ("(+ income 1)", "the expression is int, not boolean"),
        # arity, unknown names, malformed terms
        ("(not approved has_default)", "wrong number of arguments to 'not': 1 expected, 2 given"),
        ("(=> approved)", "wrong number of arguments to '=>': at least 2 expected, 1 given"),
        ("(= income)", "wrong number of arguments to '='"),
        ("(ite approved 1)", "wrong number of arguments to 'ite': 3 expected, 2 given"),
        ("(=> approved (> salary 3))", "unknown variable 'salary'"),
        ("(=> approved (max income 3))", "unknown operator 'max'"),
        ("(=> approved (income 3))", "'income' is a name, not an operator"),
        ("(=> approved ((> income 3)))", "applies a term, not an operator"),
        ("(=> approved (> income 1e3))", "'1e3' is not a numeral"),
        ("(=> approved ())", "empty '()'"),
        ("(forall ((x Money)) (> x 0))", "unknown sort 'Money'"),
        ("(forall ((x Int)) (+ x 1))", "the body of 'forall' is int, not boolean"),
        ("(let ((x income)) (> x 1.5))", "'>' mixes int 'x' with real '1.5'"),
        ("(" * 150 + "approved" + ")" * 150, "nested deeper than"),
    ],
)
def test_ill_sorted_rules_are_refused_naming_the_rule(expression, problem):
    with pytest.raises(PolicyError) as err:
        policy_from_dict(_with_rule(expression), source="loan.yaml")
    assert err.value.where == "rule 'extra.rule-1'"
    assert problem in err.value.problem, err.value.problem
    assert expression[:40] in err.value.problem  # the expression is quoted back


@pytest.mark.parametrize(
    "expression",
    [
        "(=> (>= rate 3) approved)",  # an int numeral stands for a real
        "(=> (= rate (/ 7 2)) approved)",
        "(=> (< (to_real income) rate) approved)",
        "(=> (= (mod income 2) (- 1)) approved)",
        "(=> (> income -5) approved)",
        "(=> (= (abs (- income 3)) 2) approved)",
        "(= (ite has_default 1.5 2) rate)",
        "(=> (distinct plan basic premium) approved)",
        "(xor approved (not approved))",
        "(let ((rich (> income 100000))) (=> rich approved))",
        "(forall ((p Plan)) (or (= p basic) (= p premium)))",
        "(exists ((x Int)) (and (> x 1) (< x 3)))",
        "(! (=> has_default (not approved)) :named blocks)",
        "(=> (< income 10 20 30) approved)",
        "(= (to_int rate) 3)",
    ],
)
def test_well_sorted_rules_load(expression):
    policy = policy_from_dict(_with_rule(expression))
    assert z3.is_bool(policy.compiled["extra.rule-1"])


def test_a_bool_compared_with_a_number_used_to_give_a_wrong_verdict():
    """The defect: with `(= discount 10)` on a bool, Z3 read `(= (ite discount 1 0) 10)`, always
    false, so 'gold members get the discount' came out INVALID. Now the policy does not load."""
    data = {
        "version": "1.0",
        "variables": [{"name": "gold", "type": "bool"}, {"name": "discount", "type": "bool"}],
        "rules": [{"id": "gold_discount", "expression": "(=> gold (= discount 10))"}],
    }
    coerced = z3.parse_smt2_string("(assert (=> gold (= discount 10)))", decls={"gold": z3.Bool("gold"), "discount": z3.Bool("discount")})
    assert "ite" in coerced[0].sexpr()  # what Z3 alone does with it
    with pytest.raises(PolicyError, match=r"rule 'gold_discount': type mismatch: '=' compares bool 'discount' with int '10'"):
        policy_from_dict(data)


def test_bedrock_json_policies_are_sort_checked_too(tmp_path):
    definition = {"policyDefinition": {
        "version": "1.0",
        "types": [],
        "variables": [{"name": "isMember", "type": "BOOL", "description": ""}, {"name": "discount", "type": "INT", "description": ""}],
        "rules": [{"id": "A1B2C3", "expression": "(=> (= isMember 1) (= discount 10))", "alternateExpression": "Members get 10."}],
    }}
    path = tmp_path / "bedrock.json"
    path.write_text(json.dumps(definition), encoding="utf-8")
    with pytest.raises(PolicyError) as err:
        load_policy(path)
    assert str(err.value).startswith(f"{path}, rule 'A1B2C3': type mismatch: '=' compares bool 'isMember' with int '1'")


def test_premises_and_claims_are_sort_checked_at_check_time(loan):
    reasoner = Reasoner(loan)
    with pytest.raises(PolicyError, match=r"premise 1: type mismatch: '=' compares bool 'has_default' with int '0'"):
        reasoner.check_expressions(["(= plan premium)", "(= has_default 0)"], ["approved"])
    with pytest.raises(PolicyError, match=r"claim 0: type mismatch: '=' mixes int 'income' with real '2.5'"):
        reasoner.check_expressions([], ["(= income 2.5)"])
    # and a well-sorted check still works after a refused one (nothing half-parsed is cached)
    assert reasoner.check_expressions(["has_default"], ["approved"]).result is Result.INVALID


def test_an_ill_sorted_llm_sample_is_a_dissenting_vote(loan):
    good = json.dumps({"statements": [{"premises": [{"logic": "has_default"}], "claims": [{"logic": "(not approved)"}]}]})
    bad = json.dumps({"statements": [{"premises": [{"logic": "(= has_default 1)"}], "claims": [{"logic": "(not approved)"}]}]})

    class Scripted:
        def generate(self, prompts, n, temperature):
            return [[good, good, bad]]

    translator = LLMTranslator(Scripted(), samples=3, threshold=0.5)
    [t] = translator.translate("q", "a", loan)
    assert t.confidence == pytest.approx(2 / 3)
    assert len(translator.rejected) == 1 and "type mismatch" in translator.rejected[0]


# -- differential property: whatever the checker accepts, Z3 builds with the sort it said ------------
_SIG = smt.Signature(variables={"b": "bool", "c": "bool", "i": "int", "j": "int", "r": "real", "e": "Color"},
                     values={"red": "Color", "blue": "Color"}, types=frozenset({"Color"}))
_CTX = z3.Context()
_COLOR, _ = z3.EnumSort("Color", ["red", "blue"], ctx=_CTX)
_DECLS = {"b": z3.Bool("b", _CTX), "c": z3.Bool("c", _CTX), "i": z3.Int("i", _CTX), "j": z3.Int("j", _CTX),
          "r": z3.Real("r", _CTX), "e": z3.Const("e", _COLOR)}
_Z3_SORT = {"bool": z3.BoolSort(_CTX), "int": z3.IntSort(_CTX), "real": z3.RealSort(_CTX), "Color": _COLOR}
_OPS = ["and", "or", "not", "=>", "=", "distinct", "ite", "<", ">=", "+", "-", "*", "/", "div", "mod", "abs", "xor", "to_real", "to_int"]
_ATOMS = st.sampled_from(["b", "c", "i", "j", "r", "e", "red", "blue", "true", "false", "0", "3", "2.5", "-1"])
_TERMS = st.recursive(_ATOMS, lambda kids: st.builds(lambda op, args: f"({op} {' '.join(args)})", st.sampled_from(_OPS), st.lists(kids, min_size=1, max_size=3)), max_leaves=8)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_TERMS)
def test_accepted_terms_are_built_by_z3_with_the_checked_sort_and_no_coercion(text):
    try:
        checked = smt.check(smt.read(text), _SIG)
    except smt.SmtError:
        return
    [term] = z3.parse_smt2_string(f"(assert (= {text} {text}))", sorts={"Color": _COLOR}, decls=_DECLS, ctx=_CTX)
    built = term.arg(0)
    assert built.sort() == _Z3_SORT[checked.sort]
    # Z3 turns a bool into a number with (ite b 1 0); the checker must have refused any such term
    assert "(ite b 1 0)" not in built.sexpr() and "(ite c 1 0)" not in built.sexpr()
    if "to_real" not in text:  # nor lift an int variable to a real
        assert "(to_real i)" not in built.sexpr() and "(to_real j)" not in built.sexpr()


def test_rules_z3_refuses_in_one_script_still_load_one_by_one():
    """Rules are built with one parser call; two rules naming the same annotation (legal each on
    its own, an error in one script) fall back to one call per rule."""
    policy = policy_from_dict({
        "variables": [{"name": "a", "type": "bool"}, {"name": "b", "type": "bool"}],
        "rules": [{"id": "r1", "expression": "(! (=> a b) :named n)"}, {"id": "r2", "expression": "(! (=> b a) :named n)"}],
    })
    assert {k: v.sexpr() for k, v in policy.compiled.items()} == {"r1": "(=> a b)", "r2": "(=> b a)"}
