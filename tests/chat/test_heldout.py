"""The held-out table through the real chat app and REST API (`awarl.chat.heldout`, scripts/chat_heldout.py):
a scripted agent on a world v2 (namesakes asked about and answered by the scripted user), the table's
safety bounds, and the script on the tests' tiny world agent, its hard bounds asserted as floors."""

from __future__ import annotations

import json

import pytest

from awarl.chat.config import ChatSettings
from awarl.chat.generate import ScriptedGenerator
from awarl.chat.heldout import GROUPS, HeldoutTable, Outcome, load_world, run_heldout, user_reply
from awarl.data.world import VERBS, WorldConfig, generate_world, write_world
from awarl.errors import DataError
from awarl.protocol import ABSTAIN_PHRASE
from awarl.train.tiny import clarified_question


@pytest.fixture(scope="module")
def world_v2(tmp_path_factory):
    world = generate_world(WorldConfig(version=2, persons=60, cities=8, countries=4, seed=0))
    return world, write_world(world, tmp_path_factory.mktemp("world-v2"))


def _asked_in(world):
    """The world question a prompt asks (the first one in those words: namesakes share a question)."""
    first = {}
    for q in world.questions:
        first.setdefault(q.question, q)
    return lambda prompt: first[max((t for t in first if t in prompt), key=len)]


def _by_prompt(world):
    """A scripted agent that knows the corpus: the gold country with its supporting passages for an
    answerable question (the first one asked in those words: namesakes share a question), else it abstains."""
    asked = _asked_in(world)

    def answer(prompt: str, n: int) -> str:
        q = asked(prompt)
        if not q.answerable:
            return f"<answer>{ABSTAIN_PHRASE}</answer>"
        return f"<answer>{q.answer}</answer> " + " ".join(f"[{i}]" for i in world.supporting(q))

    return answer


def test_a_scripted_agent_through_the_api_namesakes_asked_and_answered(world_v2, tmp_path):
    world, files = world_v2
    settings = ChatSettings(policy=str(files["policy"]), policy_name="world", corpus=str(files["corpus"]),
                            generator="scripted", db=str(tmp_path / "chat.sqlite"), audit=str(tmp_path / "audit.jsonl"),
                            backoff_s=0.01, workers=4)
    questions = world.split("eval")
    outcomes = run_heldout(settings, world, questions, poll_s=0.02,
                           generators={"scripted": ScriptedGenerator(_by_prompt(world))})
    table = HeldoutTable(outcomes)
    rows = {r.group: r for r in table.rows}
    assert list(rows) == list(GROUPS) and sum(r.questions for r in rows.values()) == len(questions) == 20
    assert [o.record_id for o in outcomes] == [q.id if q.answerable else f"{q.id}#unanswerable" for q in questions]
    single, namesakes = rows[GROUPS[0]], rows[GROUPS[1]]
    # one passage per hop, each binding its person and city: every right first answer is served VALID from citations
    assert single.right_first == single.right_first_valid == single.right_valid == single.valid_citations == single.questions
    assert single.asked == 0
    # the loop asks which namesake is meant, the scripted user names its own person's city, and the right answer is VALID
    assert namesakes.asked == namesakes.answered == namesakes.questions
    assert namesakes.right_first_valid == namesakes.right_first > 0
    assert all(o.badge == "VALID_GIVEN_YOUR_STATEMENT" for o in outcomes if o.group == GROUPS[1] and o.first_right)
    # a namesake whose words match an earlier question got that person's answer: never served VALID
    assert namesakes.right_first < namesakes.questions
    assert all(not o.valid for o in outcomes if o.group == GROUPS[1] and not o.first_right)
    assert namesakes.wrong_unvalidated == namesakes.questions - namesakes.right_first
    for r in rows.values():
        assert r.wrong_valid == r.right_to_wrong == r.errors == 0
    assert rows[GROUPS[2]].safe_unanswerable == rows[GROUPS[2]].questions == rows[GROUPS[2]].right_first
    assert rows[GROUPS[3]].safe_unanswerable == rows[GROUPS[3]].questions == rows[GROUPS[3]].abstained
    assert table.misses() == []
    md = table.markdown()
    assert md.splitlines()[0] == "| | " + " | ".join(GROUPS) + " |"
    assert "| **wrong answers served VALID** (bound 0) | 0 | 0 | 0 | 0 |" in md


def test_an_agent_citing_only_the_city_is_asked_which_namesake_is_meant(world_v2, tmp_path):
    """The trained agent's habit: it cites the "<city> is a city in <country>" passage and not the
    person's. With nothing cited that names the person, the loop looks the question's name up in the
    corpus; a namesake's answer is then asked about, and served VALID only when the user's person
    makes it right."""
    world, files = world_v2
    asked = _asked_in(world)

    def city_only(prompt: str, n: int) -> str:
        q = asked(prompt)
        if not q.answerable:
            return f"<answer>{ABSTAIN_PHRASE}</answer>"
        return f"<answer>{q.answer}</answer> [{world.supporting(q)[-1]}]"

    settings = ChatSettings(policy=str(files["policy"]), policy_name="world", corpus=str(files["corpus"]),
                            generator="scripted", db=str(tmp_path / "chat.sqlite"), audit=str(tmp_path / "audit.jsonl"),
                            backoff_s=0.01, workers=4, max_iterations=1)
    questions = [q for q in world.split("eval") if q.answerable and int(q.cues.get("namesakes", 1)) > 1]
    assert questions
    outcomes = run_heldout(settings, world, questions, poll_s=0.02, generators={"scripted": ScriptedGenerator(city_only)})
    [row] = [r for r in HeldoutTable(outcomes).rows if r.questions]
    assert row.asked == row.answered == row.questions  # every one asked which person, every one answered
    assert row.right_first_valid == row.right_first > 0
    assert all(not o.valid for o in outcomes if not o.first_right)
    assert row.wrong_valid == row.right_to_wrong == row.errors == 0


def test_an_agent_that_abstains_on_a_namesake_is_asked_again_once_the_user_says_which(world_v2, tmp_path):
    """The trained agent abstains on many namesake questions (it cannot tell the persons apart). The loop
    then asks which person is meant, asking only about the fact the question turns on ("born in" for a
    birth question), and asks the agent again with the user's answer; the right answer is then VALID
    given the user's statement, and an agent that abstains again is served its abstention."""
    world, files = world_v2
    prompts: list[str] = []

    persons = {p.key or p.name: p for p in world.persons}
    verbs = VERBS

    def abstains_until_told(prompt: str, n: int) -> str:
        prompts.append(prompt)
        question, _, told = prompt.partition("\n")
        # the namesake the user's answer names (they share the question's words)
        q = next((q for q in world.questions if q.question == question.strip() and q.answerable
                  and told.rstrip().endswith(f"A: {getattr(persons[q.who], q.relation)}")), None)
        return f"<answer>{q.answer}</answer>" if q is not None else f"<answer>{ABSTAIN_PHRASE}</answer>"

    settings = ChatSettings(policy=str(files["policy"]), policy_name="world", corpus=str(files["corpus"]),
                            generator="scripted", db=str(tmp_path / "chat.sqlite"), audit=str(tmp_path / "audit.jsonl"),
                            backoff_s=0.01, workers=4)
    names = [p.name for p in world.persons]
    questions = [q for q in world.split("eval") if names.count(q.person) > 1 or not q.answerable]
    assert any(q.answerable for q in questions) and any(not q.answerable for q in questions)
    outcomes = run_heldout(settings, world, questions, poll_s=0.02,
                           generators={"scripted": ScriptedGenerator(abstains_until_told)})
    rows = {r.group: r for r in HeldoutTable(outcomes).rows}
    namesakes = rows[GROUPS[1]]
    assert namesakes.right_first == 0 and namesakes.asked == namesakes.answered == namesakes.questions
    # the user's answer names the city of the question's own relation, so whichever namesake the corpus
    # ranks first, the answer the agent then gives is proved from it
    assert all(o.badge == "VALID_GIVEN_YOUR_STATEMENT" and o.served_right for o in outcomes if o.group == GROUPS[1])
    for group in GROUPS[2:]:  # an unanswerable question stays safe whatever the user says
        assert rows[group].safe_unanswerable == rows[group].questions
    for q in questions:
        if not q.answerable:
            continue
        told = [p for p in prompts if q.question in p and "\n" in p]
        assert told and all(verbs[q.relation] in p for p in told), told
        assert not any("rejected" in p for p in told), told  # an abstention is no rejected answer
        other = verbs["lives" if q.relation == "born" else "born"]
        assert not any(other in p for p in told), told  # the other fact settles nothing: not asked
        # the demo's warm start trains the agent on exactly this message (warm_start.clarified_share)
        assert clarified_question(world, q) in told
    assert HeldoutTable(outcomes).misses() == []


def test_the_scripted_user_names_only_its_own_persons_option(world_v2):
    world, _ = world_v2
    names = [p.name for p in world.persons]
    q = next(q for q in world.questions if q.answerable and names.count(q.person) > 1)
    me = next(p for p in world.persons if (p.key or p.name) == q.who)
    other = next(p for p in world.persons if p.name == q.person and p.key != q.who)
    verb = "was born in" if q.relation == "born" else "lives in"
    mine, theirs = getattr(me, q.relation), getattr(other, q.relation)
    ask = f"Which {q.person} do you mean — the one who {verb} {theirs}, or in {mine}?"
    thread = {"pending_questions": [ask, "Is it raining — yes or no?"],
              "question_options": {ask: {theirs: f"{q.person} {verb} {theirs}.", mine: f"{q.person} {verb} {mine}."}}}
    assert user_reply(q, thread, {p.key or p.name: p for p in world.persons}) == [mine, None]


def test_the_table_flags_each_hard_bound():
    ok = Outcome("a", GROUPS[0], "q", "Ruvia", True, badge="VALID", first="Ruvia", first_right=True, served="Ruvia",
                 served_right=True, valid_from="citations")
    wrong_valid = Outcome("b", GROUPS[0], "q", "Ruvia", True, badge="VALID", first="Undel", served="Undel")
    replaced = Outcome("c", GROUPS[0], "q", "Ruvia", True, badge="NOT_VALIDATED", first="Ruvia", first_right=True,
                       served="Undel")
    unanswerable_valid = Outcome("d#unanswerable", GROUPS[2], "q", "Ruvia", False, badge="VALID", served="Ruvia")
    assert HeldoutTable([ok]).misses() == []
    misses = HeldoutTable([ok, wrong_valid, replaced, unanswerable_valid]).misses()
    assert misses == [f"{GROUPS[0]}: 1 wrong answer(s) served VALID (bound: 0)",
                      f"{GROUPS[0]}: 1 right first answer(s) replaced by a wrong one (bound: 0)",
                      f"{GROUPS[2]}: 1 wrong answer(s) served VALID (bound: 0)",
                      f"{GROUPS[2]}: 1 unanswerable question(s) served VALID (bound: every one abstained or non-VALID)"]
    assert "1 / 2 (50%) (target ≥ 90%: missed)" in HeldoutTable([ok, replaced]).markdown()


def test_a_world_json_its_generator_no_longer_makes_is_refused(world_v2, tmp_path):
    _, files = world_v2
    raw = json.loads(files["world"].read_text(encoding="utf-8"))
    raw["questions"][3]["kind"] = "missing"
    (tmp_path / "world.json").write_text(json.dumps(raw), encoding="utf-8")
    with pytest.raises(DataError, match=r"world.json, question 3, field 'questions': the world generated"):
        load_world(tmp_path / "world.json")


@pytest.mark.slow
def test_the_default_product_on_the_quick_demo_holds_the_bounds_and_floors(quick_demo_dir, tmp_path, capsys,
                                                                          load_script):
    """The script end to end on what a user serves first: `awarl chat serve --demo` after `awarl demo --quick`
    (the session's quick demo: its AWA agent, world v2, the world policy, the demo's default settings), every
    held-out question through the API. The hard safety bounds hold whatever the agent answers; the floors are
    the default product's (docs/chat.md records the table, with margins below what it measured)."""
    script = load_script("chat_heldout")
    # the threads stay in tmp_path/db, so that a missed bound leaves every iteration of its thread to read
    assert script.main(["--demo", str(quick_demo_dir), "--quiet", "--json", str(tmp_path / "t.json"),
                        "--db-dir", str(tmp_path / "db")]) == 0, (tmp_path / "t.json").read_text(encoding="utf-8")[:2000]
    out = capsys.readouterr().out
    assert "search noise: off when serving" in out and "every hard safety bound holds" in out
    table = json.loads((tmp_path / "t.json").read_text(encoding="utf-8"))
    rows = {r["group"]: r for r in table["rows"]}
    assert table["misses"] == [] and set(rows) == {"answerable, no namesake", "answerable, namesakes",
                                                   "unanswerable, missing", "unanswerable, near-miss"}
    assert sum(r["questions"] for r in rows.values()) == 180  # the quick world's held-out split
    for r in rows.values():
        assert r["wrong_valid"] == 0 and r["right_to_wrong"] == 0 and r["errors"] == 0
        if not r["group"].startswith("answerable"):
            assert r["safe_unanswerable"] == r["questions"]
    plain, namesakes = rows["answerable, no namesake"], rows["answerable, namesakes"]
    assert plain["right_first"] >= 0.5 * plain["questions"]  # the trained agent reads (0.89 measured)
    assert plain["right_first_valid"] >= 0.9 * plain["right_first"]  # the bar: >= 90% served VALID
    assert namesakes["asked"] >= 0.5 * namesakes["questions"] and namesakes["answered"] == namesakes["asked"]
    assert namesakes["right_first_valid"] >= 0.8 * namesakes["right_first"]  # settled by the user's answer
    # the agent trained on the user's reply (warm_start.clarified_share) reads it: 81 / 88 measured at seed 0
    assert namesakes["right_valid"] >= 0.6 * namesakes["questions"]
    assert script.main(["--demo", str(tmp_path / "nowhere")]) == 2
    assert "demo.json: not found" in capsys.readouterr().err


def test_the_noise_the_served_settings_name_is_reported(world_v2):
    from awarl.chat.heldout import named_noise

    _, files = world_v2
    settings = ChatSettings(policy=str(files["policy"]), rollout={"world_noise": str(files["noise"])})
    assert named_noise(settings) == str(files["noise"])  # reported; `rollout_of` serves without it


def test_a_demo_without_an_agent_needs_one_and_agent_serves_another(world_v2, tmp_path):
    from awarl.chat.heldout import load_demo
    from awarl.errors import ConfigError

    _, files = world_v2
    demo = tmp_path / "demo"
    demo.mkdir()
    world = files["world"].parent
    (demo / "demo.json").write_text(json.dumps({"version": 1, "world": str(world), "corpus": str(files["corpus"]),
                                                "policy": str(files["policy"]), "agent": None}))
    with pytest.raises(ConfigError, match="names no trained agent.*pass --agent PATH"):
        load_demo(demo, db_dir=tmp_path)
    loaded = load_demo(demo, db_dir=tmp_path, agent=tmp_path / "ckpt")
    assert loaded.settings.generator == f"hf:{tmp_path / 'ckpt'}" and loaded.settings.db == str(tmp_path / "chat.sqlite")
    assert loaded.settings.mode_note.startswith(f"Serving hf:{tmp_path / 'ckpt'} over ") and loaded.world.config.version == 2
    (demo / "demo.json").write_text("{not json")
    with pytest.raises(DataError, match="demo.json: not valid JSON"):
        load_demo(demo, db_dir=tmp_path)


@pytest.mark.slow
def test_the_checker_audit_finds_no_wrong_answer_it_proves_on_the_quick_demo(quick_demo_dir, capsys, load_script):
    """scripts/audit_checker.py on the quick demo's world: every wrong country, hedge and denial against the
    first namesake and single-person questions, none proved VALID (it found the hedges and denials the
    pattern translator proved before it read every value and skipped negated matches)."""
    script = load_script("audit_checker")
    for group in ("namesakes", "single"):
        assert script.main(["--demo", str(quick_demo_dir), "--group", group, "--limit", "2"]) == 0
        assert f"2 questions ({group})" in capsys.readouterr().out
