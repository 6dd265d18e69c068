"""Grid search on train, early stopping on val (never test), refit and metrics."""

from __future__ import annotations

import numpy as np
import pytest

from recourselab.config import Params
from recourselab.data import dataset_from_params, prepare_splits
from recourselab.models.registry import ENSEMBLE, FitContext
from recourselab.models.tuning import Split, tune_model


def test_cv_selects_the_best_configuration_and_reports_metrics(moons_small):
    train, val, test = moons_small
    result = tune_model("knn", {"n_neighbors": [1, 101]}, {}, train=train, val=val, test=test, seed=0,
                        n_classes=2)
    scores = {r["params"]["n_neighbors"]: r["cv_accuracy"] for r in result.cv_results}
    assert set(scores) == {1, 101}
    assert result.best_params["n_neighbors"] == max(scores, key=scores.get)
    assert result.cv_score == max(scores.values())
    assert set(result.metrics) >= {"val_accuracy", "val_auc", "test_accuracy", "test_auc", "fit_time_s",
                                   "tune_time_s", "n_fit_rows", "n_tune_rows"}
    assert 0.5 < result.metrics["test_auc"] <= 1.0


def test_test_split_never_influences_the_model(moons_small):
    train, val, test = moons_small
    flipped = Split(test.X, 1 - test.y)
    grid = {"max_depth": [2, 4]}
    a = tune_model("xgboost", grid, {"n_estimators": 80}, train=train, val=val, test=test, seed=1,
                   n_classes=2)
    b = tune_model("xgboost", grid, {"n_estimators": 80}, train=train, val=val, test=flipped, seed=1,
                   n_classes=2)
    np.testing.assert_array_equal(a.model.predict_proba(test.X), b.model.predict_proba(test.X))
    assert a.metrics["test_accuracy"] == pytest.approx(1 - b.metrics["test_accuracy"])


def test_row_caps_are_honoured(moons_small):
    train, val, test = moons_small
    r = tune_model("svm", {"C": [1, 10]}, {"gamma": 1.0}, train=train, val=val, test=test, seed=0,
                   n_classes=2, max_tune_rows=90, max_fit_rows=100)
    assert r.metrics["n_tune_rows"] == 90 and r.metrics["n_fit_rows"] == 100
    single = tune_model("svm", {}, {"gamma": 1.0}, train=train, val=val, test=test, seed=0, n_classes=2)
    assert single.cv_score is None and single.cv_results == [] and single.metrics["n_tune_rows"] == 0


def test_every_default_member_reaches_097_on_moons():
    params = Params()
    splits = prepare_splits(dataset_from_params("moons", params), 0, params.prepare.split)
    train, val, test = (Split(*splits.arrays(s)) for s in ("train", "val", "test"))
    for name in ENSEMBLE:
        spec = getattr(params.models, name)
        r = tune_model(name, spec.grid, spec.fixed, train=train, val=val, test=test, seed=0, n_classes=2,
                       max_tune_rows=spec.max_tune_rows, max_fit_rows=spec.max_fit_rows)
        assert r.metrics["val_accuracy"] >= 0.97, (name, r.metrics)


def test_a_class_with_fewer_rows_than_folds_is_named(moons_small):
    from recourselab.errors import DataError
    from recourselab.models.tuning import Split, cross_validate

    train, val, _ = moons_small
    keep = np.r_[np.flatnonzero(train.y == 0), np.flatnonzero(train.y == 1)[:2]]
    ctx = FitContext(X_val=val.X, y_val=val.y, seed=0, n_classes=2)
    with pytest.raises(DataError, match=r"model 'knn': class 1 has 2 tuning rows, fewer than the 3 CV folds "
                                        r"\(tune_ensemble\.cv_folds\)"):
        cross_validate("knn", {"n_neighbors": 3}, Split(train.X[keep], train.y[keep]), ctx, folds=3)
