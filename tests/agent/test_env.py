"""SearchEnv driven by scripted tool calls, then one short TRL GRPO run that uses it as the
``environment_factory`` of a tiny offline model."""

from __future__ import annotations

import inspect

import pytest

from awarl.agent.env import BUDGET_MESSAGE, EMPTY_QUERY_MESSAGE, NO_RESULTS_MESSAGE, SearchEnv, search_env_factory
from awarl.agent.settings import RolloutSettings
from awarl.config_fields import ConfigError
from awarl.protocol import ABSTAIN_PHRASE, build_messages, extract_citations, parse_results
from awarl.search.bm25 import BM25Index


@pytest.fixture(scope="module")
def index(hotpot_prepared):
    _, passages = hotpot_prepared
    return BM25Index.build(passages)


def _row(record, **extra):
    return {**record.to_dict(), "p": 0.5, "prompt": build_messages(record.question), **extra}


def _env_class(index, **settings):
    """TRL's environment_factory: a zero-argument callable over one retriever and one set of settings."""
    return search_env_factory(index, RolloutSettings(**settings))


def test_scripted_rollout_records_queries_and_ids(index, hotpot_prepared):
    records, _ = hotpot_prepared
    rec = records[0]
    env = _env_class(index, topk=2, passage_words=15)()
    assert env.reset(**_row(rec)) is None  # nothing is appended to the prompt
    assert (env.record_id, env.question, env.answers, env.p) == (rec.id, rec.question, rec.answers, 0.5)

    first = env.search(rec.question)
    second = env.search("Ridley Scott film director")
    for text in (first, second):
        lines = text.splitlines()
        assert len(lines) == 2 and len(parse_results(text)) == 2
        assert all(len(passage.split()) <= 16 for _, _, passage in parse_results(text))  # 15 words + "…"
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
    closed = _env_class(index, scope="closed")()
    with pytest.raises(ValueError, match="closed scope needs the record's 'passages'"):
        closed.reset(**_row(records[0], passages=[]))
    with pytest.raises(ConfigError, match="must be one of 'global', 'closed'"):
        RolloutSettings.from_dict({"scope": "local"})
    with pytest.raises(TypeError, match="retriever must implement"):
        SearchEnv(object())


def test_two_factories_in_one_process_keep_their_own_settings(index, hotpot_prepared):
    """Settings live on instances, not the class: two runs in one process never share them."""
    records, _ = hotpot_prepared
    one, three = _env_class(index, topk=1)(), _env_class(index, topk=3)()
    for env in (one, three):
        env.reset(**_row(records[0]))
        env.search("film director")
    assert (len(one.retrieved[0]), len(three.retrieved[0])) == (1, 3)


def test_tool_schema_is_validated_at_construction(index):
    pytest.importorskip("transformers")
    from transformers.utils import get_json_schema

    schema = get_json_schema(SearchEnv.search)["function"]
    assert schema["name"] == "search" and schema["parameters"]["required"] == ["query"]
    assert schema["parameters"]["properties"]["query"]["type"] == "string"
    assert "<title>: <text> [<passage id>]" in schema["description"]

    class Undocumented(SearchEnv):
        def lookup(self, title: str) -> str:
            """Look a title up."""
            return title

    with pytest.raises(TypeError, match="Undocumented.lookup cannot be a tool"):
        Undocumented(index)


def test_only_search_is_a_tool():
    """TRL turns every public function of the class except reset/get_reward into a tool."""
    tools = [name for name, _ in inspect.getmembers(SearchEnv, predicate=inspect.isfunction)
             if name not in ("reset", "get_reward") and not name.startswith("_")]
    assert tools == ["search"]


def _keyword_reward(completions, answers, environments, **kwargs):
    """1 for a correct answer (the shared scorer), plus 0.1 for each search the rollout made, plus a
    thousandth per character written, so that a group whose rollouts all search twice and miss still
    differs (this test checks that GRPO updates the weights, not what it learns)."""
    from awarl.protocol import score_text

    return [float(score_text(c, golds).outcome == "correct") + 0.1 * len(env.queries) + 1e-3 * len(str(c))
            for c, golds, env in zip(completions, answers, environments)]


@pytest.mark.slow
def test_grpo_trains_a_tiny_model_with_search_env(tiny_sft_model_dir, hotpot_prepared, index, tmp_path):
    """A few GRPO steps on CPU: TRL finds exactly the `search` tool, the warm-started model calls
    it, the environments record the calls, and the weights move."""
    pytest.importorskip("trl")
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    torch.manual_seed(0)
    records, _ = hotpot_prepared
    rows = [{k: v for k, v in _row(r).items() if k != "meta"} for r in records[:8]]
    settings = RolloutSettings(topk=2, scope="closed", max_searches=2, passage_words=20, max_completion_tokens=160)
    created: list[SearchEnv] = []
    finished: list[tuple[list[str], list[list[str]], list[str]]] = []  # (queries, retrieved, passages) per rollout

    class RecordingEnv(SearchEnv):
        """TRL pools and resets environments between batches: keep each rollout's record."""

        def __init__(self):
            super().__init__(index, settings)
            created.append(self)

        def reset(self, **row):
            if getattr(self, "queries", None):
                finished.append((list(self.queries), [list(ids) for ids in self.retrieved], list(self.passages)))
            return super().reset(**row)

    tok = AutoTokenizer.from_pretrained(tiny_sft_model_dir)
    model = AutoModelForCausalLM.from_pretrained(tiny_sft_model_dir)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    args = GRPOConfig(
        output_dir=str(tmp_path / "grpo"), use_cpu=True, bf16=False, gradient_checkpointing=False,
        per_device_train_batch_size=4, num_generations=4, max_completion_length=160, max_tool_calling_iterations=2,
        max_steps=2, learning_rate=1e-3, logging_steps=1, save_strategy="no", report_to="none", temperature=1.0,
        beta=0.0, loss_type="dapo", dataloader_num_workers=0, seed=0,
    )
    trainer = GRPOTrainer(model=model, reward_funcs=[_keyword_reward], args=args, train_dataset=Dataset.from_list(rows),
                          processing_class=tok, environment_factory=RecordingEnv)
    assert [t.__name__ for t in trainer.tools] == ["search"]
    trainer.train()

    assert trainer.state.global_step == 2
    searched = finished + [(e.queries, e.retrieved, e.passages) for e in created if e.queries]
    assert searched, "the warm-started model never called search"
    for queries, retrieved, passages in searched:
        assert len(retrieved) == len(queries) <= 2
        assert all(set(ids) <= set(passages) for ids in retrieved)  # closed scope held in training
    changed = [n for n, p in model.named_parameters() if not torch.equal(p.detach(), before[n])]
    assert changed
