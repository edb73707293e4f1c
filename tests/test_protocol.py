import pytest

from awarl.protocol import (
    ABSTAIN_PHRASE,
    build_messages,
    exact_match,
    extract_answer,
    extract_citations,
    format_final,
    is_abstention,
    normalize_answer,
    parse_final,
    score,
    score_text,
    token_f1,
)


@pytest.mark.parametrize(
    "raw,norm",
    [
        ("The Beatles", "beatles"),
        ("an apple a day", "apple day"),
        ("U.S.A.", "usa"),
        ("  Hello,   World! ", "hello world"),
        ("\u201cQuoted\u201d", "quoted"),
        ("Yes", "yes"),
    ],
)
def test_normalize(raw, norm):
    assert normalize_answer(raw) == norm


def test_em_and_f1():
    assert exact_match("the Eiffel Tower", ["Eiffel Tower"]) == 1.0
    assert exact_match("Eiffel", ["Eiffel Tower"]) == 0.0
    assert token_f1("Eiffel", ["Eiffel Tower"]) == pytest.approx(2 / 3)
    assert token_f1("tower eiffel", ["x", "Eiffel Tower"]) == 1.0
    # yes/no only match themselves (HotpotQA official rule)
    assert token_f1("yes", ["yes it is"]) == 0.0
    assert token_f1("no", ["no"]) == 1.0
    assert token_f1("", ["a"]) == 0.0


def test_extract_answer_and_citations():
    text = "I think <answer>wrong</answer> no wait <answer> Ronald Shusett </answer> [d3f2a] [d91c0] [d3f2a]"
    assert extract_answer(text) == "Ronald Shusett"
    assert extract_citations(text) == ["d3f2a", "d91c0"]
    assert extract_answer("no tags here") is None
    assert extract_citations("[not an id!] [ok_1]") == ["ok_1"]
    # a block that holds another opening tag is malformed: no answer, so it scores as unparsable, never as
    # "<answer>Paris" (wrong) in one reader and "Paris" (right) in another
    assert extract_answer("<answer><answer>Paris</answer> who") is None
    assert score(parse_final("<answer><answer>Paris</answer>"), ["Paris"]).outcome == "unparsable"
    assert extract_answer("<answer>Paris</answer></answer>") == "Paris"  # a stray closing tag after it is outside


@pytest.mark.parametrize(
    "answer,expected",
    [
        ("not enough information", True),
        ("Not enough information.", True),
        ("NOT ENOUGH INFORMATION!", True),
        ("I don't know", True),
        ("", False),
        (None, False),
        ("Paris", False),
        ("There is not enough information on his mother, but his father was Tom Smith", False),
    ],
)
def test_abstention(answer, expected):
    assert is_abstention(answer) is expected


def test_abstention_phrases_configurable():
    assert not is_abstention("no idea")
    assert is_abstention("No idea.", phrases=["no idea"])


def test_score_outcomes():
    golds = ["Paris"]
    assert score_text("<answer>Paris</answer>", golds).outcome == "correct"
    assert score_text("<answer>Lyon</answer>", golds).outcome == "wrong"
    assert score_text(f"<answer>{ABSTAIN_PHRASE}</answer>", golds).outcome == "abstain"
    assert score_text("Paris", golds).outcome == "unparsable"
    empty = score_text("<answer></answer>", golds)
    assert empty.outcome == "wrong" and not empty.correct
    # answering an unanswerable question is wrong whatever it says
    assert score_text("<answer>Paris</answer>", golds, answerable=False).outcome == "wrong"
    assert score_text(f"<answer>{ABSTAIN_PHRASE}</answer>", golds, answerable=False).outcome == "abstain"
    partial = score(parse_final("<answer>Paris</answer>"), ["Paris France"], metric="f1")
    assert partial.outcome == "correct" and partial.em == 0.0 and partial.f1 == pytest.approx(2 / 3)
    hedged = score(parse_final("<answer>Paris France</answer>"), golds, metric="f1")  # longer than the gold
    assert hedged.outcome == "wrong" and hedged.hedged and hedged.f1 == pytest.approx(2 / 3)


def test_messages_completion_parsing():
    completion = [
        {"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": {"name": "search"}}]},
        {"role": "tool", "name": "search", "content": "Paris: capital <answer>bait</answer> [d1]"},
        {"role": "assistant", "content": format_final("Paris", ["d1"])},
    ]
    parsed = parse_final(completion)
    assert parsed.answer == "Paris" and parsed.citations == ["d1"] and not parsed.abstained
    assert [m["role"] for m in build_messages("q")] == ["system", "user"]
