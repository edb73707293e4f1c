import pytest
from hypothesis import given
from hypothesis import strategies as st

from awarl.protocol import Score
from awarl.eval.metrics import by_dataset, compute_metrics, macro_average, ra_f1

C, W, A, U = Score("correct", 1, 1), Score("wrong", 0, 0), Score("abstain", 0, 0), Score("unparsable", 0, 0)


def test_hand_computed():
    # 10 questions: 4 correct, 2 wrong, 1 unparsable, 3 abstain
    m = compute_metrics([C] * 4 + [W] * 2 + [U] + [A] * 3)
    # an unparsable reply did not abstain: it counts as answered (and wrong)
    assert (m.n, m.answered, m.abstained, m.correct, m.unparsable) == (10, 7, 3, 4, 1)
    assert m.precision == pytest.approx(4 / 7)
    assert m.accuracy == pytest.approx(0.4)
    assert m.ra_f1 == pytest.approx(2 * (4 / 7) * 0.4 / (4 / 7 + 0.4))
    assert m.refusal_rate == pytest.approx(0.3)
    assert m.em == pytest.approx(0.4)


def test_edge_cases():
    assert compute_metrics([A, A]).ra_f1 == 0.0  # all abstain: P = A = 0
    assert compute_metrics([A, A]).refusal_rate == 1.0
    none = compute_metrics([C, W])
    assert none.refusal_rate == 0.0 and none.precision == none.accuracy == 0.5 and none.ra_f1 == 0.5
    assert compute_metrics([W, W]).ra_f1 == 0.0
    assert compute_metrics([]).n == 0


def test_unanswerable_rates():
    m = compute_metrics([A, W, A, C], answerable=[False, False, True, True])
    assert m.abstain_recall == 0.5 and m.over_refusal == 0.5 and m.n_unanswerable == 2
    assert compute_metrics([A, C]).abstain_recall is None


def test_macro_average():
    per = by_dataset([("a", C, True), ("a", W, True), ("b", C, True), ("b", A, True), ("b", A, True)])
    assert per["a"].ra_f1 == pytest.approx(0.5)
    assert per["b"].precision == 1.0 and per["b"].accuracy == pytest.approx(1 / 3)
    macro = macro_average(per)
    assert macro["ra_f1"] == pytest.approx((per["a"].ra_f1 + per["b"].ra_f1) / 2)
    assert macro["n"] == 5


outcomes = st.lists(st.sampled_from([C, W, A, U]), min_size=1, max_size=60)


@given(outcomes)
def test_ra_f1_bounds(scores):
    m = compute_metrics(scores)
    assert 0.0 <= m.ra_f1 <= 1.0
    assert min(m.precision, m.accuracy) - 1e-12 <= m.ra_f1 <= max(m.precision, m.accuracy) + 1e-12
    assert m.accuracy <= m.precision + 1e-12  # answered <= all
    assert m.answered + m.abstained == m.n


@given(st.floats(0, 1), st.floats(0, 1))
def test_ra_f1_symmetric_and_bounded(p, a):
    assert ra_f1(p, a) == pytest.approx(ra_f1(a, p))
    assert ra_f1(p, a) <= max(p, a) + 1e-12
