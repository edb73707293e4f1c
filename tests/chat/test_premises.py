"""Premises come only from the question, the clarifications and the cited passages: an answer that
states its own premises proves nothing, a proof resting on the user's statement says so, and a
rewrite that declares the question IMPOSSIBLE is checked unless the checker found it contradictory."""

from __future__ import annotations

import pytest

from awarl.chat.generate import ScriptedGenerator

from .conftest import CONTRADICTORY, GOLD_80


@pytest.fixture
def world_case(world):
    """An answerable birth question, and a city of another country than its answer."""
    q = next(q for q in world.questions if q.answerable and q.relation == "born")
    city = next(c for c, country in sorted(world.parent.items()) if country != q.answer and country in set(world.parent.values())
                and c not in world.parent.values())
    return q, city, world.parent[city]


def test_an_uncited_answer_that_states_its_own_birth_city_is_not_valid(make_manager, world_dir, world_case):
    q, city, country = world_case
    m = make_manager(None, policy=str(world_dir / "policy.yaml"), policy_name="world", corpus=str(world_dir / "corpus.jsonl"))
    answer = f"{q.person} was born in {city}, a city in {country}."
    t = m.wait(m.submit(q.question, answer).id)
    assert t["status"] == "COMPLETED" and t["badge"] != "VALID" and t["exit"] != "VALID_RESPONSE", t
    [it] = t["iterations"]
    assert f"born in {city}" not in it["premises_text"]  # the answer's own sentence is no evidence
    statement = next(f for f in it["findings"] if f["translation"] and f["translation"]["claims"])
    assert any(f"born in {city}" in c["natural_language"] for c in statement["translation"]["claims"])
    assert not any(f"born in {city}" in p["natural_language"] for p in statement["translation"]["premises"])


def test_the_same_sentence_citing_the_passages_that_say_otherwise_is_invalid(make_manager, world_dir, world, world_case):
    q, city, country = world_case
    cites = " ".join(f"[{i}]" for i in world.supporting(q))
    m = make_manager(None, policy=str(world_dir / "policy.yaml"), policy_name="world", corpus=str(world_dir / "corpus.jsonl"))
    t = m.wait(m.submit(q.question, f"<answer>{q.person} was born in {city}, a city in {country}.</answer> {cites}").id)
    assert t["badge"] == "INVALID" and t["exit"] == "CHECKED_ONLY"


def test_an_answer_assuming_the_membership_it_needs_is_not_valid(make_manager):
    m = make_manager(None)
    t = m.wait(m.submit("What discount do I get?", "Since you are a gold member buying regular-priced items, you get 15% off.").id)
    assert t["badge"] not in ("VALID", "VALID_GIVEN_YOUR_STATEMENT") and t["exit"] == "CHECKED_ONLY", t
    assert t["badge"] == "CHECKED_ONLY" and "SATISFIABLE" in t["warning"]


def test_a_proof_from_the_users_own_statement_is_badged_as_given(make_manager):
    m = make_manager(None)
    t = m.wait(m.submit(GOLD_80, "As a gold member you get 15% off.").id)
    assert (t["exit"], t["badge"]) == ("VALID_RESPONSE", "VALID_GIVEN_YOUR_STATEMENT")
    assert "given your statement" in t["warning"] and "gold" in t["warning"]
    assert "gold" in " ".join(t["iterations"][0]["given"])


def test_a_question_that_only_asks_gives_an_unqualified_valid(make_manager, world_dir, world):
    q = next(q for q in world.questions if q.answerable and q.relation == "born")
    cites = " ".join(f"[{i}]" for i in world.supporting(q))
    m = make_manager(None, policy=str(world_dir / "policy.yaml"), policy_name="world", corpus=str(world_dir / "corpus.jsonl"))
    t = m.wait(m.submit(q.question, f"<answer>{q.answer}</answer> {cites}").id)
    assert t["badge"] == "VALID" and t["warning"] is None and t["iterations"][0]["given"] == []


def test_declaring_a_consistent_question_impossible_is_checked_like_a_rewrite(make_manager):
    gen = ScriptedGenerator(lambda q, n: "<answer>You get 10% off.</answer>",
                            lambda p, n: "DECISION: IMPOSSIBLE\nANSWER: You get 50% off and free shipping.")
    m = make_manager(gen, max_iterations=2)
    t = m.wait(m.submit(GOLD_80).id)
    assert t["exit"] == "MAX_ITERATIONS_REACHED" and t["badge"] == "INVALID", t
    assert t["final_response"] == "You get 10% off."  # all INVALID: the first of equals is served
    assert [i["result"] for i in t["iterations"]] == ["INVALID", "INVALID", "INVALID"]
    assert any("IMPOSSIBLE declared" in e["event"] for e in t["events"])


def test_impossible_is_served_when_the_checker_found_the_premises_contradictory(make_manager):
    gen = ScriptedGenerator(lambda q, n: "<answer>Shipping is free.</answer>",
                            lambda p, n: "DECISION: IMPOSSIBLE\nANSWER: Your order cannot be both $30 and $90.")
    m = make_manager(gen)
    t = m.wait(m.submit(CONTRADICTORY).id)
    assert (t["exit"], t["badge"]) == ("IMPOSSIBLE", "IMPOSSIBLE") and t["iterations"][0]["result"] == "IMPOSSIBLE"
