"""Growing Spheres on the ensemble majority: validity, exact query accounting, budget, immutables, determinism."""

from __future__ import annotations

import numpy as np
import pytest

from recourselab.errors import DataError
from recourselab.methods.growing_spheres import GrowingSpheres, sample_layer
from recourselab.models.oracle import QueryBudgetExceeded
from tests.methods.conftest import immutables_kept, majority


def test_layer_samples_lie_in_the_layer_and_only_move_masked_columns():
    rng = np.random.default_rng(0)
    center = np.zeros((3, 4))
    mask = np.array([True, True, False, True])
    pts = sample_layer(center, np.array([0.0, 1.0, 2.0]), np.array([1.0, 2.0, 2.5]), 500, mask, rng)
    r = np.linalg.norm(pts, axis=2)
    assert (r[0] <= 1 + 1e-12).all() and ((r[1] >= 1 - 1e-12) & (r[1] <= 2 + 1e-12)).all()
    assert ((r[2] >= 2 - 1e-12) & (r[2] <= 2.5 + 1e-12)).all()
    assert (pts[:, :, 2] == 0).all()


def test_majority_enemies_with_exact_query_accounting(moons):
    box = moons.blackbox()
    cf = GrowingSpheres(box, n_samples=40, seed=0).explain(moons.factuals, target=1)
    assert cf.valid.mean() >= 0.9
    assert np.array_equal(majority(moons, cf)[cf.valid], cf.valid[cf.valid])
    parts = cf.log["queries_shrink"] + cf.log["queries_grow"] + cf.log["queries_sparsify"]
    assert cf.queries == box.used("search") == parts
    assert cf.log["queries_shrink"] % 40 == 0 and cf.log["queries_grow"] % 40 == 0
    assert cf.log["queries_shrink"] >= 40 * len(moons.factuals)  # every factual draws its first ball


def test_budget_raises_before_passing_it(moons):
    box = moons.blackbox()
    with pytest.raises(QueryBudgetExceeded, match="search budget of 100"):
        GrowingSpheres(box, n_samples=40).explain(moons.factuals, target=1, budget=100)
    assert box.used("search") == 0  # the first step already needs 40 x 30 rows


def test_immutables_kept_and_points_valid(mixed):
    cf = GrowingSpheres(mixed.blackbox(), n_samples=30, seed=1).explain(mixed.factuals)
    assert immutables_kept(mixed, cf)
    np.testing.assert_allclose(mixed.schema.snap(cf.counterfactuals), cf.counterfactuals, atol=1e-9)
    assert cf.valid.mean() >= 0.9


def test_deterministic_per_seed(moons):
    a, b, c = (GrowingSpheres(moons.blackbox(), n_samples=20, seed=s).explain(moons.factuals[:10], target=1)
               for s in (0, 0, 1))
    np.testing.assert_array_equal(a.counterfactuals, b.counterfactuals)
    assert a.queries == b.queries
    assert not np.array_equal(a.counterfactuals, c.counterfactuals)


def test_bad_options():
    with pytest.raises(TypeError, match="BlackBox"):
        GrowingSpheres(object())


def test_bad_settings(moons):
    with pytest.raises(DataError, match="n_samples"):
        GrowingSpheres(moons.blackbox(), n_samples=0)
    with pytest.raises(DataError, match="radius"):
        GrowingSpheres(moons.blackbox(), radius=float("nan"))
