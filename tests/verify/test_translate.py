"""Translators: the pattern translator on the shipped policy, the LLM translator with a scripted
backend and over a real local HTTP server."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from awarl.verify.findings import Ambiguity, Result, Translation, aggregate
from awarl.errors import BackendError
from awarl.llm.text import TextModel
from awarl.verify.policy import load_policy
from awarl.verify.reasoner import check
from awarl.verify.translate import LLMTranslator, PatternTranslator, TranslationError

PRICING = Path(__file__).resolve().parents[2] / "configs" / "policies" / "pricing.yaml"


@pytest.fixture(scope="module")
def pricing():
    return load_policy(PRICING)


def test_pattern_translator_reads_premises_from_the_question_and_claims_per_sentence(pricing):
    items = PatternTranslator().translate(
        "I am a gold member buying a regular-priced jacket for $80. What discount do I get?",
        "You get 15% off. Shipping is free. Thanks for asking!",
        pricing,
    )
    assert len(items) == 2
    first, second = items
    assert [s.logic for s in first.premises] == ["(= tier gold)", "(= order_total 80.0)", "(not is_sale_item)"]
    assert [s.logic for s in first.claims] == ["(= discount_percent 15)"]
    assert [s.logic for s in second.claims] == ["free_shipping"]
    assert first.claims[0].natural_language == "15%"
    assert first.untranslated_premises == ["What discount do I get?"]
    assert first.untranslated_claims == ["Thanks for asking!"]
    assert first.confidence == 1.0


SUBJECT_POLICY = {
    "version": "1.0",
    "variables": [
        {"name": "member", "type": "bool", "role": "premise", "description": "the asker is a member",
         "patterns": [{"regex": r"(?P<subject>\b\w+) is a member\b", "value": True}]},
        {"name": "discount", "type": "bool", "role": "claim", "description": "a discount applies",
         "patterns": [{"phrase": "you get a discount", "value": True}]},
    ],
    "rules": [{"id": "members", "expression": "(=> member discount)", "description": "Members get a discount."}],
}


def test_pattern_translator_binds_premises_to_the_first_subject_named(tmp_path):
    import yaml

    path = tmp_path / "subject.yaml"
    path.write_text(yaml.safe_dump(SUBJECT_POLICY), encoding="utf-8")
    policy = load_policy(path)
    own = check(policy, "Ann is a member. Does Ann get a discount?", "Yes, you get a discount.", PatternTranslator())
    assert aggregate(own) is Result.VALID
    [item] = PatternTranslator().translate("ANN asks. ann is a member.\nBob is a member.", "You get a discount.", policy)
    assert [s.logic for s in item.premises] == ["member"]
    assert "Bob is a member (about bob, not ann)" in item.untranslated_premises
    other = check(policy, "Cat is here? Bob is a member.", "You get a discount.", PatternTranslator())
    assert aggregate(other) is Result.VALID  # nothing names another subject first: Bob binds
    mixed = check(policy, "Ann is late. Bob is a member.", "You get a discount.", PatternTranslator())
    assert aggregate(mixed) is Result.VALID


def test_a_conditional_answer_is_checked_as_the_implication_it_states(pricing):
    question = "I am a gold member. What discount do I get?"
    [item] = PatternTranslator().translate(question, "If your items are regular-priced, you get 15% off.", pricing)
    assert [s.logic for s in item.claims] == ["(=> (not is_sale_item) (= discount_percent 15))"]
    assert "(not is_sale_item)" not in [s.logic for s in item.premises]  # the assumption is no premise
    assert aggregate(check(pricing, question, "If your items are regular-priced, you get 15% off.", PatternTranslator())) is Result.VALID
    # A wrong conditional is never proved (the solver can make its assumption false, so not INVALID either).
    assert aggregate(check(pricing, question, "If your items are regular-priced, you get 50% off.", PatternTranslator())) is Result.SATISFIABLE
    assert aggregate(check(pricing, question, "You get 15% off.", PatternTranslator())) is Result.SATISFIABLE


def test_pattern_translator_negations_win_over_plain_phrases(pricing):
    [t] = PatternTranslator().translate("I am not a member.", "You will pay for shipping.", pricing)
    assert [s.logic for s in t.premises] == ["(= tier none)"]
    assert [s.logic for s in t.claims] == ["(not free_shipping)"]


def test_pattern_translator_nothing_matched_is_no_translations(pricing):
    findings = check(pricing, "Hi", "Have a nice day.", PatternTranslator())
    assert [f.result for f in findings] == [Result.NO_TRANSLATIONS]
    assert findings[0].translation.untranslated_claims == ["Have a nice day."]


def _sample(premises, claims, untranslated=()):
    return json.dumps({
        "statements": [{"premises": [{"logic": p, "natural_language": p} for p in premises],
                        "claims": [{"logic": c, "natural_language": c} for c in claims]}],
        "untranslated_premises": [], "untranslated_claims": list(untranslated),
    })


class Scripted:
    """A generation backend that replays fixed completions and records what it was asked."""

    def __init__(self, completions):
        self.completions, self.calls = completions, []

    def generate(self, prompts, n, temperature):
        self.calls.append((prompts, n, temperature))
        return [self.completions[:n] for _ in prompts]


Q = "I am a gold member buying regular-priced items. What discount do I get?"
A = "You get 15% off."


def test_llm_translator_agreeing_samples_give_full_confidence(pricing):
    backend = Scripted([
        _sample(["(= tier gold)", "(not is_sale_item)"], ["(= discount_percent 15)"]),
        _sample(["(not is_sale_item)", "(= tier gold)"], ["(= 15 discount_percent)"]),  # same meaning, other text
        "```json\n" + _sample(["(= tier gold)", "(= is_sale_item false)"], ["(= discount_percent 15)"]) + "\n```",
    ])
    translator = LLMTranslator(backend, samples=3, temperature=0.5)
    [t] = translator.translate(Q, A, pricing)
    assert isinstance(t, Translation) and t.confidence == 1.0
    assert backend.calls[0][1:] == (3, 0.5)
    assert "discount_percent: int" in backend.calls[0][0][0] and "Tier: values none, silver, gold" in backend.calls[0][0][0]
    findings = check(pricing, Q, A, translator)
    assert aggregate(findings) is Result.VALID


def test_llm_translator_disagreement_below_threshold_is_translation_ambiguous(pricing):
    gold = _sample(["(= tier gold)", "(not is_sale_item)"], ["(= discount_percent 15)"])
    silver = _sample(["(= tier silver)", "(not is_sale_item)"], ["(= discount_percent 15)"])
    backend = Scripted([gold, silver, gold, "not json at all", gold])
    translator = LLMTranslator(backend, samples=5, threshold=0.8)
    [item] = translator.translate(Q, A, pricing)
    assert isinstance(item, Ambiguity)
    assert item.confidence == pytest.approx(3 / 5)  # the broken sample is a dissenting vote
    assert len(translator.rejected) == 1 and "no JSON object" in translator.rejected[0]
    leading, second = item.options
    assert [s.logic for s in leading[0].premises][0] == "(= tier gold)" and leading[0].confidence == pytest.approx(0.6)
    assert [s.logic for s in second[0].premises][0] == "(= tier silver)" and second[0].confidence == pytest.approx(0.2)
    [finding] = check(pricing, Q, A, translator)
    assert finding.result is Result.TRANSLATION_AMBIGUOUS
    # Scenarios are drawn under the policy: the silver reading (15% for silver) breaks a rule,
    # so the only situation where the readings differ is one where the gold reading holds.
    assert [s.assignments["tier"] for s in finding.difference_scenarios] == ["gold"]
    assert finding.difference_scenarios[0].assignments["discount_percent"] == 15


def test_llm_translator_at_threshold_keeps_the_leader(pricing):
    gold = _sample(["(= tier gold)"], ["(= discount_percent 15)"])
    other = _sample(["(= tier gold)"], ["(= discount_percent 10)"])
    [t] = LLMTranslator(Scripted([gold, gold, gold, other]), samples=4, threshold=0.75).translate(Q, A, pricing)
    assert isinstance(t, Translation) and t.confidence == 0.75 and t.claims[0].logic == "(= discount_percent 15)"


def test_llm_translator_untranslated_text_only_is_no_translations(pricing):
    empty = json.dumps({"statements": [], "untranslated_premises": ["Hello"], "untranslated_claims": ["Nice weather."]})
    translator = LLMTranslator(Scripted([empty, empty]), samples=2)
    findings = check(pricing, "Hello", "Nice weather.", translator)
    assert [f.result for f in findings] == [Result.NO_TRANSLATIONS]
    assert findings[0].translation.untranslated_claims == ["Nice weather."]


def test_llm_translator_rejects_unknown_variables_and_fails_loudly_when_nothing_parses(pricing):
    bad = _sample(["(= membership gold)"], ["(= discount_percent 15)"])
    translator = LLMTranslator(Scripted([bad, "{broken"]), samples=2)
    with pytest.raises(TranslationError, match="none of 2 samples parsed.*unknown variable 'membership'"):
        translator.translate(Q, A, pricing)


def test_llm_translator_over_a_local_openai_compatible_server(pricing, chat_server):
    gold = _sample(["(= tier gold)", "(not is_sale_item)"], ["(= discount_percent 15)"])
    silver = _sample(["(= tier silver)", "(not is_sale_item)"], ["(= discount_percent 15)"])
    calls = {"n": 0}

    def reply(body):
        calls["n"] += 1
        if calls["n"] == 1:
            return 503, []  # a transient failure is retried
        # This server ignores n and returns one choice; the client asks again for the rest.
        return 200, [gold if calls["n"] % 2 == 0 else silver]

    server = chat_server(reply)
    backend = TextModel.openai(server.base_url, "translator", timeout_s=5, retries=2, backoff_s=0.01)
    translator = LLMTranslator(backend, samples=4, threshold=1.0)
    [item] = translator.translate(Q, A, pricing)
    assert isinstance(item, Ambiguity) and item.confidence == 0.5
    assert server.paths[0] == "/v1/chat/completions"
    assert server.requests[1]["n"] == 4 and server.requests[-1]["n"] == 1
    assert server.requests[1]["model"] == "translator"


def test_http_backend_gives_up_with_a_clear_error(chat_server):
    server = chat_server(lambda body: (500, []))
    backend = TextModel.openai(server.base_url, "m", timeout_s=5, retries=1, backoff_s=0.01)
    with pytest.raises(BackendError, match=r"failed after 2 attempts; last error: HTTP 500"):
        backend.generate(["hi"], n=1, temperature=0.0)
    assert len(server.requests) == 2
    bad_request = chat_server(lambda body: (400, []))
    with pytest.raises(BackendError, match="HTTP 400"):
        TextModel.openai(bad_request.base_url, "m", retries=3, backoff_s=0.01).generate(["hi"], 1, 0.0)
    assert len(bad_request.requests) == 1  # a client error is not retried


def test_llm_translator_over_awarls_own_chat_backend(pricing, chat_server):
    from awarl.llm.openai_chat import OpenAIChatGenerator

    gold = _sample(["(= tier gold)", "(not is_sale_item)"], ["(= discount_percent 15)"])
    server = chat_server(lambda body: (200, [gold]))
    backend = OpenAIChatGenerator(server.base_url, "translator", check=False, concurrency=2, backoff=0.01)
    try:
        translator = LLMTranslator(TextModel(backend, max_new_tokens=256), samples=3, temperature=0.9)
        findings = check(pricing, Q, A, translator)
    finally:
        backend.close()
    assert aggregate(findings) is Result.VALID and findings[0].translation.confidence == 1.0
    assert len(server.requests) == 3
    assert {r["temperature"] for r in server.requests} == {0.9}
    assert server.requests[0]["max_tokens"] == 256


def test_text_model_drives_a_real_tiny_transformers_model(pricing, tiny_model_dir):
    from awarl.llm.hf import HFGenerator

    generator = TextModel(HFGenerator(tiny_model_dir, device="cpu", dtype="float32"), max_new_tokens=8)
    texts = generator.generate(["Translate: hello", "Translate: bye"], n=2, temperature=1.0)
    assert [len(t) for t in texts] == [2, 2] and all(isinstance(x, str) for row in texts for x in row)
    # An untrained model writes no JSON: the translator says so instead of guessing a verdict.
    with pytest.raises(TranslationError, match="none of 2 samples parsed"):
        LLMTranslator(generator, samples=2).translate(Q, A, pricing)


def _texts_of(policy_tests: Path) -> list[tuple[str, str]]:
    import yaml

    return [(t["question"], t["answer"]) for t in yaml.safe_load(policy_tests.read_text())["tests"]]


def test_the_literal_prefilter_never_changes_a_translation(tmp_path):
    """Skipping a pattern whose required text is absent is exact: every shipped policy's tests and a
    world's evidence (as written, upper-cased, lower-cased) translate the same with and without it."""
    from awarl.data.world import WorldConfig, evidence_text, generate_world, policy_yaml

    shipped = PRICING.parent
    cases = [(load_policy(shipped / f"{name}.yaml"), _texts_of(shipped / f"{name}.tests.yaml")) for name in ("pricing", "benefits")]
    world = generate_world(WorldConfig(version=2, persons=60, cities=8, countries=4, seed=0))
    (tmp_path / "world.yaml").write_text(policy_yaml(world), encoding="utf-8")
    countries = sorted({q.answer for q in world.questions})
    cases.append((load_policy(tmp_path / "world.yaml"),
                  [(evidence_text(world, q), f"It is {countries[i % len(countries)]}.") for i, q in enumerate(world.questions[:40])]))
    fast, slow = PatternTranslator(timeout_ms=60_000), PatternTranslator(timeout_ms=60_000, prefilter=False)
    compared = 0
    for policy, texts in cases:
        for question, answer in texts:
            for q, a in ((question, answer), (question.upper(), answer.upper()), (question.lower(), answer.lower())):
                assert fast.translate(q, a, policy) == slow.translate(q, a, policy), (q, a)
                compared += 1
    assert compared > 150
    # and it is the world policy's per-city patterns that it skips
    world_policy = cases[-1][0]
    city = next(v for v in world_policy.variables if v.name == "home_city")
    assert all(p.literal().startswith(" lives in ") for p in city.patterns)


def test_required_literal_reads_only_what_every_match_holds():
    from awarl.verify.regex_source import required_literal

    assert required_literal(r"\d+ dollars") == " dollars"
    assert required_literal("(gold|silver) member") == " member"
    assert required_literal("gold|silver") == ""  # a top-level alternative makes each run optional
    assert required_literal("colou?r") == "colo"
    assert required_literal(r"x{2}yy") == "yy"
    assert required_literal(r"\p{Lu}abc\.") == "abc."
    assert required_literal("(?x) a b c") == ""  # verbose mode: spaces are not text
    assert required_literal("[abc]") == ""


def test_an_answer_that_qualifies_its_claim_is_never_read_as_the_claim(tmp_path):
    """The pattern translator reads a country only from a sentence that says it plainly: a list claims
    every country it names (INVALID on the wrong one), and a negation, exception, doubt or alternative
    that no match accounts for ("or", "probably", "not … that it is") leaves the sentence unread, so it
    is never proved; a negation of another match ("R, not W") does not."""
    from awarl.data.world import WorldConfig, generate_world, policy_yaml

    world = generate_world(WorldConfig(persons=30, cities=8, countries=4, seed=0))
    (tmp_path / "world.yaml").write_text(policy_yaml(world), encoding="utf-8")
    policy = load_policy(tmp_path / "world.yaml")
    q = next(q for q in world.questions if q.answerable)
    right, wrong = q.answer, next(c for c in sorted({x.answer for x in world.questions if x.answerable}) if c != q.answer)

    def claims(template):
        answer = template.format(R=right, W=wrong)
        return sorted({c.logic.split()[-1].rstrip(")") for t in PatternTranslator().translate(q.question, answer, policy)
                       for c in getattr(t, "claims", [])})

    for plain in ("{R}", "It is {R}.", "{R}, not {W}", "It is {R}; it's not {W}", "not {W} but {R}",
                  "{R} is the answer — not {W}.", "{R} — not {W}", "No, it is {R}."):
        assert claims(plain) == [right], plain
    for hedge in ("{R}, {W}", "{R} and {W}"):
        assert claims(hedge) == sorted([right, wrong]), hedge
    for unread in ("It is not {R}.", "I do not think that it is {R}.", "It is not, in fact, {R}.", "probably {R}",
                   "maybe {R}", "Anything but {R}.", "Anywhere except {R}.", "Other than {R}, I have no idea.",
                   "I doubt it is {R}.", "{R} is ruled out.", "{R}: no.", "It isn't {W}, it's {R} or {W}.",
                   "{R} rather than {W}", "{R}, unless it is {W}", "{R}?", "I am not sure it is {R}.", "{R} or {W}",
                   "either {R} or {W}", "{R}/{W}", "{R} enough information", "{R}, not enough information",
                   "{R} (unknown)", "It is unclear; {R}", "Insufficient evidence: {R}", "I am unable to tell; {R}"):
        assert claims(unread) == [], unread
