"""The ensemble's verdict on counterfactuals: per-model validity, agreement, counted queries."""

from __future__ import annotations

import numpy as np
import pytest

from recourselab.errors import DataError
from recourselab.models.oracle import BlackBox, EnsembleOutput, QueryBudgetExceeded
from recourselab.models.verdict import Verdict, as_oracle, verify


class Fixed:
    """A model that labels row i with ``labels[i]`` (one-hot binary probabilities)."""

    def __init__(self, labels: list[int]) -> None:
        self.labels = np.asarray(labels)
        self.calls = 0

    def predict_proba(self, X: np.ndarray) -> np.ndarray:
        self.calls += 1
        lab = self.labels[: len(X)]
        return np.stack([1 - lab, lab], axis=1).astype(float)


def test_verdict_per_model_validity_agreement_unanimous_and_majority():
    labels = np.array([[1, 1, 0, 1], [1, 0, 0, 1], [1, 1, 1, 0]])  # members x rows
    out = EnsembleOutput(("a", "b", "c"), np.stack([1 - labels, labels], axis=-1).astype(float))
    v = Verdict.from_output(out, 1)
    assert v.member_valid.shape == (4, 3)
    assert {k: x.tolist() for k, x in v.per_model().items()} == {
        "a": [True, True, False, True], "b": [True, False, False, True], "c": [True, True, True, False]}
    np.testing.assert_allclose(v.agreement, [1, 2 / 3, 1 / 3, 2 / 3])
    np.testing.assert_allclose(v.agreement, out.agreement(np.ones(4, dtype=int)))
    assert v.unanimous.tolist() == [True, False, False, False]
    assert v.majority.tolist() == [True, True, False, True]
    assert v.rejected_by_majority.tolist() == [False, False, True, False]
    assert v.counts() == {"n": 4, "rejected_by_any": 3, "rejected_by_majority": 1, "rejected_by_all": 0,
                          "mean_agreement": pytest.approx(2 / 3), "valid_per_model": {"a": 3, "b": 2, "c": 3}}
    frame = v.frame()
    assert list(frame.columns) == ["valid__a", "valid__b", "valid__c", "agreement", "valid_unanimous",
                                   "valid_majority"]
    assert frame["valid__b"].tolist() == [True, False, False, True]


def test_a_tie_is_neither_accepted_nor_rejected_by_a_majority():
    out = EnsembleOutput(("a", "b"), np.array([[[0.0, 1.0]], [[1.0, 0.0]]]))
    v = Verdict.from_output(out, np.array([1]))
    assert v.agreement.tolist() == [0.5]
    assert not v.majority[0] and not v.rejected_by_majority[0] and not v.unanimous[0]


def test_verify_queries_once_under_its_budget():
    a, b = Fixed([1, 0, 1]), Fixed([1, 1, 1])
    box = BlackBox({"a": a, "b": b})
    X = np.zeros((3, 2))
    v = verify(box, X, np.array([1, 1, 0]), budget_name="check")
    assert box.used("check") == 3 and a.calls == b.calls == 1
    assert v.queries == 3 and v.budget_name == "check"
    assert v.member_valid.tolist() == [[True, True], [False, True], [False, False]]


def test_a_budget_too_small_refuses_before_any_member_is_called():
    a = Fixed([1, 1, 1])
    box = BlackBox({"a": a}, budgets={"verify": 2})
    with pytest.raises(QueryBudgetExceeded, match=r"verifying 3 counterfactuals .* only 2 are left"):
        verify(box, np.zeros((3, 2)), 1)
    assert a.calls == 0 and box.used("verify") == 0


def test_a_mapping_or_a_single_model_is_wrapped_in_a_blackbox():
    a = Fixed([1, 0])
    assert as_oracle({"a": a}).member_names == ("a",)
    assert as_oracle(a).member_names == ("Fixed",)
    box = BlackBox({"a": a})
    assert as_oracle(box) is box
    with pytest.raises(TypeError, match="BlackBox, a mapping of named models or one model"):
        as_oracle(42)


@pytest.mark.parametrize("target", [np.array([1, 1]), np.array([0, 2, 1]), np.array([0.5, 1.0, 1.0])])
def test_targets_that_are_not_class_indices_of_the_rows_are_refused(target):
    out = EnsembleOutput(("a",), np.full((1, 3, 2), 0.5))
    with pytest.raises(DataError, match="verdict targets must be 3 class indices"):
        Verdict.from_output(out, target)
