"""The facts and types of the synthetic world, shared by both versions (`awarl.data.world`, world v1;
`awarl.data.world_v2`): its vocabulary, its knobs (`WorldConfig`), its people, questions and the
`World` that holds them, and the search queries a good agent makes. Imports nothing heavy."""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import Any

from awarl.data.records import Passage
from awarl.data.world_noise import CITY_NAMES, TIE_ORDERS
from awarl.errors import ConfigError
from awarl.protocol import parse_results

# Invented single words: short, distinct, pronounceable, none an English word the BM25 stopword
# list or the SQuAD normaliser would touch.
FIRST_NAMES = ("Bora", "Kemi", "Talo", "Nuri", "Sela", "Dovo", "Fira", "Gani", "Heli", "Joru", "Kalo", "Lumi",
               "Mero", "Nava", "Ossi", "Pela", "Rino", "Sudo", "Tevi", "Ulla", "Vero", "Wadi", "Yana", "Zeno")
LAST_NAMES = ("Kemt", "Lisk", "Morv", "Nast", "Orly", "Pram", "Quel", "Rusk", "Sorn", "Tump", "Vask", "Wilt",
              "Yost", "Zark", "Bilt", "Crom", "Dusk", "Fenn", "Gorm", "Hask", "Jolt", "Kirn", "Lorn", "Mabb")
CITIES = ("Tavel", "Umar", "Brisk", "Colda", "Dremm", "Esto", "Falk", "Gilby", "Harn", "Ivra", "Jask", "Kolm",
          "Lunda", "Mirro", "Nebb", "Orsk", "Pylo", "Quarn", "Rilla", "Sabo", "Tirn", "Ulso", "Varda", "Wemb",
          "Xalo", "Yorra", "Zumb", "Abro", "Belka", "Cazo", "Dorin", "Elbo", "Fosk", "Gamo", "Hobb", "Illo",
          "Jerro", "Kapa", "Lobb", "Mosk", "Nilo", "Opra", "Pesk", "Qualo", "Rubo", "Sifa", "Tobb", "Uvva")
COUNTRIES = ("Morland", "Pelaria", "Quostan", "Ruvia", "Suldor", "Tekara", "Undel", "Vostia", "Wendar",
             "Xandia", "Yelmar", "Zorvia")
# World v2's larger name pool (40 x 40): more held-out questions fit.
EXTRA_FIRST_NAMES = ("Adro", "Beni", "Cira", "Dela", "Ebbo", "Fenu", "Gilo", "Hamo", "Ilva", "Kiro", "Lesa", "Mika",
                     "Nelo", "Orra", "Pavi", "Rasi")
EXTRA_LAST_NAMES = ("Balk", "Crev", "Drom", "Elst", "Fusk", "Grev", "Karv", "Lesk", "Mork", "Nesk", "Pilt", "Rolm",
                    "Tesk", "Vorn", "Wusk", "Yelk")
REGIONS = ("Nortesh", "Sudava", "Estoria", "Wessia")
JOBS = ("baker", "farmer", "teacher", "doctor", "painter", "sailor", "miner", "singer")
HOBBIES = ("chess", "fishing", "music", "running", "poetry", "gardening")
LANDMARKS = ("market", "bridge", "harbor", "tower", "garden", "castle")

PLACE_LEVELS = ("city", "country", "region")
RELATIONS = ("born", "lives")
VERBS = {"born": "was born in", "lives": "lives in"}
"""The words between a person and the city of each relation, as the corpus writes them (\"Talo Nast lives in Dorin.\")."""
TEMPLATES = {
    "born": ("In which {level} was {p} born?", "Which {level} was {p} born in?"),
    "lives": ("In which {level} does {p} live?", "Which {level} does {p} live in?"),
}
SPLITS = ("sft", "rl", "eval")
KINDS = ("answerable", "missing", "near_miss_variant", "near_miss_relation")
"""A question's kind: answerable; missing (the city's country passage is absent); near-miss with a
one-letter variant city whose country passage ranks first; near-miss with the asked relation's
passage absent, so the other relation's city is the one a careless reader looks up."""

DEFAULT_CEILINGS = {"1/1@0": 0.2, "1/1@0.1": 0.1, "1/1@0.3": 0.05, "2/1@0": 0.1, "4/2@0.1": 0.1, "3/1@0": 0.1,
                    "4/1@0.3": 0.35}
"""World v2's mix of ceiling profiles ``"m/j@f"`` -> share of the answerable questions: a name shared by
m people of whom j lead to the gold answer, with silent retrieval noise f. Fixed from the audit
(docs/fidelity.md, World v2): mean(u) 0.49, 35% of answerable questions at u <= 0.2, 35% at u >= 0.6."""
_PROFILE = re.compile(r"^([1-4])/([1-4])@(0(?:\.\d+)?)$")


class WorldError(ConfigError):
    """Knobs that cannot make a world; the message names the knob and the limit."""


@dataclass(frozen=True)
class WorldConfig:
    """The knobs of a world. Defaults make 500 persons, 1,000 questions and ~1,600 passages (v1)."""

    persons: int = 500  # corpus size: persons (each has 2 questions); at most 24 x 24 (v1), 40 x 40 (v2)
    cities: int = 36  # v1: cities of the whole world, at most len(CITIES); v2: answerable cities per split
    countries: int = 8  # at most len(COUNTRIES)
    hops: int = 2  # 2: person -> city -> country; 3: ... -> region (v1 only)
    distractors: int = 1  # distractor passages per person (job, hobby; v2: a visited city) and per place (landmark): 0-2
    unanswerable_share: float = 0.3  # target share of questions that the corpus cannot answer
    split: tuple[float, float, float] = (0.6, 0.24, 0.16)  # share of persons for SFT / RL / held-out eval
    seed: int = 0
    version: int = 1  # 1: shared cities, missing links only (the regression control); 2: the fair test
    # -- world v2 only --
    ceilings: dict[str, float] = field(default_factory=lambda: dict(DEFAULT_CEILINGS), hash=False)  # "m/j@f" -> share
    near_miss_share: float = 0.5  # unanswerable questions that are near-misses (half variant city, half other relation)
    visible_failure: float = 0.2  # probability per search that the question's country passages are left out
    max_searches: int = 3  # the search budget the ceilings assume (the rollout's max_searches): one retry
    # "index": passages that tie in a result keep the index's order (the same in every rollout); "rollout": their
    # order is drawn per (question, rollout seed), so a reader that follows the first namesake shown has p_i = u_q
    # on each question, where with "index" it has 0 or 1 - f (docs/fidelity.md, "By kind of question")
    tie_order: str = "index"
    # "world": a city has one name; "rollout": the search tool shows the cities under names drawn per (question,
    # rollout seed), the same within the rollout, so a policy cannot tie what it learned to the names of one split's
    # cities (docs/benchmarks.md, "Where the refusal gap comes from")
    city_names: str = "world"

    def __post_init__(self) -> None:
        v2 = self.version == 2
        limits = {"version": (1, 2), "persons": (6, len(_first_names(v2)) * len(_last_names(v2))),
                  "cities": (2, 200 if v2 else len(CITIES)), "countries": (4 if v2 else 2, len(COUNTRIES)),
                  "hops": (2, 2 if v2 else 3), "distractors": (1 if v2 else 0, 2), "max_searches": (2, 8)}
        for name, (lo, hi) in limits.items():
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or not lo <= value <= hi:
                raise WorldError(f"WorldConfig.{name} must be an integer in [{lo}, {hi}]"
                                 f"{' for version 2' if v2 else ''}, got {value!r}")
        if not 0.0 <= self.unanswerable_share < 1.0:
            raise WorldError(f"WorldConfig.unanswerable_share must be in [0, 1), got {self.unanswerable_share}")
        if len(self.split) != 3 or any(s <= 0 for s in self.split) or abs(sum(self.split) - 1.0) > 1e-6:
            raise WorldError(f"WorldConfig.split must be three positive shares summing to 1, got {self.split}")
        if self.countries > self.cities:
            raise WorldError(f"WorldConfig.countries ({self.countries}) must not exceed cities ({self.cities})")
        for name in ("near_miss_share", "visible_failure"):
            if not 0.0 <= getattr(self, name) < 1.0:
                raise WorldError(f"WorldConfig.{name} must be in [0, 1), got {getattr(self, name)}")
        if self.tie_order not in TIE_ORDERS:
            raise WorldError(f"WorldConfig.tie_order must be one of {', '.join(TIE_ORDERS)}, got {self.tie_order!r}")
        if self.tie_order != "index" and not v2:
            raise WorldError("WorldConfig.tie_order: 'rollout' needs version 2 (its search tool's noise draws the order)")
        if self.city_names not in CITY_NAMES:
            raise WorldError(f"WorldConfig.city_names must be one of {', '.join(CITY_NAMES)}, got {self.city_names!r}")
        if self.city_names != "world" and not v2:
            raise WorldError("WorldConfig.city_names: 'rollout' needs version 2 (its search tool's noise draws the names)")
        self.profiles()  # the ceilings mix parses

    def profiles(self) -> list[tuple[int, int, float, float]]:
        """The ceilings mix as (m, j, f, share), sorted by key; checked: j divides m (the other namesakes
        lead to m/j - 1 other countries, j each, so no country is more likely than the gold one), f in
        [0, 1), shares >= 0 summing to 1, and j namesakes fit in one country's cities (v2)."""
        if not isinstance(self.ceilings, dict) or not self.ceilings:
            raise WorldError(f"WorldConfig.ceilings must map 'm/j@f' to a share, got {self.ceilings!r}")
        out = []
        for key, share in sorted(self.ceilings.items()):
            m = _PROFILE.match(str(key))
            if not m or int(m.group(2)) > int(m.group(1)) or int(m.group(1)) % int(m.group(2)):
                raise WorldError(f"WorldConfig.ceilings: {key!r} is not 'm/j@f' with m in 1..4, j dividing m and f "
                                 f"in [0, 1) (e.g. '4/1@0.3': four namesakes, one leads to the gold answer, noise 0.3)")
            if not isinstance(share, (int, float)) or isinstance(share, bool) or share < 0:
                raise WorldError(f"WorldConfig.ceilings[{key!r}] must be a share >= 0, got {share!r}")
            if self.version == 2 and int(m.group(2)) > self.cities // self.countries:
                raise WorldError(f"WorldConfig.ceilings: {key!r} needs {m.group(2)} cities per country, and "
                                 f"cities / countries = {self.cities // self.countries}")
            out.append((int(m.group(1)), int(m.group(2)), float(m.group(3)), float(share)))
        if abs(sum(p[3] for p in out) - 1.0) > 1e-6:
            raise WorldError(f"WorldConfig.ceilings: the shares must sum to 1, got {sum(p[3] for p in out):.4f}")
        return out

    @classmethod
    def from_dict(cls, raw: dict[str, Any], where: str = "world") -> "WorldConfig":
        known = set(cls.__dataclass_fields__)
        unknown = sorted(set(raw) - known)
        if unknown:
            raise WorldError(f"{where}: unknown knob(s) {unknown}; known: {sorted(known)}")
        values = dict(raw)
        if "split" in values:
            values["split"] = tuple(values["split"])
        if "ceilings" in values and isinstance(values["ceilings"], dict):
            values["ceilings"] = {str(k): v for k, v in values["ceilings"].items()}
        try:
            return cls(**values)
        except WorldError as exc:
            raise WorldError(f"{where}: {exc}") from None

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["split"] = list(self.split)
        for knob, default in (("tie_order", "index"), ("city_names", "world")):
            if out[knob] == default:  # only when set, so worlds written before the knob existed still match
                del out[knob]
        return out


def _first_names(v2: bool) -> tuple[str, ...]:
    return FIRST_NAMES + EXTRA_FIRST_NAMES if v2 else FIRST_NAMES


def _last_names(v2: bool) -> tuple[str, ...]:
    return LAST_NAMES + EXTRA_LAST_NAMES if v2 else LAST_NAMES


@dataclass(frozen=True)
class Person:
    name: str
    born: str
    lives: str
    extras: tuple[str, ...]  # distractor passages' texts
    key: str = ""  # v2: "<name>#<k>" for the k-th of several namesakes; "" = the name


@dataclass(frozen=True)
class Question:
    """One world question: the chain of places from the person's city to the answer."""

    id: str
    question: str
    person: str
    relation: str  # born | lives
    chain: tuple[str, ...]  # (city, country[, region])
    answer: str
    answerable: bool
    split: str
    missing: str | None  # the place whose next-level passage is absent (v2 near_miss_relation: the person)
    subject: str = ""  # the person the question is about (v2: "<name>#<k>" for the k-th namesake); "" = person
    kind: str = "answerable"  # one of KINDS
    ceiling: float | None = None  # u_q: the best reader's chance of the gold answer (answerable only)
    cues: dict[str, Any] = field(default_factory=dict, hash=False)  # what makes it hard (namesakes, noise, variant)

    @property
    def who(self) -> str:
        """The key of the person's facts in `World.fact_passage`."""
        return self.subject or self.person

    @property
    def level(self) -> str:
        return PLACE_LEVELS[len(self.chain) - 1]


@dataclass
class World:
    """A generated world: its facts, its passages (keyed by fact) and its questions."""

    config: WorldConfig
    persons: list[Person]
    parent: dict[str, str]  # place -> the place one level up (city -> country, country -> region)
    absent: set[str]  # places whose "is in" passage is not in the corpus
    passages: list[Passage]
    fact_passage: dict[tuple[str, str], str]  # (subject, relation) -> passage id ("in" for places)
    questions: list[Question] = field(default_factory=list)
    levels: dict[str, str] = field(default_factory=dict)  # place -> city | country | region
    noise: dict[str, dict[str, Any]] = field(default_factory=dict)  # record id -> its search noise (v2)
    _index: dict[str, Passage] | None = field(default=None, repr=False, compare=False)

    def cities(self) -> set[str]:
        """Every split's cities (the places at the city level): the names renamed SFT copies draw from and the
        names a world that draws city names per rollout permutes."""
        return {place for place, level in self.levels.items() if level == "city"}

    def split(self, name: str) -> list[Question]:
        if name not in SPLITS:
            raise WorldError(f"unknown split {name!r}; choose one of {', '.join(SPLITS)}")
        return [q for q in self.questions if q.split == name]

    def passage(self, pid: str) -> Passage:
        if self._index is None:
            self._index = {p.id: p for p in self.passages}
        return self._index[pid]

    def by_title(self) -> dict[str, list[str]]:
        """Passage ids by title (the entity a passage is about), in corpus order."""
        out: dict[str, list[str]] = {}
        for p in self.passages:
            out.setdefault(p.title, []).append(p.id)
        return out

    def supporting(self, q: Question) -> list[str]:
        """Ids of the passages that answer ``q``, hop by hop, as far as the corpus has them."""
        first = self.fact_passage.get((q.who, q.relation))
        if first is None:  # v2 near_miss_relation: the asked relation's passage is absent
            return []
        ids = [first]
        for place in q.chain[:-1]:
            pid = self.fact_passage.get((place, "in"))
            if pid is None:
                break
            ids.append(pid)
        return ids

    def stats(self) -> dict[str, Any]:
        out: dict[str, Any] = {"persons": len(self.persons), "passages": len(self.passages),
                               "questions": len(self.questions), "absent_links": sorted(self.absent)}
        for name in SPLITS:
            qs = self.split(name)
            out[name] = {"questions": len(qs), "unanswerable": sum(not q.answerable for q in qs),
                         "unanswerable_share": round(sum(not q.answerable for q in qs) / max(len(qs), 1), 3)}
            if self.config.version == 2:
                u = [q.ceiling for q in qs if q.answerable]
                out[name]["kinds"] = {k: sum(q.kind == k for q in qs) for k in KINDS}
                out[name]["mean_u"] = round(sum(u) / max(len(u), 1), 4)
        return out


def record_id(q: Question) -> str:
    """The id ``awarl data prepare --dataset musique`` gives this question's record."""
    return q.id if q.answerable else f"{q.id}#unanswerable"


def gold_queries(q: Question, first: str = "relation") -> list[str]:
    """What a good agent searches: the relation asked about with the person ("born Bora Kemt"), then
    the next level's name with each place ("country Tavel"). The relation word ranks the person's
    right passage first, as a keyword query for a real search engine would. Names come after a word,
    so a name in a query is the same token as in the passages it was read from (byte-level BPE
    tokenizes " Tavel" and "Tavel" differently). ``first="question"`` searches the whole question
    first instead (a model trained so also searches sensibly on other data sets, which the test
    fixtures need)."""
    if first not in ("relation", "question"):
        raise WorldError(f"first must be 'relation' or 'question', got {first!r}")
    head = q.question if first == "question" else f"{q.relation} {q.person}"
    return [head] + [f"{PLACE_LEVELS[i + 1]} {place}" for i, place in enumerate(q.chain[:-1])]


_LINK = re.compile(r"\S+ is a \w+ in the \w+ (\w+)\.")


def _first_link(result: str) -> tuple[str, str] | None:
    """(passage id, place one level up) of the first "X is a city in the country Y." line of a
    rendered search result, or None."""
    return next(((pid, m.group(1)) for pid, _, text in parse_results(result) if (m := _LINK.fullmatch(text))), None)

