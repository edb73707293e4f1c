"""Capability estimation with the warm-started tiny model: K=2 rollouts per query, resume after a
simulated crash, shards and merge, and clear errors for bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from awarl.agent.settings import RolloutSettings
from typer.testing import CliRunner

from awarl.capability import CapabilityConfig, estimate, merge, read_done, shard_path
from awarl.cli import app
from awarl.data.records import DataError, write_jsonl


@pytest.fixture(scope="module")
def prepared(hotpot_prepared, tmp_path_factory) -> Path:
    """records.jsonl (4 HotpotQA questions) with its corpus.jsonl beside it, as `awarl data prepare` writes."""
    records, passages = hotpot_prepared
    records = records[:4]
    keep = {pid for r in records for pid in r.passages}
    folder = tmp_path_factory.mktemp("prepared")
    write_jsonl(folder / "records.jsonl", (r.to_dict() for r in records))
    write_jsonl(folder / "corpus.jsonl", (p.to_dict() for p in passages if p.id in keep))
    return folder / "records.jsonl"


@pytest.fixture(scope="module")
def backend(tiny_sft_model_dir):
    from awarl.llm.spec import load_backend

    return load_backend(str(tiny_sft_model_dir), device="cpu", batch_size=8)


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


class CrashAfterFirstRow:
    """Wraps a real backend; raises once the output file holds ``rows`` finished queries (a crash mid-run)."""

    def __init__(self, inner, out: Path, rows: int = 1):
        self.inner, self.out, self.rows = inner, out, rows
        self.accepts, self.tokenizer = inner.accepts, inner.tokenizer
        self.eos_token_ids, self.max_model_len, self.name = inner.eos_token_ids, inner.max_model_len, inner.name

    def generate(self, prompts, params):
        if self.out.exists() and self.out.read_text().count("\n") >= self.rows:
            raise KeyboardInterrupt("simulated crash")
        return self.inner.generate(prompts, params)

    def close(self):
        pass


class CountingFirstTurns(CrashAfterFirstRow):
    """Counts rollouts started: first-turn prompts are the only ones without a tool response."""

    def __init__(self, inner):
        super().__init__(inner, Path("/nonexistent"))
        self.tool_response = inner.tokenizer.convert_tokens_to_ids("<tool_response>")
        self.first_turns = 0

    def generate(self, prompts, params):
        self.first_turns += sum(self.tool_response not in p for p in prompts)
        return self.inner.generate(prompts, params)


def test_estimate_k2_with_resume_after_crash(prepared, backend, tmp_path):
    out = tmp_path / "p.jsonl"
    traj = tmp_path / "traj.jsonl"
    rollout = RolloutSettings(scope="closed", max_searches=2, max_completion_tokens=256)
    config = CapabilityConfig(model="tiny", data=prepared, out=out, rollout=rollout, k=2, temperature=1.0,
                              max_concurrent=2, trajectories=traj, seed=3, chunk=1)
    with pytest.raises(KeyboardInterrupt):
        estimate(config, backend=CrashAfterFirstRow(backend, out), progress=False)
    first = _rows(out)
    assert len(first) >= 1
    with out.open("a") as fh:  # the crash also tore a line in half
        fh.write('{"id": "half-writ')

    counting = CountingFirstTurns(backend)
    result = estimate(config, backend=counting, progress=False)
    rows = _rows(out)
    ids = [json.loads(line)["id"] for line in prepared.read_text().splitlines()]
    assert sorted(r["id"] for r in rows) == sorted(ids)  # every query exactly once, the torn line gone
    assert rows[: len(first)] == first  # finished work kept as it was
    assert result.skipped == len(first) and result.estimated == len(ids) - len(first)
    assert result.rollouts == 2 * result.estimated
    assert counting.first_turns == 2 * result.estimated  # only the unfinished queries ran again
    for row in rows:
        cap = row["capability"]
        assert cap["k"] == 2
        assert cap["correct"] + cap["wrong"] + cap["abstain"] + cap["unparsable"] == 2
        assert row["p"] == cap["correct"] / 2
        assert sum(cap["stop_reasons"].values()) == 2
        assert row["question"] and row["answers"]  # the record itself travels with p
        assert cap["rollout"] == rollout.resolved() and cap["model"] == "tiny"  # p_i records what it measured
    trajectories = _rows(traj)
    assert len(trajectories) == 2 * len(ids)
    assert sorted({(t["record_id"], t["sample"]) for t in trajectories}) == sorted((i, s) for i in ids for s in (0, 1))
    assert read_done(out, config).keys() == set(ids)

    # Resuming under other rollout settings is refused, naming both values and the fix.
    other = CapabilityConfig(model="tiny", data=prepared, out=out, rollout=rollout.replace(topk=5), k=2,
                             temperature=1.0)
    with pytest.raises(DataError, match=r"other rollout settings \(topk: 5 vs 3; this run vs recorded\).*new --out"):
        estimate(other, backend=backend, progress=False)


@pytest.fixture(scope="module")
def world_records(world_prepared, tmp_path_factory) -> Path:
    """records.jsonl (6 held-out questions of the test world, which the warm-started model answers right,
    wrong or abstains on) with the world's corpus.jsonl beside it."""
    records, passages = world_prepared
    folder = tmp_path_factory.mktemp("world-records")
    write_jsonl(folder / "records.jsonl", (r.to_dict() for r in records[:6]))
    write_jsonl(folder / "corpus.jsonl", (p.to_dict() for p in passages))
    return folder / "records.jsonl"


def _without_timing(row: dict) -> dict:
    if "capability" in row:
        return {**row, "capability": {k: v for k, v in row["capability"].items() if k != "seconds"}}
    return {k: v for k, v in row.items() if k != "seconds"}


def test_a_resumed_estimate_equals_an_uninterrupted_one(world_records, backend, tmp_path):
    """Interrupted inside its second chunk and resumed, a run writes exactly the rows (and trajectories)
    of a run that was never interrupted: every rollout samples from its own (seed, query, sample) stream
    and the chunk the crash cut runs again whole."""
    rollout = RolloutSettings(scope="closed", topk=3, passage_words=20, max_searches=2, max_completion_tokens=384)

    def config(name: str) -> CapabilityConfig:
        return CapabilityConfig(model="tiny", data=world_records, out=tmp_path / f"{name}.jsonl", rollout=rollout, k=2,
                                temperature=1.0, max_concurrent=4, seed=11, chunk=3,
                                trajectories=tmp_path / f"{name}.traj.jsonl")

    whole, resumed = config("whole"), config("resumed")
    estimate(whole, backend=backend, progress=False)
    with pytest.raises(KeyboardInterrupt):
        estimate(resumed, backend=CrashAfterFirstRow(backend, resumed.out, rows=4), progress=False)
    written = len(_rows(resumed.out))
    assert 4 <= written < 6  # the first chunk and part of the second
    result = estimate(resumed, backend=backend, progress=False)
    assert (result.skipped, result.estimated) == (written, 6 - written)
    for a, b, key in ((whole.out, resumed.out, "id"), (whole.trajectories, resumed.trajectories, "record_id")):
        expected = sorted((_without_timing(r) for r in _rows(a)), key=lambda r: (r[key], r.get("sample", 0)))
        assert sorted((_without_timing(r) for r in _rows(b)), key=lambda r: (r[key], r.get("sample", 0))) == expected
    trajectories = _rows(whole.trajectories)
    assert len({t["outcome"] for t in trajectories}) > 1  # the comparison covers sampled, differing rollouts
    assert len({tuple(t["final_text"] for t in trajectories if t["record_id"] == i) for i in {t["record_id"] for t in trajectories}}) > 1


def test_a_second_run_on_one_output_is_refused_naming_the_holder(prepared, tiny_sft_model_dir, tmp_path, lock_holder):
    out = tmp_path / "p.jsonl"
    with lock_holder(out) as pid:
        res = CliRunner().invoke(app, ["capability", "estimate", "--model", str(tiny_sft_model_dir), "--data",
                                       str(prepared), "--out", str(out), "--k", "2", "--no-progress"])
    assert res.exit_code == 1
    assert res.output.strip().splitlines()[-1] == (f"error: {out}: another run (pid {pid}) is writing here; "
                                                   "wait for it to finish or write to another --out")
    assert not out.exists()
    from awarl.agent.stage import OutputLock

    with OutputLock(out):  # the holder exited: the lock is free again
        pass


def test_shards_then_merge_via_cli(prepared, tiny_sft_model_dir, tmp_path):
    out = tmp_path / "p.jsonl"
    cli = CliRunner()
    common = ["capability", "estimate", "--model", str(tiny_sft_model_dir), "--data", str(prepared), "--out", str(out),
              "--k", "2", "--scope", "closed", "--max-searches", "0", "--max-completion-tokens", "24",
              "--device", "cpu"]
    for i in range(2):
        res = cli.invoke(app, [*common, "--shard", f"{i}/2"])
        assert res.exit_code == 0, res.output
        assert f"-> {shard_path(out, i, 2)}" in res.output and "rollouts/s" in res.output
    again = cli.invoke(app, [*common, "--shard", "0/2"])
    assert "0 queries estimated" in again.output and "2 already done" in again.output
    res = cli.invoke(app, ["capability", "merge", "--out", str(out), "--data", str(prepared)])
    assert res.exit_code == 0, res.output
    ids = [json.loads(line)["id"] for line in prepared.read_text().splitlines()]
    assert [r["id"] for r in _rows(out)] == ids  # merged in data order
    assert all(r["capability"]["k"] == 2 for r in _rows(out))


def test_merge_rejects_incomplete_or_overlapping_shards(tmp_path, prepared):
    a, b = tmp_path / "p.shard0of3.jsonl", tmp_path / "p.shard1of3.jsonl"
    write_jsonl(a, [{"id": "x", "p": 0.5}])
    write_jsonl(b, [{"id": "y", "p": 1.0}])
    with pytest.raises(DataError, match=r"missing shard\(s\) \[2\] of 3"):
        merge([a, b], tmp_path / "p.jsonl")
    write_jsonl(b, [{"id": "x", "p": 1.0}])
    with pytest.raises(DataError, match="'x' is already in another shard"):
        merge([a, b], tmp_path / "p.jsonl")


def test_merge_refuses_shards_of_another_estimate_and_rows_its_data_lacks(tmp_path):
    cap = {"k": 8, "model": "sft/final", "temperature": 0.7, "rollout": {"topk": 3}}
    a, b = tmp_path / "p.shard0of2.jsonl", tmp_path / "p.shard1of2.jsonl"
    write_jsonl(a, [{"id": "x", "p": 0.5, "capability": cap}])
    write_jsonl(b, [{"id": "y", "p": 1.0, "capability": {**cap, "model": "grpo/awa/final"}}])
    with pytest.raises(DataError, match=r"p.shard1of2.jsonl, line 1, field 'capability.model': estimated with another "
                                        r"model than .*p.shard0of2.jsonl's rows"):
        merge([a, b], tmp_path / "p.jsonl")
    write_jsonl(b, [{"id": "y", "p": 1.0, "capability": cap}])
    write_jsonl(tmp_path / "records.jsonl", [{"id": "x", "question": "?", "answers": ["a"], "dataset": "world"}])
    with pytest.raises(DataError, match=r"1 of the shards' 2 rows have no record here \(first: \['y'\]\)"):
        merge([a, b], tmp_path / "p.jsonl", tmp_path / "records.jsonl")  # a subset of the records: y would be lost
    assert not (tmp_path / "p.jsonl").exists()
    assert merge([a, b], tmp_path / "p.jsonl") == 2


def test_bad_input_is_reported_clearly(prepared, tiny_sft_model_dir, tmp_path):
    cli = CliRunner()
    bad = tmp_path / "records.jsonl"
    lines = prepared.read_text().splitlines()
    bad.write_text(lines[0] + "\n" + lines[1].replace('"question"', '"questoin"') + "\n")
    res = cli.invoke(app, ["capability", "estimate", "--model", str(tiny_sft_model_dir), "--data", str(bad),
                           "--out", str(tmp_path / "p.jsonl"), "--no-progress"])
    assert res.exit_code == 1 and "line 2, field 'question': missing required field" in res.output
    res = cli.invoke(app, ["capability", "estimate", "--model", str(tmp_path / "no-model"), "--data", str(prepared),
                           "--out", str(tmp_path / "p.jsonl"), "--no-progress"])
    assert res.exit_code == 1 and "does not exist" in res.output
    res = cli.invoke(app, ["capability", "estimate", "--model", "x", "--data", str(prepared), "--out", "o.jsonl",
                           "--shard", "2/2"])
    assert res.exit_code == 2 and "error: --shard must be i/n with 0 <= i < n, got '2/2'" in res.output
    write_jsonl(tmp_path / "k4.jsonl", [{"id": "a", "p": 0.5, "capability": {"k": 4}}])
    with pytest.raises(DataError, match="estimated with k=4, this run uses k=2"):
        read_done(tmp_path / "k4.jsonl", CapabilityConfig(model="x", data=prepared, out=tmp_path / "o.jsonl", k=2))
    write_jsonl(tmp_path / "m.jsonl", [{"id": "a", "p": 0.5, "capability": {"k": 2, "model": "base", "temperature": 1.0}}])
    with pytest.raises(DataError, match="estimated with model='base', this run uses model='sft'"):
        read_done(tmp_path / "m.jsonl", CapabilityConfig(model="sft", data=prepared, out=tmp_path / "o.jsonl", k=2))


def test_degenerate_estimates_are_summarised_with_a_warning(tmp_path):
    from awarl.capability import summarize

    def row(i, p, unparsable, budget):
        return {"id": f"q{i}", "p": p, "capability": {"k": 4, "unparsable": unparsable,
                                                       "stop_reasons": {"token_budget": budget}}}

    bad = tmp_path / "bad.jsonl"
    write_jsonl(bad, [row(i, 0.0, 4, 3) for i in range(5)])
    summary = summarize(bad)
    assert (summary.mean_p, summary.zero_p, summary.unparsable, summary.token_budget) == (0.0, 1.0, 1.0, 0.75)
    warnings = " ".join(summary.warnings())
    assert "no parsable <answer>" in warnings and "awarl train sft" in warnings and "max_completion_tokens" in warnings
    good = tmp_path / "good.jsonl"
    write_jsonl(good, [row(i, 0.5, 0, 0) for i in range(5)])
    assert summarize(good).warnings() == []
