"""Result metrics: OT(x), OT(y), blocked MMD^2, AReS-style cost."""

from __future__ import annotations

import numpy as np
import ot
import pytest

from recourselab.discover.metrics import (
    ares_cost,
    edited_rows,
    minmax_onehot,
    mmd2,
    ot_x,
    ot_x_minmax,
    ot_y,
    sw2_reference,
    w2_reference,
)
from recourselab.discover.ot import random_directions, sliced_wasserstein_sq
from recourselab.errors import DataError


def test_ot_metrics_vanish_on_identical_samples_and_are_seeded():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(30, 4))
    assert ot_x(X, X, n_projections=200) == 0.0
    Y = X * np.array([2.0, 1.0, 0.5, 1.0])  # anisotropic: the value depends on the directions drawn
    one = ot_x(Y, X, n_projections=300, seed=1)
    assert one == ot_x(Y, X, n_projections=300, seed=1) > 0
    assert one != ot_x(Y, X, n_projections=300, seed=2)
    theta = random_directions(4, 300, np.random.default_rng([1, 5000]))  # the seed picks these directions
    assert one == pytest.approx(sliced_wasserstein_sq(Y, X, theta, 0.1), abs=1e-12)
    assert ot_y(np.full(10, 0.5), np.full(10, 0.5)) == 0.0
    assert abs(ot_y(np.full(10, 0.5), np.ones(10)) - 0.25) < 1e-12


def test_blocked_mmd_equals_the_dense_formula():
    rng = np.random.default_rng(1)
    X, Y = rng.normal(size=(37, 3)), rng.normal(0.3, 1.0, size=(41, 3))

    def k(A, B):
        return np.exp(-((A[:, None] - B[None]) ** 2).sum(-1) / 2.0)

    dense = k(X, X).mean() + k(Y, Y).mean() - 2 * k(X, Y).mean()
    assert abs(mmd2(X, Y, block=5) - dense) < 1e-12
    assert mmd2(X, X) == 0.0
    with pytest.raises(DataError, match="MMD\\^2 needs rows in both samples, got 0 and 41"):
        mmd2(X[:0], Y)  # was a ZeroDivisionError


def test_ares_cost_counts_bins_and_categorical_changes(toy):
    Xf = toy.factuals[:3].copy()
    X = Xf.copy()
    sl = toy.schema.slices()
    age = toy.schema.features[toy.schema.feature_names.index("age")]
    width = (age.upper - age.lower) / 10
    X[0, sl["age"].start] += 2 * width / age.std  # two bins
    X[1, sl["owner"]] = -X[1, sl["owner"]]  # binary flip: one categorical change
    cost = ares_cost(X, Xf, toy.schema)
    assert abs(cost[0] - 2.0) < 0.05 and cost[1] == 1.0 and cost[2] == 0.0
    assert edited_rows(X, Xf).tolist() == [True, True, False]


def test_minmax_onehot_view_scales_ranges_to_one_and_flips_to_two(toy):
    schema = toy.schema
    Xf = toy.factuals[:2].copy()
    X = Xf.copy()
    sl = schema.slices()
    age = schema.features[schema.feature_names.index("age")]
    X[0, sl["age"].start] = (age.upper - age.mean) / age.std
    Xf[0, sl["age"].start] = (age.lower - age.mean) / age.std  # the whole training range
    X[1, sl["owner"]] = -X[1, sl["owner"]]  # binary flip
    V, Vf = minmax_onehot(X, schema), minmax_onehot(Xf, schema)
    n_cols = sum(1 if f.kind == "numerical" else len(f.levels) for f in schema.features)
    assert V.shape == (2, n_cols)
    assert np.allclose(((V - Vf) ** 2).sum(axis=1), [1.0, 2.0])
    assert 0.0 <= V.min() and V.max() <= 1.0
    assert ot_x_minmax(Xf, Xf, schema, n_projections=100) == 0.0
    assert ot_x_minmax(X, Xf, schema, n_projections=100) > 0.0


def test_reference_convention_trims_each_sample_then_scales_by_one_over_one_minus_two_delta():
    rng = np.random.default_rng(3)
    a, b = rng.normal(size=50), rng.normal(0.5, 2.0, size=50)
    # distinct values: each sample keeps its ranks 5..44, matched in sorted order
    kept = (np.sort(a)[5:45] - np.sort(b)[5:45]) ** 2
    assert w2_reference(a, b, delta=0.1) == pytest.approx(kept.mean() / 0.8, rel=1e-12)
    # ties make the kept sets differ in size: exact OT by the LP solver agrees
    c, e = np.repeat([0.0, 1.0, 2.0, 5.0], [20, 5, 20, 5]), rng.uniform(size=37)
    kc = c[(c >= np.quantile(c, 0.1)) & (c <= np.quantile(c, 0.9))]
    ke = e[(e >= np.quantile(e, 0.1)) & (e <= np.quantile(e, 0.9))]
    assert len(kc) != len(ke)
    lp = ot.emd2(np.full(len(kc), 1 / len(kc)), np.full(len(ke), 1 / len(ke)), (kc[:, None] - ke[None, :]) ** 2)
    assert w2_reference(c, e, delta=0.1) == pytest.approx(lp / 0.8, rel=1e-9)
    # large continuous samples: 1 / (1 - 2 delta) times this project's convention
    big_a, big_b = rng.normal(size=4000), rng.normal(1.0, 1.5, size=4000)
    assert w2_reference(big_a, big_b) / ot_y(big_a, big_b) == pytest.approx(1.25, rel=0.01)
    X, F = rng.normal(size=(400, 3)), rng.normal(0.3, 1.2, size=(400, 3))
    assert sw2_reference(X, F, n_projections=50) / ot_x(X, F, n_projections=50) == pytest.approx(1.25, rel=0.03)


def test_ares_cost_of_edited_rows_is_undefined_when_no_row_is_edited(toy):
    from recourselab.discover.result import result_metrics
    from recourselab.discover.settings import DiscoverSettings

    Xf = toy.factuals[:6]
    rec = {"OT_x": 0.0, "OT_y": 0.1, "UCL_x": 0.0, "UCL_y": 0.1, "eta": 0.5, "iteration": 0}
    y = np.full(6, 0.2)
    none = result_metrics(Xf.copy(), Xf, y, np.ones(6), toy.schema, DiscoverSettings(), rec, 0.1, 0.1, 0.5)
    assert none["edited_rows"] == 0 and none["ares_cost_edited"] is None  # was 0.0, averaged into summaries
    X = Xf.copy()
    X[1, toy.schema.slices()["owner"]] *= -1  # one binary flip: one categorical change
    one = result_metrics(X, Xf, y, np.ones(6), toy.schema, DiscoverSettings(), rec, 0.1, 0.1, 0.5)
    assert one["edited_rows"] == 1 and one["ares_cost_edited"] == 1.0
