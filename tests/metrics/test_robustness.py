"""Validity under model multiplicity, the query set, and over-seed summaries."""

from __future__ import annotations

import numpy as np
import pytest

from recourselab.errors import DataError
from recourselab.metrics.robustness import query_set, summarize_seeds, validity_by_direction, validity_metrics
from recourselab.models.oracle import EnsembleOutput


def _output(labels: list[list[int]]) -> EnsembleOutput:
    """Members x rows hard labels as one-hot binary probabilities."""
    lab = np.asarray(labels)
    proba = np.stack([1 - lab, lab], axis=-1).astype(float)
    return EnsembleOutput(tuple(f"m{i}" for i in range(len(lab))), proba)


def test_validity_per_model_mean_unanimous_and_majority():
    out = _output([[1, 1, 0, 1], [1, 0, 0, 1], [1, 1, 1, 0]])
    m = validity_metrics(out, np.ones(4, dtype=int))
    assert m["per_model"] == {"m0": 0.75, "m1": 0.5, "m2": 0.75}
    assert m["mean_per_model"] == pytest.approx(2 / 3)
    assert m["unanimous"] == 0.25  # only row 0 is labelled 1 by every member
    assert m["majority"] == 0.75  # rows 0, 1, 3


def test_query_set_keeps_rows_every_member_gets_right_up_to_the_cap():
    out = _output([[1, 0, 1, 1, 0], [1, 0, 0, 1, 0]])
    y = np.array([1, 0, 1, 1, 1])
    assert query_set(out, y, 10).tolist() == [0, 1, 3]
    # Over the cap: a seeded random subset of the eligible rows, ascending, not the first rows.
    picks = {tuple(query_set(out, y, 2, seed=s).tolist()) for s in range(20)}
    assert picks == {(0, 1), (0, 3), (1, 3)}
    assert query_set(out, y, 2, seed=5).tolist() == query_set(out, y, 2, seed=5).tolist()


def test_query_set_does_not_depend_on_row_order():
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 2, 1000)
    out = _output([labels, labels])
    rows = query_set(out, labels, 100, seed=1)
    assert len(rows) == 100 and np.all(np.diff(rows) > 0)
    assert rows.max() > 500  # drawn from the whole file, not its first 100 rows


def test_majority_is_strict_and_a_tie_is_not_valid():
    out = _output([[1, 1, 0], [0, 1, 0]])  # two members: row 0 is a 1-1 tie
    assert validity_metrics(out, np.array([1, 1, 0]))["majority"] == pytest.approx(2 / 3)  # rows 1, 2
    assert validity_metrics(out, np.array([0, 1, 0]))["majority"] == pytest.approx(2 / 3)  # same tie, other target
    three = EnsembleOutput(("a", "b", "c"), np.eye(3)[[[2], [0], [1]]])  # three classes, one vote each
    assert validity_metrics(three, np.array([2]))["majority"] == 0.0


def test_summarize_seeds_means_nested_metrics_and_tolerates_missing_ones():
    per_seed = {
        0: {"a": 1.0, "nested": {"b": 2}, "flag": True, "first": None, "name": "x"},
        1: {"a": 3.0, "nested": {"b": 4}, "flag": False, "first": 7},
        2: {"a": 5.0, "nested": {"b": 6}, "flag": True, "first": 9},
    }
    s = summarize_seeds(per_seed)
    assert s["seeds"] == [0, 1, 2] and set(s["per_seed"]) == {"0", "1", "2"}
    assert s["summary"]["a"] == {"mean": 3.0, "std": pytest.approx(2.0), "n": 3}  # sample std (ddof 1) of 1, 3, 5
    assert s["summary"]["nested.b"]["mean"] == 4.0
    # None in seed 0 (e.g. a NaN stored as JSON null): seeds 1, 2, and n says so
    assert s["summary"]["first"] == {"mean": 8.0, "std": pytest.approx(2 ** 0.5), "n": 2}
    numpy = summarize_seeds({0: {"k": np.int64(2), "f": np.float32(0.5)}, 1: {"k": np.int64(4), "f": np.float32(1.5)}})
    assert numpy["summary"]["k"]["mean"] == 3.0 and numpy["summary"]["f"]["mean"] == 1.0
    assert "flag" not in s["summary"] and "name" not in s["summary"]  # bools and strings are not averaged
    one = summarize_seeds({0: {"a": 2.0}, 1: {"a": None}, 2: {"a": float("nan")}})["summary"]["a"]
    assert one == {"mean": 2.0, "std": None, "n": 1}  # no sample std from one seed (not 0)


def test_empty_query_sets_and_counterfactual_sets_are_refused():
    out = _output([[1, 0], [0, 1]])  # the members disagree on both rows
    with pytest.raises(DataError, match=r"the query set is empty: none of the 2 rows is classified correctly by "
                                        r"every member \(m0, m1\)"):
        query_set(out, np.array([1, 0]), 10)
    with pytest.raises(DataError, match="validity needs at least one counterfactual, got 0 rows"):
        validity_metrics(EnsembleOutput(("a",), np.zeros((1, 0, 2))), np.zeros(0, dtype=int))


def test_validity_by_direction_splits_recourse_from_the_reverse():
    # rows 0-2: factual 0 -> target 1 (favourable 1: recourse); rows 3-4: factual 1 -> target 0 (reverse)
    out = _output([[1, 1, 0, 0, 1], [1, 0, 0, 0, 0]])
    factual = np.array([0, 0, 0, 1, 1])
    target = 1 - factual
    by = validity_by_direction(out, target, factual, favourable=1)
    assert set(by) == {"unfavourable_to_favourable", "favourable_to_unfavourable"}
    recourse, reverse = by["unfavourable_to_favourable"], by["favourable_to_unfavourable"]
    assert recourse == {"n": 3, **validity_metrics(_output([[1, 1, 0], [1, 0, 0]]), np.ones(3, dtype=int))}
    assert recourse["per_model"] == {"m0": pytest.approx(2 / 3), "m1": pytest.approx(1 / 3)}
    assert reverse["n"] == 2 and reverse["per_model"] == {"m0": 0.5, "m1": 1.0} and reverse["unanimous"] == 0.5
    # the overall figures are the row-weighted mix of the two directions
    overall = validity_metrics(out, target)
    mixed = (3 * recourse["mean_per_model"] + 2 * reverse["mean_per_model"]) / 5
    assert overall["mean_per_model"] == pytest.approx(mixed)
    # favourable class 0 swaps the roles
    swapped = validity_by_direction(out, target, factual, favourable=0)
    assert swapped["unfavourable_to_favourable"] == reverse and swapped["favourable_to_unfavourable"] == recourse


def test_a_direction_without_rows_has_a_zero_count_and_no_values_and_three_classes_add_a_third():
    out = _output([[1, 1], [1, 0]])
    by = validity_by_direction(out, np.array([1, 1]), np.array([0, 0]), favourable=1)
    assert by["favourable_to_unfavourable"] == {"n": 0, "per_model": {"m0": None, "m1": None},
                                                "mean_per_model": None, "unanimous": None, "majority": None}
    assert summarize_seeds({0: {"v": by}})["summary"]["v.unfavourable_to_favourable.n"]["mean"] == 2
    assert "v.favourable_to_unfavourable.mean_per_model" not in summarize_seeds({0: {"v": by}})["summary"]
    three = EnsembleOutput(("a",), np.eye(3)[[[1, 2, 0]]])  # labels 1, 2, 0 for the three rows
    factual, target = np.array([0, 1, 2]), np.array([1, 2, 0])  # favourable 1: 0->1, 1->2, 2->0
    by3 = validity_by_direction(three, target, factual, favourable=1)
    assert {k: v["n"] for k, v in by3.items()} == {"unfavourable_to_favourable": 1, "favourable_to_unfavourable": 1,
                                                   "unfavourable_to_unfavourable": 1}
    with pytest.raises(DataError, match="one factual label per counterfactual"):
        validity_by_direction(three, target, factual[:2], favourable=1)
