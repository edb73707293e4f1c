"""Sound checks on the world policy: a premise read from a cited passage binds the entities it names.

An answer that cites another person's passage, a namesake's passage or a near-miss city's country
is never VALID (real Z3 checks on a generated world's policy and corpus)."""

from __future__ import annotations

from pathlib import Path

import pytest

from awarl.chat.validate import Validator
from awarl.data.world import WorldConfig, generate_world, policy_yaml
from awarl.verify.findings import Result, aggregate


def _validator(world, tmp_path) -> Validator:
    path = tmp_path / "policy.yaml"
    path.write_text(policy_yaml(world), encoding="utf-8")
    return Validator(path, corpus={p.id: p for p in world.passages})


def _result(v: Validator, world, question: str, country: str, pids: list[str]):
    cited = [{"id": p, "title": world.passage(p).title, "text": world.passage(p).text} for p in pids]
    answer = f"<answer>{country}</answer> " + " ".join(f"[{p}]" for p in pids)
    check = v.validate(question, [], answer, cited)
    return aggregate(check.findings), check


@pytest.fixture(scope="module")
def world_v2():
    return generate_world(WorldConfig(version=2, persons=60, cities=8, countries=4, seed=0))


def _relation_pid(world, key: str, rel: str) -> str:
    return world.fact_passage[(key, rel)]


def test_another_persons_passage_proves_nothing(world, tmp_path):
    v = _validator(world, tmp_path)
    q = next(q for q in world.questions if q.answerable and q.relation == "lives")
    other = next(p for p in world.persons if p.name != q.person and world.parent.get(p.lives) not in (None, q.answer)
                 and p.lives not in world.absent)
    wrong = world.parent[other.lives]
    pids = [_relation_pid(world, other.name, "lives"), world.fact_passage[(other.lives, "in")]]
    result, check = _result(v, world, q.question, wrong, pids)
    assert result is not Result.VALID and result is not None
    assert any(f"about {other.name.lower()}" in u for f in check.findings if f.translation
               for u in f.translation.untranslated_premises)
    right, _ = _result(v, world, q.question, q.answer, list(world.supporting(q)))  # the control: its own passages prove it
    assert right is Result.VALID


def test_a_namesakes_passage_is_not_a_premise(world_v2, tmp_path):
    v = _validator(world_v2, tmp_path)
    names = [p.name for p in world_v2.persons]
    q = next(q for q in world_v2.questions if q.answerable and names.count(q.person) > 1)
    rel = q.relation
    other = next(p for p in world_v2.persons if p.name == q.person and p.key != q.subject
                 and world_v2.parent.get(getattr(p, rel)) and getattr(p, rel) not in world_v2.absent)
    city = getattr(other, rel)
    pids = [_relation_pid(world_v2, other.key, rel), world_v2.fact_passage[(city, "in")]]
    result, check = _result(v, world_v2, q.question, world_v2.parent[city], pids)
    assert result is not Result.VALID
    [clash] = [n for n in check.extras["namesakes"] if n["passage"] == pids[0]]
    assert clash["subject"] == q.person.lower() and city in clash["values"] and q.chain[0] in clash["values"]
    gold, _ = _result(v, world_v2, q.question, q.answer, list(world_v2.supporting(q)))
    assert gold is not Result.VALID  # the name alone does not say which namesake is asked about


def test_a_near_miss_citys_country_is_not_the_persons(world_v2, tmp_path):
    v = _validator(world_v2, tmp_path)
    q = next(q for q in world_v2.questions if q.kind == "near_miss_variant")
    variant = q.cues["variant"]
    pids = [_relation_pid(world_v2, q.subject or q.person, q.relation), world_v2.fact_passage[(variant, "in")]]
    result, _ = _result(v, world_v2, q.question, world_v2.parent[variant], pids)
    assert result is not Result.VALID


def test_only_namesakes_of_the_person_asked_about_are_asked(world_v2, tmp_path):
    """An answer citing the passage of another person who has namesakes reports no namesakes of that
    person (nothing to ask the user); the question's own person is looked up instead."""
    v = _validator(world_v2, tmp_path)
    names = [p.name for p in world_v2.persons]
    q = next(q for q in world_v2.questions if q.answerable and names.count(q.person) > 1)
    stranger = next(p for p in world_v2.persons if names.count(p.name) > 1 and p.name != q.person)
    pid = _relation_pid(world_v2, stranger.key, "lives")
    _, check = _result(v, world_v2, q.question, q.answer, [pid])
    subjects = {n["subject"] for n in check.extras.get("namesakes", [])}
    assert stranger.name.lower() not in subjects
    assert subjects == {q.person.lower()}  # SATISFIABLE: the question's person has namesakes, so the loop asks about them


def test_a_namesake_answer_the_user_settles_drops_citations_that_do_not_support_it(world_v2, tmp_path):
    """Once the user has said which namesake is meant, the policy's rule proves the country; a right answer
    citing another city's passage is served without that citation (and says so), a wrong one never VALID."""
    from awarl.chat.thread import Clarification

    v = _validator(world_v2, tmp_path)
    names = [p.name for p in world_v2.persons]
    q = next(q for q in world_v2.questions if q.answerable and names.count(q.person) > 1)
    city = q.chain[0]
    verb = "lives in" if q.relation == "lives" else "was born in"
    said = [Clarification(question=f"Which {q.person} do you mean?", answer=f"{q.person} {verb} {city}.")]
    other_city = next(c for c, k in world_v2.parent.items() if k not in (None, q.answer) and (c, "in") in world_v2.fact_passage)
    pid = world_v2.fact_passage[(other_city, "in")]  # "<other city> is a city in the country K": says nothing of the answer
    cited = [{"id": pid, "title": world_v2.passage(pid).title, "text": world_v2.passage(pid).text}]
    right = v.validate(q.question, said, f"<answer>{q.answer}</answer> [{pid}]", cited)
    assert aggregate(right.findings) is Result.VALID and right.recited == f"<answer>{q.answer}</answer>"
    assert right.given == [said[0].answer]
    assert all("citations removed" in f.detail for f in right.findings if f.citation is None)
    wrong = v.validate(q.question, said, f"<answer>{world_v2.parent[other_city]}</answer> [{pid}]", cited)
    assert wrong.recited is None and aggregate(wrong.findings) is not Result.VALID
    unsaid = v.validate(q.question, [], f"<answer>{q.answer}</answer> [{pid}]", cited)  # nobody said which one
    assert unsaid.recited is None and aggregate(unsaid.findings) is not Result.VALID
    # an answer that says more than the proved country keeps its citations, so the gate still judges the rest
    more = v.validate(q.question, said, f"<answer>{q.answer}. It borders {world_v2.parent[other_city]} [{pid}].</answer>", cited)
    assert more.recited is None and aggregate(more.findings) is not Result.VALID
    # a premise the question states in its leading clause is the user's statement, and the badge says so
    stated = f"Given that {q.person} {verb} {city}, {q.question[0].lower()}{q.question[1:]}"
    inline = v.validate(stated, [], f"<answer>{q.answer}</answer>", [])
    assert aggregate(inline.findings) is Result.VALID and inline.given == [f"Given that {q.person} {verb} {city}."]


def test_a_reply_that_denies_an_option_is_not_restated_as_it():
    from awarl.chat.loop import _restated
    from awarl.chat.thread import Clarification, Thread

    ask = "Which Talo Nast do you mean — the one who was born in Dorin, or in Elbo?"
    t = Thread(id="t", prompt="Which country was Talo Nast born in?",
               question_options={ask: {"Dorin": "Talo Nast was born in Dorin.", "Elbo": "Talo Nast was born in Elbo."}})
    said = {reply: _restated(t, Clarification(question=ask, answer=reply)).answer
            for reply in ("Elbo", "the one in Elbo", "Not the one in Dorin.", "Dorin or Elbo", "maybe Elbo")}
    assert said == {"Elbo": "Talo Nast was born in Elbo.", "the one in Elbo": "Talo Nast was born in Elbo.",
                    "Not the one in Dorin.": "Not the one in Dorin.", "Dorin or Elbo": "Dorin or Elbo",
                    "maybe Elbo": "maybe Elbo"}


def test_a_statement_of_the_user_that_hedges_is_no_premise(world, tmp_path):
    """"X lives in Goriv or Kegez." states neither city: typed as a reply, stated before the question or
    in its leading clause, it is left out of the premises and the findings say so; said plainly, it proves."""
    from awarl.chat.thread import Clarification

    v = _validator(world, tmp_path)
    q = next(q for q in world.questions if q.answerable and q.relation == "lives")
    city = q.chain[0]
    other = next(c for c in world.parent if c != city)
    answer = f"<answer>{q.answer}</answer>"
    lower = q.question[0].lower() + q.question[1:]
    plain = f"{q.person} lives in {city}."
    for hedge in (f"{q.person} lives in {city} or {other}.", f"Maybe {q.person} lives in {city}.",
                  f"I think {q.person} lives in {city}.", f"{q.person} lives in {city}, maybe."):
        for question, said in ((q.question, [Clarification(question="Where does the person live?", answer=hedge)]),
                               (f"{hedge} {q.question}", []),
                               (f"Given that {hedge.rstrip('.')}, {lower}", [])):
            check = v.validate(question, said, answer, [])
            assert aggregate(check.findings) is Result.SATISFIABLE, (question, said)
            assert check.extras["hedged"] and check.given == []
            assert all("not taken as a premise" in f.detail for f in check.findings if f.citation is None)
        # the hedge is no premise, but neither is it a denial: the plain statement beside it still proves
        both = v.validate(q.question, [Clarification(question="Where?", answer=hedge),
                                       Clarification(question="Where, exactly?", answer=plain)], answer, [])
        assert aggregate(both.findings) is Result.VALID and both.given == [plain]
    for question, said in ((q.question, [Clarification(question="Where does the person live?", answer=plain)]),
                           (f"{plain} {q.question}", []), (f"Given that {plain.rstrip('.')}, {lower}", []),
                           (f"{q.person} lives in {city} since May. {q.question}", [])):
        check = v.validate(question, said, answer, [])
        assert aggregate(check.findings) is Result.VALID and "hedged" not in check.extras, (question, said)
    # doubt in the next sentence, another option after it, a question that asks to confirm, a trailing clause
    for question, said in ((f"{plain} Not sure though. {q.question}", []),
                           (q.question, [Clarification(question="Where?", answer=f"{plain} Or {other}.")]),
                           (f"{q.person} lives in {city}, right? {q.question}", []),
                           (f"Is it true that {q.person} lives in {city}? {q.question}", []),
                           (f"{q.question[:-1]}, given that {q.person} lives in {city} or {other}?", []),
                           (f"I think {q.person} lives in {city} - {lower}", [])):
        check = v.validate(question, said, answer, [])
        assert aggregate(check.findings) is Result.SATISFIABLE and check.extras["hedged"], (question, said)


POLICIES = Path(__file__).resolve().parents[2] / "configs" / "policies"


@pytest.mark.parametrize("question, said, result", [
    ("I am a gold member. Do I get free shipping?", None, Result.VALID),
    ("I became a gold member in May. Do I get free shipping?", None, Result.VALID),  # the month is no hedge
    ("I am a gold member and I'm not sure what discount I get.", None, Result.VALID),  # nor is a doubt about the claim
    ("Do I get free shipping?", "Yes, gold since May.", Result.VALID),
    ("I am a gold member. Or silver, not sure. Do I get free shipping?", None, Result.SATISFIABLE),
    ("I am a gold member. At least I believe so. Do I get free shipping?", None, Result.SATISFIABLE),
    ("I used to be a gold member. Do I get free shipping?", None, Result.SATISFIABLE),
    ("Am I a gold member? Do I get free shipping?", None, Result.SATISFIABLE),  # asked, not stated
    ("Do I get free shipping, given I'm probably a gold member?", None, Result.SATISFIABLE),
    ("Do I get free shipping?", "Gold. Not 100% sure though.", Result.SATISFIABLE),
])
def test_what_a_user_doubts_is_no_premise_on_a_shipped_policy(question, said, result):
    from awarl.chat.thread import Clarification

    v = Validator(POLICIES / "pricing.yaml")
    said_list = [Clarification(question="Are you a member?", answer=said)] if said else []
    check = v.validate(question, said_list, "Yes, you get free shipping.", [])
    assert aggregate(check.findings) is result
    assert bool(check.extras.get("hedged")) is (result is Result.SATISFIABLE)


def test_the_served_answer_says_which_statements_were_not_taken_as_facts(make_manager, world_dir, world):
    q = next(q for q in world.questions if q.answerable and q.relation == "lives")
    city, other = q.chain[0], next(c for c in world.parent if c != q.chain[0])
    m = make_manager(policy=str(world_dir / "policy.yaml"), policy_name="world", corpus=str(world_dir / "corpus.jsonl"))
    hedge = f"{q.person} lives in {city} or {other}."
    t = m.wait(m.submit(f"{hedge} {q.question}", answer=f"<answer>{q.answer}</answer>").id, timeout=60)
    assert t["badge"] not in ("VALID", "VALID_GIVEN_YOUR_STATEMENT")
    assert t["iterations"][t["served"]]["hedged"] == [hedge]
    assert f"Not taken as facts, as they qualify what they state: “{hedge}”" in t["warning"]
    plain = m.wait(m.submit(f"{q.person} lives in {city}. {q.question}", answer=f"<answer>{q.answer}</answer>").id, timeout=60)
    assert plain["badge"] == "VALID_GIVEN_YOUR_STATEMENT" and "Not taken as facts" not in (plain["warning"] or "")


@pytest.mark.parametrize("question, given", [
    ("Do I get free shipping if I'm a gold member?", "I'm a gold member."),
    ("Do I get free shipping, assuming I am a gold member?", "I am a gold member."),
    ("Do I get free shipping as a gold member?", "as a gold member."),
    ("If I'm a gold member, do I get free shipping?", "If I'm a gold member."),
])
def test_a_condition_the_question_sets_is_the_users_statement(question, given):
    """A proof that uses the question's own condition rests on the user's word: the badge says "given your statement"."""
    v = Validator(POLICIES / "pricing.yaml")
    check = v.validate(question, [], "Yes, you get free shipping.", [])
    assert aggregate(check.findings) is Result.VALID and check.given == [given]
    hedged = v.validate(question.replace("a gold member", "maybe a gold member"), [], "Yes, you get free shipping.", [])
    assert aggregate(hedged.findings) is Result.SATISFIABLE and hedged.extras["hedged"]


class _Replies:
    """An answer-only agent that gives its replies in turn (the last one again when they run out)."""

    name, decisions = "replies", False

    def __init__(self, *texts: str):
        self.texts, self.calls = list(texts), 0

    def answer(self, question, temperature):
        from awarl.chat.generate import AgentReply

        self.calls += 1
        return AgentReply.from_text(self.texts[min(self.calls, len(self.texts)) - 1])

    def rewrite(self, prompt):
        raise AssertionError("an answer-only agent is never asked to rewrite")


def test_a_contradiction_found_on_the_way_is_told_whatever_is_served(make_manager, world_dir, world):
    """The user's statement contradicts a passage the first answer cited (IMPOSSIBLE); the agent then
    abstains: the abstention is served, and the warning says what the checker found, once, with the
    count of answers checked (each answer once)."""
    q = next(q for q in world.questions if q.answerable and q.relation == "lives")
    pid = world.fact_passage[(q.person, "lives")]
    wrong_city = next(c for c in world.parent if c != q.chain[0] and world.parent[c])
    m = make_manager(_Replies(f"<answer>{q.answer}</answer> [{pid}]", "<answer>not enough information</answer>"),
                     policy=str(world_dir / "policy.yaml"), policy_name="world", corpus=str(world_dir / "corpus.jsonl"))
    t = m.wait(m.submit(f"{q.person} lives in {wrong_city}. {q.question}").id, timeout=60)
    assert t["iterations"][0]["result"] == "IMPOSSIBLE" and t["badge"] == "ABSTAINED"
    assert f"passages cited then ([{pid}]) contradictory: check what you stated." in t["warning"]
    assert "The best of 2 checked answers is shown (answer 2)." in t["warning"]
