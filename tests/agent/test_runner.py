"""The rollout runner end to end with the warm-started tiny model on the test world's questions (the
model was warm-started on that world), its token-for-token agreement with TRL's GRPOTrainer tool
loop, and tool errors and budgets with a scripted backend on the shipped HotpotQA sample."""

from __future__ import annotations

import pytest

from awarl.protocol import build_messages, parse_final, score
from awarl.agent.runner import Rollout, Runner, RunnerConfig, Trajectory
from awarl.agent.env import search_env_factory
from awarl.agent.settings import RolloutSettings


@pytest.fixture(scope="module")
def hotpot(hotpot_prepared):
    from awarl.search.bm25 import BM25Index

    records, passages = hotpot_prepared
    return records, BM25Index.build(passages)


@pytest.fixture(scope="module")
def world(world_prepared):
    from awarl.search.bm25 import BM25Index

    records, passages = world_prepared
    return records, BM25Index.build(passages)


@pytest.fixture(scope="module")
def backend(tiny_sft_model_dir):
    from awarl.llm.spec import load_backend

    return load_backend(str(tiny_sft_model_dir), device="cpu", batch_size=8)


def test_runner_end_to_end(world, backend):
    records, index = world
    env = search_env_factory(index, RolloutSettings(scope="closed", topk=3, passage_words=20))
    budget = 512
    runner = Runner(backend, env, RunnerConfig(rollout=RolloutSettings(max_searches=2, max_completion_tokens=budget), max_concurrent=4))
    finished: list[Trajectory] = []
    trajs = runner.run([Rollout(r) for r in records[:4]], on_done=finished.append)

    assert [t.record_id for t in trajs] == [r.id for r in records[:4]]  # input order, whatever finished first
    assert sorted(t.record_id for t in finished) == sorted(t.record_id for t in trajs)
    searched = [t for t in trajs if t.queries]
    assert searched, "the warm-started model should call search"
    for rec, t in zip(records, trajs):
        assert t.stop_reason in ("answer", "abstain", "no_answer", "turn_budget", "token_budget")
        assert len(t.completion_ids) == len(t.tool_mask) == t.completion_tokens + t.tool_tokens <= budget
        assert sum(t.tool_mask) == t.completion_tokens
        assert set(t.retrieved_ids) <= set(rec.passages)  # closed scope: only the record's own paragraphs
        assert len(t.turns) <= 3 and sum(len(turn.tool_calls) for turn in t.turns) >= len(t.queries)
        # The trajectory's verdict is the protocol scorer's verdict on its final message.
        verdict = score(parse_final(t.messages), rec.answers, answerable=rec.answerable)
        assert (t.outcome, t.em, t.f1) == (verdict.outcome, verdict.em, verdict.f1)
        assert t.seconds > 0 and t.prompt_tokens == len(t.prompt_ids)
        assert Trajectory.from_dict(t.to_dict()).to_dict() == t.to_dict()
    text = backend.tokenizer.decode(searched[0].completion_ids)
    assert "<tool_response>" in text and f"[{searched[0].retrieved_ids[0]}]" in text


def test_batched_runner_equals_one_conversation_at_a_time(world, backend):
    records, index = world
    env = search_env_factory(index, RolloutSettings(scope="closed", topk=3, passage_words=20))
    config = dict(rollout=RolloutSettings(max_searches=2, max_completion_tokens=384))
    batched = Runner(backend, env, RunnerConfig(max_concurrent=8, **config)).run([Rollout(r) for r in records[4:7]])
    single = [Runner(backend, env, RunnerConfig(max_concurrent=1, **config)).run([Rollout(r)])[0] for r in records[4:7]]
    assert [t.completion_ids for t in batched] == [t.completion_ids for t in single]


def test_sampled_rollouts_depend_only_on_seed_record_and_sample(world, backend):
    """Rollout k of a record samples the same conversation in a batch, alone or in another order; the
    environment receives its seed."""
    from awarl.agent.env import SearchEnv
    from awarl.agent.runner import rollout_seed

    records, index = world
    seen: list[tuple[str, int]] = []

    class Recording(SearchEnv):
        def reset(self, **row):
            seen.append((row["id"], row["rollout_seed"]))
            return super().reset(**row)

    settings = RolloutSettings(scope="closed", topk=3, passage_words=20, max_searches=2, max_completion_tokens=384)
    config = dict(rollout=settings, temperature=1.0, seed=5)
    rollouts = [Rollout(r, s) for r in records[4:6] for s in range(2)]
    env = lambda: Recording(index, settings)  # noqa: E731 (a zero-argument factory, as TRL takes)
    batched = Runner(backend, env, RunnerConfig(max_concurrent=8, **config)).run(rollouts)
    alone = [Runner(backend, env, RunnerConfig(max_concurrent=1, **config)).run([r])[0] for r in rollouts]
    reversed_ = Runner(backend, env, RunnerConfig(max_concurrent=3, **config)).run(rollouts[::-1])[::-1]
    assert [t.completion_ids for t in batched] == [t.completion_ids for t in alone] == [t.completion_ids for t in reversed_]
    assert batched[0].completion_ids != batched[1].completion_ids  # the K samples of one record differ
    other = Runner(backend, env, RunnerConfig(max_concurrent=8, **{**config, "seed": 6})).run(rollouts)
    assert [t.completion_ids for t in other] != [t.completion_ids for t in batched]
    assert seen[:4] == [(r.record.id, rollout_seed(5, r.record.id, r.sample)) for r in rollouts]


def test_token_budget_rolls_back_an_overflowing_tool_result(world, backend):
    records, index = world
    env = search_env_factory(index, RolloutSettings(scope="closed", topk=3, passage_words=None))
    budget = len(backend.tokenizer(records[0].question)["input_ids"]) + 22  # the call fits, its 3-passage result not
    traj = Runner(backend, env, RunnerConfig(rollout=RolloutSettings(max_searches=2, max_completion_tokens=budget))).run([Rollout(records[0])])[0]
    assert traj.messages[0].get("tool_calls"), "the warm-started model searches first"
    assert traj.stop_reason == "token_budget"
    # As in TRL: the result that would overflow the budget is dropped, the model never sees it.
    assert traj.tool_tokens == 0 and traj.queries == [] and len(traj.messages) == 1
    assert len(traj.completion_ids) <= budget and all(traj.tool_mask)


def test_zero_turns_means_no_tool_results(world, backend):
    records, index = world
    env = search_env_factory(index, RolloutSettings(scope="closed"))
    traj = Runner(backend, env, RunnerConfig(rollout=RolloutSettings(max_searches=0, max_completion_tokens=256))).run([Rollout(records[1])])[0]
    assert traj.messages[0].get("tool_calls"), "the warm-started model searches first"
    assert traj.stop_reason == "turn_budget" and traj.outcome == "unparsable"
    assert traj.tool_tokens == 0 and all(traj.tool_mask)


def test_prompt_and_trajectory_ids_match_grpo_trainer(world, tiny_sft_model_dir, tmp_path):
    """Same prompt, same greedy turns, same tool-result splicing, same tool mask as GRPOTrainer."""
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    from awarl.llm.hf import HFGenerator

    records, index = world
    env = search_env_factory(index, RolloutSettings(scope="closed", topk=3, passage_words=20))
    tok = AutoTokenizer.from_pretrained(tiny_sft_model_dir)
    model = AutoModelForCausalLM.from_pretrained(tiny_sft_model_dir)
    rows = [{**{k: v for k, v in r.to_dict().items() if k != "meta"}, "prompt": build_messages(r.question)}
            for r in records[:2]]
    args = GRPOConfig(
        output_dir=str(tmp_path), use_cpu=True, bf16=False, gradient_checkpointing=False, report_to="none",
        per_device_train_batch_size=2, num_generations=2, max_completion_length=400, max_tool_calling_iterations=2,
        beta=0.0, generation_kwargs={"do_sample": False}, save_strategy="no",
    )

    def zero(completions, **kwargs):
        return [0.0] * len(completions)

    trainer = GRPOTrainer(model=model, reward_funcs=[zero], args=args, train_dataset=Dataset.from_list(rows),
                          processing_class=tok, environment_factory=env)
    batch = trainer._generate_and_score_completions([rows[0], rows[0]])
    keep_p, keep_c = batch["prompt_mask"][0].bool(), batch["completion_mask"][0].bool()
    trl_prompt = batch["prompt_ids"][0][keep_p].tolist()
    trl_completion = batch["completion_ids"][0][keep_c].tolist()
    trl_tool_mask = batch["tool_mask"][0][keep_c].tolist()

    backend = HFGenerator(tiny_sft_model_dir, model_obj=trainer.model, tokenizer_obj=tok, device="cpu")
    traj = Runner(backend, env, RunnerConfig(rollout=RolloutSettings(max_searches=2, max_completion_tokens=400))).run([Rollout(records[0])])[0]
    assert traj.prompt_ids == trl_prompt
    assert traj.completion_ids == trl_completion
    assert traj.tool_mask == trl_tool_mask
    assert traj.queries, "the comparison should cover a tool round"


class ScriptedChat:
    """A chat backend that replays scripted assistant messages, one per turn, for every conversation."""

    accepts, tokenizer, eos_token_ids, max_model_len, name = "messages", None, [], None, "scripted"

    def __init__(self, script):
        self.script, self.seen = script, []

    def generate(self, prompts, params):
        from awarl.llm.base import Generation

        out = []
        for prompt in prompts:
            self.seen.append(prompt)
            turn = sum(m["role"] == "assistant" for m in prompt.messages)
            message = self.script[turn]
            out.append(Generation(text=message.get("content", ""), message=message, prompt_tokens=10 + 5 * turn,
                                  completion_tokens=5))
        return out

    def close(self):
        pass


def _call(name, arguments):
    return {"id": f"c-{name}", "type": "function", "function": {"name": name, "arguments": arguments}}


def test_tool_errors_become_messages_and_the_conversation_goes_on(hotpot):
    records, index = hotpot
    rec = records[0]
    script = [
        {"role": "assistant", "content": "", "tool_calls": [_call("search", "{not json"), _call("lookup", {"q": "x"})]},
        {"role": "assistant", "content": "", "tool_calls": [_call("search", {"query": rec.question})]},
        {"role": "assistant", "content": f"<answer>{rec.answers[0]}</answer> [{rec.supporting[0]}]"},
    ]
    backend = ScriptedChat(script)
    traj = Runner(backend, search_env_factory(index, RolloutSettings(scope="closed")), RunnerConfig(rollout=RolloutSettings(max_searches=3))).run([Rollout(rec)])[0]
    bad_args, unknown = traj.turns[0].tool_calls
    assert bad_args.failed and bad_args.result.startswith("{'error': ") and "mapping" in bad_args.result
    assert unknown.failed and unknown.result == "{'error': 'Tool lookup not found.'}"
    assert not traj.turns[1].tool_calls[0].failed and traj.queries == [rec.question]
    assert traj.stop_reason == "answer" and traj.outcome == "correct" and traj.citations == [rec.supporting[0]]
    # Tool messages go back tied to their calls, after the assistant turn that made them.
    second = backend.seen[1].messages
    assert [m["role"] for m in second[2:]] == ["assistant", "tool", "tool"]
    assert [m["tool_call_id"] for m in second[3:]] == ["c-search", "c-lookup"]
    assert backend.seen[0].tools[0]["name"] == "search"


def test_turn_budget_stops_a_model_that_keeps_searching(hotpot):
    records, index = hotpot
    script = [{"role": "assistant", "content": "", "tool_calls": [_call("search", {"query": f"q{i}"})]} for i in range(5)]
    traj = Runner(ScriptedChat(script), search_env_factory(index, RolloutSettings(scope="closed")), RunnerConfig(rollout=RolloutSettings(max_searches=2))).run(
        [Rollout(records[0])])[0]
    assert traj.stop_reason == "turn_budget" and traj.queries == ["q0", "q1"] and traj.outcome == "unparsable"
    assert len(traj.turns) == 3
