"""The method registry: every name builds a CounterfactualMethod; unknown names and options are refused."""

from __future__ import annotations

import numpy as np
import pytest

from recourselab.errors import DataError, UnknownKeyError
from recourselab.methods.base import CounterfactualMethod
from recourselab.methods.registry import DISTRIBUTIONAL_METHODS, METHODS, UnknownMethodError, get_method, make_method

FAST = {"nearest": {}, "nearest_line": {"steps": 3}, "wachter": {"threshold": 0.7},
        "growing_spheres": {"n_samples": 20}, "betarce": {"base": "growing_spheres",
                                                          "base_options": {"n_samples": 20}, "n_samples": 20}}


def test_unknown_names_list_the_valid_ones(moons):
    with pytest.raises(UnknownMethodError, match="valid methods: nearest, nearest_line, wachter"):
        get_method("lime")
    with pytest.raises(UnknownMethodError):
        make_method("lime", moons.blackbox())


@pytest.mark.parametrize("name", sorted(FAST))
def test_each_baseline_builds_and_explains(moons, name):
    box = moons.blackbox()
    method = make_method(name, box, X_train=moons.X_train, y_train=moons.y_train, **FAST[name])
    assert isinstance(method, CounterfactualMethod) and method.name == name
    cf = method.explain(moons.factuals[:8], target=1)
    assert cf.method == name and cf.queries == box.used("search")
    assert cf.counterfactuals.shape == (8, moons.schema.n_encoded)


def test_unknown_options_and_missing_training_rows(moons):
    with pytest.raises(UnknownKeyError, match="valid: .*n_samples"):
        make_method("growing_spheres", moons.blackbox(), samples=3)
    with pytest.raises(DataError, match="needs training rows"):
        make_method("nearest", moons.blackbox())
    with pytest.raises(DataError, match="needs training labels"):
        make_method("dice", moons.blackbox(), X_train=moons.X_train)
    with pytest.raises(DataError, match="itself"):
        make_method("betarce", moons.blackbox(), base="betarce")


def test_adapters_of_the_project_methods(moons):
    box = moons.blackbox()
    dce = make_method("dce", box, max_iter=3)
    assert dce.name == "dce" and isinstance(dce, CounterfactualMethod)
    disc = make_method("discover", box, max_iter=2, seed=3)
    assert disc.name == "discover" and disc.settings.budget == "search" and disc.settings.seed == 3
    assert set(METHODS) == {"nearest", "nearest_line", "wachter", "growing_spheres", "betarce", "dice",
                            "densityflow"}
    assert set(DISTRIBUTIONAL_METHODS) == {"discover", "dce"}


def test_factories_take_the_context_by_keyword(moons):
    import inspect

    for factory in METHODS.values():
        params = inspect.signature(factory).parameters
        assert {"oracle", "schema", "X_train", "y_train", "seed"} <= set(params)
    a, b = (make_method("growing_spheres", moons.blackbox(), seed=s, n_samples=10).explain(
        moons.factuals[:5], target=1) for s in (1, 2))
    assert not np.array_equal(a.counterfactuals, b.counterfactuals)


def test_densityflow_wraps_a_given_model(moons):
    from recourselab.densityflow import DensityFlow

    flow = DensityFlow(schema=moons.schema)
    assert make_method("densityflow", moons.blackbox(), model=flow) is flow
    with pytest.raises(DataError, match="cannot change"):
        make_method("densityflow", moons.blackbox(), model=flow, epochs=3)
    with pytest.raises(TypeError, match="fitted DensityFlow"):
        make_method("densityflow", moons.blackbox(), model=np.zeros(2))


def test_densityflow_is_fitted_and_distilled_when_not_given(moons):
    box = moons.blackbox()
    flow = make_method("densityflow", box, X_train=moons.X_train, y_train=moons.y_train, distill_budget=8, epochs=2,
                       hidden=16, distill_epochs=1, distill_inner=1, distill_points=8, n_starts=2, seed=1)
    assert box.used("distill") == 8 and flow.config.seed == 1
    cf = flow.explain(moons.factuals[:4], target=1)
    assert cf.queries == 0 and cf.counterfactuals.shape == (4, 2)


@pytest.mark.parametrize("name", sorted(FAST))
def test_bad_factuals_are_refused_before_any_query(moons, name):
    box = moons.blackbox()
    method = make_method(name, box, X_train=moons.X_train, y_train=moons.y_train, **FAST[name])
    with pytest.raises(DataError, match="width"):
        method.explain(np.zeros((3, 5)), target=1)
    bad = moons.factuals[:4].copy()
    bad[1, 1] = np.nan
    with pytest.raises(DataError, match="non-finite"):
        method.explain(bad, target=1)
    with pytest.raises(DataError, match="one class index per row"):
        method.explain(moons.factuals[:4], target=[1, 1])
    with pytest.raises(DataError, match="0..1"):
        method.explain(moons.factuals[:4], target=2)
    assert box.used("search") == 0
