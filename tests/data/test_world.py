"""The synthetic world: determinism, the official format through the MuSiQue adapter, unanswerable
questions that really lack their fact, disjoint splits, the knobs, and its verifier policy; world
v2's disjoint bridge cities, near-misses, namesake ceilings, search noise and its audit."""

from __future__ import annotations

import json
import random
import re
import tempfile
from pathlib import Path

import pytest

from awarl.data.adapters import load_dataset_file
from awarl.data.records import load_corpus
from awarl.data.world import (
    SPLITS,
    WorldConfig,
    WorldError,
    generate_world,
    gold_conversation,
    gold_queries,
    record_id,
    write_world,
)

SMALL = WorldConfig(persons=80, seed=3, version=1)


@pytest.fixture(scope="module")
def world():
    return generate_world(SMALL)


@pytest.fixture(scope="module")
def written(world, tmp_path_factory):
    return write_world(world, tmp_path_factory.mktemp("world"))


def test_same_seed_same_world_other_seed_other_world(world, tmp_path):
    again = generate_world(SMALL)
    assert again.passages == world.passages and again.questions == world.questions
    a, b = write_world(world, tmp_path / "a"), write_world(again, tmp_path / "b")
    for name in (*SPLITS, "corpus", "policy", "policy_tests"):
        assert a[name].read_bytes() == b[name].read_bytes(), name
    other = generate_world(WorldConfig(persons=80, seed=4))
    assert [q.question for q in other.questions] != [q.question for q in world.questions]


def test_splits_load_through_the_musique_adapter(world, written):
    corpus = {p.id: p for p in load_corpus(written["corpus"])}
    assert len(corpus) == len(world.passages)
    for split in SPLITS:
        records, passages = load_dataset_file("musique", written[split])
        questions = world.split(split)
        assert [r.id for r in records] == [record_id(q) for q in questions]
        assert [r.answerable for r in records] == [q.answerable for q in questions]
        for rec, q in zip(records, questions):
            assert rec.answers == [q.answer]
            assert set(rec.supporting) <= set(rec.passages) <= set(corpus), rec.id  # same ids as the corpus
            assert sorted(rec.supporting) == sorted(world.supporting(q))
        assert {p.id for p in passages} <= set(corpus)


def test_unanswerable_questions_lack_their_fact_and_answerable_ones_have_it(world, written):
    texts = [p.text for p in load_corpus(written["corpus"])]
    unanswerable = [q for q in world.questions if not q.answerable]
    assert unanswerable and len(unanswerable) < len(world.questions)
    for q in world.questions:
        city, country = q.chain[0], q.chain[1]
        stated = [t for t in texts if re.match(rf"{city} is a city in the country ", t)]
        if q.answerable:
            assert stated == [f"{city} is a city in the country {country}."]
        else:
            assert stated == [] and q.missing == city
        person = f"{q.person} was born in" if q.relation == "born" else f"{q.person} lives in"
        assert any(t.startswith(person) for t in texts)  # hop 1 is always answerable


def test_unanswerable_share_is_controlled():
    for share in (0.0, 0.3, 0.5):
        w = generate_world(WorldConfig(persons=200, unanswerable_share=share))
        got = sum(not q.answerable for q in w.questions) / len(w.questions)
        assert abs(got - share) < 0.06, (share, got)


def test_splits_are_disjoint_by_person(world):
    persons = {s: {q.person for q in world.split(s)} for s in SPLITS}
    assert all(persons.values())
    assert not (persons["sft"] & persons["rl"] or persons["sft"] & persons["eval"] or persons["rl"] & persons["eval"])


def test_search_finds_what_the_gold_trajectory_needs(world):
    from awarl.search.bm25 import BM25Index

    index = BM25Index.build(world.passages)
    for q in world.questions[:40]:
        hits = [[h.passage.id for h in row] for row in index.search(gold_queries(q), 3)]
        assert world.supporting(q)[0] in hits[0]  # the person's relation passage
        if q.answerable:
            assert hits[1][0] == world.supporting(q)[1]  # "<city> country" ranks the link first


def test_three_hops_ask_for_a_region(tmp_path):
    w = generate_world(WorldConfig(persons=40, hops=3, distractors=0))
    q = w.questions[0]
    assert "region" in q.question and len(q.chain) == 3 and len(gold_queries(q)) == 3
    assert all(len(p.text.split()) <= 9 for p in w.passages)
    files = write_world(w, tmp_path)
    records, _ = load_dataset_file("musique", files["eval"])
    assert records and all(r.answers[0] in {v for v in w.parent.values()} for r in records)


@pytest.mark.parametrize("knob, value", [("persons", 5), ("hops", 4), ("distractors", 3), ("cities", 99),
                                         ("unanswerable_share", 1.0), ("split", (0.5, 0.5, 0.0))])
def test_bad_knobs_name_the_knob(knob, value):
    with pytest.raises(WorldError, match=knob):
        WorldConfig(**{knob: value})
    with pytest.raises(WorldError, match="unknown knob"):
        WorldConfig.from_dict({"persns": 10})


def test_world_json_records_the_facts(world, written):
    saved = json.loads(written["world"].read_text())
    assert saved["config"] == SMALL.to_dict()
    assert saved["absent"] == sorted(world.absent)
    assert saved["stats"]["eval"]["questions"] == len(world.split("eval"))


# -- the verifier policy -------------------------------------------------------------------------------------
def test_policy_lints_clean_and_its_tests_pass(written):
    from awarl.verify.lint import lint
    from awarl.verify.policy import load_policy
    from awarl.verify.policy_tests import load_policy_tests, run_policy_tests
    from awarl.verify.translate import PatternTranslator

    policy = load_policy(written["policy"])
    assert [i.message for i in lint(policy)] == []
    tests = load_policy_tests(written["policy_tests"])
    outcomes = run_policy_tests(policy, tests, lambda t: PatternTranslator())
    assert len(outcomes) >= 5
    failed = [(o.test.name, o.test.expected, o.actual) for o in outcomes if not o.passed]
    assert failed == []


def test_verify_check_flags_a_country_that_contradicts_the_cited_birth_city(world, written):
    from typer.testing import CliRunner

    from awarl.cli import app

    q = next(q for q in world.split("eval") if q.answerable and q.relation == "born")
    evidence = " ".join([q.question, *(world.passage(pid).text for pid in world.supporting(q))])
    wrong = next(k for k in sorted(set(world.parent.values())) if k != q.answer)
    runner = CliRunner()
    for answer, expected in ((q.answer, "VALID"), (wrong, "INVALID")):
        result = runner.invoke(app, ["verify", "check", "--policy", str(written["policy"]), "--question", evidence,
                                     "--answer", answer, "--json"])
        assert result.exit_code in (0, 1), result.output
        findings = json.loads(result.output)["findings"]
        assert [f["result"] for f in findings] == [expected], (answer, result.output)


def test_gold_queries_put_names_after_a_word():
    # " Tavel" in a passage and "Tavel" at the start of a query are different byte-level BPE tokens;
    # a name after a word is the same token in both, so the agent copies it instead of translating it.
    q = next(q for q in generate_world(SMALL).questions if q.relation == "born")
    assert gold_queries(q) == [f"born {q.person}", f"country {q.chain[0]}"]
    assert gold_queries(q, first="question")[0] == q.question


def test_warm_start_conversations_abstain_or_guess_on_unanswerable_questions():
    from awarl.agent.env import search_env_factory
    from awarl.agent.settings import RolloutSettings
    from awarl.data.world import _first_link
    from awarl.protocol import ABSTAIN_PHRASE, parse_final
    from awarl.search.bm25 import BM25Index
    from awarl.train.tiny import world_trajectories

    world = generate_world(WorldConfig(persons=300, seed=3))  # big enough that "country <city>" finds links
    env = search_env_factory(BM25Index.build(world.passages), RolloutSettings(scope="global", topk=3, max_searches=2))
    questions = {record_id(q): q for q in world.split("sft")}
    for share in (1.0, 0.3, 0.0):
        rows = {r["record_id"]: r["messages"] for r in world_trajectories(world, env, ("sft",), abstain_share=share)}
        finals = {rid: parse_final(m[-1]["content"]) for rid, m in rows.items()}
        # A guess needs a link passage in the last result; without one the conversation abstains.
        can_guess = [rid for rid, q in questions.items() if not q.answerable and _first_link(rows[rid][-2]["content"])]
        assert len(can_guess) > 30
        abstained = [rid for rid in can_guess if finals[rid].answer == ABSTAIN_PHRASE]
        assert abs(len(abstained) / len(can_guess) - share) < 0.15, share
        for rid, q in questions.items():
            final = finals[rid]
            if q.answerable:
                assert final.answer == q.answer and final.citations == world.supporting(q)
            elif final.answer != ABSTAIN_PHRASE:
                # The guess: another city's country, citing the person's passage and that city's link.
                person_pid, link_pid = final.citations
                assert person_pid == world.fact_passage[(q.person, q.relation)]
                link = world.passage(link_pid)
                assert link.title != q.chain[0] and link.text.endswith(f"in the country {final.answer}.")
    with pytest.raises(ValueError, match="abstain_share"):
        world_trajectories(world, env, ("sft",), abstain_share=1.5)


# -- world v2 -------------------------------------------------------------------------------------------------
V2 = WorldConfig(version=2, persons=120, seed=3)


@pytest.fixture(scope="module")
def world2():
    return generate_world(V2)


@pytest.fixture(scope="module")
def written2(world2, tmp_path_factory):
    return write_world(world2, tmp_path_factory.mktemp("world2"))


@pytest.fixture(scope="module")
def index2(world2):
    from awarl.search.bm25 import BM25Index

    return BM25Index.build(world2.passages)


def _env(index, written, **kw):
    from awarl.agent.env import search_env_factory
    from awarl.agent.settings import RolloutSettings

    return search_env_factory(index, RolloutSettings(topk=3, passage_words=20, max_searches=3,
                                                     world_noise=str(written["noise"]), **kw))


def test_v2_same_seed_same_world_other_seed_other_world(world2, written2, tmp_path):
    again = generate_world(V2)
    assert again.passages == world2.passages and again.questions == world2.questions
    b = write_world(again, tmp_path / "b")
    for name in (*SPLITS, "corpus", "world", "noise", "policy", "policy_tests"):
        assert written2[name].read_bytes() == b[name].read_bytes(), name
    other = generate_world(WorldConfig(version=2, persons=120, seed=4))
    assert [p.text for p in other.passages] != [p.text for p in world2.passages]


def test_v2_bridge_cities_are_disjoint_per_split_and_countries_shared(world2):
    cities = {s: {q.chain[0] for q in world2.split(s)} for s in SPLITS}
    assert not (cities["sft"] & cities["rl"] or cities["sft"] & cities["eval"] or cities["rl"] & cities["eval"])
    countries = {s: {q.answer for q in world2.split(s)} for s in SPLITS}
    assert countries["sft"] == countries["rl"] == countries["eval"] == set(world2.parent.values())
    names = {s: {q.person for q in world2.split(s)} for s in SPLITS}
    assert not (names["sft"] & names["eval"] or names["rl"] & names["eval"])
    # Every word of a held-out name also appears in the SFT split's passages (visits, names).
    words = {w for q in world2.split("sft") for w in q.person.split()}
    sft_titles = {world2.passage(pid).text for q in world2.split("sft") for pid in world2.by_title()[q.person]}
    visited = {w.strip(".") for t in sft_titles if " visited " in t for w in t.split(" visited ")[1].split(" and ")}
    assert all(w in words for q in world2.split("eval") for w in q.person.split())
    assert {q.chain[0] for q in world2.split("eval")} <= visited


def test_v2_unanswerable_questions_lack_the_needed_fact(world2, written2, index2):
    texts = {p.text for p in load_corpus(written2["corpus"])}
    kinds = {q.kind for q in world2.questions}
    assert kinds == {"answerable", "missing", "near_miss_variant", "near_miss_relation"}
    for q in world2.questions:
        city, country = q.chain
        verb = "was born in" if q.relation == "born" else "lives in"
        link = [t for t in texts if t.startswith(f"{city} is a city in the country ")]
        if q.kind == "answerable":
            assert link == [f"{city} is a city in the country {country}."]
            assert world2.passage(world2.fact_passage[(q.who, q.relation)]).text == f"{q.person} {verb} {city}."
        elif q.kind == "missing":
            assert link == [] and f"{q.person} {verb} {city}." in texts
        elif q.kind == "near_miss_variant":
            variant = q.cues["variant"]
            assert link == [] and variant == f"{city}s"
            hits = index2.search([f"country {city}"], 3)[0]  # the stemmer maps the variant to the city
            assert hits[0].passage.text.startswith(f"{variant} is a city in the country ")
        else:  # near_miss_relation: the asked relation's passage is absent, the other one's city is placed
            assert not any(t.startswith(f"{q.person} {verb} ") for t in texts)
            other = q.cues["other_city"]
            assert any(t.startswith(f"{other} is a city in the country ") for t in texts)
        assert q.answerable == (q.kind == "answerable") and (q.ceiling is None) == (not q.answerable)


def test_v2_namesake_ceilings_are_j_over_m_times_the_noise(world2):
    cfg = world2.config
    groups: dict[tuple[str, str], list] = {}
    for q in world2.questions:
        groups.setdefault((q.person, q.relation), []).append(q)
    seen_m = set()
    for (name, rel), qs in groups.items():
        if not qs[0].answerable:
            continue
        m = len(qs)
        seen_m.add(m)
        counts = {c: sum(o.answer == c for o in qs) for c in {o.answer for o in qs}}
        assert len(set(counts.values())) == 1  # no country likelier than another: j each
        assert len({o.question for o in qs}) == 1 and len({o.chain[0] for o in qs}) == m
        for q in qs:
            j = counts[q.answer]
            assert (q.cues["namesakes"], q.cues["leading"]) == (m, j)
            want = j / m * (1 - q.cues["silent_noise"]) * (1 - cfg.visible_failure ** (cfg.max_searches - 1))
            assert q.ceiling == pytest.approx(want, abs=1e-6)
    assert seen_m == {1, 2, 3, 4}
    saved = json.loads((write_world(world2, Path(tempfile.mkdtemp())))["world"].read_text())
    rows = {r["id"]: r for r in saved["questions"]}
    q = next(q for q in world2.questions if q.answerable and q.cues["namesakes"] == 4)
    assert rows[q.id]["u"] == q.ceiling and rows[q.id]["kind"] == "answerable" and rows[q.id]["cues"]["namesakes"] == 4


def _results(make_env, q, seed, queries):
    env = make_env()
    env.reset(id=record_id(q), question=q.question, passages=[], rollout_seed=seed)
    return [env.search(s) for s in queries]


def test_v2_noise_is_seeded_per_rollout(world2, written2, index2):
    make_env = _env(index2, written2)
    q = next(q for q in world2.split("rl") if q.answerable and q.cues["silent_noise"] == 0.3 and q.cues["namesakes"] == 1)
    true = world2.passage(world2.fact_passage[(q.chain[0], "in")])
    queries = [f"country {q.chain[0]}"] * 3
    runs = {seed: _results(make_env, q, seed, queries) for seed in range(200)}
    assert all(_results(make_env, q, seed, queries) == runs[seed] for seed in (0, 7, 99))  # same seed, same tool
    shown = {seed: {r.split("\n")[0] for r in rs if f"[{true.id}]" in r} for seed, rs in runs.items()}
    noisy = [seed for seed, lines in shown.items() if any(true.text not in line for line in lines)]
    # Silent noise holds for the whole rollout (repeating the query does not escape it) ...
    for seed in noisy:
        assert all(true.text not in line and "is a city in the country" in line for line in shown[seed])
    assert 0.2 < len(noisy) / 200 < 0.4  # f = 0.3
    # ... visible failures are drawn per call: some calls of a rollout lose the link, a retry finds it.
    lost = sum(f"[{true.id}]" not in r for rs in runs.values() for r in rs) / 600
    assert 0.12 < lost < 0.28  # visible_failure = 0.2
    assert any(f"[{true.id}]" not in rs[0] and f"[{true.id}]" in rs[1] for rs in runs.values())


def test_v2_noise_counts_rollouts_without_a_seed_and_spares_other_records(world2, written2, index2):
    from awarl.agent.env import search_env_factory
    from awarl.agent.settings import RolloutSettings

    q = next(q for q in world2.split("rl") if q.answerable and q.cues["silent_noise"] == 0.3)
    query = [f"country {q.chain[0]}"]
    make_env = _env(index2, written2)
    env = make_env()
    counted = []
    for _ in range(5):  # TRL's GRPO passes no seed: the n-th rollout of a record gets seed n
        env.reset(id=record_id(q), question=q.question, passages=[])
        counted.append((env.rollout_seed, env.search(query[0])))
    assert [s for s, _ in counted] == [0, 1, 2, 3, 4]
    assert [r for _, r in counted] == [_results(_env(index2, written2), q, s, query)[0] for s in range(5)]
    plain = search_env_factory(index2, RolloutSettings(topk=3, passage_words=20, max_searches=3))()
    plain.reset(id="not-a-world-question", question="?", passages=[])
    env.reset(id="not-a-world-question", question="?", passages=[])
    assert env.search(query[0]) == plain.search(query[0])  # a record the table does not list: no noise
    assert RolloutSettings(world_noise="a/noise.json").mismatch(RolloutSettings()) == ["world_noise: 'a/noise.json' vs null"]


def test_the_chatbot_serves_without_the_world_noise(tmp_path):
    from awarl.agent.settings import RolloutSettings
    from awarl.chat.generate import rollout_of

    RolloutSettings(topk=2, world_noise=str(tmp_path / "noise.json")).save(tmp_path)
    served = rollout_of(tmp_path)
    assert served.world_noise is None and served.topk == 2



def test_a_checkpoint_read_from_outside_its_run_folder_finds_the_world_noise(tmp_path, written2, monkeypatch):
    import shutil

    from awarl.agent.options import rollout_from
    from awarl.agent.settings import RolloutSettings, load_rollout
    from awarl.errors import ConfigError

    demo = tmp_path / "demo"
    (demo / "world").mkdir(parents=True)
    shutil.copy(written2["noise"], demo / "world" / "noise.json")
    RolloutSettings(topk=2, world_noise="world/noise.json").save(demo / "grpo" / "awa" / "final")
    monkeypatch.chdir(tmp_path)  # `awarl eval run --model demo/grpo/awa/final` from the folder above the demo
    assert load_rollout(Path("demo/grpo/awa/final")).world_noise == str(Path("demo/world/noise.json"))
    monkeypatch.chdir(demo)  # inside the demo, as the demo names it
    assert load_rollout(Path("grpo/awa/final")).world_noise == "world/noise.json"
    monkeypatch.chdir(demo / "grpo" / "awa")  # inside the arm's folder: above the working folder too
    assert load_rollout(Path("final")).world_noise == str((demo / "world" / "noise.json").resolve())
    monkeypatch.chdir(demo)
    # on the command line "null" means none, and a noise file that is not there is one error, before any run starts
    off = rollout_from(Path("grpo/awa/final"), {"world_noise": "null", "system_prompt": "null"})
    assert off.world_noise is None and off.system_prompt is None and off.topk == 2
    with pytest.raises(ConfigError, match="nope.json: no such noise file"):
        rollout_from(None, {"world_noise": "nope.json"})

def test_v2_gold_conversations_read_the_tool(world2, written2, index2):
    from awarl.protocol import ABSTAIN_PHRASE, parse_final

    make_env = _env(index2, written2)
    env = make_env()
    retried = 0
    for q in world2.split("sft"):
        env.reset(id=record_id(q), question=q.question, passages=[])
        messages = gold_conversation(world2, q, env.search)
        final = parse_final(messages[-1]["content"])
        calls = [m for m in messages if m.get("tool_calls")]
        assert len(calls) <= V2.max_searches
        retried += len(calls) == 3 and final.answer != ABSTAIN_PHRASE
        if not q.answerable:
            assert final.answer == ABSTAIN_PHRASE
        elif final.answer != ABSTAIN_PHRASE:  # what the country passage it read says, cited first
            link = world2.passage(final.citations[0])
            assert link.title in world2.parent and messages[-2]["content"].count(f"[{link.id}]") == 1
    assert retried > 0


def test_renamer_draws_what_the_plain_definition_draws(world2, written2, index2):
    """`Renamer` sorts the pools once and tests only the name groups whose first word a conversation holds;
    it must draw exactly what the definition does: every name found as a substring and every city word
    present is left out of the pools, which are sorted (so the draws do not depend on string hashing)."""
    from awarl.data.world import Renamer, _without

    assert _without(["a", "b", "c", "d"], ["d", "b"]) == ["a", "c"]
    for bad in (["b", "b"], ["bb"]):
        with pytest.raises(ValueError, match="not distinct members"):
            _without(["a", "b", "c"], bad)
    names = {p.name for p in world2.persons}
    cities = {c for c, level in world2.levels.items() if level == "city"}
    pids = {p.id for p in world2.passages}

    def reference(messages, rng, ids):  # the definition, pools sorted on every call
        text = "\n".join(str(m.get("content") or "") + " " + " ".join(str(c) for c in m.get("tool_calls") or [])
                         for m in messages)
        words = set(re.findall(r"\w+", text))
        present = sorted({n for n in names if n in text}, key=lambda n: (-len(n), n))
        found = sorted(words & cities)
        kept = {w for w in found if w + "s" in words or w.endswith("s") and w[:-1] in words}
        kept |= {w for w in words - cities if w.endswith("s") and w[:-1] in cities}
        kept |= {w[:-1] for w in kept if w.endswith("s")}
        movable = [c for c in found if c not in kept]
        mapping = (dict(zip(present, rng.sample(sorted(names - set(present)), len(present))))
                   | dict(zip(movable, rng.sample(sorted(cities - set(found)), len(movable)))))
        present_ids = sorted(words & pids) if ids else []
        return mapping | dict(zip(present_ids, rng.sample(sorted(pids - set(present_ids)), len(present_ids))))

    rename, env = Renamer(world2), _env(index2, written2)()
    some = sorted(names)
    for i, q in enumerate(world2.split("sft")[:40]):
        env.reset(id=record_id(q), question=q.question, passages=[])
        # a name inside a longer word counts as present (it is not renamed there, and no name becomes it)
        messages = [*gold_conversation(world2, q, env.search),
                    {"role": "user", "content": f"X{some[i]}s met {some[-1 - i]}."}]
        ids = i % 2 == 1  # the demo renames the passage ids too (warm_start.rename_ids)
        mapping = reference(messages, random.Random(i), ids)
        pattern = re.compile(r"\b(" + "|".join(re.escape(k) for k in sorted(mapping, key=len, reverse=True)) + r")\b")
        sub = lambda v: (pattern.sub(lambda m: mapping[m.group(1)], v) if isinstance(v, str)  # noqa: E731
                         else {k: sub(x) for k, x in v.items()} if isinstance(v, dict)
                         else [sub(x) for x in v] if isinstance(v, list) else v)
        assert rename(messages, random.Random(i), ids=ids) == sub(messages), q.id


def test_v2_renamed_copies_rename_persons_and_cities_and_keep_the_reading(world2, written2, index2):
    import random

    from awarl.data.world import renamed_conversation
    from awarl.protocol import parse_final
    from awarl.train.tiny import world_trajectories

    make_env = _env(index2, written2)
    rows = world_trajectories(world2, make_env, ("sft",), renamed_copies=2)
    n = len(world2.split("sft"))
    assert len(rows) == 3 * n and [r["record_id"] for r in rows[:3]] == [rows[0]["record_id"]] * 3
    cities = {c for c, level in world2.levels.items() if level == "city"}
    names = {p.name for p in world2.persons}
    changed = 0
    for original, copy in zip(rows[::3], rows[1::3]):
        a, b = original["messages"], copy["messages"]
        assert [m["role"] for m in a] == [m["role"] for m in b]
        fa, fb = parse_final(a[-1]["content"]), parse_final(b[-1]["content"])
        assert (fa.answer, fa.citations) == (fb.answer, fb.citations)  # countries and passage ids are kept
        ids = lambda ms: re.findall(r"\[(\w+)\]", " ".join(str(m.get("content")) for m in ms))  # noqa: E731
        assert ids(a) == ids(b)
        q = next(q for q in world2.split("sft") if record_id(q) == original["record_id"])
        assert q.person not in b[1]["content"] and any(name in b[1]["content"] for name in names)
        words = lambda ms: set(re.findall(r"\w+", json.dumps(ms)))  # noqa: E731
        first_hop = set(re.findall(r"(?:born in|lives in) (\w+)\.", a[3]["content"]))
        kept = {w for w in first_hop if w + "s" in words(a) or w.endswith("s")}
        moved = (first_hop & cities) - kept
        assert moved.isdisjoint(words(b))  # renamed everywhere, to cities the conversation did not name
        changed += bool(moved)
    assert changed >= 0.8 * n
    # Seeded: the same generator gives the same copy; a v1 world has no renamed copies.
    q = world2.split("sft")[0]
    env = make_env()
    env.reset(id=record_id(q), question=q.question, passages=[])
    messages = gold_conversation(world2, q, env.search)
    assert renamed_conversation(world2, messages, random.Random(1)) == renamed_conversation(world2, messages,
                                                                                             random.Random(1))
    # rename_ids: the copies' passage ids are others of the world's, the same in the results and the cited answer
    pids = {p.id for p in world2.passages}
    renamed = renamed_conversation(world2, messages, random.Random(1), ids=True)
    ids_of = lambda ms: re.findall(r"\[(\w+)\]", " ".join(str(m.get("content")) for m in ms))  # noqa: E731
    before, after = ids_of(messages), ids_of(renamed)
    assert len(before) == len(after) > 0, (before, after)
    assert set(after) - pids == set(before) - pids  # an id outside the corpus (the search noise's) is kept
    assert (set(before) & pids).isdisjoint(after)
    assert len(set(zip(before, after))) == len(set(before)) == len(set(after))  # one consistent renaming
    final = parse_final(renamed[-1]["content"])
    assert all(f"[{c}]" in " ".join(str(m.get("content")) for m in renamed[:-1]) for c in final.citations)
    only = world_trajectories(world2, make_env, ("sft",), renamed_copies=1, originals=False)
    persons = {record_id(q): q.person for q in world2.split("sft")}
    assert len(only) == n and all(persons[r["record_id"]] not in r["messages"][1]["content"] for r in only)
    with pytest.raises(ValueError, match="originals=False needs renamed_copies"):
        world_trajectories(world2, make_env, ("sft",), originals=False)
    with pytest.raises(ValueError, match="renamed_copies must be >= 0"):
        world_trajectories(world2, make_env, ("sft",), renamed_copies=-1)


def test_v2_policy_lints_clean_and_its_tests_pass(tmp_path):
    small = generate_world(WorldConfig(version=2, persons=40, cities=8, countries=4, seed=1))
    test_policy_lints_clean_and_its_tests_pass(write_world(small, tmp_path))


@pytest.mark.parametrize("knob, value", [("hops", 3), ("countries", 3), ("distractors", 0),
                                         ("ceilings", {"3/2@0": 1.0}), ("ceilings", {"1/1@0": 0.5})])
def test_v2_bad_knobs_name_the_knob(knob, value):
    with pytest.raises(WorldError, match=knob):
        WorldConfig(version=2, **{knob: value})


# -- the audit ---------------------------------------------------------------------------------------------------
def test_audit_of_a_small_v2_world(tmp_path):
    from awarl.eval.world_audit import audit_world

    world = generate_world(WorldConfig(version=2, persons=120, split=(0.5, 0.2, 0.3), seed=0))
    audit = audit_world(world, seeds=2, folder=tmp_path)
    got = {c.name: round(c.value, 3) for c in audit.checks}
    assert (audit.questions, audit.answerable) == (72, 50)
    assert got == {"lookup": 0.069, "lookup, else abstain": 0.306, "shape rule": 0.663, "careful reader": 0.97, "oracle - mean(u)": 0.0,
                   "mean(u)": 0.486, "share u <= 0.2": 0.32, "share u >= 0.6": 0.32, "rank rule": 0.486,
                   "middle share, random reader": 0.52, "middle share, consistent reader": 0.0,
                   "middle share, rank-1 reader": 0.0,
                   "held-out words not in SFT text": 0.0, "bridge cities shared with SFT": 0.0, "always abstain": 0.306}
    assert audit.ok and "| shape rule | 0.663 | <= 0.75 | yes |" in audit.table()


def test_audit_middle_share_of_a_consistent_reader(tmp_path):
    """A reader that follows one namesake per question has p_i 0 or (1 - f) x the retry's success there, so
    only a silent noise f that puts 1 - f in (0.2, 0.5) gives it a middle p_i: 1/1@0.6 does (0.4 x 0.96)."""
    from awarl.eval.world_audit import audit_world

    mix = {"1/1@0": 0.4, "1/1@0.6": 0.3, "2/1@0": 0.3}
    world = generate_world(WorldConfig(version=2, persons=120, split=(0.5, 0.2, 0.3), seed=0, ceilings=mix))
    audit = audit_world(world, seeds=1, folder=tmp_path)
    answerable = [q for q in world.split("eval") if q.answerable]
    noisy = sum(q.cues["silent_noise"] == 0.6 for q in answerable) / len(answerable)
    assert noisy > 0.2
    assert audit.check("middle share, consistent reader").value == pytest.approx(noisy)
    # The random reader's p_i is u: 2/1@0 (u 0.48) and 1/1@0.6 (u 0.38) are both in the middle.
    pairs = sum(q.cues["namesakes"] == 2 for q in answerable) / len(answerable)
    assert audit.check("middle share, random reader").value == pytest.approx(noisy + pairs)
    from awarl.errors import ConfigError

    with pytest.raises(ConfigError, match="seeds must be at least 1"):  # no rollout: the shape rule would pass unrun
        audit_world(world, seeds=0, folder=tmp_path)


def test_base_spread_reads_p_i_against_the_world_ceilings(tmp_path):
    from awarl.data.records import write_jsonl
    from awarl.errors import DataError
    from awarl.eval.world_audit import base_spread, spearman

    world = generate_world(WorldConfig(version=2, persons=120, split=(0.5, 0.2, 0.3), seed=0))
    files = write_world(world, tmp_path / "world")
    questions = json.loads(files["world"].read_text(encoding="utf-8"))["questions"]
    held = [q for q in questions if q["split"] == "eval"]
    answerable = [q for q in held if q["u"] is not None]

    def estimate(p_of) -> Path:
        path = tmp_path / "p.jsonl"
        write_jsonl(path, [{"id": q["record_id"], "answerable": q["u"] is not None, "p": p_of(q)} for q in held])
        return path

    # A reader at its ceilings: p_i = u_q, ranked exactly as u (Spearman 1), the shares those of u.
    audit = base_spread(estimate(lambda q: q["u"] or 0.0), files["world"])
    got = {c.name: round(c.value, 3) for c in audit.checks}
    u = [q["u"] for q in answerable]
    assert audit.answerable == len(answerable) == 50
    assert got["Spearman(p_i, u)"] == 1.0
    assert got["share p <= 0.2"] == round(sum(x <= 0.2 for x in u) / 50, 3) == 0.32
    assert got["mean p_i"] == round(sum(u) / 50, 3)
    # Sampling noise only (p_i unrelated to u) or a base that answers nothing fails.
    flat = base_spread(estimate(lambda q: 0.03), files["world"])
    assert not flat.ok and flat.check("Spearman(p_i, u)").value == 0.0 and flat.check("share p >= 0.6").value == 0.0
    assert spearman([1, 2, 3, 4], [4, 3, 2, 1]) == -1.0 and spearman([1, 1, 2], [0, 0, 5]) == 1.0
    # An estimate of another world is refused by name.
    write_jsonl(tmp_path / "other.jsonl", [{"id": "elsewhere-1", "p": 0.5}])
    with pytest.raises(DataError, match="other.jsonl: 1 questions are not in"):
        base_spread(tmp_path / "other.jsonl", files["world"])



def test_by_kind_groups_an_evaluation_by_the_worlds_kinds_of_question(tmp_path):
    from awarl.errors import DataError
    from awarl.data.world_facts import KINDS
    from awarl.eval.world_audit import by_kind, kind_label

    world = generate_world(WorldConfig(version=2, persons=120, split=(0.5, 0.2, 0.3), seed=0))
    files = write_world(world, tmp_path / "world")
    held = [q for q in json.loads(files["world"].read_text(encoding="utf-8"))["questions"] if q["split"] == "eval"]
    assert kind_label({"kind": "answerable", "cues": {"namesakes": 4, "leading": 1, "silent_noise": 0.3}}) == "4/1@0.3"
    assert kind_label({"kind": "answerable", "cues": {"namesakes": 1, "leading": 1, "silent_noise": 0.0}}) == "1/1@0"
    # A run that answers right exactly where one person is named and abstains everywhere else, and one that
    # answers everything wrongly: each kind's numbers are what the rows say.
    careful = [{"record_id": q["record_id"], "p": 0.5,
                "outcome": "correct" if q["u"] is not None and q["cues"]["namesakes"] == 1 else "abstain"} for q in held]
    reckless = [{"record_id": q["record_id"], "p": 0.5, "outcome": "wrong"} for q in held]
    kinds = by_kind(files["world"], {"careful": careful, "reckless": reckless})
    assert sum(k["n"] for k in kinds) == len(held)
    labels = [k["kind"] for k in kinds]
    answerable = [k for k in kinds if k["answerable"]]
    assert labels[len(answerable):] == [k for k in KINDS[1:] if k in labels]  # answerable kinds first
    assert [k["u"] for k in answerable] == sorted((k["u"] for k in answerable), reverse=True)
    for k in kinds:
        single = k["kind"].startswith("1/")
        assert k["runs"]["careful"] == {"n": k["n"], "accuracy": 1.0 if single else 0.0, "refusal": 0.0 if single else 1.0}
        assert k["runs"]["reckless"] == {"n": k["n"], "accuracy": 0.0, "refusal": 0.0} and k["p"] == 0.5
        assert (k["u"] is None) == (not k["answerable"])
    one = next(k for k in kinds if k["kind"] == "1/1@0")
    ones = [q["u"] for q in held if q["u"] is not None and kind_label(q) == "1/1@0"]
    assert one["n"] == len(ones) and one["u"] == pytest.approx(sum(ones) / len(ones))
    # Rows of another world are refused by name.
    with pytest.raises(DataError, match="run 'x' has a question that is not in this world"):
        by_kind(files["world"], {"x": [{"record_id": "elsewhere-1", "outcome": "wrong"}]})

def test_audit_of_world_v1_finds_what_the_issue_measured(tmp_path):
    from awarl.eval.world_audit import audit_world

    audit = audit_world(generate_world(WorldConfig(persons=120, seed=0)), seeds=1, folder=tmp_path)
    assert audit.check("lookup").value == 1.0 and audit.check("shape rule").value == 1.0  # memorisable, visible
    assert audit.check("mean(u)").value == 1.0 and not audit.ok


def test_world_audit_script_exits_1_on_a_miss_and_2_on_a_bad_knob(capsys):
    import importlib.util

    path = Path(__file__).resolve().parents[2] / "scripts" / "world_audit.py"
    spec = importlib.util.spec_from_file_location("world_audit_script", path)
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    assert script.main(["--set", "version=1", "--set", "persons=60", "--seeds", "1"]) == 1
    assert "| shape rule | 1.000 | <= 0.75 | **no** |" in capsys.readouterr().out
    assert script.main(["--set", "persns=60"]) == 2 and "persns" in capsys.readouterr().err


def test_v2_clarified_conversations_read_the_users_reply(world2, written2, index2):
    """``clarified_share``: answerable SFT questions whose person has namesakes also get the conversation the
    chatbot has with the agent once the user has said which one is meant: the question with the user's reply
    (the city), one search for that city's country, the answer citing it. Nothing else changes."""
    from awarl.data.world_facts import VERBS
    from awarl.data.world_v2 import namesake_cities
    from awarl.protocol import parse_final
    from awarl.train.tiny import world_trajectories

    plain = world_trajectories(world2, _env(index2, written2), ("sft",))  # a factory each: visible failures are
    rows = world_trajectories(world2, _env(index2, written2), ("sft",), clarified_share=1.0)  # drawn per call
    told = [r for r in rows if "Clarifications from the user:" in r["messages"][1]["content"]]
    assert [r for r in rows if r not in told] == plain  # the other conversations are those without it
    by_id = {record_id(q): q for q in world2.split("sft")}
    expected = [q for q in world2.split("sft") if q.answerable and len(namesake_cities(world2, q)) > 1]
    assert len(told) == len(expected) > 10
    persons = {p.key or p.name: p for p in world2.persons}
    answered = 0
    for row in told:
        q = by_id[row["record_id"]]
        city = getattr(persons[q.who], q.relation)
        user = row["messages"][1]["content"]
        assert user.startswith(q.question + "\n") and user.endswith(f"? A: {city}")
        assert f"the one who {VERBS[q.relation]} " in user and all(c in user for c in namesake_cities(world2, q))
        calls = [m["tool_calls"][0]["function"]["arguments"]["query"] for m in row["messages"] if m.get("tool_calls")]
        assert calls and set(calls) == {f"country {city}"} and len(calls) <= world2.config.max_searches
        final = parse_final(row["messages"][-1]["content"])
        if not final.abstained:  # a visible failure on every try abstains; silent noise may state another country
            assert final.citations == [world2.fact_passage[(city, "in")]]
            answered += final.answer == q.answer
    assert answered >= 0.6 * len(told)
    half = world_trajectories(world2, _env(index2, written2), ("sft",), clarified_share=0.5)
    assert 0.25 * len(told) <= len(half) - len(plain) <= 0.75 * len(told)
    with pytest.raises(ValueError, match="clarified_share"):
        world_trajectories(world2, _env(index2, written2), ("sft",), clarified_share=1.5)


def test_misread_conversations_name_another_country_and_keep_everything_else(world2, written2, index2):
    """``misread_share`` (a noisy teacher): that share of the conversations answering an answerable question
    answer another of the world's countries, with the same searches and citations; abstentions, unanswerable
    questions and the other conversations are untouched. The share is drawn per question, seeded, so two calls
    give the same data."""
    from awarl.protocol import parse_final
    from awarl.train.tiny import misread, world_trajectories

    plain = world_trajectories(world2, _env(index2, written2), ("sft",), abstain_share=0.3)
    noisy = world_trajectories(world2, _env(index2, written2), ("sft",), abstain_share=0.3, misread_share=0.65)
    assert noisy == world_trajectories(world2, _env(index2, written2), ("sft",), abstain_share=0.3, misread_share=0.65)
    assert len(plain) == len(noisy)
    by_id = {record_id(q): q for q in world2.split("sft")}
    countries = {place for place, level in world2.levels.items() if level == "country"}
    answered = changed = 0
    for before, after in zip(plain, noisy):
        assert before["record_id"] == after["record_id"] and before["messages"][:-1] == after["messages"][:-1]
        old, new = parse_final(before["messages"][-1]["content"]), parse_final(after["messages"][-1]["content"])
        if not by_id[before["record_id"]].answerable or old.abstained:
            assert old == new
            continue
        answered += 1
        assert new.citations == old.citations and new.answer in countries
        changed += new.answer != old.answer
    assert answered > 80 and 0.5 <= changed / answered <= 0.8  # 0.65, drawn per question
    assert world_trajectories(world2, _env(index2, written2), ("sft",), abstain_share=0.3, misread_share=0.0) == plain
    abstains = [r["messages"] for r in plain if parse_final(r["messages"][-1]["content"]).abstained]
    assert abstains and misread(world2, abstains[0], random.Random(0)) == abstains[0]
    with pytest.raises(ValueError, match="misread_share"):
        world_trajectories(world2, _env(index2, written2), ("sft",), misread_share=1.5)


def test_renamed_copies_do_not_depend_on_the_process_string_hashing():
    """The renaming pairs names in a fixed order: two processes with different hash seeds (so
    different set orders) write the same copy, as the same seed must give the same SFT data."""
    import os
    import subprocess
    import sys

    script = ("import json, random\n"
              "from awarl.data.world import WorldConfig, generate_world, renamed_conversation\n"
              "w = generate_world(WorldConfig(version=2, persons=60, cities=8, countries=4, seed=0))\n"
              "names = sorted({p.name for p in w.persons})[:16]\n"
              "cities = sorted(c for c, level in w.levels.items() if level == 'city')[:6]\n"
              "msgs = [{'role': 'user', 'content': ' and '.join(names + cities)}]\n"
              "print(json.dumps(renamed_conversation(w, msgs, random.Random(3), ids=True)))\n")
    outs = {subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True,
                           env={**os.environ, "PYTHONHASHSEED": str(seed)}).stdout for seed in (1, 2, 3)}
    assert len(outs) == 1


# -- tie order ---------------------------------------------------------------------------------------------------
def test_tie_order_is_drawn_per_rollout_and_fixed_within_it():
    from awarl.data.world_noise import NoiseTable, QuestionNoise, RolloutNoise
    from awarl.search.retriever import Hit, Passage

    hits = [Hit(Passage(f"d{i}", "t", f"text {i}"), score) for i, score in enumerate((5.0, 5.0, 5.0, 4.0))]
    spec = {"q1": QuestionNoise(0.0, {}, ())}
    index_order = RolloutNoise(NoiseTable(0.0, spec), "q1", 0)
    assert [h.passage.id for h in index_order.apply(hits)] == ["d0", "d1", "d2", "d3"]
    table = NoiseTable(0.0, spec, "rollout")
    orders = set()
    for seed in range(40):
        noise = RolloutNoise(table, "q1", seed)
        first = [h.passage.id for h in noise.apply(hits)]
        assert [h.passage.id for h in noise.apply(hits)] == first  # every call of the rollout alike
        assert first[3] == "d3" and sorted(first[:3]) == ["d0", "d1", "d2"]  # only the tie moves
        orders.add(tuple(first))
    assert len(orders) == 6  # every order of three tied passages, over 40 rollouts
    # A record the table does not list keeps the index's order (the chatbot serves so).
    assert [h.passage.id for h in RolloutNoise(table, "other", 3).apply(hits)] == ["d0", "d1", "d2", "d3"]


def test_tie_order_knob_round_trips_and_is_refused_where_it_cannot_apply(tmp_path):
    from awarl.data.world_noise import NoiseFileError, NoiseTable

    assert "tie_order" not in WorldConfig(version=2).to_dict()  # worlds written before the knob still match
    cfg = WorldConfig(version=2, persons=120, split=(0.5, 0.2, 0.3), seed=0, tie_order="rollout")
    assert WorldConfig.from_dict(cfg.to_dict()) == cfg
    files = write_world(generate_world(cfg), tmp_path / "w")
    assert NoiseTable.load(files["noise"]).tie_order == "rollout"
    plain = write_world(generate_world(WorldConfig(version=2, persons=120, split=(0.5, 0.2, 0.3), seed=0)), tmp_path / "p")
    assert "tie_order" not in json.loads(plain["noise"].read_text(encoding="utf-8"))
    # The knob changes the tool, not the world: the same passages and questions.
    assert files["corpus"].read_bytes() == plain["corpus"].read_bytes()
    with pytest.raises(WorldError, match="tie_order"):
        WorldConfig(version=2, tie_order="shuffled")
    with pytest.raises(WorldError, match="needs version 2"):
        WorldConfig(version=1, tie_order="rollout")
    bad = json.loads(files["noise"].read_text(encoding="utf-8")) | {"tie_order": "random"}
    (tmp_path / "bad.json").write_text(json.dumps(bad), encoding="utf-8")
    with pytest.raises(NoiseFileError, match="bad.json: tie_order"):
        NoiseTable.load(tmp_path / "bad.json")


def test_audit_rank1_reader_under_rollout_tie_order(tmp_path):
    """With the index's order a reader that follows the first namesake shown has p_i 0 or 1 - f; with the
    order drawn per rollout its p_i is u_q, so its middle share is the random reader's."""
    from awarl.eval.world_audit import audit_world

    base = dict(version=2, persons=120, split=(0.5, 0.2, 0.3), seed=0)
    index_order = audit_world(generate_world(WorldConfig(**base)), seeds=1, folder=tmp_path / "i")
    rollout = audit_world(generate_world(WorldConfig(**base, tie_order="rollout")), seeds=1, folder=tmp_path / "r")
    assert index_order.check("middle share, rank-1 reader").value == 0.0
    assert rollout.check("middle share, rank-1 reader").value == rollout.check("middle share, random reader").value > 0.3
    assert rollout.check("middle share, consistent reader").value == 0.0  # following one person is still 0 or 1
    assert rollout.check("mean(u)").value == index_order.check("mean(u)").value and rollout.ok


def test_audit_is_the_same_under_rollout_city_names(tmp_path):
    """The knob changes the names a result shows, never a fact a reader can use: every row of the audit (lookup
    tables, the shape rule, the careful reader, the ceilings, the namesake readers) is the same."""
    from awarl.eval.world_audit import audit_world

    base = dict(version=2, persons=120, split=(0.5, 0.2, 0.3), seed=0)
    plain = audit_world(generate_world(WorldConfig(**base)), seeds=1, folder=tmp_path / "w")
    named = audit_world(generate_world(WorldConfig(**base, city_names="rollout")), seeds=1, folder=tmp_path / "r")
    assert [(c.name, c.value) for c in named.checks] == [(c.name, c.value) for c in plain.checks] and named.ok


# -- city names drawn per rollout --------------------------------------------------------------------------------
def test_city_names_are_drawn_per_rollout_and_a_query_searches_the_city_it_names():
    from awarl.data.world_noise import NoiseTable, QuestionNoise, RolloutNoise
    from awarl.search.retriever import Hit, Passage

    cities = ("Tavok", "Pusop", "Defim", "Farek", "Fareks", "Norim", "Norims")
    swap = {"d2": "Tavok is a city in the country Ruvia."}
    table = NoiseTable(0.0, {"q1": QuestionNoise(1.0, swap, ())}, "index", cities)
    assert table.name_classes == (("Defim", "Pusop", "Tavok"), ("Farek", "Norim"))
    hits = [Hit(Passage("d1", "Ann Lee", "Ann Lee lives in Pusop."), 2.0),
            Hit(Passage("d2", "Pusop", "Pusop is a city in the country Morland."), 1.0),
            Hit(Passage("d3", "Farek", "Farek is near Fareks and Pusopia."), 0.5)]
    seen = set()
    for seed in range(40):
        noise = RolloutNoise(table, "q1", seed)
        shown = noise.apply(hits)
        assert [h.passage.id for h in shown] == ["d1", "d2", "d3"] and noise.apply(hits) == shown  # fixed in the rollout
        city = shown[0].passage.text.split()[-1].rstrip(".")
        assert city == noise.names["Pusop"] and noise.world_query(f"country {city}") == "country Pusop"
        # every spelling the index reads as the name (case, a trailing "s") stands for the same city
        assert noise.world_query(f"COUNTRY {city.upper()}") == "COUNTRY Pusop"
        assert noise.world_query(f"{city.lower()}s country") == "Pusops country"
        assert noise.world_query(f"near {noise.names['Farek']}s") == "near Fareks"  # a variant, by its own name
        assert shown[1].passage.text == f"{noise.names['Tavok']} is a city in the country Ruvia."  # the silent swap, renamed
        base = shown[2].passage.title
        assert base in ("Farek", "Norim") and shown[2].passage.text == f"{base} is near {base}s and Pusopia."
        assert shown[0].passage.title == "Ann Lee"  # persons, countries and words that merely contain a name keep theirs
        seen.add(city)
    assert seen == {"Tavok", "Pusop", "Defim"}
    # A record the table does not list (a chatbot question) sees the world's names; so does a table without cities.
    assert RolloutNoise(table, "other", 0).apply(hits) == hits
    plain = RolloutNoise(NoiseTable(0.0, {"q1": QuestionNoise(0.0, {}, ())}), "q1", 0)
    assert plain.apply(hits) == hits and plain.world_query("country Pusop") == "country Pusop"


def test_city_names_knob_round_trips_and_is_refused_where_it_cannot_apply(tmp_path):
    from awarl.data.world_noise import NoiseFileError, NoiseTable

    assert "city_names" not in WorldConfig(version=2).to_dict()  # worlds written before the knob still match
    cfg = WorldConfig(version=2, persons=120, split=(0.5, 0.2, 0.3), seed=0, city_names="rollout")
    assert WorldConfig.from_dict(cfg.to_dict()) == cfg
    world = generate_world(cfg)
    files = write_world(world, tmp_path / "w")
    table = NoiseTable.load(files["noise"])
    assert set(table.cities) == {c for c, level in world.levels.items() if level == "city"}
    plain = write_world(generate_world(WorldConfig(version=2, persons=120, split=(0.5, 0.2, 0.3), seed=0)), tmp_path / "p")
    assert "cities" not in json.loads(plain["noise"].read_text(encoding="utf-8"))
    assert files["corpus"].read_bytes() == plain["corpus"].read_bytes()  # the tool changes, not the world
    with pytest.raises(WorldError, match="city_names"):
        WorldConfig(version=2, city_names="shuffled")
    with pytest.raises(WorldError, match="needs version 2"):
        WorldConfig(version=1, city_names="rollout")
    bad = json.loads(files["noise"].read_text(encoding="utf-8")) | {"cities": ["Two words"]}
    (tmp_path / "bad.json").write_text(json.dumps(bad), encoding="utf-8")
    with pytest.raises(NoiseFileError, match="bad.json: cities"):
        NoiseTable.load(tmp_path / "bad.json")


def test_gold_conversations_read_the_same_facts_under_rollout_city_names(tmp_path):
    """Through the real tool and BM25: the best reader answers and cites exactly as with the world's names,
    while the results it read name the cities otherwise; the clarified conversation's user names the city as
    the rollout shows it, and its answer is the same too."""
    from awarl.agent.env import search_env_factory
    from awarl.agent.settings import RolloutSettings
    from awarl.search.bm25 import BM25Index
    from awarl.train.tiny import world_trajectories

    base = dict(version=2, persons=120, split=(0.5, 0.2, 0.3), seed=1)
    runs = {}
    for names in ("world", "rollout"):
        world = generate_world(WorldConfig(**base, city_names=names))
        files = write_world(world, tmp_path / names)
        settings = RolloutSettings(topk=3, max_searches=3, world_noise=str(files["noise"]))
        env = search_env_factory(BM25Index.build(world.passages), settings)
        runs[names] = world_trajectories(world, env, ("sft",), clarified_share=1.0)
    assert len(runs["world"]) == len(runs["rollout"]) > 60
    assert [r["messages"][-1]["content"] for r in runs["world"]] == [r["messages"][-1]["content"] for r in runs["rollout"]]
    tools = [(a["content"], b["content"]) for x, y in zip(runs["world"], runs["rollout"])
             for a, b in zip(x["messages"], y["messages"]) if a["role"] == "tool"]
    assert sum(a != b for a, b in tools) > 0.8 * len(tools)
    clarified = [(x["messages"][1]["content"], y["messages"][1]["content"]) for x, y in zip(runs["world"], runs["rollout"])
                 if x["messages"][1]["content"] != x["messages"][1]["content"].split("?")[0] + "?"]
    assert clarified and any(a != b for a, b in clarified)
