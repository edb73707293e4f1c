"""Try to make the chatbot's checker prove a wrong answer on a world: every wrong country, every hedge
and denial of the right one, against each held-out question.

    python scripts/audit_checker.py --demo runs/demo-quick [--limit 20] [--group namesakes]

For each answerable held-out question (of ``--group``: ``namesakes``, ``single`` or ``all``) the checker
(`awarl.chat.validate.Validator`, as the chat server builds it: the world policy, the corpus, the
lexical citation judge) gets

- every wrong country as the answer, with no user answer or with a true fact of the asked person as
  the user's answer to a clarifying question, citing nothing or any one passage of the person's name
  or of the cities of everyone who bears it, with all of those passages in the search trace;
- the right country hedged or denied (`HEDGES`: "Ruvia or Suldor", "It is not Ruvia." …), citing the
  question's gold passages.

A wrong answer is one the held-out table scores wrong (`awarl.protocol.exact_match` against the gold
country). Prints the count of checks and every wrong answer proved VALID; exit status 1 when there is
one, 2 when the demo cannot be read. Reading the passages of a namesake's cities is what the search
would show an agent; the premises never come from anywhere else.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from awarl.chat.heldout import GROUPS, group_of, load_world  # noqa: E402
from awarl.chat.thread import Clarification  # noqa: E402
from awarl.chat.validate import Validator  # noqa: E402
from awarl.data.records import load_corpus  # noqa: E402
from awarl.errors import AwarlError  # noqa: E402
from awarl.protocol import exact_match, extract_answer  # noqa: E402
from awarl.verify.findings import Result, aggregate  # noqa: E402

HEDGES = ("{right} or {wrong}", "{wrong} or {right}", "either {right} or {wrong}", "{right}, {wrong}", "It is not {right}.",
          "{right} is wrong; it is {wrong}", "{right} is not right.", "{right}? No, {wrong}", "not {right} but {wrong}",
          "It isn't {wrong}, it's {right} or {wrong}.", "I do not think that it is {right}.", "It is not, in fact, {right}.",
          "probably {right}", "Anything but {right}.", "{right} rather than {wrong}", "I doubt it is {right}.",
          "{right} enough information", "{right}, not enough information")
"""Answers that name the right country and are not it (`exact_match` scores each wrong)."""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--demo", type=Path, default=Path("runs/demo"), help="folder of `awarl demo --out`")
    parser.add_argument("--group", choices=("namesakes", "single", "all"), default="namesakes")
    parser.add_argument("--limit", type=int, default=None, help="only the first N questions of the group")
    args = parser.parse_args(argv)
    world_dir = args.demo / "world"
    try:
        world = load_world(world_dir / "world.json")
        corpus = {p.id: p for p in load_corpus(args.demo / "data" / "corpus.jsonl")}
    except AwarlError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    checker = Validator(world_dir / "policy.yaml", corpus=corpus, judge="lexical")
    persons = {p.key or p.name: p for p in world.persons}
    countries = sorted({q.answer for q in world.questions if q.answerable})
    by_title: dict[str, list[dict[str, str]]] = {}
    for p in corpus.values():
        by_title.setdefault(p.title, []).append({"id": p.id, "title": p.title, "text": p.text})
    wanted = {"namesakes": {GROUPS[1]}, "single": {GROUPS[0]}, "all": {GROUPS[0], GROUPS[1]}}[args.group]
    questions = [q for q in world.split("eval") if q.answerable and group_of(q) in wanted][: args.limit]
    checks, proved_wrong, started = 0, [], time.perf_counter()

    def check(q, answer: str, clarifications: list[Clarification], cited: list[dict[str, str]],
              returned: list[dict[str, str]]) -> None:
        nonlocal checks
        cites = " ".join(f"[{p['id']}]" for p in cited)
        text = f"<answer>{answer}</answer> {cites}".strip()
        v = checker.validate(q.question, clarifications, text, cited, None, returned=returned)
        checks += 1
        if aggregate([f for f in v.findings if f.citation is None]) is Result.VALID and \
                exact_match(extract_answer(text) or "", [q.answer]) < 1.0:
            proved_wrong.append((q.question, q.answer, text, [c.answer for c in clarifications], v.trace))

    for n, q in enumerate(questions, 1):
        person = persons[q.who]
        bearers = [p for p in world.persons if p.name == person.name]
        cities = sorted({c for p in bearers for c in (p.born, p.lives)})
        shown = by_title.get(person.name, []) + [p for c in cities for p in by_title.get(c, [])]
        facts = [f"{person.name} was born in {person.born}.", f"{person.name} lives in {person.lives}."]
        for clarifications in ([], *([Clarification("Which one do you mean?", f)] for f in facts)):
            for cited in ([], *([p] for p in shown)):
                for country in countries:
                    if country != q.answer:
                        check(q, country, clarifications, cited, shown)
        gold = [{"id": i, "title": corpus[i].title, "text": corpus[i].text} for i in world.supporting(q) if i in corpus]
        others = [c for c in countries if c != q.answer]
        for wrong in dict.fromkeys((others[0], others[-1])):  # a policy's patterns run in order: one before, one after
            for template in HEDGES:
                check(q, template.format(right=q.answer, wrong=wrong), [], gold, shown)
        print(f"{n}/{len(questions)} questions, {checks} checks, {len(proved_wrong)} wrong answers proved VALID",
              file=sys.stderr, flush=True)
    for question, gold, text, given, trace in proved_wrong:
        print(f"WRONG VALID: {question!r} (gold {gold}): {text!r}; user said {given}; trace premises {trace}")
    print(f"{len(questions)} questions ({args.group}), {checks} checks, {len(proved_wrong)} wrong answers proved VALID "
          f"({time.perf_counter() - started:.0f} s)")
    return 1 if proved_wrong else 0


if __name__ == "__main__":
    sys.exit(main())
