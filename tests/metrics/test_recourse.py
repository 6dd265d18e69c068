"""The shared recourse scoring: validity from the verdict, costs, immutables, queries, the over-seed table."""

from __future__ import annotations

import math

import numpy as np
import pytest

from recourselab.errors import DataError
from recourselab.methods.base import Counterfactuals
from recourselab.metrics.recourse import (
    ROW_COLUMNS,
    TABLE_KEYS,
    immutable_violations,
    monotone_violations,
    rows_frame,
    score_counterfactuals,
    summarize_scores,
)
from recourselab.models.verdict import Verdict


def _cf(method="m", queries=7, wall=0.5):
    X = np.array([[0.0, 0.0, 1.0], [1.0, 1.0, 0.0], [2.0, 0.0, 1.0], [0.0, 3.0, 0.0]])
    C = X + np.array([[3.0, 4.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 1.0], [0.0, -2.0, 0.0]])  # row 2 moves column 2
    return Counterfactuals(method=method, factuals=X, counterfactuals=C, counterfactuals_original=None,
                           target=np.ones(4, dtype=np.int64), queries=queries, wall_time=wall)


def _verdict():
    labels = np.array([[1, 1, 1], [1, 0, 1], [0, 0, 1], [0, 0, 0]])  # agreement 1, 2/3, 1/3, 0
    return Verdict(member_names=("a", "b", "c"), member_labels=labels, target=np.ones(4, dtype=np.int64))


IMMUTABLE = np.array([False, False, True])


def test_scores_follow_the_verdict_and_the_costs():
    s = score_counterfactuals(_cf(), _verdict(), immutable=IMMUTABLE, setting="s", seed=3)
    assert s.validity_per_model == {"a": 0.5, "b": 0.25, "c": 0.75}
    assert s.validity_mean == pytest.approx(0.5)
    assert s.validity_unanimous == 0.25 and s.validity_majority == 0.5
    assert s.cost_l1 == pytest.approx((7 + 1 + 1 + 2) / 4)
    assert s.cost_l2 == pytest.approx((5 + 1 + 1 + 2) / 4)
    assert s.immutable_violations == 1
    assert (s.queries, s.wall_time_s, s.seed, s.n) == (7, 0.5, 3, 4)
    assert math.isnan(s.plausibility_lof)
    row = s.row()
    assert set(TABLE_KEYS) <= set(row) and row["method"] == "m" and row["setting"] == "s"
    assert score_counterfactuals(_cf(), _verdict(), immutable=IMMUTABLE, queries=99).queries == 99


def test_plausibility_is_computed_with_training_rows():
    rng = np.random.default_rng(0)
    X_train = rng.normal(size=(200, 3))
    y_train = np.r_[np.zeros(100, int), np.ones(100, int)]
    s = score_counterfactuals(_cf(), _verdict(), immutable=IMMUTABLE, X_train=X_train, y_train=y_train)
    assert 0.0 <= s.plausibility_lof <= 1.0 and 0.0 <= s.plausibility_iforest <= 1.0


def test_immutable_violations_count_rows_not_cells():
    X = np.zeros((3, 4))
    C = X.copy()
    C[0, [2, 3]] = 1.0
    C[1, 0] = 5.0
    assert immutable_violations(X, C, np.array([False, False, True, True])) == 1
    assert immutable_violations(X, C, np.zeros(4, bool)) == 0
    with pytest.raises(DataError, match="mask"):
        immutable_violations(X, C, np.zeros(3, bool))


def test_monotone_violations_count_rows_that_moved_the_forbidden_way():
    X = np.zeros((4, 3))
    C = X.copy()
    C[0, 0] = -1.0   # fell: breaks "increasing"
    C[1, 0] = 2.0    # rose: fine
    C[2, 1] = 3.0    # rose: breaks "decreasing"
    C[3, 2] = -9.0   # no rule
    signs = np.array([1, -1, 0])
    assert monotone_violations(X, C, signs) == 2
    assert monotone_violations(X, C, np.zeros(3, int)) == 0
    assert monotone_violations(X, X - 1e-12, signs) == 0  # within the tolerance
    with pytest.raises(DataError, match="signs"):
        monotone_violations(X, C, np.zeros(2, int))


def test_rows_frame_has_one_row_per_counterfactual():
    f = rows_frame(_cf(), _verdict(), setting="s", seed=1)
    assert tuple(f.columns) == ROW_COLUMNS and len(f) == 4
    assert f["valid_unanimous"].tolist() == [True, False, False, False]
    np.testing.assert_allclose(f["agreement"], [1, 2 / 3, 1 / 3, 0])


def test_a_verdict_of_other_rows_is_refused():
    v = _verdict()
    short = Verdict(member_names=v.member_names, member_labels=v.member_labels[:2], target=v.target[:2])
    with pytest.raises(DataError, match="verdict covers 2 rows"):
        score_counterfactuals(_cf(), short, immutable=IMMUTABLE)


def test_summary_is_mean_and_std_over_seeds_per_method_and_setting():
    scores = [score_counterfactuals(_cf(queries=q, wall=w), _verdict(), immutable=IMMUTABLE, setting="s", seed=i)
              for i, (q, w) in enumerate([(10, 1.0), (20, 3.0)])]
    scores.append(score_counterfactuals(_cf(method="other"), _verdict(), immutable=IMMUTABLE, seed=0))
    table = summarize_scores(scores)
    assert [(e["method"], e["setting"], e["seeds"]) for e in table] == [("m", "s", 2), ("other", "default", 1)]
    assert table[0]["queries"] == 15 and table[0]["queries_std"] == pytest.approx(np.std([10, 20], ddof=1))
    assert table[1]["queries_std"] == 0.0
    for entry in table:
        assert all(k in entry and f"{k}_std" in entry for k in TABLE_KEYS)
