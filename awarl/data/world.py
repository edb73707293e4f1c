"""A seeded synthetic world: fictional people and places, their facts as passages, and 2-hop questions.

It exists so that a laptop can watch AWA-RL work end to end (`awarl demo`): the questions are
easy enough for a 2-layer model to learn to search for in a few minutes, hard enough that its
capability p_i spreads between 0 and 1, and a controlled share of them cannot be answered from
the corpus at all, so abstaining is the right move there.

The world::

    person --born in / lives in--> city --in--> country [--in--> region, when hops = 3]

- Passages: ``"<P> was born in <C>."``, ``"<P> lives in <C>."``, ``"<C> is a city in the country
  <K>."`` (``"<K> is a country in the region <R>."`` at 3 hops), plus distractor passages about
  each person (job, hobby) and each place (a landmark).
- Questions: ``"In which country was <P> born?"`` / ``"Which country does <P> live in?"`` (region
  at 3 hops). The first hop (find the person's city) must pick the right relation out of the
  person's passages; the second looks the city up.
- Unanswerable questions: the ``city -> country`` passage of some cities is left out of the corpus,
  chosen so that a controlled share of all questions goes through such a city. Their answer is
  still recorded (the world knows it), but ``answerable`` is false: no passage says it.
- Splits are disjoint by person: SFT, RL (capability p_i + GRPO) and held-out evaluation.

That is world v1 (``version: 1``, the regression control): cities, their countries and which of
them lack a link are shared by every split, so a lookup table from the SFT questions answers the
held-out split. World v2 (``version: 2``, `awarl.data.world_v2`) is the fair test: bridge cities
disjoint per split, near-miss unanswerables beside missing ones, and graded ceilings u_q
(namesakes, silent retrieval noise, visible failures a retry overcomes). Its search tool noise is
written to ``noise.json`` and applied by `awarl.agent.env.SearchEnv` when the rollout settings name
it (`awarl.data.world_noise`). The types and knobs both versions share live in
`awarl.data.world_facts`; this module is the world's API and re-exports them.

`write_world` writes MuSiQue's official JSONL (``answerable``, ``paragraphs`` with
``is_supporting``, ``question_decomposition``), so ``awarl data prepare --dataset musique`` reads
each split unchanged, plus ``corpus.jsonl`` (every passage, awarl's Passage rows with the ids the
adapter gives), ``world.json`` (the facts) and a verifier policy over the world's own facts with
its tests (`policy_yaml`, `policy_tests_yaml`). The vocabulary is a few hundred invented words, so
a tokenizer trained on `world_texts` holds every name as one token.

This module imports nothing heavy (no torch, no bm25s).
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from awarl.data.records import Passage, passage_id, write_jsonl
from awarl.data.world_facts import (  # noqa: F401 (re-exported: awarl.data.world is the world's API)
    CITIES,
    COUNTRIES,
    DEFAULT_CEILINGS,
    EXTRA_FIRST_NAMES,
    EXTRA_LAST_NAMES,
    FIRST_NAMES,
    HOBBIES,
    JOBS,
    KINDS,
    LANDMARKS,
    LAST_NAMES,
    PLACE_LEVELS,
    REGIONS,
    RELATIONS,
    SPLITS,
    TEMPLATES,
    VERBS,
    Person,
    Question,
    World,
    WorldConfig,
    WorldError,
    _first_link,
    gold_queries,
    record_id,
)
from awarl.protocol import ABSTAIN_PHRASE, format_final, tool_call_message, tool_result_message

# -- generation ----------------------------------------------------------------------------------------------
def generate_world(config: WorldConfig = WorldConfig()) -> World:
    """Build the world of ``config`` (same config, same world, byte for byte)."""
    if config.version == 2:
        from awarl.data.world_v2 import generate_world_v2

        return generate_world_v2(config)
    rng = random.Random(config.seed)
    cities = list(CITIES[: config.cities])
    countries = list(COUNTRIES[: config.countries])
    regions = list(REGIONS)
    # Each seed links the places differently (as evenly as the counts allow).
    parent = {c: countries[i % len(countries)] for i, c in enumerate(rng.sample(cities, len(cities)))}
    if config.hops == 3:
        parent.update({k: regions[i % len(regions)] for i, k in enumerate(rng.sample(countries, len(countries)))})
    names = [f"{a} {b}" for a in FIRST_NAMES for b in LAST_NAMES]
    rng.shuffle(names)
    persons = []
    for name in names[: config.persons]:
        born, lives = rng.sample(cities, 2)
        extras = (f"{name} works as a {rng.choice(JOBS)}.", f"{name} likes {rng.choice(HOBBIES)}.")
        persons.append(Person(name, born, lives, extras[: config.distractors]))
    absent = _choose_absent(persons, cities, config.unanswerable_share, rng)

    builder: dict[str, Passage] = {}
    fact_passage: dict[tuple[str, str], str] = {}

    def add(title: str, text: str, fact: tuple[str, str] | None = None) -> None:
        p = Passage(passage_id(title, text), title, text)
        builder.setdefault(p.id, p)
        if fact is not None:
            fact_passage[fact] = p.id

    for p in persons:
        add(p.name, f"{p.name} {VERBS['born']} {p.born}.", (p.name, "born"))
        add(p.name, f"{p.name} {VERBS['lives']} {p.lives}.", (p.name, "lives"))
        for text in p.extras:
            add(p.name, text)
    for place, up in parent.items():
        level = "city" if place in cities else "country"
        if place not in absent:
            add(place, f"{place} is a {level} in the {PLACE_LEVELS[PLACE_LEVELS.index(level) + 1]} {up}.", (place, "in"))
        for _ in range(config.distractors):
            add(place, f"{place} has a famous {rng.choice(LANDMARKS)}.")
    passages = list(builder.values())
    rng.shuffle(passages)  # corpus order carries no hint

    n_sft = round(config.split[0] * len(persons))
    n_rl = round(config.split[1] * len(persons))
    questions = []
    for i, p in enumerate(persons):
        split = "sft" if i < n_sft else "rl" if i < n_sft + n_rl else "eval"
        for rel in RELATIONS:
            chain = [getattr(p, rel)]
            while len(chain) < config.hops:
                chain.append(parent[chain[-1]])
            missing = next((c for c in chain[:-1] if c in absent), None)
            text = rng.choice(TEMPLATES[rel]).format(level=PLACE_LEVELS[config.hops - 1], p=p.name)
            questions.append(Question(f"world{config.seed}-{i:04d}-{rel}", text, p.name, rel, tuple(chain), chain[-1],
                                      missing is None, split, missing))
    levels = {**{c: "city" for c in cities}, **{k: "country" for k in countries}, **{r: "region" for r in regions}}
    return World(config, persons, parent, absent, passages, fact_passage, questions, levels)


def _choose_absent(persons: Sequence[Person], cities: list[str], share: float, rng: random.Random) -> set[str]:
    """Cities whose country passage is left out, so that the share of questions through them is
    as close as possible to ``share`` (each person asks about two cities)."""
    load = {c: 0 for c in cities}
    for p in persons:
        load[p.born] += 1
        load[p.lives] += 1
    total = 2 * len(persons)
    order = list(cities)
    rng.shuffle(order)
    absent: set[str] = set()
    covered = 0
    for c in order:
        if abs(covered + load[c] - share * total) < abs(covered - share * total):
            absent.add(c)
            covered += load[c]
    return absent


def gold_conversation(world: World, q: Question, search: Callable[[str], str], system_prompt: str | None = None,
                      *, stop_early: bool = True, first: str = "relation", guess: bool = False) -> list[dict]:
    """The conversation an ideal agent has for ``q`` with the real search tool ``search``: one
    search per hop, then the cited answer, or the abstain phrase when a hop's fact is absent
    (the search that should have found it is still made, so the model learns to look first).

    ``guess=True`` (unanswerable questions only) ends like an agent that never abstains instead: it
    answers the place named by the first link passage the last search returned, about some other
    place, citing it (the classic hallucination from an irrelevant retrieval); when that result
    holds no such passage, it abstains after all.

    In world v2 the ideal agent reads what the tool returns (`awarl.data.world_v2.gold_conversation_v2`):
    it follows one namesake, retries a search that returned no country passage while the budget
    allows, and answers what the country passage it got says, or abstains."""
    from awarl.protocol import build_messages

    if world.config.version == 2:
        from awarl.data.world_v2 import gold_conversation_v2

        return gold_conversation_v2(world, q, search, system_prompt, first=first, guess=guess)

    messages = build_messages(q.question, system_prompt)
    result = ""
    for i, query in enumerate(gold_queries(q, first)):
        messages.append(tool_call_message(query))
        result = search(query)
        messages.append(tool_result_message(result))
        if stop_early and not q.answerable and i > 0 and query.split()[-1] == q.missing:
            break
    if q.answerable:
        final = format_final(q.answer, world.supporting(q))
    else:
        wrong = _first_link(result) if guess else None
        final = (format_final(wrong[1], [world.fact_passage[(q.person, q.relation)], wrong[0]]) if wrong
                 else format_final(ABSTAIN_PHRASE))
    messages.append({"role": "assistant", "content": final})
    return messages


def renamed_conversation(world: World, messages: list[dict], rng: random.Random, *, ids: bool = False) -> list[dict]:
    """``messages`` (a gold conversation of ``world``) with every person and city it names renamed
    consistently to others of the world's, drawn by ``rng``: the same tool calls, results, citations
    and reasoning about facts that are not the world's, so they can only be followed by reading.
    The SFT stage trains on such copies (``warm_start.renamed_copies``, beside the real conversations
    or instead of them: ``warm_start.originals``): a tiny model that sees the real conversations
    learns the SFT persons' cities by heart long before it learns to copy them from the search
    result, and then fails every held-out question (docs/benchmarks.md, World v2 warm start). Countries are kept (they
    are shared by every split, so they teach nothing about a split), and so is a near-miss variant
    city and the city it varies, which must stay one letter apart. ``ids=True`` renames the passage
    ids too (each to another passage's id of the world), in the results and in the cited answer alike,
    so the cited ids can only be copied from the results, not remembered. Renaming many conversations
    of one world: build one `Renamer` and call it (the same result, without sorting the pools each time)."""
    return Renamer(world)(messages, rng, ids=ids)


class Renamer:
    """`renamed_conversation` for the conversations of one world: the world's names, cities and passage
    ids sorted once (the draws sample from those sorted pools, so the result does not depend on string
    hashing), and the names grouped by their first word, so finding the ones a conversation mentions
    tests only the groups whose first word it contains. The world must not change while it is in use."""

    def __init__(self, world: World):
        # the persons' names and the cities of every split (their tokens are all trained)
        self.city_set = world.cities()
        self.names, self.cities = sorted({p.name for p in world.persons}), sorted(self.city_set)
        self.pids = sorted({p.id for p in world.passages})
        self.pid_set = set(self.pids)
        self.by_first: dict[str, list[str]] = {}
        for name in self.names:  # a name's first word with its space is a substring of the name
            self.by_first.setdefault(name[:name.find(" ") + 1] or name, []).append(name)

    def __call__(self, messages: list[dict], rng: random.Random, *, ids: bool = False) -> list[dict]:
        text = "\n".join(str(m.get("content") or "") + " " + " ".join(str(c) for c in m.get("tool_calls") or [])
                         for m in messages)
        words = set(re.findall(r"\w+", text))
        # longest first (so "Ann Lee" is not renamed inside "Ann Leeds"), then by name: a set's order changes
        # with each process's string hashing, and the pairing below must not
        present_names = sorted((n for first, group in self.by_first.items() if first in text
                                for n in group if n in text), key=lambda n: (-len(n), n))
        present_cities = sorted(words & self.city_set)
        kept = {w for w in present_cities if w + "s" in words or w.endswith("s") and w[:-1] in words}
        kept |= {w for w in words - self.city_set if w.endswith("s") and w[:-1] in self.city_set}  # a variant and its base
        kept |= {w[:-1] for w in kept if w.endswith("s")}
        movable = [c for c in present_cities if c not in kept]
        mapping = dict(zip(present_names, rng.sample(_without(self.names, present_names), len(present_names))))
        mapping.update(zip(movable, rng.sample(_without(self.cities, present_cities), len(movable))))
        if ids:
            present_ids = sorted(words & self.pid_set)
            mapping.update(zip(present_ids, rng.sample(_without(self.pids, present_ids), len(present_ids))))
        if not mapping:
            return [dict(m) for m in messages]
        pattern = re.compile(r"\b(" + "|".join(re.escape(k) for k in sorted(mapping, key=len, reverse=True)) + r")\b")

        def sub(value: Any) -> Any:
            if isinstance(value, str):
                return pattern.sub(lambda m: mapping[m.group(1)], value)
            if isinstance(value, dict):
                return {k: sub(v) for k, v in value.items()}
            if isinstance(value, list):
                return [sub(v) for v in value]
            return value

        return [sub(m) for m in messages]


def _without(pool: list[str], drop: Sequence[str]) -> list[str]:
    """The sorted ``pool`` less ``drop`` (distinct members of it), still sorted."""
    from bisect import bisect_left

    at = sorted({bisect_left(pool, x) for x in drop}, reverse=True)
    if len(at) != len(drop) or any(i >= len(pool) or pool[i] not in drop for i in at):
        raise ValueError(f"not distinct members of the pool: {sorted(drop)}")
    out = list(pool)
    for i in at:
        del out[i]
    return out


# -- official-format files -----------------------------------------------------------------------------------
def musique_row(world: World, q: Question, rng: random.Random, extra_paragraphs: int = 4) -> dict[str, Any]:
    """One MuSiQue JSONL row. Paragraphs: the supporting passages present in the corpus, the
    person's other passages and a few passages of other places (closed scope searches these)."""
    support = world.supporting(q)
    by_title = world.by_title()
    person_ids = [pid for pid in by_title[q.person] if pid not in support]
    chain_ids = [pid for place in q.chain for pid in by_title.get(place, []) if pid not in support]
    pool = [pid for place in world.parent if place not in q.chain for pid in by_title.get(place, [])]
    others = rng.sample(pool, k=min(extra_paragraphs, len(pool)))
    ids = list(dict.fromkeys([*support, *person_ids, *chain_ids, *others]))
    rng.shuffle(ids)
    paragraphs = [{"idx": i, "title": world.passage(pid).title, "paragraph_text": world.passage(pid).text,
                   "is_supporting": pid in support} for i, pid in enumerate(ids)]
    hops = [{"id": i, "question": (f"{q.person} >> {'place of birth' if q.relation == 'born' else 'residence'}" if i == 0
                                   else f"#{i} >> {PLACE_LEVELS[i]}"),
             "answer": q.chain[i], "paragraph_support_idx": next((j for j, pid in enumerate(ids) if pid == s), None)}
            for i, s in enumerate(support)]
    return {"id": q.id, "paragraphs": paragraphs, "question": q.question, "question_decomposition": hops,
            "answer": q.answer, "answer_aliases": [], "answerable": q.answerable}


def write_world(world: World, folder: str | Path) -> dict[str, Path]:
    """Write the world: ``{sft,rl,eval}.jsonl`` (MuSiQue JSONL), ``corpus.jsonl``, ``world.json``,
    ``policy.yaml`` and ``policy.tests.yaml`` (v2 also ``noise.json``, the search tool's noise, which
    the rollout settings' ``world_noise`` names). Returns the paths by name."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    rng = random.Random(world.config.seed + 1)
    paths: dict[str, Path] = {}
    for name in SPLITS:
        paths[name] = folder / f"{name}.jsonl"
        write_jsonl(paths[name], (musique_row(world, q, rng) for q in world.split(name)))
    paths["corpus"] = folder / "corpus.jsonl"
    write_jsonl(paths["corpus"], (p.to_dict() for p in world.passages))
    paths["world"] = folder / "world.json"
    paths["world"].write_text(json.dumps({
        "config": world.config.to_dict(), "stats": world.stats(),
        "persons": [{"name": p.name, "born": p.born, "lives": p.lives, **({"key": p.key} if p.key else {})}
                    for p in world.persons],
        "parent": world.parent, "absent": sorted(world.absent),
        "questions": [{"id": q.id, "record_id": record_id(q), "split": q.split, "kind": q.kind,
                       "u": q.ceiling if q.answerable and q.ceiling is not None else (1.0 if q.answerable else None),
                       "cues": q.cues} for q in world.questions]}, indent=1) + "\n", encoding="utf-8")
    if world.config.version == 2:
        from awarl.data.world_noise import NOISE_FILE, NoiseTable

        paths["noise"] = NoiseTable.from_world(world).save(folder / NOISE_FILE)
    paths["policy"] = folder / "policy.yaml"
    paths["policy"].write_text(policy_yaml(world), encoding="utf-8")
    paths["policy_tests"] = folder / "policy.tests.yaml"
    paths["policy_tests"].write_text(policy_tests_yaml(world), encoding="utf-8")
    return paths


def world_texts(world: World, system_prompt: str | None = None) -> list[str]:
    """Every string a model in this world reads or writes (to train a tokenizer on)."""
    texts = [f"{p.title}: {p.text}" for p in world.passages]
    for q in world.questions:
        texts.append(q.question)
        texts += [json.dumps({"name": "search", "arguments": {"query": s}}) for s in gold_queries(q)]
        texts.append(format_final(q.answer))
    texts.append(format_final(ABSTAIN_PHRASE))
    if system_prompt:
        texts.append(system_prompt)
    return texts


# -- verifier policy -----------------------------------------------------------------------------------------
def policy_yaml(world: World) -> str:
    """A verifier policy (configs/policies format) over the world's facts, as the corpus states them.

    Premises come from the question (which relation it asks about) and from the cited passages
    (``<P> was born in <C>``, ``<P> lives in <C>``); each pattern names its person in a ``subject``
    group, so a passage about someone else is no premise (`awarl.verify.translate`); the claim is
    the place the answer names. Rules map each
    city to its country (only links the corpus holds: an answer about a city whose country no
    passage states can be SATISFIABLE at best, never VALID) and the asked relation to the answer.
    """
    import yaml

    cfg = world.config
    top = PLACE_LEVELS[cfg.hops - 1]
    levels = PLACE_LEVELS[: cfg.hops]
    places = {lvl: sorted({c for c in world.parent if _level(world, c) == lvl} |
                          ({v for v in world.parent.values() if _level(world, v) == lvl})) for lvl in levels}
    types = [{"name": "Relation", "description": "What the question asks about the person.",
              "values": [{"value": "birth", "description": "where the person was born"},
                         {"value": "residence", "description": "where the person lives"}]}]
    for lvl in levels:
        types.append({"name": lvl.capitalize(), "description": f"A {lvl} of the world.",
                      "values": [{"value": v, "description": f"the {lvl} {v}"} for v in places[lvl]]})
    variables: list[dict[str, Any]] = [{
        "name": "asked", "type": "Relation", "role": "premise",
        "description": "Which of the person's places the question asks about.",
        "patterns": [{"regex": rf"\b{top} (?:was|is) (?P<subject>.+) born\b", "value": "birth"},
                     {"regex": rf"\b{top} (?:does|do) (?P<subject>.+) live\b", "value": "residence"}]}]
    for rel, var, verb in (("birth", "birth", "(?: was| is)? born in"), ("residence", "home", " lives in")):
        variables.append({"name": f"{var}_city", "type": "City", "role": "premise",
                          "description": f"The city of the person's {rel}, as a cited passage states it.",
                          "patterns": [{"regex": rf"(?P<subject>\b\w+ \w+){verb} {c}\b", "value": c} for c in places["city"]]})
        for lvl in levels[1:]:
            variables.append({"name": f"{var}_{lvl}", "type": lvl.capitalize(), "role": "any",
                              "description": f"The {lvl} of the person's {rel} (follows from the city).",
                              "patterns": []})
    variables.append({"name": f"answer_{top}", "type": top.capitalize(), "role": "claim",
                      "description": f"The {top} the answer names.",
                      "patterns": [{"regex": rf"\b{v}\b", "value": v} for v in places[top]]})
    rules = []
    for place, up in sorted(world.parent.items()):
        if place in world.absent:
            continue
        lvl = _level(world, place)
        nxt = PLACE_LEVELS[PLACE_LEVELS.index(lvl) + 1]
        for var in ("birth", "home"):
            rules.append({"id": f"{var}_{place}_{nxt}".lower(),
                          "expression": f"(=> (= {var}_{lvl} {place}) (= {var}_{nxt} {up}))",
                          "description": f"{place} is a {lvl} in the {nxt} {up}."})
    rules.append({"id": "answer_birth", "expression": f"(=> (= asked birth) (= answer_{top} birth_{top}))",
                  "description": f"A question about where the person was born is answered by the {top} of the birth city."})
    rules.append({"id": "answer_residence", "expression": f"(=> (= asked residence) (= answer_{top} home_{top}))",
                  "description": f"A question about where the person lives is answered by the {top} of the home city."})
    header = (f"# Verifier policy of the synthetic world (seed {cfg.seed}, {cfg.hops} hops), written by awarl.data.world.\n"
              "# Premises: the question (which relation) and the cited passages (born in / lives in a city);\n"
              f"# claim: the {top} the answer names. Check: awarl verify check --policy policy.yaml "
              "--question '<question + cited passages>' --answer '<answer>'\n")
    body = {"version": "1.0", "types": types, "variables": variables, "rules": rules}
    return header + yaml.safe_dump(body, sort_keys=False, allow_unicode=True, width=200)


def _level(world: World, place: str) -> str:
    return world.levels[place]


def evidence_text(world: World, q: Question) -> str:
    """The question followed by the text of its supporting passages (what a cited answer shows)."""
    return " ".join([q.question, *(world.passage(pid).text for pid in world.supporting(q))])


def policy_tests_yaml(world: World, n: int = 4) -> str:
    """Policy tests (``awarl verify test``): for a few held-out answerable questions, the right
    answer with its evidence is VALID, a wrong place INVALID; an answer about a city whose link is
    absent is SATISFIABLE; an abstention translates to nothing."""
    import yaml

    top = PLACE_LEVELS[world.config.hops - 1]
    tops = sorted({q.answer for q in world.questions})
    tests = []
    answerable = [q for q in world.questions if q.answerable and q.cues.get("namesakes", 1) == 1]
    for q in answerable[:: max(1, len(answerable) // n)][:n]:
        wrong = next(t for t in tops if t != q.answer)
        ev = evidence_text(world, q)
        tests.append({"name": f"{q.id}: right {top}", "question": ev, "answer": q.answer, "expected": "VALID"})
        tests.append({"name": f"{q.id}: wrong {top}", "question": ev, "answer": wrong, "expected": "INVALID"})
    unanswerable = [q for q in world.questions if q.kind == "missing"]
    if unanswerable:
        q = unanswerable[0]
        tests.append({"name": f"{q.id}: {top} of a city the corpus does not place", "question": evidence_text(world, q),
                      "answer": q.answer, "expected": "SATISFIABLE"})
    q = answerable[0]
    tests.append({"name": f"{q.id}: an abstention claims nothing", "question": evidence_text(world, q),
                  "answer": ABSTAIN_PHRASE, "expected": "NO_TRANSLATIONS"})
    header = "# Tests of policy.yaml (awarl verify test policy.yaml), written by awarl.data.world.\n"
    return header + yaml.safe_dump({"tests": tests}, sort_keys=False, allow_unicode=True, width=200)


__all__ = ["WorldConfig", "World", "Question", "Person", "WorldError", "generate_world", "write_world", "KINDS",
           "DEFAULT_CEILINGS",
           "gold_queries", "gold_conversation", "world_texts", "policy_yaml", "policy_tests_yaml", "evidence_text",
           "musique_row", "record_id", "renamed_conversation", "Renamer", "SPLITS"]
