"""World v2: a synthetic world whose held-out split cannot be memorised and whose capability is graded.

`awarl.data.world.generate_world` builds it for ``WorldConfig(version=2)``; the files, the gold
queries and the verifier policy are v1's (`awarl.data.world`). What differs:

- **Bridge cities are disjoint per split** (each split has ``cities`` answerable cities of its own;
  the countries are shared), so no split can be answered from another's facts. Every token of a
  held-out entity still appears in SFT text: the first names and last names of the first SFT
  persons cover the whole name pool, and each single (no namesake) SFT person "visited"
  two cities of other splits, a passage its own first search returns, so a tiny model's embeddings of held-out names are trained;
  only the held-out *facts* are new.
- **Two kinds of unanswerable question**: *missing* (the city's country passage is absent) and
  *near-miss*: either a one-letter variant city (``<city>s``, which BM25's Snowball stemmer maps to
  the city, so "country <city>" ranks the variant's country passage first) or the asked relation's
  passage is absent, so the city the first search shows is the other relation's, whose country is
  stated. Only careful reading tells either near-miss from an answer.
- **Graded, irreducible ceilings** u_q on answerable questions (``WorldConfig.ceilings``): a name
  shared by m people of whom j lead to the gold country (the others lead to m/j - 1 other countries,
  j each: no country is likelier than the gold one, and the namesakes' order in a result is the
  corpus order, shuffled), silent retrieval noise f per rollout and visible failures a retry
  overcomes (`awarl.data.world_noise`). The best reader reaches
  u_q = j/m * (1 - f) * (1 - visible_failure ** (max_searches - 1)).

This module imports nothing heavy.
"""

from __future__ import annotations

import itertools
import math
import random
import re
from collections.abc import Callable, Iterator
from functools import lru_cache
from typing import Any

from awarl.data.records import Passage, passage_id
from awarl.data.world_facts import (
    COUNTRIES,
    JOBS,
    LANDMARKS,
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
    _first_names,
    _last_names,
    gold_queries,
    record_id,
)
from awarl.protocol import ABSTAIN_PHRASE, format_final, parse_results, tool_call_message, tool_result_message

_CONSONANTS = "bdfgklmnprstvz"
_VOWELS = "aeiou"
_ENDINGS = "bgkmpvz"  # no Snowball suffix ends in these, so a name stems to itself and "<name>s" to the name
DEAD_CITY_LOAD = 4
"""Unanswerable questions per city without a country passage (the answerable cities carry the rest)."""


@lru_cache(maxsize=1)
def city_names() -> tuple[str, ...]:
    """Invented five-letter city names (consonant-vowel-consonant-vowel-consonant), in a fixed order:
    the vocabulary is the same for every seed; the seed decides which names a world uses."""
    names = ["".join(t).capitalize() for t in itertools.product(_CONSONANTS, _VOWELS, _CONSONANTS, _VOWELS, _ENDINGS)]
    random.Random(20).shuffle(names)
    return tuple(names)


def _cycle(items: list[str]) -> Iterator[str]:
    return itertools.cycle(items) if items else iter(())


# -- planning: who is in a split, and what is hard about each question -----------------------------------------
def _apportion(options: list[tuple[float, float]], n: int) -> list[float]:
    """``n`` values, each option's value as often as its share says (largest remainder)."""
    total = sum(s for _, s in options) or 1.0
    exact = [(v, n * s / total) for v, s in options]
    counts = [int(x) for _, x in exact]
    for i in sorted(range(len(exact)), key=lambda i: int(exact[i][1]) - exact[i][1])[: n - sum(counts)]:
        counts[i] += 1
    return [v for (v, _), c in zip(exact, counts) for _ in range(c)]


def _plan_split(n: int, cfg: WorldConfig, rng: random.Random) -> list[dict[str, Any]]:
    """The split's units, in a random order: namesake groups ``{"m", "j", "f"}`` and single persons
    ``{"m": 1, "kinds": {rel: kind}, "f": {rel: f}}``. Unanswerable questions go to single persons,
    at most one per person while there are enough of them; a near_miss_relation question's other
    relation is always answerable (its city is the one a careless reader looks up)."""
    questions = 2 * n
    unanswerable = round(cfg.unanswerable_share * questions)
    answerable = questions - unanswerable
    reserve = (unanswerable + 1) // 2
    units: list[dict[str, Any]] = []
    used = 0
    for m, j, f, share in cfg.profiles():
        if m == 1:
            continue
        groups = min(int(share * answerable / (2 * m) + 0.5), (n - reserve - used) // m)
        units += [{"m": m, "j": j, "f": f} for _ in range(max(groups, 0))]
        used += max(groups, 0) * m
    singles = n - used
    ones = [(f, share) for m, j, f, share in cfg.profiles() if m == 1] or [(0.0, 1.0)]
    fs = _apportion(ones, 2 * singles - unanswerable)
    rng.shuffle(fs)
    n_near = round(cfg.near_miss_share * unanswerable)
    kinds = (["near_miss_variant"] * ((n_near + 1) // 2) + ["near_miss_relation"] * (n_near // 2)
             + ["missing"] * (unanswerable - n_near))
    doubles = max(0, unanswerable - singles)  # persons with both questions unanswerable
    rel = [k for k in kinds if k == "near_miss_relation"]
    other = [k for k in kinds if k != "near_miss_relation"]
    while 2 * doubles > len(other):
        rel.pop()
        other.append("missing")
    rng.shuffle(other)
    pairs = [other[2 * i: 2 * i + 2] for i in range(doubles)]
    lone = other[2 * doubles:] + rel
    rng.shuffle(lone)
    fs_iter = iter(fs)
    for i in range(singles):
        if i < doubles:
            kinds_of = dict(zip(RELATIONS, pairs[i]))
        elif i < doubles + len(lone):
            bad = rng.choice(RELATIONS)
            kinds_of = {r: lone[i - doubles] if r == bad else "answerable" for r in RELATIONS}
        else:
            kinds_of = {r: "answerable" for r in RELATIONS}
        units.append({"m": 1, "j": 1, "kinds": kinds_of,
                      "f": {r: next(fs_iter) if k == "answerable" else 0.0 for r, k in kinds_of.items()}})
    rng.shuffle(units)
    return units


# -- generation ------------------------------------------------------------------------------------------------
def generate_world_v2(config: WorldConfig) -> World:
    """Build world v2 of ``config`` (same config, same world, byte for byte)."""
    if config.version != 2:
        raise WorldError(f"generate_world_v2 builds version 2, got version {config.version}")
    rng = random.Random(config.seed)
    countries = list(COUNTRIES[: config.countries])
    n_sft, n_rl = round(config.split[0] * config.persons), round(config.split[1] * config.persons)
    sizes = {"sft": n_sft, "rl": n_rl, "eval": config.persons - n_sft - n_rl}
    plans = {s: _plan_split(sizes[s], config, rng) for s in SPLITS}
    parent, pools = _city_pools(config, plans, countries, rng)
    absent = {c for s in SPLITS for c in pools[s]["missing"] + pools[s]["near"]}
    corpus = _Corpus()
    persons, questions = _people(config, plans, pools, countries, parent, corpus, rng)
    for c, k in parent.items():
        if c not in absent:
            corpus.add(c, f"{c} is a city in the country {k}.", (c, "in"))
        for _ in range(config.distractors):
            corpus.add(c, f"{c} has a famous {rng.choice(LANDMARKS)}.")
    asked: dict[tuple[str, str], list[str]] = {}
    for q in questions:
        asked.setdefault((q.person, q.relation), []).append(q.chain[0])
    noise = {record_id(q): _question_noise(q, asked[(q.person, q.relation)], corpus.fact_passage, parent, countries, rng)
             for q in questions}
    passages = list(corpus.by_id.values())
    rng.shuffle(passages)  # corpus order carries no hint, so neither does a namesake's rank in a result
    levels = {**{c: "city" for c in parent}, **{k: "country" for k in countries}}
    return World(config, persons, parent, absent, passages, corpus.fact_passage, questions, levels, noise)


def _city_pools(config: WorldConfig, plans: dict[str, list[dict[str, Any]]], countries: list[str],
                rng: random.Random) -> tuple[dict[str, str], dict[str, dict[str, Any]]]:
    """Each split's cities: its own answerable cities (countries round robin), its own dead ones (no
    country passage) and one variant per dead near-miss city; returns the country of every city and
    the pools by split."""
    names = iter(city_names())
    parent: dict[str, str] = {}
    pools: dict[str, dict[str, Any]] = {}
    for s in SPLITS:
        count = {k: sum(u["kinds"].get(r) == k for u in plans[s] if u["m"] == 1 for r in RELATIONS)
                 for k in ("missing", "near_miss_variant")}
        live = [next(names) for _ in range(config.cities)]
        missing = [next(names) for _ in range(math.ceil(count["missing"] / DEAD_CITY_LOAD))]
        near = [next(names) for _ in range(math.ceil(count["near_miss_variant"] / DEAD_CITY_LOAD))]
        for i, c in enumerate(live):
            parent[c] = countries[i % len(countries)]
        for c in missing + near:
            parent[c] = rng.choice(countries)
        variants = {c: f"{c}s" for c in near}
        for v in variants.values():
            parent[v] = rng.choice(countries)
        by_country = {k: [c for c in live if parent[c] == k] for k in countries}
        for cities in by_country.values():
            rng.shuffle(cities)
        pools[s] = {"live": live, "missing": missing, "near": near, "variants": variants,
                    "any": _cycle(rng.sample(live, len(live))), "by_country": {k: _cycle(v) for k, v in by_country.items()},
                    "dead": {"missing": _cycle(missing), "near_miss_variant": _cycle(near)}}
    return parent, pools


class _Corpus:
    """The world's passages, deduplicated by id, and the passage stating each fact."""

    def __init__(self) -> None:
        self.by_id: dict[str, Passage] = {}
        self.fact_passage: dict[tuple[str, str], str] = {}

    def add(self, title: str, text: str, fact: tuple[str, str] | None = None) -> str:
        p = Passage(passage_id(title, text), title, text)
        self.by_id.setdefault(p.id, p)
        if fact is not None:
            self.fact_passage[fact] = p.id
        return p.id


def _people(config: WorldConfig, plans: dict[str, list[dict[str, Any]]], pools: dict[str, dict[str, Any]],
            countries: list[str], parent: dict[str, str], corpus: _Corpus,
            rng: random.Random) -> tuple[list[Person], list[Question]]:
    """The persons of every planned unit (a single person or a group of namesakes), their passages
    added to ``corpus``, and one question per person and relation."""
    # Every SFT person visits a city of another split, so each of those names appears in SFT text.
    # Held-out names first: in a small world the SFT singles may not carry every RL name too.
    others = [c for s in ("eval", "rl") for c in rng.sample(_split_cities(pools[s]), len(_split_cities(pools[s])))]
    visit_other = _cycle(others)
    everywhere = sorted(parent)
    person_names = _name_order(rng, sum(len(plans[s]) for s in SPLITS))
    persons: list[Person] = []
    questions: list[Question] = []
    for s in SPLITS:
        pool = pools[s]
        for unit in plans[s]:
            name = next(person_names)
            m = unit["m"]
            kinds = unit.get("kinds") or {r: "answerable" for r in RELATIONS}
            cities = {r: _unit_cities(unit, kinds[r], pool, countries, rng) for r in RELATIONS}
            templates = {r: rng.choice(TEMPLATES[r]) for r in RELATIONS}
            members = []
            for k in range(m):
                key = f"{name}#{k + 1}" if m > 1 else ""
                born, lives = cities["born"][k], cities["lives"][k]
                # A single person's first search shows all its passages (a namesake's may not), so the
                # SFT singles carry the other splits' city names.
                carry = s == "sft" and m == 1 and others
                a, b = (next(visit_other), next(visit_other)) if carry else rng.sample(everywhere, 2)
                extras = (f"{name} visited {a} and {b}.", f"{name} works as a {rng.choice(JOBS)}.")[: config.distractors]
                person = Person(name, born, lives, extras, key)
                for r, city in (("born", born), ("lives", lives)):
                    if kinds[r] != "near_miss_relation":
                        corpus.add(name, f"{name} {VERBS[r]} {city}.", (key or name, r))
                for text in extras:
                    corpus.add(name, text)
                persons.append(person)
                members.append(person)
            questions += _unit_questions(config, s, unit, members, len(persons), kinds, templates, parent, pool)
    return persons, questions


def _unit_questions(config: WorldConfig, split: str, unit: dict[str, Any], members: list[Person], n_persons: int,
                    kinds: dict[str, str], templates: dict[str, str], parent: dict[str, str],
                    pool: dict[str, Any]) -> list[Question]:
    """One question per member of a unit and relation (``n_persons``: persons made so far, these included)."""
    m, j = unit["m"], unit["j"]
    out = []
    for k, person in enumerate(members):
        for r in RELATIONS:
            city, kind = getattr(person, r), kinds[r]
            f = unit["f"][r] if m == 1 else unit["f"]
            out.append(_question(config, split, n_persons - m + k, person, r, templates[r], city, parent, kind, m, j, f,
                                 config.visible_failure, config.max_searches,
                                 other=getattr(person, "lives" if r == "born" else "born"),
                                 variant=pool["variants"].get(city)))
    return out


def _split_cities(pool: dict[str, Any]) -> list[str]:
    return pool["live"] + pool["missing"] + pool["near"] + list(pool["variants"].values())


def _name_order(rng: random.Random, n: int) -> Iterator[str]:
    """Person names, one per unit (a namesake group shares one): the first len(first names) of them use
    every first name and every last name once (SFT takes them first), the rest are shuffled."""
    first, last = _first_names(True), _last_names(True)
    size = len(first)
    names = [f"{first[i % size]} {last[(i + i // size) % len(last)]}" for i in range(len(first) * len(last))]
    head, tail = names[:size], names[size:]
    rng.shuffle(head)
    rng.shuffle(tail)
    if n > len(names):
        raise WorldError(f"WorldConfig.persons: {n} names needed, the pool has {len(names)}")
    return iter(head + tail)


def _unit_cities(unit: dict[str, Any], kind: str, pool: dict[str, Any], countries: list[str],
                 rng: random.Random) -> list[str]:
    """The cities of a unit's members for one relation: a group's members lead to m/j countries, j each
    (distinct cities); a single person's city follows its question's kind."""
    m, j = unit["m"], unit["j"]
    if m == 1:
        return [next(pool["dead"][kind]) if kind in pool["dead"] else next(pool["any"])]
    picked = [k for k in rng.sample(countries, m // j) for _ in range(j)]
    rng.shuffle(picked)
    return [next(pool["by_country"][k]) for k in picked]


def _question(cfg: WorldConfig, split: str, idx: int, person: Person, rel: str, template: str, city: str,
              parent: dict[str, str], kind: str, m: int, j: int, f: float, v: float, budget: int, *,
              other: str, variant: str | None) -> Question:
    answerable = kind == "answerable"
    ceiling = round(j / m * (1 - f) * (1 - v ** (budget - 1)), 6) if answerable else None
    cues: dict[str, Any] = ({"namesakes": m, "leading": j, "silent_noise": f, "visible_failure": v} if answerable
                            else {"variant": variant} if kind == "near_miss_variant"
                            else {"other_city": other} if kind == "near_miss_relation" else {})
    missing = None if answerable else person.name if kind == "near_miss_relation" else city
    return Question(f"world{cfg.seed}-{idx:04d}-{rel}", template.format(level="country", p=person.name), person.name,
                    rel, (city, parent[city]), parent[city], answerable, split, missing, person.key, kind, ceiling, cues)


def _question_noise(q: Question, cities: list[str], fact_passage: dict[tuple[str, str], str],
                    parent: dict[str, str], countries: list[str], rng: random.Random) -> dict[str, Any]:
    """The search noise of one question: the country passages of every namesake's city for the asked
    relation (a reader cannot tell which namesake is meant) get a conflicting country, never the gold
    one; a visible failure drops them (a near-miss's variant passage too, so a failure looks alike)."""
    if q.kind == "near_miss_variant":
        return {"silent": 0.0, "swap": {}, "fragile": [fact_passage[(q.cues["variant"], "in")]]}
    if not q.answerable:
        return {"silent": 0.0, "swap": {}, "fragile": []}
    swap = {}
    for c in dict.fromkeys(cities):
        wrong = rng.choice([k for k in countries if k not in (parent[c], q.answer)])
        swap[fact_passage[(c, "in")]] = f"{c} is a city in the country {wrong}."
    return {"silent": q.cues["silent_noise"], "swap": swap, "fragile": list(swap)}


# -- the ideal agent's conversation ----------------------------------------------------------------------------
def gold_conversation_v2(world: World, q: Question, search: Callable[[str], str], system_prompt: str | None = None,
                         *, first: str = "relation", guess: bool = False) -> list[dict]:
    """What the best reader does with the real tool: search the asked relation; follow the question's own
    person when the result shows it, else the first namesake shown (it cannot tell them apart); search
    that city's country, again while no country passage for it came back and the budget
    (``max_searches``) allows; answer the country that passage states, citing both, else abstain. The
    country passage is cited first: its id follows the answer's word in the result, so a small model
    learns to copy it right after the answer (docs/benchmarks.md, "Citing what it read").
    ``guess=True`` answers the first country passage of the last result instead of abstaining (about
    another city, or a variant: the hallucination a near-miss invites)."""
    from awarl.protocol import build_messages

    messages = build_messages(q.question, system_prompt)

    def call(query: str) -> str:
        messages.append(tool_call_message(query))
        result = search(query)
        messages.append(tool_result_message(result))
        return result

    result = call(gold_queries(q, first)[0])
    fact = re.compile(rf"{re.escape(q.person)} {VERBS[q.relation]} (\w+)\.")
    shown = [(pid, m.group(1)) for pid, _, text in parse_results(result) if (m := fact.fullmatch(text))]
    person_pid = None
    link = None
    if shown:
        mine = world.fact_passage.get((q.who, q.relation))
        person_pid, city = next(((p, c) for p, c in shown if p == mine), shown[0])
        calls = 1
        while link is None and calls < world.config.max_searches:
            result = call(f"country {city}")
            calls += 1
            country = re.compile(rf"{re.escape(city)} is a city in the country (\w+)\.")
            link = next(((pid, m.group(1)) for pid, _, text in parse_results(result) if (m := country.fullmatch(text))),
                        None)
    if link is not None:
        final = format_final(link[1], [link[0], person_pid])
    else:
        wrong = _first_link(result) if guess else None
        final = (format_final(wrong[1], [p for p in (wrong[0], person_pid) if p]) if wrong
                 else format_final(ABSTAIN_PHRASE))
    messages.append({"role": "assistant", "content": final})
    return messages


def asked_city(world: World, q: Question) -> str:
    """The city of ``q``'s relation for the person ``q`` is about (the user's reply to the namesake question)."""
    return getattr(next(p for p in world.persons if (p.key or p.name) == q.who), q.relation)


def namesake_cities(world: World, q: Question) -> list[str]:
    """The cities the corpus gives, for ``q``'s relation, to the persons named as ``q``'s person is, one each
    and sorted (what the chatbot asks the user to choose from: `awarl.chat.prompts.which_one`); fewer than
    two when the name is not shared or the namesakes' facts name one city."""
    cities = {getattr(p, q.relation) for p in world.persons
              if p.name == q.person and (p.key or p.name, q.relation) in world.fact_passage}
    return sorted(cities)


def clarified_conversation_v2(world: World, q: Question, search: Callable[[str], str], user: str,
                              system_prompt: str | None = None, *, city: str | None = None) -> list[dict]:
    """What the best reader does when the user has already said which namesake is meant: ``user`` is the
    question with the user's reply (`awarl.chat.prompts.Prompts.agent_question`, as the chatbot asks the
    agent again), which names the city of ``q``'s relation. So the person's search is not needed: search
    that city's country (again while no country passage came back and the budget allows) and answer what
    it states, citing it, else abstain. ``city``: the name the user gave (default the world's; a world that draws
    city names per rollout shows another)."""
    from awarl.protocol import build_messages

    messages = build_messages(user, system_prompt)
    city = city or asked_city(world, q)
    country = re.compile(rf"{re.escape(city)} is a city in the country (\w+)\.")
    link = None
    for _ in range(world.config.max_searches):
        query = f"country {city}"
        messages.append(tool_call_message(query))
        result = search(query)
        messages.append(tool_result_message(result))
        link = next(((pid, m.group(1)) for pid, _, text in parse_results(result) if (m := country.fullmatch(text))), None)
        if link is not None:
            break
    final = format_final(link[1], [link[0]]) if link is not None else format_final(ABSTAIN_PHRASE)
    messages.append({"role": "assistant", "content": final})
    return messages


__all__ = ["DEAD_CITY_LOAD", "asked_city", "city_names", "clarified_conversation_v2", "generate_world_v2", "gold_conversation_v2",
           "namesake_cities"]
