"""`parse_decision`: tolerant of the ways models dress up DECISION / ANSWER / QUESTION lines."""

from __future__ import annotations

import logging

import pytest

from awarl.chat.parser import parse_decision


def test_plain_rewrite():
    d = parse_decision("DECISION: REWRITE\nANSWER: As a gold member you get 15% off.")
    assert (d.kind, d.text, d.questions, d.parsed) == ("REWRITE", "As a gold member you get 15% off.", [], True)


@pytest.mark.parametrize("line", ["decision: rewrite", "**DECISION:** REWRITE", "## Decision: Rewrite", "- Decision - REWRITE",
                                  "**Decision**: `REWRITE`", "> DECISION: REWRITE."])
def test_decision_line_in_any_case_and_markdown(line):
    d = parse_decision(f"{line}\n**Answer:** Shipping is free.")
    assert d.kind == "REWRITE" and d.text == "Shipping is free." and d.parsed


def test_text_before_the_decision_is_ignored():
    d = parse_decision("Let me think about the policy first.\nThe rule says 15%.\n\nDECISION: REWRITE\nANSWER: You get 15% off.")
    assert d.text == "You get 15% off."


def test_multi_line_answer_is_kept_whole():
    d = parse_decision("DECISION: REWRITE\nANSWER: You get 15% off.\nShipping is free as well.\n\n- Returns within 30 days.")
    assert d.text == "You get 15% off.\nShipping is free as well.\n\n- Returns within 30 days."


def test_answer_on_the_line_after_its_label():
    assert parse_decision("DECISION: REWRITE\nANSWER:\nYou get 15% off.").text == "You get 15% off."


@pytest.mark.parametrize("q1,q2", [
    ("QUESTION: Are the items on sale?", "QUESTION: Is the order over $50?"),
    ("- QUESTION: Are the items on sale?", "- QUESTION: Is the order over $50?"),        # bulleted labels
    ("1. Question: Are the items on sale?", "2. Question: Is the order over $50?"),
    ("* **Question 1:** Are the items on sale?", "* **Question 2:** Is the order over $50?"),
])
def test_questions_with_bullets_numbers_and_bold(q1, q2):
    d = parse_decision(f"**Decision:** ASK_QUESTIONS\n{q1}\n{q2}")
    assert d.kind == "ASK_QUESTIONS"
    assert d.questions == ["Are the items on sale?", "Is the order over $50?"]


def test_questions_listed_under_a_header():
    d = parse_decision("DECISION: ASK QUESTIONS\nQUESTIONS:\n1. Are the items on sale?\n2. Is the order over $50?")
    assert d.kind == "ASK_QUESTIONS" and d.questions == ["Are the items on sale?", "Is the order over $50?"]


def test_at_most_five_questions_are_kept():
    text = "DECISION: ASK_QUESTIONS\n" + "\n".join(f"QUESTION: q{i}?" for i in range(8))
    d = parse_decision(text)
    assert d.questions == [f"q{i}?" for i in range(5)]
    assert "8 questions" in d.note


def test_impossible_with_explanation():
    d = parse_decision("DECISION: IMPOSSIBLE\nANSWER: Your order cannot be both $30 and $90.")
    assert d.kind == "IMPOSSIBLE" and d.text == "Your order cannot be both $30 and $90."


def test_impossible_explanation_without_label():
    d = parse_decision("DECISION: IMPOSSIBLE\nThe order total is given twice with different values.")
    assert d.kind == "IMPOSSIBLE" and d.text == "The order total is given twice with different values."


def test_missing_decision_but_answer_reads_as_rewrite():
    d = parse_decision("ANSWER: You get 15% off.")
    assert d.kind == "REWRITE" and d.text == "You get 15% off." and d.parsed


def test_unparseable_reply_is_a_rewrite_of_the_whole_text_and_logged(caplog):
    with caplog.at_level(logging.WARNING, logger="awarl.chat.parser"):
        d = parse_decision("You get 15% off, and shipping is free.")
    assert (d.kind, d.text, d.parsed) == ("REWRITE", "You get 15% off, and shipping is free.", False)
    assert "unparseable decision" in caplog.text


@pytest.mark.parametrize("text,note", [("", "empty reply"), ("DECISION: ASK_QUESTIONS\nI need more details.", "without any QUESTION"),
                                       ("DECISION: REWRITE", "without an answer")])
def test_incomplete_replies_fall_back_to_a_rewrite(text, note):
    d = parse_decision(text)
    assert d.kind == "REWRITE" and not d.parsed and note in d.note and d.text == text.strip()


def test_unknown_decision_word_is_not_a_decision():
    d = parse_decision("DECISION: MAYBE\nANSWER: Perhaps 15%.")
    assert d.kind == "REWRITE" and d.text == "Perhaps 15%."  # the answer still counts


# More shapes models really write: a label alone on its line, Q1: labels, two questions on a line,
# code fences, a second DECISION.

def test_question_label_alone_with_the_question_on_the_next_line():
    d = parse_decision("DECISION: ASK_QUESTIONS\nQUESTION:\nAre the items on sale?\nQUESTION:\nIs the order over $50?")
    assert d.kind == "ASK_QUESTIONS" and d.questions == ["Are the items on sale?", "Is the order over $50?"]


@pytest.mark.parametrize("q1,q2", [("Q1: Are the items on sale?", "Q2: Is the order over $50?"),
                                   ("**Q1:** Are the items on sale?", "**Q2:** Is the order over $50?"),
                                   ("Q: Are the items on sale?", "Q: Is the order over $50?")])
def test_q_labels_are_questions(q1, q2):
    d = parse_decision(f"DECISION: ASK_QUESTIONS\n{q1}\n{q2}")
    assert d.kind == "ASK_QUESTIONS" and d.questions == ["Are the items on sale?", "Is the order over $50?"]
    assert d.text == ""


@pytest.mark.parametrize("line", ["QUESTION: Are the items on sale? QUESTION: Is the order over $50?",
                                  "Q1: Are the items on sale? Q2: Is the order over $50?"])
def test_two_questions_on_one_line_are_two_questions(line):
    d = parse_decision(f"DECISION: ASK_QUESTIONS\n{line}")
    assert d.questions == ["Are the items on sale?", "Is the order over $50?"]


def test_code_fences_are_not_part_of_the_answer():
    d = parse_decision("```\nDECISION: REWRITE\nANSWER: You get 15% off.\n```")
    assert d.kind == "REWRITE" and d.text == "You get 15% off." and d.parsed
    d = parse_decision("```text\nDECISION: REWRITE\nANSWER: You get 15% off.\nShipping is free.\n```\n")
    assert d.text == "You get 15% off.\nShipping is free."


def test_the_last_decision_counts_with_the_lines_after_it():
    d = parse_decision("DECISION: ASK_QUESTIONS\nQUESTION: Are you a member?\n\nOn reflection the policy settles it.\n"
                       "DECISION: REWRITE\nANSWER: You get 15% off.")
    assert (d.kind, d.text, d.questions) == ("REWRITE", "You get 15% off.", [])
    d = parse_decision("DECISION: REWRITE\nANSWER: You get 15% off.\nDECISION: ASK_QUESTIONS\nQUESTION: Are you a member?")
    assert (d.kind, d.text, d.questions) == ("ASK_QUESTIONS", "", ["Are you a member?"])


def test_a_question_mark_in_an_answer_is_not_a_question_label():
    d = parse_decision("DECISION: REWRITE\nANSWER: Is shipping free? Yes, on orders over $50.")
    assert d.kind == "REWRITE" and d.text == "Is shipping free? Yes, on orders over $50."


def test_an_answer_written_as_the_prompts_json_string_is_unquoted():
    """The rewrite prompts show the earlier answer as a JSON string; a model that answers the same way is
    served the text inside it, and an answer that merely starts and ends with quoted words is kept."""
    assert parse_decision('DECISION: REWRITE\nANSWER: "As a gold member you get 15% off [d1]."').text == \
        "As a gold member you get 15% off [d1]."
    assert parse_decision('DECISION: REWRITE\nANSWER: "Gold" and "Silver" are "plans"').text == \
        '"Gold" and "Silver" are "plans"'
