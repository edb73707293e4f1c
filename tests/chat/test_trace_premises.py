"""The trace-premise fallback: an answer SATISFIABLE for lack of a premise that the agent's own search
returned (but it did not cite) is checked with that passage too, and says so; a passage the search
did not return is never a premise (real Z3 checks on a generated world's policy and corpus)."""

from __future__ import annotations

import pytest

from awarl.chat.generate import AgentGenerator, AgentReply, returned_passages
from awarl.chat.validate import Validator
from awarl.data.world import policy_yaml
from awarl.llm.base import Generation
from awarl.protocol import render_passage
from awarl.search.bm25 import BM25Index
from awarl.verify.findings import Result, aggregate

NOTE = "premise from search trace, not cited"


def _shown(world, pid: str) -> dict[str, str]:
    p = world.passage(pid)
    return {"id": pid, "title": p.title, "text": p.text}


@pytest.fixture(scope="module")
def validator(world, tmp_path_factory) -> Validator:
    path = tmp_path_factory.mktemp("trace") / "policy.yaml"
    path.write_text(policy_yaml(world), encoding="utf-8")
    return Validator(path, corpus={p.id: p for p in world.passages})


@pytest.fixture(scope="module")
def lives_q(world):
    """A 'which country does X live in' question, its 'X lives in C' passage and C's country passage."""
    q = next(q for q in world.questions if q.answerable and q.relation == "lives")
    return q, world.fact_passage[(q.person, "lives")], world.fact_passage[(q.chain[0], "in")]


def _check(v: Validator, world, q, country: str, cited: list[str], returned: list[str]):
    answer = f"<answer>{country}</answer> " + " ".join(f"[{p}]" for p in cited)
    return v.validate(q.question, [], answer, [_shown(world, p) for p in cited],
                      returned=[_shown(world, p) for p in returned])


def test_a_returned_uncited_premise_makes_the_answer_valid_and_says_so(validator, world, lives_q):
    q, person_pid, city_pid = lives_q
    alone = _check(validator, world, q, q.answer, [city_pid], [])
    assert aggregate(alone.findings) is Result.SATISFIABLE and alone.trace == []  # the person's city is not given
    other = next(p.id for p in world.passages if p.id not in (person_pid, city_pid))
    v = _check(validator, world, q, q.answer, [city_pid], [city_pid, other, person_pid])
    assert aggregate(v.findings) is Result.VALID
    assert v.trace == [person_pid]  # only the passage the proof needed is named, not every one returned
    assert all(f"{NOTE}: [{person_pid}]" in f.detail for f in v.findings)
    assert world.passage(person_pid).text in v.premises


def test_a_passage_the_search_did_not_return_is_never_a_premise(validator, world, lives_q):
    q, person_pid, city_pid = lives_q
    returned = [p.id for p in world.passages if p.id not in (person_pid, city_pid)][:6]
    v = _check(validator, world, q, q.answer, [city_pid], returned)
    assert aggregate(v.findings) is Result.SATISFIABLE and v.trace == []
    assert not any(NOTE in f.detail for f in v.findings)


def test_another_persons_returned_passage_proves_nothing(validator, world, lives_q):
    q, person_pid, city_pid = lives_q
    city = q.chain[0]
    other = next(p for p in world.persons if p.name != q.person and p.lives == city)  # lives in the same city
    v = _check(validator, world, q, q.answer, [city_pid], [world.fact_passage[(other.name, "lives")]])
    assert aggregate(v.findings) is not Result.VALID and v.trace == []


def test_a_wrong_answer_is_not_made_valid_by_the_trace(validator, world, lives_q):
    q, person_pid, city_pid = lives_q
    wrong_city = next(c for c, k in world.parent.items() if k not in (None, q.answer) and (c, "in") in world.fact_passage)
    wrong_pid = world.fact_passage[(wrong_city, "in")]
    v = _check(validator, world, q, world.parent[wrong_city], [wrong_pid], [wrong_pid, person_pid, city_pid])
    assert aggregate(v.findings) is not Result.VALID and v.trace == []


def test_citations_that_do_not_support_a_proved_answer_are_replaced_by_returned_ones(validator, world, lives_q):
    """A tiny agent writes ids it remembers: an answer the trace proves but that cites passages about
    other persons is cited anew with the returned passages that prove and state it; a wrong answer with
    such citations is never made VALID."""
    q, person_pid, city_pid = lives_q
    unrelated = [p.id for p in world.passages if q.answer not in p.text and q.person not in p.text][:2]
    other = next(p.id for p in world.passages if p.id not in (person_pid, city_pid, *unrelated))
    v = _check(validator, world, q, q.answer, unrelated, [other, person_pid, city_pid])
    assert aggregate(v.findings) is Result.VALID
    assert v.recited == f"<answer>{q.answer}</answer> [{person_pid}] [{city_pid}]"
    assert all("citations replaced by passages the search returned" in f.detail for f in v.findings
               if f.result is Result.VALID and f.citation is None)
    # nothing returned states the country: the citations stay, and so does their INVALID finding
    kept = _check(validator, world, q, q.answer, unrelated, [other, person_pid])
    assert kept.recited is None and aggregate(kept.findings) is not Result.VALID
    wrong = next(c for c in sorted({k for k in world.parent.values() if k}) if c != q.answer)
    w = _check(validator, world, q, wrong, unrelated, [other, person_pid, city_pid])
    assert w.recited is None and aggregate(w.findings) is not Result.VALID


def test_an_answer_proved_from_its_cited_persons_passage_is_cited_with_the_citys_too(validator, world, lives_q):
    """The answer cites the person's passage (so the proof needs no trace) and another person's passage
    instead of the city's: the gate rejects the pair, and the answer is cited anew with the person's
    passage and the returned city passage it lacked, not served INVALID (a later "SATISFIABLE" guess
    would then outrank the right answer)."""
    q, person_pid, city_pid = lives_q
    stray = next(p.id for p in world.passages if q.answer not in p.text and q.person not in p.text)
    v = _check(validator, world, q, q.answer, [stray, person_pid], [person_pid, city_pid])
    assert aggregate(v.findings) is Result.VALID and v.trace == []
    assert v.recited == f"<answer>{q.answer}</answer> [{person_pid}] [{city_pid}]"


class TraceAgent:
    """An answer-only generator whose replies carry a search trace (the passages it was shown)."""

    name, decisions = "trace-agent", False

    def __init__(self, text: str, returned: list[dict[str, str]]):
        self.text, self.returned = text, returned

    def answer(self, question, temperature):
        return AgentReply.from_text(self.text, returned=self.returned)

    def rewrite(self, prompt):
        raise AssertionError("an answer-only agent is never asked to rewrite")


def test_the_thread_reports_what_a_valid_answer_was_proved_from(make_manager, world_dir, world, lives_q):
    q, person_pid, city_pid = lives_q
    kw = dict(policy=str(world_dir / "policy.yaml"), policy_name="world", corpus=str(world_dir / "corpus.jsonl"))
    traced = make_manager(TraceAgent(f"<answer>{q.answer}</answer> [{city_pid}]",
                                     [_shown(world, city_pid), _shown(world, person_pid)]), **kw)
    t = traced.wait(traced.submit(q.question).id, timeout=60)
    assert t["badge"] == "VALID" and t["valid_from"] == "search trace" and t["rewrites"] == 0
    assert t["iterations"][t["served"]]["trace_premises"] == [person_pid]
    assert f"[{person_pid}]" in t["warning"] and "did not cite" in t["warning"]
    assert any(NOTE in f["detail"] for f in t["iterations"][t["served"]]["findings"])
    traced.close()
    # A reply that repeats an id is served once-cited, and its search trace still counts.
    repeated = make_manager(TraceAgent(f"<answer>{q.answer}</answer> [{city_pid}] [{city_pid}]",
                                       [_shown(world, city_pid), _shown(world, person_pid)]), **kw)
    t = repeated.wait(repeated.submit(q.question).id, timeout=60)
    assert t["badge"] == "VALID" and t["valid_from"] == "search trace" and t["rewrites"] == 0
    assert t["iterations"][0]["raw"].count(f"[{city_pid}]") == 2 and t["iterations"][0]["answer"].count(f"[{city_pid}]") == 1
    repeated.close()
    both = make_manager(TraceAgent(f"<answer>{q.answer}</answer> [{person_pid}] [{city_pid}]",
                                   [_shown(world, city_pid), _shown(world, person_pid)]), **kw)
    t = both.wait(both.submit(q.question).id, timeout=60)
    assert t["badge"] == "VALID" and t["valid_from"] == "citations" and t["warning"] is None
    both.close()
    unrelated = [p.id for p in world.passages if q.answer not in p.text and q.person not in p.text][:2]
    remembered = make_manager(TraceAgent(f"<answer>{q.answer}</answer> " + " ".join(f"[{i}]" for i in unrelated),
                                         [_shown(world, city_pid), _shown(world, person_pid)]), **kw)
    t = remembered.wait(remembered.submit(q.question).id, timeout=60)
    assert t["badge"] == "VALID" and t["valid_from"] == "search trace" and t["rewrites"] == 0
    assert t["iterations"][t["served"]]["recited"] and "own citations did not support it" in t["warning"]
    assert "that it did not cite" not in t["warning"]  # re-cited: the trace passages are its citations now
    assert f"passages its search returned: [{person_pid}] [{city_pid}]." in t["warning"]
    assert t["iterations"][t["served"]]["cited"] == [_shown(world, person_pid), _shown(world, city_pid)]
    remembered.close()


class SearchThenAnswer:
    """A chat backend: the first turn searches for the question, the second answers citing nothing."""

    accepts, tokenizer, eos_token_ids, max_model_len, name = "messages", None, [], None, "search-then-answer"

    def generate(self, prompts, params):
        out = []
        for prompt in prompts:
            if any(m.get("role") == "tool" for m in prompt.messages):
                message = {"role": "assistant", "content": "<answer>Morland</answer>"}
            else:
                question = prompt.messages[-1]["content"]
                message = {"role": "assistant", "content": "", "tool_calls": [
                    {"type": "function", "function": {"name": "search", "arguments": {"query": question}}}]}
            out.append(Generation(text=message["content"], message=message, prompt_tokens=10, completion_tokens=5))
        return out

    def close(self):
        pass


def test_the_agents_reply_carries_the_passages_its_search_showed(world):
    from awarl.agent.settings import RolloutSettings

    retriever = BM25Index.build(list(world.passages))
    rollout = RolloutSettings(scope="global", topk=3, passage_words=4, max_searches=1)
    gen = AgentGenerator(SearchThenAnswer(), retriever, rollout)
    try:
        reply = gen.answer("Where does Nuri Dusk live?", 0.0)
    finally:
        gen.close()
    assert reply.answer == "Morland" and reply.citations == []
    assert [p["id"] for p in reply.returned] == reply.retrieved_ids and len(reply.returned) == 3
    for p in reply.returned:  # the text as the search result showed it: cut to passage_words
        assert p["title"] == world.passage(p["id"]).title and len(p["text"].split()) <= 5
    assert reply.search()["returned"] == reply.returned


def test_only_tool_results_count_as_returned(world):
    """Passage ids the model wrote itself, or a failed call's text, are not search results."""
    from awarl.agent.runner import ToolCall, Turn

    pid = world.passages[0].id
    line = render_passage(pid, world.passages[0].title, world.passages[0].text)

    class Traj:
        turns = [Turn(content=line), Turn(content="", tool_calls=[ToolCall("search", {}, line, failed=True)])]

    assert returned_passages(Traj(), BM25Index.build(list(world.passages))) == []
    Traj.turns.append(Turn(content="", tool_calls=[ToolCall("search", {}, line + "\n" + render_passage("dnope", "X", "y"), failed=False)]))
    assert returned_passages(Traj(), BM25Index.build(list(world.passages))) == [_shown(world, pid)]
