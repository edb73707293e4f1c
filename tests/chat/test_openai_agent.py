"""The agent behind an OpenAI-compatible endpoint (what `vllm serve` of an exported checkpoint
offers), end to end over HTTP: the rollout runner with the search tool, the DECISION rewrite turn
on the same endpoint, and the LLM translator on another — against the one fake OpenAI server
(tests/fake_openai.py)."""

from __future__ import annotations

import json

from .conftest import GOLD_80


def test_openai_agent_searches_cites_and_rewrites_with_decisions(make_manager, openai_server, world_dir, world):
    q = next(q for q in world.questions if q.answerable and q.relation == "born")
    ids = world.supporting(q)
    wrong = next(c for c in sorted(set(world.parent.values())) if c != q.answer)

    def agent(body):
        msgs = body["messages"]
        if "DECISION" in msgs[-1]["content"]:  # the rewrite turn: a plain chat request, no tools
            return {"role": "assistant", "content": f"**Decision:** REWRITE\nANSWER: <answer>{q.answer}</answer> "
                                                    + " ".join(f"[{i}]" for i in ids)}
        tool_turns = [m for m in msgs if m["role"] == "tool"]
        if not tool_turns:  # first turn: call the search tool, as the served agent does
            assert body["tools"][0]["function"]["name"] == "search"
            return {"role": "assistant", "content": "", "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "search", "arguments": json.dumps({"query": q.person})}}]}
        return {"role": "assistant", "content": f"<answer>{wrong}</answer> " + " ".join(f"[{i}]" for i in ids)}

    server = openai_server(agent, model="agent")
    m = make_manager(None, generator=f"openai:{server.base_url}#agent", policy=str(world_dir / "policy.yaml"),
                     corpus=str(world_dir / "corpus.jsonl"))
    assert m.config()["decisions"] is True  # openai: specs answer rewrite prompts with DECISION lines
    t = m.wait(m.submit(q.question).id, timeout=60)
    assert t["status"] == "COMPLETED", t.get("error")
    first, second = t["iterations"]
    assert first["search"]["queries"] == [q.person] and first["search"]["stop_reason"] == "answer"
    assert world.fact_passage[(q.person, "born")] in first["search"]["retrieved_ids"]  # a real BM25 search ran
    assert first["result"] == "INVALID" and second["type"] == "rewrite" and second["decision"]["kind"] == "REWRITE"
    assert (t["badge"], t["rewrites"]) == ("VALID", 1)
    assert len(server.requests) == 3  # search turn, answer turn, rewrite turn


def test_llm_translator_from_the_chat_config(make_manager, openai_server):
    translation = {"statements": [{"premises": [{"logic": "(= tier gold)", "natural_language": "gold member"},
                                                {"logic": "(not is_sale_item)", "natural_language": "regular-priced"}],
                                   "claims": [{"logic": "(= discount_percent 15)", "natural_language": "15% off"}]}],
                   "untranslated_premises": [], "untranslated_claims": []}
    server = openai_server(lambda body: [json.dumps(translation)] * body.get("n", 1), model="agent")  # n choices
    m = make_manager(None, translator="llm", llm_url=server.base_url, llm_model="agent", llm_samples=3)
    t = m.wait(m.submit(GOLD_80, "As a gold member you get 15% off.").id, timeout=60)
    assert t["badge"] == "VALID_GIVEN_YOUR_STATEMENT", t
    finding = t["iterations"][0]["findings"][0]
    assert finding["translation"]["confidence"] == 1.0 and finding["supporting_rules"] == ["gold_discount"]
    assert server.requests and server.requests[0]["n"] == 3  # N samples in one request
