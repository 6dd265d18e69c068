"""Same seed, params, code and machine: the same outputs, and how far that holds across machines.

The per-seed computations are rerun in one process: tuning an ensemble member through the
pipeline's own path (grid search, refit, save) and fitting DensityFlow then generating with it.
XGBoost, LightGBM and DensityFlow files come back byte-identical. The scikit-learn (.skops) and
CatBoost files carry run metadata (skops: object ids in member names and zip timestamps; CatBoost:
a random model GUID), so for them the invariant is bitwise-equal predictions.

Across machines the thread count may change (``orchestration.threads_per_task``); the members
whose predictions do not depend on it are checked here with 1 and 2 threads, a random forest's
trees are too (its probabilities only up to the order of a sum), and TabNet's (float32 torch
reductions) stay within the tolerance that the reproducibility notes state.
"""

from __future__ import annotations

import numpy as np
import pytest

from recourselab.config import parse_params
from recourselab.data import dataset_from_params, prepare_splits
from recourselab.densityflow import DensityFlow
from recourselab.io import write_parquet
from recourselab.models.tuning import Split, tune_model
from recourselab.runtime import limit_threads

#: A small grid per member: two configurations, so the cross-validation runs too.
GRIDS = {"xgboost": ({"max_depth": [2, 3]}, {"n_estimators": 30}),
         "lightgbm": ({"num_leaves": [4, 8]}, {"n_estimators": 30}),
         "knn": ({"n_neighbors": [3, 5]}, {}),
         "rf": ({"max_depth": [3, None]}, {"n_estimators": 20}),
         "catboost": ({"depth": [2, 3]}, {"iterations": 30}),
         "tabnet": ({}, {"max_epochs": 2, "n_d": 4, "n_a": 4, "n_steps": 2})}
#: TabNet's predicted probabilities under another thread count (the documented cross-machine noise).
TABNET_TOLERANCE = 1e-3


@pytest.fixture(scope="module")
def moons():
    params = parse_params({"prepare": {"n_synthetic": 500}})
    return prepare_splits(dataset_from_params("moons", params), 0, (0.6, 0.2, 0.2))


def tune(moons, name: str, tmp_path, n_threads: int = 1, search: bool = True) -> tuple[bytes, np.ndarray]:
    """The saved file and test-split probabilities of member ``name`` tuned as the flow does
    (``search=False``: only its first configuration is fitted)."""
    train, val, test = (Split(*moons.arrays(s)) for s in ("train", "val", "test"))
    grid, fixed = GRIDS[name]
    if not search:
        grid, fixed = {}, {**fixed, **{k: v[0] for k, v in grid.items()}}
    with limit_threads(n_threads):
        result = tune_model(name, grid, fixed, train=train, val=val, test=test, seed=0, n_classes=2, folds=2,
                            n_threads=n_threads, progress=False)
        path = result.model.save(tmp_path / f"{name}-{n_threads}-{len(list(tmp_path.iterdir()))}")
        return path.read_bytes(), result.model.predict_proba(test.X)


@pytest.mark.parametrize("name", ["xgboost", "lightgbm"])
def test_a_retuned_member_file_is_byte_identical(moons, tmp_path, name):
    first, p1 = tune(moons, name, tmp_path)
    second, p2 = tune(moons, name, tmp_path)
    assert first == second
    assert p1.tobytes() == p2.tobytes()


@pytest.mark.parametrize("name", ["knn", "rf", "catboost"])
def test_a_retuned_member_predicts_bitwise_identically(moons, tmp_path, name):
    _, p1 = tune(moons, name, tmp_path)
    _, p2 = tune(moons, name, tmp_path)
    assert p1.tobytes() == p2.tobytes()


@pytest.mark.parametrize("name", ["xgboost", "lightgbm", "knn", "catboost"])
def test_member_predictions_do_not_depend_on_the_thread_count(moons, tmp_path, name):
    file1, p1 = tune(moons, name, tmp_path, n_threads=1, search=False)
    file2, p2 = tune(moons, name, tmp_path, n_threads=2, search=False)
    assert p1.tobytes() == p2.tobytes()
    if name == "xgboost":  # LightGBM's text file records num_threads among its parameters
        assert file1 == file2


def test_a_forest_is_the_same_under_another_thread_count_but_sums_its_trees_in_thread_order(moons):
    """The trees do not depend on n_jobs; predict_proba with n_jobs > 1 adds the trees' probabilities
    in the order the threads finish, so it may differ in the last bit (from run to run, too)."""
    train, val, test = (Split(*moons.arrays(s)) for s in ("train", "val", "test"))
    fitted = {}
    for n_threads in (1, 2):
        with limit_threads(n_threads):
            fitted[n_threads] = tune_model("rf", {}, {"n_estimators": 20, "max_depth": 3}, train=train, val=val,
                                           test=test, seed=0, n_classes=2, n_threads=n_threads, progress=False).model
    p1 = fitted[1].predict_proba(test.X)
    assert np.abs(fitted[2].predict_proba(test.X) - p1).max() <= 1e-12
    fitted[2].estimator.n_jobs = 1
    assert fitted[2].predict_proba(test.X).tobytes() == p1.tobytes()


def test_tabnet_reproduces_within_its_tolerance_under_another_thread_count(moons, tmp_path):
    _, p1 = tune(moons, "tabnet", tmp_path, n_threads=1)
    _, again = tune(moons, "tabnet", tmp_path, n_threads=1)
    _, p2 = tune(moons, "tabnet", tmp_path, n_threads=2)
    assert p1.tobytes() == again.tobytes()  # same machine, same threads: bitwise
    assert np.abs(p1 - p2).max() <= TABNET_TOLERANCE


def test_densityflow_fit_and_generate_are_byte_identical_when_rerun(moons, tmp_path):
    X, y = moons.arrays("train")
    Xt, yt = moons.arrays("test")

    def run(folder: str) -> tuple[list[bytes], bytes]:
        with limit_threads(1):
            model = DensityFlow(schema=moons.schema, seed=3, epochs=4, warmup_epochs=1, hidden=16, batch_size=64,
                                n_starts=2).fit(X, y)
            res = model.generate(Xt[:20], target=1 - yt[:20])
        log = write_parquet(tmp_path / folder / "train_log.parquet", model.log_.frame(), {"seed": 3})
        return [model.file_bytes(f) for f in DensityFlow.FILES] + [log.read_bytes()], res.counterfactuals.tobytes()

    files, counterfactuals = run("first")
    assert run("second") == (files, counterfactuals)
