"""The embedded default on the synthetic world: cited answers checked against the world's policy,
citation problems rewritten, the review queue round trip, and verify-and-resample with a real
tiny agent through the rollout runner."""

from __future__ import annotations

import json

import pytest

from awarl.chat.config import default_settings
from awarl.chat.generate import ScriptedGenerator


@pytest.fixture
def world_q(world):
    """An answerable world question, its right and a wrong country, and its evidence ids."""
    q = next(q for q in world.questions if q.answerable and q.relation == "born")
    wrong = next(c for c in sorted(set(world.parent.values())) if c != q.answer)
    return q, wrong, world.supporting(q)


def world_manager(make_manager, world_dir, gen, **kw):
    return make_manager(gen, policy=str(world_dir / "policy.yaml"), policy_name="world",
                        corpus=str(world_dir / "corpus.jsonl"), **kw)


def test_wrong_country_is_caught_and_rewritten_with_citations(make_manager, world_dir, world_q):
    q, wrong, ids = world_q
    cites = " ".join(f"[{i}]" for i in ids)
    gen = ScriptedGenerator(lambda text, n: f"<answer>{wrong}</answer> {cites}",
                            lambda p, n: f"DECISION: REWRITE\nANSWER: <answer>{q.answer}</answer> {cites}")
    m = world_manager(make_manager, world_dir, gen)
    t = m.wait(m.submit(q.question).id)
    first, second = t["iterations"]
    assert first["result"] == "INVALID" and second["result"] == "VALID"
    assert t["badge"] == "VALID" and t["final_response"] == f"{q.answer} {cites}"
    # the premises are the question plus the cited passages' text; the proof names the world's rules
    assert f"was born in {q.chain[0]}." in second["premises_text"]
    valid = next(f for f in second["findings"] if f["result"] == "VALID")
    assert "answer_birth" in valid["supporting_rules"]
    assert any(f"{q.chain[0]} is a city in the country {q.answer}." == d for d in valid["rules"].values())
    assert f"{q.chain[0]} is a city in the country {q.answer}." in gen.prompts[1][1]


def test_fabricated_citation_gets_the_citation_prompt(make_manager, world_dir, world_q):
    q, _, ids = world_q
    cites = " ".join(f"[{i}]" for i in ids)
    gen = ScriptedGenerator(lambda text, n: f"<answer>{q.answer}</answer> [dfabricated1]",
                            lambda p, n: f"DECISION: REWRITE\nANSWER: <answer>{q.answer}</answer> {cites}")
    m = world_manager(make_manager, world_dir, gen)
    t = m.wait(m.submit(q.question).id)
    fabricated = [f for f in t["iterations"][0]["findings"] if f["citation"]]
    assert fabricated[0]["citation"]["kind"] == "fabricated" and fabricated[0]["citation"]["passage_id"] == "dfabricated1"
    assert t["iterations"][1]["template"] == "rewrite_citation"
    assert "fabricated: " in gen.prompts[1][1] and "[dfabricated1]" in gen.prompts[1][1]
    assert t["badge"] == "VALID"


def test_review_round_trip_borderline_citation_approved_correction_in_next_prompt(make_manager, world_dir, world_q):
    q, _, ids = world_q
    cites = " ".join(f"[{i}]" for i in ids)
    # "known for poets" shares one content word in three with the passages: the lexical judge says BORDERLINE
    gen = ScriptedGenerator(lambda text, n: f"<answer>{q.answer}, known for poets</answer> {cites}", None)
    m = world_manager(make_manager, world_dir, gen)
    t = m.wait(m.submit(q.question).id)
    [review] = m.reviews("pending")
    assert review["reason"] == "borderline" and review["thread_id"] == t["id"]
    assert review["data"]["passage_ids"] == ids and "known for poets" in review["data"]["sentence"]
    correction = f"{q.answer} is not known for poets; say only what the passages state."
    decided = m.decide(review["id"], "approve", correction)
    assert decided["status"] == "decided" and decided["verdict"] == "approve"
    with pytest.raises(Exception, match="already decided"):
        m.decide(review["id"], "approve", None)
    m.wait(m.submit(q.question).id)
    next_prompt = [p for k, p in gen.prompts if k == "answer"][-1]
    assert correction in next_prompt and correction not in gen.prompts[0][1]


def test_default_without_demo_generates_the_world_and_runs_validate_only(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    s = default_settings(tmp_path / "runs" / "demo", db=str(tmp_path / "c.sqlite"))
    assert s.generator is None and s.policy_name == "world" and s.policies["world"].endswith("policy.yaml")
    assert "Validate-only mode" in s.mode_note and "awarl demo" in s.mode_note and str(tmp_path) not in s.mode_note
    assert (tmp_path / ".cache" / "awarl-chat" / "world" / "corpus.jsonl").exists()


def test_default_reads_the_demo_manifest(tmp_path, world_dir, tiny_model_dir):
    demo = tmp_path / "demo"
    demo.mkdir()
    (demo / "demo.json").write_text(json.dumps({
        "version": 1, "world": str(world_dir), "corpus": str(world_dir / "corpus.jsonl"),
        "policy": str(world_dir / "policy.yaml"), "agent": None, "sft_agent": None, "rollout": {"topk": 2}}))
    s = default_settings(demo)
    assert s.generator is None and "names no trained agent" in s.mode_note
    manifest = json.loads((demo / "demo.json").read_text())
    manifest["agent"] = str(tiny_model_dir)
    (demo / "demo.json").write_text(json.dumps(manifest))
    s = default_settings(demo)
    assert s.generator == f"hf:{tiny_model_dir}" and s.rollout.topk == 2 and s.corpus.endswith("corpus.jsonl")
    assert "Serving the synthetic-world agent" in s.mode_note and str(tmp_path) not in s.mode_note  # open routes show it
    assert not s.uses_decisions(s.generator)  # a local checkpoint gets verify-and-resample
    assert s.resample_feedback is False  # on the bare question: feedback text derails the tiny world agent
    assert s.workers == 32 and s.batch_size == 32  # enough threads in flight for their generations to batch


def test_verify_and_resample_with_the_tiny_world_agent(make_manager, tmp_path, test_world, tiny_world_sft_model_dir):
    """The tiny world agent (a real checkpoint, warm-started on this world) through the rollout runner and
    the search tool, under the rollout settings saved with it. It only answers, so each failed check
    re-asks it with the finding as feedback, sampled at the configured temperature."""
    from awarl.data.world import write_world

    files = write_world(test_world, tmp_path / "world")
    m = make_manager(None, generator=f"hf:{tiny_world_sft_model_dir}", policy=str(files["policy"]), policy_name="world",
                     corpus=str(files["corpus"]), max_iterations=2, temperature=1.0,
                     max_question_rounds=0)  # resampling only: no questions the loop builds itself
    assert not m.config()["decisions"]
    questions = [q for q in test_world.split("eval")][:4]
    threads = [m.wait(m.submit(q.question).id, timeout=600) for q in questions]
    for t in threads:
        assert t["status"] == "COMPLETED", t.get("error")
        first = t["iterations"][0]
        assert first["type"] == "initial" and first["search"]["queries"], first  # it searched
        assert len(first["search"]["queries"]) <= 2  # under the rollout settings saved with it (max_searches 2)
        resamples = [i for i in t["iterations"] if i["type"] == "resample"]
        assert t["rewrites"] == len(resamples) <= 2
        for it in resamples:
            assert "was checked and rejected" in it["prompt"] and it["template"] == "resample_feedback"
        if t["exit"] == "MAX_ITERATIONS_REACHED":  # the best checked answer, served unproved: every rewrite made,
            last = t["iterations"][-1]  # or the last reply gave nothing to rewrite from (it abstained, or answered nothing)
            assert t["rewrites"] == 2 or last["abstained"] or last["result"] is None, json.dumps(t, indent=1)[:6000]
            assert t["badge"] in ("INVALID", "NOT_VALIDATED") and "Best found" in t["warning"]
        if t["exit"] == "ABSTAINED":
            assert t["iterations"][t["served"]]["findings"] == []  # an abstention is never checked into a guess
        if t["exit"] == "VALID_RESPONSE":
            assert t["iterations"][-1]["search"]["citations"]  # a valid world answer rests on cited passages


def test_validate_only_checks_a_given_answer_with_its_cited_evidence(make_manager, world_dir, world_q):
    q, wrong, ids = world_q
    cites = " ".join(f"[{i}]" for i in ids)
    m = world_manager(make_manager, world_dir, None)
    assert m.config()["mode"] == "validate-only"
    right = m.wait(m.submit(q.question, f"<answer>{q.answer}</answer> {cites}").id)
    assert (right["exit"], right["badge"]) == ("VALID_RESPONSE", "VALID") and len(right["cited"]) == len(ids)
    bad = m.wait(m.submit(q.question, f"<answer>{wrong}</answer> {cites}").id)
    assert bad["badge"] == "INVALID" and "no agent to rewrite" in bad["warning"]
    bare = m.wait(m.submit(q.question, q.answer).id)  # no citations: no evidence, so the right country is not proved
    assert bare["badge"] == "CHECKED_ONLY" and "SATISFIABLE" in bare["warning"]


def test_a_malformed_answer_is_never_checked_and_text_outside_the_answer_is_not_served(make_manager, world_dir, world_q):
    """The loop checks and serves the answer as the protocol reads it (the reader of rewards and evaluation):
    a reply whose block holds another <answer> tag reads as no answer, so it is asked again; the words after
    a well-formed block are neither checked nor served."""
    from awarl.protocol import extract_answer

    q, _, ids = world_q
    cites = " ".join(f"[{i}]" for i in ids)
    replies = [f"<answer><answer>{q.answer}</answer> who {cites}", f"<answer>{q.answer}</answer> who {cites}"]
    gen = ScriptedGenerator(lambda text, n: replies[min(n, 1)], None)
    m = world_manager(make_manager, world_dir, gen, max_question_rounds=0)
    t = m.wait(m.submit(q.question).id)
    first, second = t["iterations"]
    assert first["result"] is None and not first["findings"] and first["answer"] == replies[0]  # kept, not checked
    assert second["answer"] == f"<answer>{q.answer}</answer> {cites}" and second["result"] == "VALID"
    assert (t["badge"], t["served"], t["final_response"]) == ("VALID", 1, f"{q.answer} {cites}")
    assert extract_answer(t["iterations"][t["served"]]["answer"]) == q.answer  # what the held-out table scores


@pytest.mark.parametrize("template", ["{right} or {wrong}", "{wrong} or {right}", "either {right} or {wrong}", "{right}, {wrong}",
                                      "It is not {right}.", "{right} is wrong; it is {wrong}", "{right} is not right.",
                                      "{right}? No, {wrong}", "It isn't {wrong}, it's {right} or {wrong}.",
                                      "I do not think that it is {right}."])
def test_a_hedged_or_negated_answer_is_never_valid(make_manager, world_dir, world_q, template):
    """With the right evidence cited, an answer that names the right country beside a wrong one, or that
    denies it, is not proved: every country a sentence names is a claim, a negated one is not read, and a
    sentence whose negation or hedge no match accounts for is not read at all."""
    q, wrong, ids = world_q
    cites = " ".join(f"[{i}]" for i in ids)
    m = world_manager(make_manager, world_dir, None)
    t = m.wait(m.submit(q.question, f"<answer>{template.format(right=q.answer, wrong=wrong)}</answer> {cites}").id)
    assert t["badge"] not in ("VALID", "VALID_GIVEN_YOUR_STATEMENT"), t["iterations"][-1]["findings"]
    right = m.wait(m.submit(q.question, f"<answer>It is {q.answer}, not {wrong}.</answer> {cites}").id)
    assert right["badge"] == "VALID"  # the denied country is not read, the other one is proved
