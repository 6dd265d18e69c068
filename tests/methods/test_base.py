"""The common result type and the budget of the search-based methods' ``explain``."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from sklearn.linear_model import LogisticRegression

import recourselab
from recourselab.data.schema import Schema
from recourselab.discover import DCE, Discover, fit_torch_mlp
from recourselab.errors import DataError
from recourselab.methods import CounterfactualMethod, Counterfactuals
from recourselab.models.oracle import BlackBox, QueryBudgetExceeded


@pytest.fixture(scope="module")
def toy():
    rng = np.random.default_rng(1)
    n = 200
    df = pd.DataFrame({"a": rng.normal(0, 1, n), "b": rng.normal(0, 1, n), "g": rng.choice(["x", "y"], n)})
    df["y"] = (df.a + df.b + rng.normal(0, 0.3, n) > 0).astype(int)
    schema = Schema.fit(df, dataset="toy", target="y", favourable=1, categorical=["g"], immutable=["g"])
    X = schema.transform(df)
    model = LogisticRegression().fit(X, df.y)
    rows = np.argsort(model.predict_proba(X)[:, 1])[:20]
    return schema, X, df.y.to_numpy(), model, X[rows]


def _result(n: int = 3, d: int = 2, **kw) -> Counterfactuals:
    X = np.zeros((n, d))
    return Counterfactuals(**({"method": "m", "factuals": X, "counterfactuals": X + 1.0,
                               "counterfactuals_original": None, "target": np.ones(n, dtype=np.int64),
                               "queries": 0, "wall_time": 0.0} | kw))


def test_costs_and_changed_rows_follow_the_rows():
    r = _result(counterfactuals=np.array([[1.0, 0.0], [0.0, 0.0], [3.0, 4.0]]))
    np.testing.assert_allclose(r.cost_l1, [1.0, 0.0, 7.0])
    np.testing.assert_allclose(r.cost_l2, [1.0, 0.0, 5.0])
    assert r.changed.tolist() == [True, False, True] and len(r) == 3


@pytest.mark.parametrize(("change", "message"), [
    ({"counterfactuals": np.zeros((3, 5))}, "shape"),
    ({"target": np.ones(2, dtype=np.int64)}, "2 targets for 3 rows"),
    ({"valid": np.ones(4, dtype=bool)}, "valid has shape"),
])
def test_inconsistent_results_are_refused(change, message):
    with pytest.raises(DataError, match=message):
        _result(**change)


def test_verify_sets_unanimous_validity_and_counts_the_rows(toy):
    schema, X, y, model, Xf = toy
    box = BlackBox({"lr": model, "lr2": LogisticRegression(C=0.1).fit(X, y)}, schema=schema)
    r = Counterfactuals(method="m", factuals=Xf, counterfactuals=Xf, counterfactuals_original=None,
                        target=np.ones(len(Xf), dtype=np.int64), queries=0, wall_time=0.0)
    checked = r.verify(box)
    assert checked.verdict.queries == len(Xf) and box.used("verify") == len(Xf)
    assert checked.valid.tolist() == checked.verdict.unanimous.tolist()
    with pytest.raises(DataError, match="class targets"):
        Counterfactuals(method="m", factuals=Xf, counterfactuals=Xf, counterfactuals_original=None,
                        target=np.full(len(Xf), 0.7), queries=0, wall_time=0.0).verify(box)


@pytest.mark.filterwarnings("ignore::recourselab.discover.NotCertifiedWarning")
def test_discover_explain_is_a_method_and_keeps_its_search_budget(toy):
    schema, _, _, model, Xf = toy
    solver = Discover(BlackBox({"lr": model}, schema=schema), schema=schema, max_iter=5, trials=20, seed=0)
    assert isinstance(solver, CounterfactualMethod)
    cf = solver.explain(Xf)
    assert cf.method == "discover" and cf.counterfactuals.shape == Xf.shape
    assert cf.queries == cf.result.queries > 0 and cf.valid.shape == (len(Xf),)
    assert cf.counterfactuals_original is not None and len(cf.counterfactuals_original) == len(Xf)
    with pytest.raises(QueryBudgetExceeded, match="search budget of 30"):
        solver.explain(Xf, budget=30)
    again = solver.explain(Xf, budget=cf.queries)  # exactly enough: the same run
    np.testing.assert_array_equal(again.counterfactuals, cf.counterfactuals)


@pytest.mark.filterwarnings("ignore::recourselab.discover.NotCertifiedWarning")
def test_dce_explain_charges_every_gradient_pass(toy):
    schema, X, y, _, Xf = toy
    mlp = fit_torch_mlp(X, y, seed=0)
    dce = DCE(mlp, schema=schema, max_iter=4, seed=0)
    cf = dce.explain(Xf)
    assert cf.method == "dce" and cf.queries == cf.result.queries
    with pytest.raises(QueryBudgetExceeded):
        dce.explain(Xf, budget=len(Xf) * 2)


def test_top_level_names_load_lazily_and_unknown_ones_list_the_valid():
    assert recourselab.Discover is Discover and recourselab.Counterfactuals is Counterfactuals
    assert "DensityFlow" in dir(recourselab)
    with pytest.raises(AttributeError, match="public names"):
        recourselab.NoSuchThing  # noqa: B018
