"""Nearest unanimous neighbour: validity, exact query counts, budgets, immutables, determinism, errors."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from recourselab.errors import DataError, UnknownKeyError
from recourselab.methods.base import CounterfactualMethod
from recourselab.methods.nearest import NearestNeighbour
from recourselab.models.oracle import QueryBudgetExceeded
from tests.methods.conftest import immutables_kept, unanimous


def test_unbudgeted_labels_the_whole_pool_and_finds_unanimous_rows(moons):
    box = moons.blackbox()
    method = NearestNeighbour(box, moons.X_train, moons.y_train)
    assert isinstance(method, CounterfactualMethod)
    cf = method.explain(moons.factuals, target=1)
    pool = int((moons.y_train == 1).sum())  # training labels pick the pool: no query
    assert cf.queries == pool == box.used("search") == cf.log["labelled"]
    assert cf.valid.mean() >= 0.9
    assert np.array_equal(unanimous(moons, cf), cf.valid)
    # each answer is a training row, and no other unanimous pool row is nearer
    train = {tuple(r) for r in moons.X_train}
    assert all(tuple(r) in train for r in cf.counterfactuals[cf.valid])
    box_labels = np.stack([m.predict_proba(moons.X_train).argmax(1) for m in moons.members.values()])
    ok = (box_labels == 1).all(axis=0) & (moons.y_train == 1)
    dist = np.linalg.norm(moons.factuals[:, None] - moons.X_train[None, ok], axis=2).min(axis=1)
    np.testing.assert_allclose(cf.cost_l2[cf.valid], dist[cf.valid])


def test_without_training_labels_every_row_is_in_the_pool(moons):
    box = moons.blackbox()
    cf = NearestNeighbour(box, moons.X_train).explain(moons.factuals[:5], target=1)
    assert cf.queries == len(moons.X_train) == box.used("search")


@pytest.mark.parametrize("selection", ["nearest", "sample"])
def test_budgeted_search_stays_within_the_budget(moons, selection):
    n = len(moons.factuals)
    box = moons.blackbox()
    cf = NearestNeighbour(box, moons.X_train, moons.y_train, selection=selection).explain(
        moons.factuals, target=1, budget=2 * n)
    assert cf.queries == box.used("search") <= 2 * n
    assert np.array_equal(unanimous(moons, cf), cf.valid)
    if selection == "nearest":
        assert cf.valid.mean() >= 0.9
    else:
        assert cf.queries == 2 * n


def test_nearest_first_with_a_large_budget_matches_the_full_search(moons):
    full = NearestNeighbour(moons.blackbox(), moons.X_train, moons.y_train).explain(moons.factuals, target=1)
    box = moons.blackbox()
    part = NearestNeighbour(box, moons.X_train, moons.y_train).explain(moons.factuals, target=1, budget=10_000)
    np.testing.assert_array_equal(part.counterfactuals, full.counterfactuals)
    assert part.queries < full.queries  # it labelled only rows near the factuals


def test_immutables_equal_and_original_units(mixed):
    box = mixed.blackbox()
    frame = mixed.schema.inverse_transform(mixed.factuals)
    frame.index = pd.RangeIndex(100, 100 + len(frame))
    cf = NearestNeighbour(box, mixed.X_train, mixed.y_train).explain(frame)
    assert immutables_kept(mixed, cf)
    assert (cf.counterfactuals_original[["sex", "height"]].to_numpy() == frame[["sex", "height"]].to_numpy()).all()
    assert list(cf.counterfactuals_original.index) == list(frame.index)
    assert np.array_equal(unanimous(mixed, cf), cf.valid)
    assert cf.valid.mean() > 0  # rows with the same sex and height exist for some factuals
    found = cf.counterfactuals[cf.valid]
    train = {tuple(r) for r in mixed.X_train}
    assert all(tuple(r) in train for r in found)


def test_deterministic(moons):
    runs = [NearestNeighbour(moons.blackbox(), moons.X_train, moons.y_train, selection="sample", seed=3)
            .explain(moons.factuals, target=1, budget=40) for _ in range(2)]
    np.testing.assert_array_equal(runs[0].counterfactuals, runs[1].counterfactuals)
    assert runs[0].queries == runs[1].queries == 40


def test_bad_inputs(moons):
    method = NearestNeighbour(moons.blackbox(), moons.X_train, moons.y_train)
    with pytest.raises(DataError, match="width"):
        method.explain(moons.factuals[:, :1], target=1)
    bad = moons.factuals.copy()
    bad[0, 0] = np.nan
    with pytest.raises(DataError, match="non-finite"):
        method.explain(bad, target=1)
    with pytest.raises(DataError, match="class indices"):
        method.explain(moons.factuals, target=5)
    with pytest.raises(DataError, match="budget"):
        method.explain(moons.factuals, target=1, budget=-1)
    with pytest.raises(UnknownKeyError, match="nearest, sample"):
        NearestNeighbour(moons.blackbox(), moons.X_train, selection="closest")


def test_the_oracle_limit_raises_before_any_member_is_called(moons):
    box = moons.blackbox()
    box.set_budget("search", 10)
    with pytest.raises(QueryBudgetExceeded):
        NearestNeighbour(box, moons.X_train, moons.y_train).explain(moons.factuals, target=1)
    assert box.used("search") == 0
