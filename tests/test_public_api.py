"""Every recourse method against the common interface, in the spirit of scikit-learn's ``check_estimator``.

:func:`check_method` takes a factory ``make_method(data) -> method`` and the tiny data set below;
a new method joins by adding its factory to :data:`METHODS`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import pytest

from recourselab import DCE, BlackBox, CounterfactualMethod, Counterfactuals, DensityFlow, Discover, load_dataset
from recourselab.data import Schema, prepare_splits
from recourselab.discover import fit_torch_mlp
from recourselab.errors import DataError
from recourselab.methods.registry import make_method
from recourselab.methods.robust import RobustFlow
from recourselab.models import FitContext, fit_model
from recourselab.models.oracle import QueryBudgetExceeded

pytestmark = pytest.mark.filterwarnings("ignore::recourselab.discover.NotCertifiedWarning")


@dataclass(frozen=True)
class TinyData:
    """Moons with ``x1`` immutable: training rows, a fitted two-model oracle and 12 factual rows."""

    schema: Schema
    X: np.ndarray
    y: np.ndarray
    box: BlackBox
    factuals: np.ndarray


@pytest.fixture(scope="module")
def data() -> TinyData:
    prepared = prepare_splits(load_dataset("moons", n_synthetic=200, immutable=["x1"]), 0, (0.6, 0.2, 0.2))
    X, y = prepared.arrays("train")
    ctx = FitContext(X_val=X, y_val=y, seed=0, n_classes=2)
    box = BlackBox({"knn": fit_model("knn", {"n_neighbors": 5}, X, y, ctx),
                    "rf": fit_model("rf", {"n_estimators": 10}, X, y, ctx),
                    "mlp": fit_model("mlp", {"hidden_layer_sizes": [8], "max_iter": 300}, X, y, ctx)},
                   schema=prepared.schema)
    Xt, yt = prepared.arrays("test")
    return TinyData(schema=prepared.schema, X=X, y=y, box=box, factuals=Xt[yt == 0][:12])


def _densityflow(d: TinyData) -> Any:
    return DensityFlow(schema=d.schema, seed=0, epochs=2, hidden=8, embed_dim=2, batch_size=64, warmup_epochs=0,
                       n_starts=3, rtol_train=1e-2, atol_train=1e-2, rtol_test=1e-3, atol_test=1e-3).fit(d.X, d.y)


def _discover(d: TinyData) -> Any:
    return Discover(d.box, schema=d.schema, n_projections=4, top_k=2, h=1, trials=6, max_iter=3,
                    metric_projections=50, holdout_sets=0, seed=0)


def _dce(d: TinyData) -> Any:
    model = fit_torch_mlp(d.X, d.y, hidden=(8,), epochs=30, seed=0)
    return DCE(model, schema=d.schema, max_iter=3, n_projections=4, metric_projections=50, holdout_sets=0, seed=0)


def _registered(name: str, **options: Any) -> Callable[[TinyData], Any]:
    """A factory of method ``name`` from the baseline registry, on the tiny data."""
    def make(d: TinyData) -> Any:
        return make_method(name, d.box, schema=d.schema, X_train=d.X, y_train=d.y, seed=0, **options)
    return make


def _robustflow(d: TinyData) -> Any:
    return RobustFlow(_densityflow(d), d.box, d.X, d.y, schema=d.schema)


#: (name, factory) of every method checked: the two methods, DCE, RobustFlow and every baseline.
METHODS: list[tuple[str, Callable[[TinyData], Any]]] = [
    ("densityflow", _densityflow), ("discover", _discover), ("dce", _dce), ("densityflow_r", _robustflow),
    ("nearest", _registered("nearest")), ("nearest_line", _registered("nearest_line")),
    ("wachter", _registered("wachter", steps=30, rounds=2)),
    ("growing_spheres", _registered("growing_spheres")),
    ("betarce", _registered("betarce", base="growing_spheres")),
    ("dice", _registered("dice", method="random", total_cfs=1))]


def check_method(make_method: Callable[[TinyData], Any], data: TinyData, *, small_budget: int = 3) -> None:
    """Assert the common interface's contract for the method ``make_method(data)`` builds.

    Protocol, result shape, immutables kept, determinism per seed, the search budget, bad input.
    """
    method = make_method(data)
    assert isinstance(method, CounterfactualMethod)
    X = data.factuals
    before = X.copy()
    cf = method.explain(X)
    assert np.array_equal(X, before), "explain changed its input"

    # result shape
    n, d = X.shape
    assert isinstance(cf, Counterfactuals) and cf.method == method.name and len(cf) == n
    assert cf.counterfactuals.shape == (n, d) and np.array_equal(cf.factuals, X)
    assert np.isfinite(cf.counterfactuals).all()
    assert isinstance(cf.counterfactuals_original, pd.DataFrame)
    assert list(cf.counterfactuals_original.columns) == list(data.schema.feature_names)
    assert len(cf.counterfactuals_original) == n and len(cf.target) == n
    assert isinstance(cf.queries, int) and cf.queries >= 0 and cf.wall_time >= 0
    assert cf.valid is None or np.shape(cf.valid) == (n,)

    # immutables kept
    fixed = data.schema.immutable_mask()
    assert fixed.any()
    assert np.array_equal(cf.counterfactuals[:, fixed], X[:, fixed])

    # determinism: a second method from the same seed gives the same rows
    again = make_method(data).explain(X)
    assert np.array_equal(again.counterfactuals, cf.counterfactuals)
    assert np.array_equal(again.target, cf.target)

    # the search budget: refused, or respected
    try:
        capped = make_method(data).explain(X, budget=small_budget)
    except QueryBudgetExceeded:
        pass
    else:
        assert capped.queries <= small_budget

    # bad input
    with pytest.raises(DataError):
        method.explain(X[:, :-1])
    broken = X.copy()
    broken[0, 0] = np.nan
    with pytest.raises(DataError):
        method.explain(broken)


@pytest.mark.parametrize(("name", "factory"), METHODS, ids=[name for name, _ in METHODS])
def test_method_meets_the_common_interface(name, factory, data):
    if name == "dice":
        pytest.importorskip("dice_ml", reason="DiCE is the optional extra recourselab[dice]")
    check_method(factory, data)


def test_check_method_catches_a_method_that_moves_an_immutable(data):
    class Careless:
        name = "careless"

        def explain(self, factuals, target=None, *, budget=None):
            cf = np.asarray(factuals, dtype=float) + 1.0  # moves every column, immutable ones too
            return Counterfactuals(method=self.name, factuals=np.asarray(factuals), counterfactuals=cf,
                                   counterfactuals_original=data.schema.inverse_transform(cf),
                                   target=np.ones(len(cf), dtype=np.int64), queries=0, wall_time=0.0)

    with pytest.raises(AssertionError):
        check_method(lambda d: Careless(), data)
