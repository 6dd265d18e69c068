"""Nearest neighbour plus line search: closer than the neighbour, still unanimous, exact probe counts."""

from __future__ import annotations

import numpy as np

from recourselab.methods.nearest import NearestNeighbour
from recourselab.methods.nearest_line import NearestLine
from tests.methods.conftest import immutables_kept, unanimous


def test_line_search_moves_closer_and_stays_unanimous(moons):
    nn = NearestNeighbour(moons.blackbox(), moons.X_train, moons.y_train).explain(moons.factuals, target=1)
    box = moons.blackbox()
    cf = NearestLine(box, moons.X_train, moons.y_train, steps=6).explain(moons.factuals, target=1)
    found = int(nn.valid.sum())
    assert cf.queries == box.used("search") == nn.queries + 6 * found
    assert cf.log["probes"] == 6 * found
    assert cf.valid.mean() >= 0.9
    assert unanimous(moons, cf)[cf.valid].all()
    assert (cf.cost_l2 <= nn.cost_l2 + 1e-12).all()
    assert cf.cost_l2[cf.valid].mean() < nn.cost_l2[nn.valid].mean()


def test_budget_is_shared_between_neighbour_search_and_probes(moons):
    n = len(moons.factuals)
    box = moons.blackbox()
    cf = NearestLine(box, moons.X_train, moons.y_train, steps=4).explain(moons.factuals, target=1, budget=8 * n)
    assert cf.queries == box.used("search") <= 8 * n
    assert cf.log["probes"] == cf.log["steps"] * int(cf.valid.sum())
    # a sample that takes the whole budget leaves no room for a probe: the neighbours come back as they are
    box = moons.blackbox()
    cf = NearestLine(box, moons.X_train, moons.y_train, selection="sample", steps=4).explain(
        moons.factuals, target=1, budget=2 * n)
    assert cf.queries == box.used("search") == 2 * n and cf.log["steps"] == 0 and cf.log["probes"] == 0


def test_immutables_and_categories_stay_valid(mixed):
    cf = NearestLine(mixed.blackbox(), mixed.X_train, mixed.y_train, steps=5).explain(mixed.factuals)
    assert immutables_kept(mixed, cf)
    np.testing.assert_allclose(mixed.schema.snap(cf.counterfactuals), cf.counterfactuals, atol=1e-9)
    assert unanimous(mixed, cf)[cf.valid].all()


def test_deterministic(moons):
    a, b = (NearestLine(moons.blackbox(), moons.X_train, moons.y_train).explain(moons.factuals, target=1)
            for _ in range(2))
    np.testing.assert_array_equal(a.counterfactuals, b.counterfactuals)
    assert a.queries == b.queries
