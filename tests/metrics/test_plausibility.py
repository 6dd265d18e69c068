"""Plausibility metrics: LOF / IsolationForest inlier rates, ensemble uncertainty, RQ2 Spearman."""

from __future__ import annotations

import math

import numpy as np
import pytest

from recourselab.errors import DataError
from recourselab.metrics.plausibility import density_variance_spearman, ensemble_uncertainty, inlier_rates
from recourselab.models.oracle import EnsembleOutput


def _two_blobs(n=300, seed=0):
    rng = np.random.default_rng(seed)
    X = np.vstack([rng.normal(-3.0, 0.5, (n, 2)), rng.normal(3.0, 0.5, (n, 2))])
    y = np.repeat([0, 1], n)
    return X, y


def test_counterfactuals_inside_their_target_class_are_inliers_and_far_ones_are_not():
    X, y = _two_blobs()
    target = np.array([1, 1, 0, 0])
    inside = np.array([[3.0, 3.0], [2.9, 3.1], [-3.0, -3.0], [-3.1, -2.9]])
    assert inlier_rates(inside, target, X, y) == {"lof_inlier_rate": 1.0, "iforest_inlier_rate": 1.0}
    # in the other class's blob: outliers of the target class
    swapped = inlier_rates(inside, 1 - target, X, y)
    assert swapped == {"lof_inlier_rate": 0.0, "iforest_inlier_rate": 0.0}
    half = inlier_rates(np.array([[3.0, 3.0], [40.0, 40.0]]), np.array([1, 1]), X, y, max_fit_rows=100)
    assert half == {"lof_inlier_rate": 0.5, "iforest_inlier_rate": 0.5}


def test_reference_rates_are_those_of_real_rows_weighted_like_the_targets():
    X, y = _two_blobs()
    ref_X = np.array([[3.0, 3.0], [40.0, 40.0], [-3.0, -3.0], [-3.0, -3.1]])  # class 1: one inlier of two
    ref_y = np.array([1, 1, 0, 0])                                            # class 0: two of two
    target = np.array([1, 1, 1, 0])  # 3/4 of the counterfactuals target class 1
    cf = np.array([[3.0, 3.0], [3.1, 2.9], [2.9, 3.0], [-3.0, -3.0]])
    out = inlier_rates(cf, target, X, y, reference=(ref_X, ref_y))
    assert out["lof_inlier_rate"] == 1.0
    assert out["lof_inlier_rate_real"] == pytest.approx(0.75 * 0.5 + 0.25 * 1.0)
    assert out["iforest_inlier_rate_real"] == pytest.approx(0.75 * 0.5 + 0.25 * 1.0)
    only_one = inlier_rates(cf, target, X, y, reference=(ref_X[:2], ref_y[:2]))  # no real row of class 0
    assert math.isnan(only_one["lof_inlier_rate_real"])


def test_inlier_rates_reject_mismatched_inputs_and_tiny_classes():
    X, y = _two_blobs()
    with pytest.raises(DataError, match="3 counterfactuals but 2 targets"):
        inlier_rates(np.zeros((3, 2)), np.array([0, 1]), X, y)
    with pytest.raises(DataError, match="class 2 has 0 training rows"):
        inlier_rates(np.zeros((1, 2)), np.array([2]), X, y)


def test_ensemble_uncertainty_is_zero_on_agreement_and_maximal_on_opposite_votes():
    agree = EnsembleOutput(("a", "b"), np.array([[[0.2, 0.8]], [[0.2, 0.8]]]))
    out = ensemble_uncertainty(agree, np.array([1]))
    assert out["disagreement"] == 0.0 and abs(out["mutual_information"]) < 1e-9
    opposite = EnsembleOutput(("a", "b"), np.array([[[0.0, 1.0]], [[1.0, 0.0]]]))
    out = ensemble_uncertainty(opposite, np.array([1]))
    assert out["disagreement"] == pytest.approx(0.25) and out["mutual_information"] == pytest.approx(math.log(2))


def test_rq2_spearman_of_monotone_data_is_one_with_a_bootstrap_interval():
    rng = np.random.default_rng(0)
    density = rng.normal(size=200)
    variance = np.exp(-density)  # lower density, higher variance
    out = density_variance_spearman(density, variance, n_boot=200)
    assert out["rho"] == pytest.approx(1.0) and out["n"] == 200
    assert out["ci_low"] == pytest.approx(1.0) and out["ci_high"] == pytest.approx(1.0)
    noisy = density_variance_spearman(density, variance + rng.normal(0, 0.5, 200), n_boot=200, seed=1)
    assert noisy["ci_low"] <= noisy["rho"] <= noisy["ci_high"] and 0.0 < noisy["rho"] < 1.0
    assert density_variance_spearman(density, variance, n_boot=50, seed=3) == \
        density_variance_spearman(density, variance, n_boot=50, seed=3)
    with pytest.raises(DataError, match="same length"):
        density_variance_spearman(density, variance[:10])


def test_rq2_leaves_out_non_finite_pairs_and_needs_three():
    density = np.arange(10.0)
    variance = -density
    variance[4] = np.nan  # left out: rho of the other nine, not NaN beside a finite CI
    out = density_variance_spearman(density, variance, n_boot=100)
    assert out["n"] == 9 and out["rho"] == pytest.approx(1.0) and out["ci_low"] == pytest.approx(1.0)
    tiny = density_variance_spearman(np.array([0.0, 1.0]), np.array([1.0, 0.0]), n_boot=100)
    assert tiny["n"] == 2 and all(math.isnan(tiny[k]) for k in ("rho", "ci_low", "ci_high"))
    constant = density_variance_spearman(density, np.ones(10), n_boot=100)
    assert math.isnan(constant["rho"]) and math.isnan(constant["ci_low"])


@pytest.mark.parametrize(("kw", "pattern"), [({"n_boot": 0}, r"n_boot must be an integer >= 1"),
                                             ({"n_boot": 2.5}, r"n_boot must be an integer >= 1"),
                                             ({"level": 95}, r"level must be a confidence level in \(0, 1\)")])
def test_rq2_rejects_bad_bootstrap_settings(kw, pattern):
    with pytest.raises(DataError, match=pattern):
        density_variance_spearman(np.arange(10.0), np.arange(10.0), **kw)


def test_lof_neighbours_outnumber_the_copies_of_a_repeated_row():
    # 60 copies of the origin plus a spread cloud: with 20 neighbours, LOF gave a point 0.14 from the
    # copies an outlier score of 1e9 (an outlier) while a point at distance 2 was an inlier.
    rng = np.random.default_rng(0)
    X = np.vstack([np.zeros((60, 2)), rng.normal(0.0, 1.0, (60, 2))])
    y = np.zeros(120, dtype=int)
    near = inlier_rates(np.array([[0.1, 0.1]]), np.array([0]), X, y)
    assert near["lof_inlier_rate"] == 1.0


def test_empty_counterfactual_sets_are_refused():
    X, y = _two_blobs()
    with pytest.raises(DataError, match="inlier rates need at least one counterfactual, got 0 rows"):
        inlier_rates(np.zeros((0, 2)), np.zeros(0, dtype=int), X, y, reference=(X, y))
    with pytest.raises(DataError, match="ensemble uncertainty needs at least one row, got 0"):
        ensemble_uncertainty(EnsembleOutput(("a", "b"), np.zeros((2, 0, 2))), np.zeros(0, dtype=int))
