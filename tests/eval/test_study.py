"""The fidelity study v2 (awarl.eval.study*, scripts/fidelity.py) on recorded synthetic runs: the design
(every arm names every switch), per-batch logs, aggregation, each claim passing and failing, the
paired-seed rule, a partial study, and the one expected-rate formula shared with training."""

from __future__ import annotations

import json
from dataclasses import fields
from pathlib import Path

import pytest

from awarl.eval import study
from awarl.eval.study import SEEDS, TIERS, aggregate, arm_folder, load_runs, plan, read_batches
from awarl.eval.study_claims import claims, paired_seed_rule
from awarl.eval.study_report import markdown, plot
from awarl.rewards import RewardConfig


# -- the design ----------------------------------------------------------------------------------------------
def test_every_arm_names_every_reward_switch():
    switches = {f.name for f in fields(RewardConfig)} - {"llm_judge"}
    assert set(study.STUDY_REWARD) == switches  # a new switch must get a value in the study
    for tier in TIERS.values():
        steps = set()
        for arm in tier.arms:
            assert set(arm.reward) == switches, f"{tier.name}/{arm.name}"
            RewardConfig.from_dict(arm.reward)  # every arm is a valid reward
            overrides = study.arm_overrides(tier, arm)
            assert {f"reward.{s}" for s in switches} <= set(overrides) and overrides["grpo.logging_steps"] == 1
            steps.add(overrides["grpo.max_steps"])
        assert steps == {tier.steps}  # equal optimizer steps for every arm of a tier
        assert study.base_overrides(tier)[0] == "capability.k=16"
        assert set(study.STUDY_BASE) <= set(study.base_overrides(tier))  # the demo's defaults may move; the study's bases do not
    t1 = TIERS["T1"]
    for name in ("awa_g0.2", "awa_g0.5", "awa_g1.0"):
        assert t1.arm(name).reward["floor_abstain"] is True and t1.arm(name).reward["anti_windup"] == "freeze"
    assert [t1.arm(n).reward["gamma"] for n in ("awa_g0.2", "awa_g0.5", "awa_g1.0")] == [0.2, 0.5, 1.0]
    assert t1.arm("data_manip").reward["kind"] == "unanswerable_only" and t1.arm("ternary").seeds == (0,)
    t2 = TIERS["T2"]
    assert t2.arm("awa_adaptive").reward["adaptive_p"] and not t2.arm("awa_g0.5").reward["adaptive_p"]
    assert t2.arm("awa_attempt").reward["attempt_bonus"] and t2.max_mean_p == 0.2 and t2.yardstick == "none"
    assert "warm_start.misread_share=0.75" in t2.base  # the noisy teacher, pre-registered (docs/fidelity.md)
    assert t2.arm("awa_forced").reward["forced_answer"] and not t2.arm("awa_attempt").reward["forced_answer"]
    assert "world.version=1" in TIERS["T3"].base and TIERS["T3"].steps < t1.steps
    with pytest.raises(KeyError, match="not reward switches"):
        study.reward(gama=0.3)


def test_the_one_expected_rate_formula_in_training_and_the_study():
    """Training's target (the reward's update, citation term from the batch) equals the study's and the
    demo's (`target_refusal_rate` / `expected_refusal` with the logged answer values); without the citation
    term the target differs, which is what the study v1 got wrong."""
    from awarl.demo.report import expected_refusal
    from awarl.protocol import ABSTAIN_PHRASE, build_messages
    from awarl.rewards import build_reward_funcs, target_refusal_rate

    cfg = RewardConfig(gamma=1.0)
    awa = build_reward_funcs(cfg)[0][0]
    said = lambda text: [{"role": "assistant", "content": text}]  # noqa: E731
    completions = [said("<answer>x</answer> [d1]"), said("<answer>y</answer>"), said(f"<answer>{ABSTAIN_PHRASE}</answer>")] * 2
    p = [0.48, 0.48, 0.48, 0.3, 0.7, 0.48]
    logged: dict[str, float] = {}
    awa([build_messages(f"q{i}") for i in range(6)], completions, answers=[["x"]] * 6, supporting=[["d1"]] * 6, p=p,
        log_metric=lambda k, v: logged.__setitem__(k, v))
    trained = logged["awa/expected_refusal_rate"]
    value_correct, value_wrong = logged["awa/answer_value_correct"], logged["awa/answer_value_wrong"]
    assert value_correct == pytest.approx(1.2) and value_wrong == 0.0
    assert target_refusal_rate(p, cfg, value_correct, value_wrong) == trained
    rows = [{"p": v} for v in p]
    assert expected_refusal(rows, cfg, value_correct, value_wrong) == trained
    assert trained == pytest.approx(1 / 6) and expected_refusal(rows, cfg) == pytest.approx(5 / 6)


# -- recorded runs -------------------------------------------------------------------------------------------
def _log(folder: Path, refusal: list[float], target: float, **terms: float | list[float]) -> None:
    """A GRPO metrics log as TRL writes it with logging_steps 1 and 4 optimizer steps per generation batch:
    the awa/ terms only on the step that generated the batch (a list: one value per batch)."""
    path = folder / "grpo" / "metrics_log.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as f:
        for i, r in enumerate(refusal):
            f.write(json.dumps({"step": 4 * i + 1, "loss": 0.1, "awa/refusal_rate": r, "awa/expected_refusal_rate": target,
                                "awa/answer_value_correct": 1.1, "awa/answer_value_wrong": 0.0,
                                **{study.BATCH_KEYS[k]: v[i] if isinstance(v, list) else v
                                   for k, v in terms.items()}}) + "\n")
            for step in range(4 * i + 2, 4 * i + 5):
                f.write(json.dumps({"step": step, "loss": 0.1}) + "\n")


def record(out: Path, tier: str, arm: str, seed: int, *, refusal: float | list[float] = 0.3, target: float = 0.3,
           batches: int = 60, greedy: dict | None = None, share: float = 0.3, **terms: float | list[float]) -> None:
    """One finished run: its per-batch log and result.json."""
    folder = arm_folder(out, tier, arm, seed)
    series = refusal if isinstance(refusal, list) else [refusal] * batches
    _log(folder, series, target, **terms)
    metrics = {"precision": 0.8, "accuracy": 0.5, "ra_f1": 0.615, "refusal_rate": 0.3, "abstain_recall": 0.9,
               "over_refusal": 0.1, "accuracy_answerable": 0.6, **(greedy or {})}
    study.write_result(folder, {"tier": tier, "arm": arm, "seed": seed, "greedy": metrics,
                                "sampled": [{**metrics, "precision": metrics["precision"] - 0.1}] * 2,
                                "unanswerable_share_rl": share, "rollouts_per_batch": 64})


def _t1(out: Path, seeds=SEEDS, tier: str = "T1") -> None:
    """A T1 study where claims 1-3 hold (and 4 fails: data manipulation ends at the unanswerable share)."""
    default = {
        "awa_g0.2": dict(refusal=0.40, target=0.42, greedy={"precision": 0.70, "accuracy": 0.56, "ra_f1": 0.622}),
        "awa_g0.5": dict(refusal=0.52, target=0.55),
        "awa_g1.0": dict(refusal=0.66, target=0.68),
        "static_0.5": dict(refusal=0.95, target=0.55),
        "data_manip": dict(refusal=0.30, target=0.55, greedy={"precision": 0.60, "accuracy": 0.57, "ra_f1": 0.585}),
        "none": dict(refusal=0.05, target=0.55, greedy={"precision": 0.50}),
    }
    for arm, numbers in default.items():
        for seed in seeds:
            record(out, tier, arm, seed, **numbers)


def _verdicts(out: Path) -> dict[str, bool | None]:
    return {c.number: c.holds for c in claims(aggregate(load_runs(out)))}


def test_read_batches_keeps_one_row_per_generation_batch(tmp_path):
    _log(tmp_path, [0.1, 0.2, 0.3], 0.25, P=0.1)
    path = tmp_path / "grpo" / "metrics_log.jsonl"
    with path.open("a") as f:  # a resumed run repeats step 9; a killed one leaves a torn line
        f.write(json.dumps({"step": 9, "awa/refusal_rate": 0.35}) + "\n" + '{"step": 13, "awa/ref')
    batches = read_batches(path)
    assert [b["step"] for b in batches] == [1, 5, 9] and [b["refusal"] for b in batches] == [0.1, 0.2, 0.35]
    assert batches[0]["target"] == 0.25 and batches[0]["P"] == 0.1 and "capped" not in batches[0]


def test_late_values_and_the_plateau_window():
    batches = [{"refusal": 0.0}] * 30 + [{"refusal": 0.5}] * 50
    assert study.late(batches, "refusal") == 0.5 and study.plateau_sd(batches) == 0.0
    assert study.plateau_sd(batches[:40]) is None  # fewer than 50 batches
    wandering = [{"refusal": 0.2}] * 25 + [{"refusal": 0.8}] * 25
    assert study.plateau_sd(wandering) > 0.05
    assert study.max_window_after([{"all_abstain": 1.0}] * 50 + [{"all_abstain": 0.1}] * 30, "all_abstain", 50) == 0.1
    # fewer than 20 batches after batch 50 hold no 20-batch window: a shorter one would not be the claim's
    assert study.max_window_after([{"all_abstain": 1.0}] * 50 + [{"all_abstain": 0.0}] * 5, "all_abstain", 50) is None


def test_aggregation_reports_terms_held_out_and_compute(tmp_path):
    record(tmp_path, "T2", "awa_adaptive", 0, refusal=0.4, target=0.5, P=-0.1, capped=0.2, all_abstain=0.1,
           three_outcome=0.3, probe_rollouts=512.0)
    record(tmp_path, "T2", "awa_adaptive", 1, refusal=0.6, target=0.5, P=0.1, capped=0.0, probe_rollouts=256.0)
    table = aggregate(load_runs(tmp_path))
    entry = table["T2"]["awa_adaptive"]
    assert entry["seeds"] == [0, 1]
    s0 = entry["per_seed"][0]
    assert s0["batches"] == 60 and s0["late"]["refusal"] == 0.4 and s0["late"]["P"] == -0.1
    assert s0["greedy"]["precision"] == 0.8 and s0["sampled"]["precision"] == pytest.approx(0.7)
    assert s0["training_rollouts"] == 60 * 64 and s0["probe_rollouts"] == 512
    text = markdown(table, claims(table))
    assert "| awa_adaptive | 0,1 |" in text and "0.500 ± 0.141" in text  # late refusal mean ± sd over seeds
    assert "| 3840 | 384 |" in text  # probe rollouts per run reported beside the training rollouts



def test_aggregation_shows_held_out_numbers_by_kind_of_question_on_a_world_v2(tmp_path):
    from awarl.data.world import WorldConfig, generate_world, write_world

    world = generate_world(WorldConfig(version=2, persons=120, split=(0.5, 0.2, 0.3), seed=0))
    files = write_world(world, study.base_folder(tmp_path, "T1", 0) / "world")
    held = [q for q in json.loads(files["world"].read_text())["questions"] if q["split"] == "eval"]
    for arm, outcome in (("awa_g0.5", "abstain"), ("none", "wrong")):
        record(tmp_path, "T1", arm, 0)
        trajectories = arm_folder(tmp_path, "T1", arm, 0) / "eval" / "trajectories.jsonl"
        trajectories.parent.mkdir(parents=True)
        trajectories.write_text("".join(json.dumps({"record_id": q["record_id"], "p": 0.25, "answerable": q["u"] is not None,
                                                    "outcome": "correct" if q["u"] is not None and q["u"] > 0.9 else outcome})
                                        + "\n" for q in held))
    record(tmp_path, "T1", "static_0.5", 0)  # no evaluation folder: no rows by kind, and no column
    table = aggregate(load_runs(tmp_path))
    kinds = {k["kind"]: k for k in table["T1"]["awa_g0.5"]["per_seed"][0]["by_kind"]}
    assert sum(k["n"] for k in kinds.values()) == len(held)
    assert kinds["missing"]["runs"]["awa_g0.5"] == {"n": kinds["missing"]["n"], "accuracy": 0.0, "refusal": 1.0}
    assert table["T1"]["static_0.5"]["per_seed"][0]["by_kind"] is None
    text = markdown(table, claims(table))
    assert "| kind | questions per seed | u | p_i | awa_g0.5 | none |" in text
    assert f"| missing | {kinds['missing']['n']} | – | 0.25 | 0.00 / 1.00 | 0.00 / 0.00 |" in text

# -- the paired-seed rule ------------------------------------------------------------------------------------
def test_paired_seed_rule():
    assert paired_seed_rule({0: 0.01, 1: 0.0, 2: 0.2}) == (True, "at every seed (3)")
    holds, why = paired_seed_rule({0: 0.30, 1: 0.28, 2: 0.31, 3: -0.01})
    assert holds and "> 2 SE" in why
    assert paired_seed_rule({0: 1.0, 1: 1.0, 2: -1e-9})[0] is False  # 3 seeds: a miss is never rescued
    holds, why = paired_seed_rule({0: 0.30, 1: -0.25, 2: 0.02})
    assert not holds and "seed(s) [1]" in why
    assert paired_seed_rule({0: 0.0}, strict=True)[0] is False and paired_seed_rule({0: -0.1})[0] is False


# -- the claims, each passing and failing ---------------------------------------------------------------------
def test_t1_claims_hold_on_a_study_that_shows_them(tmp_path):
    _t1(tmp_path)
    verdicts = _verdicts(tmp_path)
    assert verdicts["1"] and verdicts["2"] and verdicts["3"]
    assert verdicts["4"] is False  # data manipulation ends at the unanswerable share at every seed: predictable


def test_claims_1_to_4_are_checked_again_on_t1r_from_its_own_runs(tmp_path):
    """T1r (the tie-order world) has T1's claim arms, and its claims 1r-4r read T1r's runs only."""
    assert [a.name for a in TIERS["T1r"].arms] == [a.name for a in study.CLAIM_ARMS]
    assert [a.name for a in TIERS["T1"].arms[:len(study.CLAIM_ARMS)]] == [a.name for a in study.CLAIM_ARMS]
    assert "world.tie_order=rollout" in study.base_overrides(TIERS["T1r"])
    _t1(tmp_path, tier="T1r")
    for seed in SEEDS:  # on T1 static does not drift: 1 fails there and holds on T1r
        record(tmp_path, "T1", "static_0.5", seed, refusal=0.5, target=0.55)
        record(tmp_path, "T1", "awa_g0.5", seed, refusal=0.52, target=0.55)
    verdicts = _verdicts(tmp_path)
    assert verdicts["1"] is False and verdicts["1r"] and verdicts["2r"] and verdicts["3r"] and verdicts["4r"] is False
    assert verdicts["2"] is None and verdicts["3"] is None  # T1's γ 0.2 / 1.0 arms have not run
    found = {c.number: c for c in claims(aggregate(load_runs(tmp_path)))}
    assert "--tier T1r" in found["2r"].command
    assert [p.name for p in plot(aggregate(load_runs(tmp_path)), tmp_path)] == [
        "study_T1_batches.png", "study_T1r_batches.png", "study_frontier.png", "study_frontier_T1r.png"]


def test_claim_1_fails_when_static_does_not_drift_and_names_a_diagnostic(tmp_path):
    _t1(tmp_path)
    for seed in SEEDS:
        record(tmp_path, "T1", "static_0.5", seed, refusal=0.23, target=0.55, three_outcome=0.02, all_abstain=0.0)
    claim = claims(aggregate(load_runs(tmp_path)))[0]
    assert claim.holds is False and claim.tests[0].holds is False and claim.tests[1].holds
    assert any("few three-outcome groups" in d for d in claim.diagnostics)
    assert "--tier T1" in claim.command and "static_0.5" in claim.command


def test_claim_1_holds_by_two_standard_errors_when_one_of_four_seeds_misses(tmp_path):
    _t1(tmp_path, seeds=(0, 1, 2, 3))
    for seed, r in zip((0, 1, 2, 3), (0.99, 0.99, 0.99, 0.895)):  # misses 0.9 at seed 3; mean margin 0.069 > 2 SE
        record(tmp_path, "T1", "static_0.5", seed, refusal=r, target=0.55)
    claim = claims(aggregate(load_runs(tmp_path)))[0]
    assert claim.holds and "> 2 SE" in claim.tests[0].rule and claim.tests[0].margins[3] < 0
    assert claim.verdict == "yes"
    record(tmp_path, "T1", "static_0.5", 3, refusal=0.7, target=0.55)  # a clear miss: no longer beyond 2 SE
    assert claims(aggregate(load_runs(tmp_path)))[0].holds is False


def test_claim_2_fails_on_equal_targets_on_ties_and_on_wander(tmp_path):
    _t1(tmp_path)
    for seed in SEEDS:  # γ 0.5 and 1.0 with the same target and refusal (K too small to tell them apart)
        record(tmp_path, "T1", "awa_g1.0", seed, refusal=0.52, target=0.55)
    claim = claims(aggregate(load_runs(tmp_path)))[1]
    failed = {t.name for t in claim.tests if not t.holds}
    assert claim.holds is False
    assert failed == {"awa_g1.0 target - awa_g0.5 target >= 0.06", "awa_g1.0 refusal > awa_g0.5 refusal"}
    for seed in SEEDS:  # the plateau wanders: half the last 50 batches at 0.45, half at 0.75
        record(tmp_path, "T1", "awa_g1.0", seed, refusal=[0.66] * 10 + [0.45] * 25 + [0.75] * 25, target=0.68)
    claim = claims(aggregate(load_runs(tmp_path)))[1]
    assert not next(t for t in claim.tests if t.name.startswith("awa_g1.0 sd of")).holds
    assert any("wanders" in d for d in claim.diagnostics)


def test_claim_3_fails_on_too_small_a_precision_gain(tmp_path):
    _t1(tmp_path)
    for seed in SEEDS:
        record(tmp_path, "T1", "data_manip", seed, refusal=0.3, greedy={"precision": 0.66, "accuracy": 0.57, "ra_f1": 0.615})
    claim = claims(aggregate(load_runs(tmp_path)))[2]
    assert claim.holds is False and [t.holds for t in claim.tests] == [False, True, False, True]
    assert claim.tests[0].margins[0] == pytest.approx(0.70 - 0.66 - 0.08)


def test_claim_4_holds_when_data_manipulation_is_unpredictable(tmp_path):
    _t1(tmp_path)
    for seed, r in zip(SEEDS, (0.30, 0.50, 0.32)):
        record(tmp_path, "T1", "data_manip", seed, refusal=r, greedy={"precision": 0.60, "accuracy": 0.57, "ra_f1": 0.585})
    assert _verdicts(tmp_path)["4"] is True
    for seed, r in zip(SEEDS, (0.45, 0.55, 0.52)):  # AWA γ 0.5 spreads too: the claim fails
        record(tmp_path, "T1", "awa_g0.5", seed, refusal=r, target=0.55)
    assert _verdicts(tmp_path)["4"] is False


def test_claim_5_regression_control(tmp_path):
    for seed in SEEDS:
        record(tmp_path, "T3", "awa_g0.5", seed, greedy={"refusal_rate": 0.33})
        record(tmp_path, "T3", "static_0.5", seed, greedy={"refusal_rate": 0.34})
    assert _verdicts(tmp_path)["5"] is True
    record(tmp_path, "T3", "static_0.5", 1, greedy={"refusal_rate": 0.45})
    record(tmp_path, "T3", "static_0.5", 2, greedy={"refusal_rate": 0.40})
    assert _verdicts(tmp_path)["5"] is False



def test_a_tie_is_a_tie_not_float_noise(tmp_path):
    # exactly at a "<=" bound: 0.2515625 - 0.1515625 - 0.1 is -2.8e-17 in floating point, and still meets it
    _t1(tmp_path)
    for seed in SEEDS:
        record(tmp_path, "T1", "awa_g0.5", seed, refusal=0.2515625, target=0.1515625)
    assert claims(aggregate(load_runs(tmp_path)))[0].tests[1].holds
    # equal refusals at one seed of three fail "increases strictly", however the 2-SE arithmetic rounds
    for seed, (lo, hi) in zip(SEEDS, ((0.1578125, 0.2828125), (0.1578125, 0.2828125), (0.2828125, 0.2828125))):
        record(tmp_path, "T1", "awa_g0.5", seed, refusal=lo, target=0.55)
        record(tmp_path, "T1", "awa_g1.0", seed, refusal=hi, target=0.68)
    strictly = next(t for t in claims(aggregate(load_runs(tmp_path)))[1].tests
                    if t.name == "awa_g1.0 refusal > awa_g0.5 refusal")
    assert not strictly.holds and "seed(s) [2]" in strictly.rule
    assert paired_seed_rule({0: 1.0, 1: 1.0, 2: 0.0}, strict=True)[0] is False


def _unlog(out: Path, tier: str, arm: str, seed: int) -> None:
    (arm_folder(out, tier, arm, seed) / "grpo" / "metrics_log.jsonl").unlink()


def test_claim_4_needs_a_value_at_every_paired_seed(tmp_path):
    _t1(tmp_path)
    for seed, r in zip(SEEDS, (0.30, 0.50, 0.32)):
        record(tmp_path, "T1", "data_manip", seed, refusal=r, greedy={"precision": 0.60, "accuracy": 0.57, "ra_f1": 0.585})
    for seed, r in zip(SEEDS, (0.52, 0.53, 0.70)):  # AWA spreads 0.18 over the three seeds: the claim fails
        record(tmp_path, "T1", "awa_g0.5", seed, refusal=r, target=0.55)
    assert _verdicts(tmp_path)["4"] is False
    _unlog(tmp_path, "T1", "awa_g0.5", 2)  # without seed 2's log the two others spread 0.01: not a "yes"
    claim = claims(aggregate(load_runs(tmp_path)))[3]
    assert claim.holds is False and "no awa_g0.5 late refusal at seed(s) [2]" in claim.tests[0].rule
    for seed in SEEDS:  # no AWA log at all: still a verdict, not a crash
        if seed != 2:
            _unlog(tmp_path, "T1", "awa_g0.5", seed)
    assert _verdicts(tmp_path)["4"] is False


def test_claim_4_spread_alone_shows_data_manipulation_unpredictable(tmp_path):
    _t1(tmp_path)
    for seed, r in zip(SEEDS, (0.30, 0.50, 0.32)):  # spread 0.20, never 0.15 from the share: one test, no margins
        record(tmp_path, "T1", "data_manip", seed, refusal=r, greedy={"precision": 0.60, "accuracy": 0.57, "ra_f1": 0.585})
    claim = claims(aggregate(load_runs(tmp_path)))[3]
    assert claim.holds and claim.tests[0].holds and claim.tests[0].margins == {}


def test_claim_5_and_nan_values_count_as_missing(tmp_path):
    for seed in SEEDS:
        record(tmp_path, "T3", "awa_g0.5", seed, greedy={"refusal_rate": 0.33})
        record(tmp_path, "T3", "static_0.5", seed, greedy={"refusal_rate": 0.34})
    path = arm_folder(tmp_path, "T3", "static_0.5", 1) / "result.json"
    result = json.loads(path.read_text())
    del result["greedy"]["refusal_rate"]
    path.write_text(json.dumps(result))
    claim = next(c for c in claims(aggregate(load_runs(tmp_path))) if c.number == "5")
    assert claim.holds is False and "no value at seed(s) [1]" in claim.tests[0].rule
    record(tmp_path, "T3", "static_0.5", 1, greedy={"refusal_rate": float("nan")})  # a NaN is no value either
    claim = next(c for c in claims(aggregate(load_runs(tmp_path))) if c.number == "5")
    assert claim.holds is False and "no value at seed(s) [1]" in claim.tests[0].rule
    _t1(tmp_path)
    record(tmp_path, "T1", "awa_g0.5", 1, refusal=[0.52] * 59 + [float("nan")], target=0.55)  # a NaN batch: skipped
    assert _verdicts(tmp_path)["1"] is True


def test_a_run_shorter_than_the_late_window_has_no_late_value(tmp_path):
    _t1(tmp_path)
    record(tmp_path, "T1", "static_0.5", 2, refusal=0.95, batches=3)  # stopped after 3 batches
    claim = claims(aggregate(load_runs(tmp_path)))[0]
    assert claim.holds is False and "no value at seed(s) [2]" in claim.tests[0].rule

def test_weak_base_claims(tmp_path):
    for seed in SEEDS:
        record(tmp_path, "T2", "static_0.5", seed, refusal=0.98, all_abstain=0.95)
        record(tmp_path, "T2", "awa_g0.5", seed, refusal=0.99, all_abstain=0.97, capped=0.9, P=-0.7)
        record(tmp_path, "T2", "none", seed, refusal=0.0, greedy={"accuracy_answerable": 0.5})
        record(tmp_path, "T2", "awa_adaptive", seed, greedy={"accuracy_answerable": 0.45, "abstain_recall": 0.85})
        record(tmp_path, "T2", "awa_attempt", seed, refusal=0.5, all_abstain=0.2, batches=80)
        record(tmp_path, "T2", "awa_forced", seed, refusal=0.5, all_abstain=0.25, greedy={"accuracy_answerable": 0.41}, batches=80)
    verdicts = _verdicts(tmp_path)
    assert verdicts["T2a"] and verdicts["T2b"] and verdicts["T2c"] and verdicts["T2d"]
    for seed in SEEDS:
        record(tmp_path, "T2", "awa_g0.5", seed, refusal=0.5, target=0.9, capped=0.9, P=-0.7)  # no collapse
        record(tmp_path, "T2", "awa_adaptive", seed, greedy={"accuracy_answerable": 0.2, "abstain_recall": 0.9})
        record(tmp_path, "T2", "awa_attempt", seed, refusal=0.9, all_abstain=0.6, batches=80)
    record(tmp_path, "T2", "awa_forced", 1, refusal=0.5, all_abstain=0.25, greedy={"accuracy_answerable": 0.39}, batches=80)
    found = {c.number: c for c in claims(aggregate(load_runs(tmp_path)))}
    assert [found[n].holds for n in ("T2a", "T2b", "T2c", "T2d")] == [False, False, False, False]
    assert found["T2d"].complete  # one seed under 0.8 x none's accuracy (0.39 < 0.40) fails it
    assert any("windup" in d for d in found["T2a"].diagnostics)



def test_a_seed_without_a_value_or_a_full_window_holds_no_claim(tmp_path):
    """"At every seed" means every seed the claim lists: a run whose metrics log is gone has no late refusal
    at its seed, and a run with fewer than 20 batches after batch 50 has no 20-batch window there."""
    for seed in SEEDS:
        record(tmp_path, "T2", "static_0.5", seed, refusal=0.98)
        record(tmp_path, "T2", "awa_g0.5", seed, refusal=0.99)
        record(tmp_path, "T2", "awa_attempt", seed, refusal=0.5, all_abstain=0.2, batches=80)
    assert _verdicts(tmp_path)["T2a"] is True and _verdicts(tmp_path)["T2c"] is True
    (arm_folder(tmp_path, "T2", "awa_g0.5", 2) / "grpo" / "metrics_log.jsonl").unlink()
    record(tmp_path, "T2", "awa_attempt", 1, refusal=0.5, all_abstain=[1.0] * 50 + [0.0] * 5, batches=55)
    found = {c.number: c for c in claims(aggregate(load_runs(tmp_path)))}
    assert found["T2a"].holds is False and found["T2a"].seeds == [0, 1, 2]
    (arm_folder(tmp_path, "T2", "static_0.5", 1) / "result.json").unlink()
    partial = {c.number: c for c in claims(aggregate(load_runs(tmp_path)))}["T2a"]
    assert partial.verdict == "no (seeds 0,2 only; not run: static_0.5 seed 1)"
    [unmeasured] = [t for t in found["T2a"].tests if not t.holds]
    assert unmeasured.name.startswith("awa_g0.5") and unmeasured.rule.startswith("no value at seed(s) [2]")
    assert found["T2c"].holds is False
    assert "too few batches" in [t.rule for t in found["T2c"].tests]


def test_a_yardstick_that_collapsed_into_malformed_output_holds_no_comparison_against_it(tmp_path):
    """`none` at answerable accuracy 0 (every reply unparsable) makes "0.8 x none's" 0, which any arm meets:
    T2b and T2d then do not hold, and say why."""
    for seed in SEEDS:
        record(tmp_path, "T2", "none", seed, refusal=0.0, greedy={"accuracy_answerable": 0.0, "unparsable": 1.0})
        record(tmp_path, "T2", "awa_adaptive", seed, greedy={"accuracy_answerable": 0.0, "abstain_recall": 1.0})
        record(tmp_path, "T2", "awa_forced", seed, refusal=0.5, all_abstain=0.25, greedy={"accuracy_answerable": 0.0})
    found = {c.number: c for c in claims(aggregate(load_runs(tmp_path)))}
    for number in ("T2b", "T2d"):
        [stick] = [t for t in found[number].tests if t.name.startswith("the yardstick reads")]
        assert found[number].holds is False and not stick.holds and "seed(s) 0 (accuracy 0.000, unparsable 1.00)" in stick.rule
    record(tmp_path, "T2", "none", 1, refusal=0.0, greedy={"accuracy_answerable": 0.3, "unparsable": 0.1})
    [stick] = [t for t in {c.number: c for c in claims(aggregate(load_runs(tmp_path)))}["T2b"].tests
               if t.name.startswith("the yardstick reads")]
    assert "1 (" not in stick.rule and "0 (" in stick.rule and "2 (" in stick.rule
    for seed in (0, 2):
        record(tmp_path, "T2", "none", seed, refusal=0.0, greedy={"accuracy_answerable": 0.3, "unparsable": 0.1})
    [stick] = [t for t in {c.number: c for c in claims(aggregate(load_runs(tmp_path)))}["T2b"].tests
               if t.name.startswith("the yardstick reads")]
    assert stick.holds and stick.rule == "at every seed (3)"


def test_recovery_lags_count_from_the_turn_of_the_error():
    def batches(P, E):
        return [{"P": p, "E": e} for p, e in zip(P, E)]
    # P negative for 6 batches; the 3-batch mean of the error turns at the second of them; P is back 5 batches later
    b = batches([0, -0.1, -0.2, -0.2, -0.1, -0.1, -0.1, 0, 0], [-0.2, -0.2, -0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1])
    assert study.recovery_lags(b, window=3) == [(5, True)]
    # an error that never turns is not counted; one that turned and stays negative at the end is a lower bound
    assert study.recovery_lags(batches([-0.1] * 5, [-0.1] * 5)) == []
    assert study.recovery_lags(batches([-0.3] * 12, [0.05] * 12)) == [(12, False)]
    assert study.recovery_lags([{"refusal": 0.3}] * 3) == []  # a run that logged no penalty (a baseline)


def _windup_study(out: Path, off_P: list[float], guarded_P: list[float], guarded_E: list[float]) -> None:
    for seed in SEEDS:
        record(out, "T1", "awa_g0.5", seed, refusal=[0.70] * 60, target=0.75, P=guarded_P, E=guarded_E)
        record(out, "T1", "awa_bound", seed, refusal=[0.50] * 60, target=0.75, P=guarded_P, E=guarded_E)
        record(out, "T1", "awa_off", seed, refusal=[0.70] * 60, target=0.75, P=off_P, E=guarded_E)


def test_claim_w_the_guard_holds_where_the_unguarded_controller_winds_up(tmp_path):
    turn = [-0.1] * 20 + [0.05] * 40            # the error turns at batch 20
    guarded = [-0.2] * 25 + [0.0] * 35          # back 5 batches later
    _windup_study(tmp_path, off_P=[-0.7] * 40 + [0.0] * 20, guarded_P=guarded, guarded_E=turn)
    found = {c.number: c for c in claims(aggregate(load_runs(tmp_path)))}
    assert found["W"].holds and found["W"].complete
    assert not found["Wb"].holds  # awa_bound ends 0.25 below its target
    assert [t.holds for t in found["Wb"].tests] == [False, True, True]

    # a slow recovery (P negative 15 batches after the turn) fails W2; an unguarded run that neither winds up
    # nor misses its target fails W3: the guard is not shown to matter
    _windup_study(tmp_path, off_P=[-0.3] * 40 + [0.0] * 20, guarded_P=[-0.2] * 35 + [0.0] * 25, guarded_E=turn)
    found = {c.number: c for c in claims(aggregate(load_runs(tmp_path)))}
    assert [t.holds for t in found["W"].tests] == [True, False, False] and not found["W"].holds
    assert found["W"].numbers["awa_off lowest P_t"] == {0: -0.3, 1: -0.3, 2: -0.3}
    # P_t moves in steps of delta: an unguarded run whose lowest P_t is -0.5 itself has wound up (<= -0.5)
    _windup_study(tmp_path, off_P=[-0.5] * 40 + [0.0] * 20, guarded_P=guarded, guarded_E=turn)
    assert {c.number: c for c in claims(aggregate(load_runs(tmp_path)))}["W"].holds


# -- a partial study -----------------------------------------------------------------------------------------
def test_plan_resumes_and_aggregate_works_on_a_partial_study(tmp_path):
    assert len(plan(tmp_path, ["T1"], SEEDS)) == 8 * 3 + 2  # ternary and static 0.3 at seed 0 only
    _t1(tmp_path, seeds=(0,))
    todo = plan(tmp_path, list(TIERS), SEEDS)
    assert ("T1", "awa_g0.5", 0) not in todo and ("T1", "awa_g0.5", 1) in todo and ("T1", "ternary", 0) in todo
    found = {c.number: c for c in claims(aggregate(load_runs(tmp_path)))}
    assert found["1"].holds and found["1"].verdict == \
        "yes (seeds 0 only; not run: static_0.5 seed 1, static_0.5 seed 2, awa_g0.5 seed 1, awa_g0.5 seed 2)"
    assert found["5"].holds is None and found["5"].verdict == "not measured"
    assert found["2"].command.startswith("OMP_NUM_THREADS=1 python scripts/fidelity.py run --tier T1 --seeds 0 1 2")
    table = aggregate(load_runs(tmp_path))
    text = markdown(table, claims(table), pending=todo)
    assert "Not finished:" in text and "not measured" in text and "### T1" in text and "### T2" not in text


def test_the_script_aggregates_what_finished_and_lists_the_arms(tmp_path, capsys, load_script):
    fid = load_script("fidelity")
    assert fid.main(["aggregate", "--out", str(tmp_path)]) == 1  # nothing finished yet
    _t1(tmp_path, seeds=(0, 1))
    assert fid.main(["aggregate", "--out", str(tmp_path)]) == 0
    report = (tmp_path / "fidelity.md").read_text()
    assert "## Claims" in report and "Not finished:" in report
    assert (tmp_path / "study_T1_batches.png").stat().st_size > 1000 and (tmp_path / "study_frontier.png").exists()
    assert fid.main(["arms"]) == 0
    shown = capsys.readouterr().out
    assert "awa_attempt" in shown and '"attempt_bonus": true' in shown


def test_a_tier_folder_refuses_other_settings(tmp_path, load_script):
    from awarl.resources import config_path

    fid = load_script("fidelity")
    recipe = config_path("demo_world.yaml")
    fid._check_study(tmp_path, "T2", recipe)
    fid._check_study(tmp_path, "T2", recipe)  # same settings: resumes
    (tmp_path / "T3").mkdir()
    (tmp_path / "T3" / "study.json").write_text((tmp_path / "T2" / "study.json").read_text())
    with pytest.raises(SystemExit, match="another --out"):
        fid._check_study(tmp_path, "T3", recipe)  # T3's base (world v1) is not T2's


def test_plots_of_a_recorded_study(tmp_path):
    _t1(tmp_path, seeds=(0,))
    paths = plot(aggregate(load_runs(tmp_path)), tmp_path)
    assert [p.name for p in paths] == ["study_T1_batches.png", "study_frontier.png"]


def test_the_frontier_averages_only_the_seeds_every_gamma_arm_finished(tmp_path):
    from awarl.eval.study_report import frontier

    greedy = {("awa_g0.2", 0): (0.60, 0.30, 0.50), ("awa_g0.5", 0): (0.70, 0.25, 0.60),
              ("awa_g1.0", 0): (0.80, 0.20, 0.70), ("awa_g0.5", 1): (0.90, 0.10, 0.95),
              ("awa_g0.2", 1): (0.75, 0.22, 0.55), ("awa_g1.0", 1): (0.85, 0.15, 0.90),
              ("awa_g0.5", 2): (0.10, 0.90, 0.05), ("none", 0): (0.40, 0.35, 0.10), ("none", 2): (0.45, 0.30, 0.05)}
    for (arm, seed), (prec, acc, ref) in greedy.items():
        record(tmp_path, "T1r", arm, seed, greedy={"precision": prec, "accuracy": acc, "refusal_rate": ref})
    table = aggregate(load_runs(tmp_path))
    found = frontier(table["T1r"])
    # seed 2 has γ 0.5 only: drawn as its own line, kept out of the mean; seed 1 is not ordered (0.95 > 0.90)
    assert found.shared == [0, 1] and sorted(found.per_seed) == [0, 1, 2] and found.ordered_seeds() == [0]
    assert [g for g, _ in found.mean] == [0.2, 0.5, 1.0]
    assert found.mean[1][1] == pytest.approx(((0.25 + 0.10) / 2, 0.80, (0.60 + 0.95) / 2))
    assert found.baselines["none"] == ([0], (0.35, 0.40, 0.10))  # over the shared seeds it has
    text = markdown(table, claims(table))
    assert "### T1r: the frontier across γ, per seed" in text
    assert "| 1 | 0.550 / 0.750 / 0.220 | 0.950 / 0.900 / 0.100 | 0.900 / 0.850 / 0.150 |" in text
    assert "Refusal rises strictly with γ at 1 of the 2 seeds where all three γ finished (0)." in text
    assert frontier({"none": table["T1r"]["none"]}) is None
    assert [p.name for p in plot(table, tmp_path)] == ["study_T1r_batches.png", "study_frontier_T1r.png"]


def test_a_run_that_fell_into_malformed_output_is_diagnosed_as_a_format_collapse(tmp_path):
    from awarl.eval.study_claims import diagnose

    record(tmp_path, "T1r", "none", 1, refusal=0.07, greedy={"precision": 0.0, "accuracy": 0.0, "unparsable": 1.0})
    record(tmp_path, "T1r", "none", 2, refusal=0.25, greedy={"unparsable": 0.01})
    table = aggregate(load_runs(tmp_path))
    assert "format collapse" in diagnose(table, "T1r", "none", 1)
    assert "format collapse" not in diagnose(table, "T1r", "none", 2)
    assert table["T1r"]["none"]["per_seed"][1]["greedy"]["unparsable"] == 1.0  # reported in the tier table


def _eval_folder(folder: Path, correct: int, abstained: int, n: int = 40) -> None:
    """A greedy evaluation folder as `awarl eval run` leaves it: records, predictions, settings."""
    from awarl.data.records import QARecord
    from awarl.protocol import ABSTAIN_PHRASE

    (folder / "eval").mkdir(parents=True, exist_ok=True)
    records = [QARecord(f"q{i}", f"where {i}?", ["Ruvia"], "world", answerable=i >= 10) for i in range(n)]
    answers = {r.id: "Ruvia" if i < correct + 10 and i >= 10 else ABSTAIN_PHRASE if i < abstained else "Morland"
               for i, r in enumerate(records)}
    (folder / "eval" / "records.jsonl").write_text("".join(json.dumps(r.to_dict()) + "\n" for r in records))
    (folder / "eval" / "predictions.jsonl").write_text(json.dumps(answers))
    (folder / "eval" / "run.json").write_text(json.dumps({"rollout": {"metric": "em"}}))


def test_claim_3_carries_the_question_level_paired_bootstrap_where_evaluations_exist(tmp_path):
    _t1(tmp_path, seeds=(0,))
    _eval_folder(arm_folder(tmp_path, "T1", "awa_g0.2", 0), correct=20, abstained=10)  # abstains on the 10 unanswerable
    _eval_folder(arm_folder(tmp_path, "T1", "data_manip", 0), correct=20, abstained=0)  # guesses on them
    claim = claims(aggregate(load_runs(tmp_path)))[2]
    per_seed = claim.numbers["awa_g0.2 - data_manip per seed, question-level paired bootstrap"]
    assert per_seed[0]["precision"]["diff"] == pytest.approx(20 / 30 - 20 / 40, abs=1e-4) and per_seed[0]["precision"]["beyond_2se"]
    assert per_seed[0]["accuracy"] == {"diff": 0.0, "stderr": 0.0, "beyond_2se": False}  # the same 20 right answers


LEARNS = [0.15] * 10 + [0.2] * 20 + [0.3] * 20   # batch accuracy: +0.15 from the first 10 batches to the last 20


def recording_jobs(tmp_path, tier, calls, arm_result=None, failing_bases=()):
    """A stand-in for `scripts/fidelity.py`'s `_spawn`: records (arm, seed), makes the base folder (or exits 1 for
    a seed of ``failing_bases``) and writes an arm's result with ``arm_result(arm, seed)``."""
    def job(args):
        arm, seed = args[args.index("--arm") + 1], int(args[args.index("--seed") + 1])
        calls.append((arm, seed))
        if arm == "base":
            if seed in failing_bases:
                return 1
            study.base_folder(tmp_path, tier, seed).mkdir(parents=True)
        else:
            (arm_result or (lambda a, s: record(tmp_path, tier, a, s)))(arm, seed)
        return 0
    return job


def test_run_builds_the_bases_first_and_skips_a_base_that_misses_its_precondition(tmp_path, monkeypatch, capsys,
                                                                                 load_script):
    """The scheduling of `scripts/fidelity.py run` (the jobs themselves train, so here they only record):
    a tier's bases before its arms, finished arms skipped, a T2 base with mean p_i > 0.2 gets no arms, and T2's
    yardstick (`none`) runs before the other arms at every seed."""
    fid = load_script("fidelity")
    calls = []
    monkeypatch.setattr(fid, "_spawn", recording_jobs(tmp_path, "T2", calls, lambda arm, seed: record(
        tmp_path, "T2", arm, seed, batches=len(LEARNS), accuracy=LEARNS, greedy={"unparsable": 0.0})))
    monkeypatch.setattr(fid, "base_mean_p", lambda out, tier, seed: {0: 0.12, 1: 0.35, 2: 0.15}[seed])
    record(tmp_path, "T2", "none", 0, batches=len(LEARNS), accuracy=LEARNS, greedy={"unparsable": 0.0})  # finished: skipped
    assert fid.run(tmp_path, ["T2"], [0, 1, 2], None, fid.RECIPE, jobs=2) == 0
    assert sorted(calls[:3]) == [("base", 0), ("base", 1), ("base", 2)]
    assert calls[3] == ("none", 2)
    assert sorted(calls[4:]) == [(a, s) for a in sorted(("static_0.5", "awa_g0.5", "awa_adaptive", "awa_attempt",
                                                                          "awa_forced")) for s in (0, 2)]
    assert "T2 seed 1: the base's mean p_i on answerable RL questions is 0.350 > 0.2" in capsys.readouterr().out


def test_a_yardstick_that_learns_nothing_keeps_the_other_arms_off_its_seed(tmp_path, monkeypatch, capsys, load_script):
    """T2's second precondition: `none` must gain >= 0.10 in batch accuracy and read held-out in format; at a seed
    where it does not, no other arm runs, and the runner says why."""
    fid = load_script("fidelity")
    calls = []
    flat = [0.2] * len(LEARNS)

    def result(arm, seed):
        if arm == "none":
            record(tmp_path, "T2", arm, seed, batches=len(LEARNS), accuracy=LEARNS if seed == 0 else flat,
                   greedy={"unparsable": 0.0 if seed != 2 else 0.9})
        else:
            record(tmp_path, "T2", arm, seed)

    monkeypatch.setattr(fid, "_spawn", recording_jobs(tmp_path, "T2", calls, result))
    monkeypatch.setattr(fid, "base_mean_p", lambda out, tier, seed: 0.1)
    assert fid.run(tmp_path, ["T2"], [0, 1, 2], None, fid.RECIPE, jobs=1) == 0
    assert {s for a, s in calls if a not in ("base", "none")} == {0}
    out = capsys.readouterr().out
    assert "T2 seed 1: the yardstick arm none does not show that RL teaches this base (batch accuracy 0.200" in out
    assert "a gain of +0.000 < 0.1" in out and "T2 seed 2" in out and "held-out unparsable share 0.9" in out
    # the criterion itself, on one run
    run = study.load_run(arm_folder(tmp_path, "T2", "none", 0))
    assert study.yardstick_failures(run) == [] and (run.tier, run.arm, run.seed) == ("T2", "none", 0)
    short = study.Run("T2", "none", 0, run.result, run.batches[:12])
    assert study.yardstick_failures(short) == ["12 generation batches logged accuracy, fewer than 30"]


def test_a_base_that_does_not_finish_runs_no_arm_at_its_seed(tmp_path, monkeypatch, capsys, load_script):
    """A base job that fails (a crash, or another `run` writing the same base) keeps its seed's arms from starting
    on a half-built base; the other seeds go on, and the runner's exit code says something failed."""
    fid = load_script("fidelity")
    calls = []
    monkeypatch.setattr(fid, "_spawn", recording_jobs(tmp_path, "T1", calls, failing_bases=(1,)))
    assert fid.run(tmp_path, ["T1"], [0, 1], ["none", "static_0.5"], fid.RECIPE, jobs=1) == 1
    assert sorted(c for c in calls if c[0] != "base") == [("none", 0), ("static_0.5", 0)]
    assert "T1 seed 1: its base did not finish (exit 1" in capsys.readouterr().out
