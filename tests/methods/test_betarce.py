"""BetaRCE robustifier: the Beta lower bound, robust results, exact query accounting, budget, immutables."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import beta as beta_dist

from recourselab.errors import DataError
from recourselab.methods.betarce import BetaRCE, agreement_lower_bound
from recourselab.methods.growing_spheres import GrowingSpheres
from recourselab.methods.wachter import Wachter
from recourselab.models.oracle import QueryBudgetExceeded
from tests.methods.conftest import immutables_kept, unanimous


def test_lower_bound_is_the_beta_quantile():
    lb = agreement_lower_bound(np.array([0, 5, 7]), 7, 0.9)
    np.testing.assert_allclose(lb, [beta_dist.ppf(0.1, 1 + k, 8 - k) for k in (0, 5, 7)])
    np.testing.assert_allclose(agreement_lower_bound(np.array([7]), 7, 0.9), 0.1 ** (1 / 8))
    assert np.all(np.diff(agreement_lower_bound(np.arange(8), 7, 0.9)) > 0)


def test_robustifies_wachter_counterfactuals(moons):
    box = moons.blackbox()
    base = Wachter(box, threshold=0.5)
    method = BetaRCE(box, base, delta=0.5, beta=0.9, n_samples=30, seed=0)
    assert method.min_votes == 3  # with 3 members only unanimity reaches 0.5 at beta 0.9
    cf = method.explain(moons.factuals, target=1)
    n = len(moons.factuals)
    assert cf.valid.mean() >= 0.9
    assert np.array_equal(unanimous(moons, cf)[cf.valid], cf.valid[cf.valid])
    assert cf.log["base_queries"] == 0 and cf.log["check_queries"] == n
    assert cf.log["grow_queries"] % 30 == 0
    assert cf.queries == box.used("search") == n + cf.log["grow_queries"]
    plain = base.explain(moons.factuals, target=1)
    assert unanimous(moons, cf).mean() >= unanimous(moons, plain).mean()


def test_base_queries_are_counted_and_budget_shared(moons):
    box = moons.blackbox()
    gs = GrowingSpheres(box, n_samples=20, seed=0)
    cf = BetaRCE(box, gs, delta=0.5, n_samples=20).explain(moons.factuals[:10], target=1)
    assert cf.queries == box.used("search") == cf.log["base_queries"] + cf.log["check_queries"] + cf.log[
        "grow_queries"]
    box2 = moons.blackbox()
    with pytest.raises(QueryBudgetExceeded):
        BetaRCE(box2, GrowingSpheres(box2, n_samples=20, seed=0), delta=0.5, n_samples=20).explain(
            moons.factuals[:10], target=1, budget=cf.log["base_queries"] + 5)
    assert box2.used("search") <= cf.log["base_queries"] + 5


def test_immutables_kept(mixed):
    box = mixed.blackbox()
    cf = BetaRCE(box, GrowingSpheres(box, n_samples=20), delta=0.5, n_samples=20).explain(mixed.factuals)
    assert immutables_kept(mixed, cf)
    np.testing.assert_allclose(mixed.schema.snap(cf.counterfactuals), cf.counterfactuals, atol=1e-9)


def test_deterministic(moons):
    a, b = (BetaRCE(moons.blackbox(), Wachter(moons.blackbox()), delta=0.5, n_samples=20, seed=2)
            .explain(moons.factuals, target=1) for _ in range(2))
    np.testing.assert_array_equal(a.counterfactuals, b.counterfactuals)
    assert a.queries == b.queries


def test_unreachable_delta_is_refused(moons):
    with pytest.raises(DataError, match="cannot be reached with 3 members"):
        BetaRCE(moons.blackbox(), Wachter(moons.blackbox()), delta=0.9, beta=0.9)
    with pytest.raises(TypeError, match="counterfactual method"):
        BetaRCE(moons.blackbox(), object())
