"""The loop's paths, end to end through ThreadManager: real Z3 checks on the shipped pricing policy,
real SQLite, a scripted generator in place of the model."""

from __future__ import annotations

import json
import re
import time

import pytest

from awarl.chat.generate import ScriptedGenerator
from awarl.verify.findings import Ambiguity, Statement, Translation
from awarl.verify.translate import PatternTranslator

from .conftest import CONTRADICTORY, GOLD_80, GOLD_UNKNOWN


def answers(*texts):
    """An answer script: the n-th call gets texts[n] (the last one repeats)."""
    return lambda q, n: texts[min(n, len(texts) - 1)]


def audit_lines(m):
    return [json.loads(line) for line in m.audit.path.read_text().splitlines()]


def kinds(gen, kind):
    return [p for k, p in gen.prompts if k == kind]


def test_valid_first_answer_is_served_and_audited(make_manager):
    gen = ScriptedGenerator(answers("<answer>As a gold member you get 15% off.</answer>"), answers("unused"))
    m = make_manager(gen)
    t = m.wait(m.submit(GOLD_80).id)
    assert (t["status"], t["exit"], t["badge"], t["rewrites"]) == ("COMPLETED", "VALID_RESPONSE", "VALID_GIVEN_YOUR_STATEMENT", 0)
    assert t["final_response"] == "As a gold member you get 15% off."
    assert [i["type"] for i in t["iterations"]] == ["initial"]
    [line] = audit_lines(m)
    assert line["exit"] == "VALID_RESPONSE" and line["thread_id"] == t["id"] and line["prompt"] == GOLD_80
    assert line["model"] == "scripted" and line["policy"] == {"name": "pricing", "version": "1.0"}
    assert line["findings"][0]["result"] == "VALID" and line["findings"][0]["supporting_rules"] == ["gold_discount"]


def test_invalid_is_rewritten_with_the_rule_in_words_then_valid(make_manager):
    gen = ScriptedGenerator(answers("<answer>You get 10% off.</answer>"),
                            answers("**Decision:** REWRITE\n**Answer:** As a gold member you get 15% off."))
    m = make_manager(gen)
    t = m.wait(m.submit(GOLD_80).id)
    assert (t["exit"], t["badge"], t["rewrites"]) == ("VALID_RESPONSE", "VALID_GIVEN_YOUR_STATEMENT", 1)
    assert [(i["type"], i["result"], i["template"]) for i in t["iterations"]] == [
        ("initial", "INVALID", None), ("rewrite", "VALID", "rewrite_invalid")]
    [prompt] = kinds(gen, "rewrite")
    assert "Gold members get 15% off regular-priced items." in prompt  # the rule in natural language, not an id
    assert "You get 10% off." in prompt and "DECISION: REWRITE" in prompt
    assert "discount_percent = 15" in prompt  # the scenario the rules give
    assert t["iterations"][1]["decision"]["kind"] == "REWRITE"


@pytest.mark.parametrize("max_iterations", [0, 1, 3])
def test_max_iterations_counts_rewrites_exactly(make_manager, max_iterations):
    gen = ScriptedGenerator(answers("<answer>You get 10% off.</answer>"), answers("DECISION: REWRITE\nANSWER: You get 10% off."))
    m = make_manager(gen, max_iterations=max_iterations)
    t = m.wait(m.submit(GOLD_80).id)
    assert (t["exit"], t["badge"]) == ("MAX_ITERATIONS_REACHED", "INVALID")
    assert t["rewrites"] == max_iterations == len(kinds(gen, "rewrite"))
    assert len(t["iterations"]) == 1 + max_iterations
    assert "INVALID" in t["warning"]
    [review] = m.reviews()
    assert review["reason"] == "max_iterations" and review["thread_id"] == t["id"]
    assert audit_lines(m)[-1]["exit"] == "MAX_ITERATIONS_REACHED"


def test_impossible_premises_let_the_model_declare_the_question_impossible(make_manager):
    gen = ScriptedGenerator(answers("<answer>Shipping is free.</answer>"),
                            answers("DECISION: IMPOSSIBLE\nANSWER: Your order cannot be both $30 and $90."))
    m = make_manager(gen)
    t = m.wait(m.submit(CONTRADICTORY).id)
    assert (t["exit"], t["badge"]) == ("IMPOSSIBLE", "IMPOSSIBLE")
    assert t["final_response"] == "Your order cannot be both $30 and $90."
    assert t["iterations"][1]["template"] == "rewrite_impossible"
    assert audit_lines(m)[-1]["exit"] == "IMPOSSIBLE"  # the sample chatbot left this exit unaudited


def ask_then(answer):
    return lambda p, n: ("DECISION: ASK_QUESTIONS\n- QUESTION: Are the items regular-priced or on sale?" if n == 0
                         else f"DECISION: REWRITE\nANSWER: {answer}")


def test_satisfiable_asks_and_the_users_answer_becomes_a_premise(make_manager):
    gen = ScriptedGenerator(answers("<answer>You get 15% off your order.</answer>"), ask_then("unused"))
    m = make_manager(gen)
    tid = m.submit(GOLD_UNKNOWN).id
    t = m.wait(tid)
    assert t["status"] == "AWAITING_INPUT" and t["pending_questions"] == ["Are the items regular-priced or on sale?"]
    prompt = kinds(gen, "rewrite")[0]
    assert "rewrite_satisfiable" == t["iterations"][-1]["template"]
    assert "is_sale_item" in prompt and "DECISION: ASK_QUESTIONS" in prompt  # the differing variable is shown
    m.answer(tid, ["They are regular-priced."], skipped=False)
    t = m.wait(tid)
    assert (t["exit"], t["badge"], t["rewrites"]) == ("VALID_RESPONSE", "VALID_GIVEN_YOUR_STATEMENT", 1)
    assert t["clarifications"] == [{"question": "Are the items regular-priced or on sale?",
                                    "answer": "They are regular-priced.", "skipped": False, "reason": "answered"}]
    assert t["iterations"][-1]["type"] == "revalidate"
    assert "They are regular-priced." in t["iterations"][-1]["premises_text"]
    assert audit_lines(m)[-1]["clarifications"][0]["answer"] == "They are regular-priced."


def test_skipped_questions_lead_to_a_rewrite_with_assumptions(make_manager):
    gen = ScriptedGenerator(answers("<answer>You get 15% off your order.</answer>"),
                            ask_then("If your items are regular-priced, as a gold member you get 15% off."))
    m = make_manager(gen)
    tid = m.submit(GOLD_UNKNOWN).id
    assert m.wait(tid)["status"] == "AWAITING_INPUT"
    m.answer(tid, [], skipped=True)
    t = m.wait(tid)
    # The conditional answer is checked as the implication it states (regular-priced ⇒ 15% off),
    # never by taking its assumption as a premise: the implication follows from the policy.
    assert (t["exit"], t["badge"], t["rewrites"]) == ("VALID_RESPONSE", "VALID_GIVEN_YOUR_STATEMENT", 2)
    [claim] = t["iterations"][-1]["findings"][0]["translation"]["claims"]
    assert claim["logic"] == "(=> (not is_sale_item) (= discount_percent 15))"
    assert "regular" not in t["iterations"][-1]["premises_text"]
    assert t["clarifications"][0]["skipped"] and t["clarifications"][0]["reason"] == "skipped"
    second = kinds(gen, "rewrite")[1]
    assert "(skipped;" in second and "DECISION: ASK_QUESTIONS" not in second  # one round of questions only
    assert audit_lines(m)[-1]["clarifications"][0]["skipped"] is True


def test_unanswered_questions_time_out_and_are_skipped(make_manager):
    gen = ScriptedGenerator(answers("<answer>You get 15% off your order.</answer>"),
                            ask_then("If your items are regular-priced, as a gold member you get 15% off."))
    m = make_manager(gen, question_timeout_s=0.3)
    tid = m.submit(GOLD_UNKNOWN).id
    deadline = time.monotonic() + 15
    while m.get(tid)["status"] != "COMPLETED" and time.monotonic() < deadline:
        time.sleep(0.05)
    t = m.get(tid)
    assert t["status"] == "COMPLETED" and t["clarifications"][0]["reason"] == "timeout"
    assert t["exit"] == "VALID_RESPONSE"  # the conditional rewrite is proved as an implication
    assert audit_lines(m)[-1]["clarifications"][0]["reason"] == "timeout"


def test_abstention_completes_with_its_trace_and_is_never_rewritten(make_manager):
    gen = ScriptedGenerator(answers("<answer>not enough information</answer>"), answers("DECISION: REWRITE\nANSWER: 15%"))
    m = make_manager(gen)
    t = m.wait(m.submit(GOLD_80).id)
    assert (t["exit"], t["badge"], t["rewrites"]) == ("ABSTAINED", "ABSTAINED", 0)
    assert t["final_response"] == "not enough information"
    assert t["iterations"][0]["search"]["stop_reason"] == "answer" and not t["iterations"][0]["findings"]
    assert kinds(gen, "rewrite") == []
    assert audit_lines(m)[-1]["exit"] == "ABSTAINED"


def test_generator_down_ends_in_error_after_retries_and_is_audited(make_manager, caplog):
    """The thread's error (which its reader sees) says what failed and gives a reference; the cause (an
    exception's text, which may name hosts or paths) is only in the server log, on the referenced line."""
    gen = ScriptedGenerator(answers("x"), answers("x"), down=True)
    m = make_manager(gen, retries=3)
    with caplog.at_level("ERROR"):
        t = m.wait(m.submit(GOLD_80).id)
    assert (t["status"], t["exit"], t["badge"]) == ("ERROR", "ERROR", "ERROR")
    assert "after 3 attempt(s)" in t["error"] and "connection refused" not in t["error"]
    ref = re.search(r"reference ([0-9a-f]{12})", t["error"]).group(1)
    assert any(ref in r.getMessage() and "connection refused" in r.getMessage() for r in caplog.records)
    assert len(kinds(gen, "answer")) == 3
    line = audit_lines(m)[-1]
    assert line["exit"] == "ERROR" and line["error"] == t["error"]


def test_unreachable_openai_generator_ends_in_error_not_a_hang(make_manager):
    import socket

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    m = make_manager(None, generator=f"openai:http://127.0.0.1:{port}/v1#agent", retries=2)
    started = time.monotonic()
    t = m.wait(m.submit(GOLD_80).id, timeout=60)
    assert t["status"] == "ERROR" and "could not load generator" in t["error"]
    assert time.monotonic() - started < 60
    assert audit_lines(m)[-1]["exit"] == "ERROR"


def test_nothing_translated_is_served_as_not_validated(make_manager):
    gen = ScriptedGenerator(answers("<answer>Thanks for shopping with us, have a great day!</answer>"), answers("x"))
    m = make_manager(gen)
    t = m.wait(m.submit("Hello there!").id)
    assert (t["exit"], t["badge"]) == ("NO_TRANSLATIONS", "NOT_VALIDATED")
    assert "nothing in this answer maps" in t["warning"] and kinds(gen, "rewrite") == []


def test_valid_mixed_with_untranslated_text_is_partly_validated_never_valid(make_manager):
    gen = ScriptedGenerator(answers("<answer>Shipping is free. Our store opens at nine.</answer>"), answers("x"))
    m = make_manager(gen)
    t = m.wait(m.submit("I have a silver membership and my order is $75.").id)
    assert (t["exit"], t["badge"]) == ("NO_TRANSLATIONS", "PARTLY_VALIDATED")
    assert t["iterations"][0]["partly_valid"] is True and "Partly validated" in t["warning"]


def test_too_complex_gets_the_simplify_prompt(make_manager, cubes_policy):
    gen = ScriptedGenerator(answers("<answer>Yes, the cubes add up.</answer>"),
                            answers("DECISION: REWRITE\nANSWER: I cannot say."))
    m = make_manager(gen, policy=str(cubes_policy), check_timeout_ms=200, max_iterations=1)
    t = m.wait(m.submit("Take three positive numbers.").id)
    assert t["iterations"][0]["result"] == "TOO_COMPLEX"
    assert t["iterations"][1]["template"] == "rewrite_too_complex"
    assert "Simplify" in kinds(gen, "rewrite")[0]
    assert t["badge"] == "NOT_VALIDATED"  # "I cannot say." translates to nothing


def test_unparseable_rewrite_is_taken_whole_and_logged(make_manager):
    gen = ScriptedGenerator(answers("<answer>You get 10% off.</answer>"), answers("As a gold member you get 15% off."))
    m = make_manager(gen)
    t = m.wait(m.submit(GOLD_80).id)
    assert t["exit"] == "VALID_RESPONSE" and t["final_response"] == "As a gold member you get 15% off."
    assert t["iterations"][1]["decision"]["parsed"] is False
    assert any("unparseable" in e["event"] for e in t["events"])


def test_corrections_are_in_generation_and_rewrite_prompts(make_manager):
    gen = ScriptedGenerator(answers("<answer>Vioxx is still approved, and you get 10% off.</answer>"),
                            answers("DECISION: REWRITE\nANSWER: As a gold member you get 15% off."))
    m = make_manager(gen)
    t = m.wait(m.submit("I am a gold member buying a regular-priced jacket for $80 and some Vioxx. What discount do I get?").id)
    first, rewrite = kinds(gen, "answer")[0], kinds(gen, "rewrite")[0]
    assert "withdrawn from the market" in first and "withdrawn from the market" in rewrite
    cites = [f for f in t["iterations"][0]["findings"] if f["citation"]]
    assert cites and cites[0]["citation"]["kind"] == "correction"
    assert t["exit"] == "VALID_RESPONSE"


class AmbiguousFirst:
    """A translator whose first reading of the answer disagrees with itself (as an LLM translator's
    samples may), then reads it with the policy's patterns."""

    def __init__(self):
        self.calls = 0

    def translate(self, question, answer, policy):
        self.calls += 1
        if self.calls == 1:
            a = Translation(premises=[Statement("(= tier gold)")], claims=[Statement("(= discount_percent 15)")], confidence=0.5)
            b = Translation(premises=[Statement("(= tier gold)")], claims=[Statement("(= discount_percent 10)")], confidence=0.5)
            return [Ambiguity(options=[[a], [b]], confidence=0.5)]
        return PatternTranslator().translate(question, answer, policy)


def test_translation_ambiguous_uses_its_template_with_the_readings(tmp_path):
    from awarl.chat.loop import Loop
    from awarl.chat.prompts import Prompts
    from awarl.chat.thread import Thread
    from awarl.chat.validate import Validator

    from .conftest import PRICING

    gen = ScriptedGenerator(answers("<answer>You get 15% off.</answer>"),
                            answers("DECISION: REWRITE\nANSWER: As a gold member you get 15% off."))
    loop = Loop(Validator(PRICING, translator=AmbiguousFirst()), gen, Prompts())
    t = loop.run(Thread.new(GOLD_80, generator="scripted", policy="pricing"))
    assert t.iterations[0].result == "TRANSLATION_AMBIGUOUS"
    assert t.iterations[1].template == "rewrite_translation_ambiguous"
    prompt = kinds(gen, "rewrite")[0]
    assert "reading 1" in prompt and "discount_percent" in prompt
    assert t.badge.value == "VALID_GIVEN_YOUR_STATEMENT" and t.rewrites == 1


def test_a_bedrock_policy_json_is_served(make_manager, tmp_path):
    """A policy exported from Bedrock loads as is; without awarl's patterns the offline translator reads
    nothing, and the answer is honestly 'not validated' (an LLM translator would translate it)."""
    import json as _json

    from awarl.verify.policy import load_policy

    from .conftest import PRICING

    exported = tmp_path / "pricing.bedrock.json"
    exported.write_text(_json.dumps({"policyDefinition": load_policy(PRICING).to_definition()}))
    m = make_manager(None, policy=str(exported))
    assert m.config()["policy"] == "pricing.bedrock"
    t = m.wait(m.submit(GOLD_80, "You get 10% off.").id)
    assert t["status"] == "COMPLETED" and t["badge"] == "NOT_VALIDATED" and t["policy_version"] == "1.0"


def test_a_reply_without_a_final_answer_is_never_checked_or_served(make_manager):
    """A broken tool call or a spent budget leaves no <answer>: the agent is asked again."""
    gen = ScriptedGenerator(answers(None, "<answer>As a gold member you get 15% off.</answer>"), None, decisions=False)
    m = make_manager(gen)
    t = m.wait(m.submit(GOLD_80).id)
    assert (t["exit"], t["badge"], t["rewrites"]) == ("VALID_RESPONSE", "VALID_GIVEN_YOUR_STATEMENT", 1)
    assert [(i["type"], i["result"]) for i in t["iterations"]] == [("initial", None), ("resample", "VALID")]
    assert "had no final answer" in t["iterations"][1]["prompt"]


def test_no_final_answer_within_max_iterations_ends_unvalidated(make_manager):
    gen = ScriptedGenerator(answers(None), None, decisions=False)
    m = make_manager(gen, max_iterations=1)
    t = m.wait(m.submit(GOLD_80).id)
    assert (t["exit"], t["badge"], t["final_response"]) == ("MAX_ITERATIONS_REACHED", "NOT_VALIDATED", "")
    assert "no final answer in 2 attempt(s)" in t["warning"]


def test_after_a_checked_answer_a_missing_one_keeps_the_checked_result(make_manager):
    gen = ScriptedGenerator(answers("<answer>You get 10% off.</answer>", None), None, decisions=False)
    m = make_manager(gen, max_iterations=1, resample_feedback=False)
    t = m.wait(m.submit(GOLD_80).id)
    assert (t["exit"], t["badge"], t["final_response"]) == ("MAX_ITERATIONS_REACHED", "INVALID", "You get 10% off.")
    assert t["iterations"][1]["prompt"] == GOLD_80  # bare resampling: exactly the question, no feedback


# -- which checked sample is served ------------------------------------------------------------
SAT = "<answer>You get 15% off your order.</answer>"  # on GOLD_UNKNOWN: allowed, not proved
BAD = "<answer>You get 50% off your order.</answer>"  # contradicts the policy
ABSTAIN = "<answer>not enough information</answer>"


@pytest.mark.parametrize("script, served, exit, badge", [
    ((SAT, BAD, BAD, BAD), 0, "MAX_ITERATIONS_REACHED", "NOT_VALIDATED"),   # SATISFIABLE, then worse
    ((BAD, SAT, BAD, BAD), 1, "MAX_ITERATIONS_REACHED", "NOT_VALIDATED"),   # a later better one wins
    ((SAT, ABSTAIN), 0, "MAX_ITERATIONS_REACHED", "NOT_VALIDATED"),         # an abstention after SATISFIABLE
    ((BAD, ABSTAIN), 1, "ABSTAINED", "ABSTAINED"),                          # an abstention beats INVALID
    ((BAD, None, None, None), 0, "MAX_ITERATIONS_REACHED", "INVALID"),      # replies without an answer are never served
])
def test_the_best_checked_sample_is_served_never_a_worse_one_after_it(make_manager, script, served, exit, badge):
    gen = ScriptedGenerator(answers(*script))  # answer-only: re-asked (verify-and-resample)
    m = make_manager(gen, max_iterations=3, max_question_rounds=0)  # no loop-built questions here
    t = m.wait(m.submit(GOLD_UNKNOWN).id)
    assert (t["served"], t["exit"], t["badge"]) == (served, exit, badge), t["warning"]
    assert t["final_response"] == t["iterations"][served]["answer"].replace("<answer>", "").replace("</answer>", "").strip()
    assert t["badge_label"] and t["badge_style"]
    if len([i for i in t["iterations"] if i["result"] or i["abstained"]]) > 1:
        assert "best of" in t["warning"]


def test_a_valid_sample_after_worse_ones_is_served_valid(make_manager):
    gen = ScriptedGenerator(answers("<answer>You get 10% off.</answer>", "<answer>As a gold member you get 15% off.</answer>",
                                    "<answer>You get 10% off.</answer>"))
    m = make_manager(gen, max_iterations=3)
    t = m.wait(m.submit(GOLD_80).id)
    assert (t["exit"], t["badge"], t["served"], t["rewrites"]) == ("VALID_RESPONSE", "VALID_GIVEN_YOUR_STATEMENT", 1, 1)
    assert (t["badge_label"], t["badge_style"]) == ("Valid given your statement", "VALID_GIVEN_YOUR_STATEMENT")


# -- clarifying questions the loop builds for an answer-only agent ----------------------------
def test_the_loop_asks_what_the_scenarios_differ_on_when_the_agent_cannot(make_manager):
    gen = ScriptedGenerator(answers(SAT))  # answer-only: no DECISION lines
    m = make_manager(gen)
    tid = m.submit(GOLD_UNKNOWN).id
    t = m.wait(tid)
    assert t["status"] == "AWAITING_INPUT" and t["iterations"][-1]["template"] == "loop_question"
    [question] = t["pending_questions"]
    assert question.endswith("yes or no?") and "sale" in question.lower()
    m.answer(tid, ["They are regular-priced."], skipped=False)
    t = m.wait(tid)
    assert (t["exit"], t["badge"]) == ("VALID_RESPONSE", "VALID_GIVEN_YOUR_STATEMENT")
    assert len(kinds(gen, "answer")) == 1  # the agent was not re-asked: the user's answer settled it


def test_a_namesake_is_asked_about_and_the_choice_becomes_a_premise(make_manager, tmp_path):
    from awarl.data.world import WorldConfig, generate_world, write_world

    world = generate_world(WorldConfig(version=2, persons=60, cities=8, countries=4, seed=0))
    files = write_world(world, tmp_path / "world")
    names = [p.name for p in world.persons]
    q = next(q for q in world.questions if q.answerable and names.count(q.person) > 1)
    others = sorted({getattr(p, q.relation) for p in world.persons if p.name == q.person} - {q.chain[0]})
    cites = " ".join(f"[{i}]" for i in world.supporting(q))
    gen = ScriptedGenerator(answers(f"<answer>{q.answer}</answer> {cites}"))
    m = make_manager(gen, policy=str(files["policy"]), policy_name="world", corpus=str(files["corpus"]))
    tid = m.submit(q.question).id
    t = m.wait(tid)
    assert t["status"] == "AWAITING_INPUT", t.get("warning")
    [question] = t["pending_questions"]
    verb = "was born in" if q.relation == "born" else "lives in"
    assert question.startswith(f"Which {q.person} do you mean — the one who {verb} ") and q.chain[0] in question
    assert all(c in question for c in others)
    m.answer(tid, [f"The one in {q.chain[0]}."], skipped=False)
    t = m.wait(tid)
    assert (t["exit"], t["badge"]) == ("VALID_RESPONSE", "VALID_GIVEN_YOUR_STATEMENT"), t["warning"]
    assert f"{q.person} {verb} {q.chain[0]}." in t["iterations"][-1]["premises_text"]


@pytest.fixture
def namesake_world(tmp_path):
    """A world v2 with namesakes; one answerable question whose person has them, its gold city and another."""
    from awarl.data.world import WorldConfig, generate_world, write_world

    world = generate_world(WorldConfig(version=2, persons=60, cities=8, countries=4, seed=0))
    files = write_world(world, tmp_path / "world")
    names = [p.name for p in world.persons]
    q = next(q for q in world.questions if q.answerable and names.count(q.person) > 1)
    other = sorted({getattr(p, q.relation) for p in world.persons if p.name == q.person} - {q.chain[0]})[0]
    settings = dict(policy=str(files["policy"]), policy_name="world", corpus=str(files["corpus"]))
    return world, q, other, settings


ABSTAIN = "<answer>not enough information</answer>"


def test_an_abstention_on_a_namesake_asks_which_one_then_the_agent_again(make_manager, namesake_world):
    world, q, other, settings = namesake_world
    right = f"<answer>{q.answer}</answer>"
    gen = ScriptedGenerator(answers(ABSTAIN, right))
    m = make_manager(gen, **settings)
    tid = m.submit(q.question).id
    t = m.wait(tid)
    assert t["status"] == "AWAITING_INPUT"
    [question] = t["pending_questions"]
    verb = "was born in" if q.relation == "born" else "lives in"
    assert question.startswith(f"Which {q.person} do you mean — the one who {verb} ")
    m.answer(tid, [q.chain[0]], skipped=False)
    t = m.wait(tid)
    assert (t["exit"], t["badge"]) == ("VALID_RESPONSE", "VALID_GIVEN_YOUR_STATEMENT"), t["warning"]
    assert [i["type"] for i in t["iterations"]] == ["initial", "ask", "revalidate", "resample"]
    second = kinds(gen, "answer")[1]  # the question asked and the user's reply reach the agent; no "rejected" answer
    assert second.startswith(q.question) and f"{question} A: {q.chain[0]}" in second and "rejected" not in second


@pytest.mark.parametrize("how", ["skipped", "no answer again", "abstains again"])
def test_after_asking_an_abstaining_agent_the_abstention_is_served_when_nothing_better_comes(make_manager, namesake_world, how):
    world, q, other, settings = namesake_world
    gen = ScriptedGenerator(answers(ABSTAIN, None if how == "no answer again" else ABSTAIN))
    m = make_manager(gen, max_iterations=1, **settings)
    tid = m.submit(q.question).id
    assert m.wait(tid)["status"] == "AWAITING_INPUT"
    m.answer(tid, [] if how == "skipped" else [q.chain[0]], skipped=how == "skipped")
    t = m.wait(tid)
    assert (t["exit"], t["badge"], t["served"], t["final_response"]) == ("ABSTAINED", "ABSTAINED", 0,
                                                                         "not enough information"), t["warning"]
    assert len(kinds(gen, "answer")) == (1 if how == "skipped" else 2)
    assert ("still did not answer" in t["warning"]) == (how != "skipped")


def test_an_answer_the_users_reply_makes_invalid_is_not_served_as_it_was_checked_before(make_manager, namesake_world):
    """The first answer cites only the city (SATISFIABLE: which person is meant?). The user names the
    other namesake, so the same answer checks INVALID: it is no longer served as "not validated", and
    the question the user already answered is not asked again in a second round."""
    world, q, other, settings = namesake_world
    city_only = f"<answer>{q.answer}</answer> [{world.supporting(q)[-1]}]"
    gen = ScriptedGenerator(answers(city_only, ABSTAIN))
    m = make_manager(gen, max_question_rounds=2, **settings)
    tid = m.submit(q.question).id
    t = m.wait(tid)
    assert t["status"] == "AWAITING_INPUT", t["warning"]
    m.answer(tid, [other], skipped=False)
    t = m.wait(tid)
    assert t["status"] == "COMPLETED" and len(t["clarifications"]) == 1  # not asked the same question again
    assert [(i["type"], i["result"]) for i in t["iterations"][:3]] == [
        ("initial", "SATISFIABLE"), ("ask", "SATISFIABLE"), ("revalidate", "INVALID")]
    assert t["badge"] == "ABSTAINED" and t["iterations"][t["served"]]["abstained"], t["warning"]
