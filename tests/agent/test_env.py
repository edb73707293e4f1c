"""SearchEnv driven by scripted tool calls, then one short TRL GRPO run that uses it as the
``environment_factory`` of a tiny offline model."""

from __future__ import annotations

import inspect

import pytest

from awarl.agent.env import BUDGET_MESSAGE, EMPTY_QUERY_MESSAGE, NO_RESULTS_MESSAGE, SearchEnv, SearchSettings
from awarl.agent.protocol import ABSTAIN_PHRASE, build_messages, extract_citations
from awarl.search.bm25 import BM25Index


@pytest.fixture(scope="module")
def index(hotpot_prepared):
    _, passages = hotpot_prepared
    return BM25Index.build(passages)


def _row(record, **extra):
    return {**record.to_dict(), "p": 0.5, "prompt": build_messages(record.question), **extra}


def _env_class(index, **settings):
    class Env(SearchEnv):  # a subclass per test keeps the class-level configuration apart
        pass

    return Env.configure(index, **settings)


def test_scripted_rollout_records_queries_and_ids(index, hotpot_prepared):
    records, _ = hotpot_prepared
    rec = records[0]
    env = _env_class(index, topk=2, max_tokens=15)()
    assert env.reset(**_row(rec)) is None  # nothing is appended to the prompt
    assert (env.record_id, env.question, env.answers, env.p) == (rec.id, rec.question, rec.answers, 0.5)

    first = env.search(rec.question)
    second = env.search("Ridley Scott film director")
    for text in (first, second):
        lines = text.splitlines()
        assert len(lines) == 2 and all(line.startswith("[d") for line in lines)
        assert all(len(line.split(": ", 1)[1].split()) <= 16 for line in lines)  # 15 words + "…"
    assert env.queries == [rec.question, "Ridley Scott film director"]
    assert env.retrieved == [extract_citations(first), extract_citations(second)]
    assert env.retrieved[0] == [h.passage.id for h in index.search([rec.question], 2)[0]]

    # reset starts the next rollout clean (TRL reuses pooled instances)
    env.reset(**_row(records[1]))
    assert env.queries == [] and env.retrieved == [] and env.record_id == records[1].id


def test_search_budget_returns_a_message_not_an_exception(index, hotpot_prepared):
    records, _ = hotpot_prepared
    env = _env_class(index, max_searches=2)()
    env.reset(**_row(records[0]))
    env.search("film score")
    env.search("composer")
    refused = env.search("one more")
    assert refused == BUDGET_MESSAGE.format(n=2) and ABSTAIN_PHRASE in refused
    assert env.queries == ["film score", "composer"] and len(env.retrieved) == 2 and env.over_budget == 1


def test_closed_scope_only_returns_the_records_passages(index, hotpot_prepared):
    records, _ = hotpot_prepared
    env = _env_class(index, topk=10, scope="closed")()
    for rec in records[:10]:
        env.reset(**_row(rec))
        env.search("film music history city")
        env.search(rec.question)
        assert all(set(ids) <= set(rec.passages) for ids in env.retrieved)
    # a row's own "scope" column overrides the configured one
    env.reset(**_row(records[0], scope="global"))
    env.search("Ridley Scott science fiction horror film")
    assert set(env.retrieved[0]) - set(records[0].passages)


def test_empty_and_unmatched_queries(index, hotpot_prepared):
    records, _ = hotpot_prepared
    env = _env_class(index)()
    env.reset(**_row(records[0]))
    assert env.search("   ") == EMPTY_QUERY_MESSAGE and env.queries == []
    assert env.search("qqqzzz") == NO_RESULTS_MESSAGE
    assert env.queries == ["qqqzzz"] and env.retrieved == [[]]


def test_misconfiguration_fails_loudly(index, hotpot_prepared):
    records, _ = hotpot_prepared

    class Unconfigured(SearchEnv):
        _retriever = None

    with pytest.raises(RuntimeError, match="configure"):
        Unconfigured().reset(**_row(records[0]))
    closed = _env_class(index, scope="closed")()
    with pytest.raises(ValueError, match="closed scope needs the record's 'passages'"):
        closed.reset(**_row(records[0], passages=[]))
    with pytest.raises(ValueError, match="scope must be one of"):
        SearchSettings(scope="local")
    with pytest.raises(TypeError, match="retriever must implement"):
        SearchEnv.configure(object())


def test_tool_schema_is_validated_at_construction(index):
    pytest.importorskip("transformers")
    from transformers.utils import get_json_schema

    schema = get_json_schema(SearchEnv.search)["function"]
    assert schema["name"] == "search" and schema["parameters"]["required"] == ["query"]
    assert schema["parameters"]["properties"]["query"]["type"] == "string"
    assert "[<passage id>] <title>: <text>" in schema["description"]

    class Undocumented(SearchEnv):
        def lookup(self, title: str) -> str:
            """Look a title up."""
            return title

    with pytest.raises(TypeError, match="Undocumented.lookup cannot be a tool"):
        Undocumented.configure(index)()


def test_only_search_is_a_tool():
    """TRL turns every public function of the class except reset/get_reward into a tool."""
    tools = [name for name, _ in inspect.getmembers(SearchEnv, predicate=inspect.isfunction)
             if name not in ("reset", "get_reward") and not name.startswith("_")]
    assert tools == ["search"]
