"""The tune_ensemble flow: per (seed, model) cached tasks, manifest, metrics, BlackBox loading."""

from __future__ import annotations

import numpy as np

import flows.tune_ensemble as tune_module
from flows.prepare import run_prepare
from recourselab.data import load_prepared
from recourselab.io import read_json
from recourselab.models import load_ensemble


def test_tune_flow_writes_models_and_is_cached(tmp_path, params_factory, monkeypatch):
    params = params_factory(
        datasets=["moons"], seeds=[0, 1], prepare={"n_synthetic": 300},
        tune_ensemble={"members": ["knn", "xgboost"], "cv_folds": 2},
        models={"lightgbm": {"grid": {}, "fixed": {"n_estimators": 30, "num_leaves": 7}}},
        discover={"models": ["xgboost", "lightgbm"]},  # lightgbm is tuned for DISCOVER only
        orchestration={"task_runner": "thread", "max_workers": 2},
    )
    cache = tmp_path / "cache"
    run_prepare("moons", params, tmp_path / "prepared", cache)
    calls = []
    original = tune_module.tune_model
    monkeypatch.setattr(tune_module, "tune_model", lambda *a, **k: calls.append(a[0]) or original(*a, **k))

    args = ("moons", params, tmp_path / "prepared", tmp_path / "ensemble", tmp_path / "metrics", cache)
    first = tune_module.run_tune_ensemble(*args)
    assert sorted(calls) == ["knn", "knn", "lightgbm", "lightgbm", "xgboost", "xgboost"]
    assert not any(r.cached for r in first)

    seed_dir = tmp_path / "ensemble" / "moons" / "seed=1"
    manifest = read_json(seed_dir / "manifest.json")
    assert sorted(manifest["members"]) == ["knn", "lightgbm", "xgboost"] and manifest["seed"] == 1
    assert manifest["ensemble"] == ["knn", "xgboost"]
    metrics = read_json(seed_dir / "metrics.json")
    assert metrics["xgboost"]["test_accuracy"] >= 0.95
    summary = read_json(tmp_path / "metrics" / "moons" / "tune_ensemble.json")
    assert summary["seeds"] == [0, 1]
    accs = [read_json(tmp_path / "ensemble" / "moons" / f"seed={s}" / "metrics.json")["knn"]["val_accuracy"]
            for s in (0, 1)]
    assert summary["members"]["knn"]["val_accuracy"]["mean"] == np.mean(accs)

    prepared = load_prepared(tmp_path / "prepared" / "moons" / "seed=1")
    box = load_ensemble(seed_dir, schema=prepared.schema)
    X, y = prepared.arrays("test")
    assert (box.predict(X) == y).mean() >= 0.95

    second = tune_module.run_tune_ensemble(*args)
    assert len(calls) == 6, "a cache hit ran the task body"
    assert all(r.cached for r in second)

    # Adding a member tunes only the new model; the others stay cache hits.
    grown = params_factory(
        datasets=["moons"], seeds=[0, 1], prepare={"n_synthetic": 300},
        tune_ensemble={"members": ["knn", "xgboost", "rf"], "cv_folds": 2},
        models={"lightgbm": {"grid": {}, "fixed": {"n_estimators": 30, "num_leaves": 7}},
                "rf": {"grid": {}, "fixed": {"n_estimators": 20}}},
        discover={"models": ["xgboost", "lightgbm"]},
        orchestration={"task_runner": "thread", "max_workers": 2},
    )
    third = tune_module.run_tune_ensemble("moons", grown, *args[2:])
    assert sorted(calls[6:]) == ["rf", "rf"], "adding a member re-tuned the others"
    assert sum(not r.cached for r in third) == 2
    assert read_json(seed_dir / "manifest.json")["ensemble"] == ["knn", "xgboost", "rf"]


def test_member_metrics_summary_is_the_sample_std_and_null_for_one_seed():
    two = tune_module.summarize({0: {"knn": {"val_auc": 0.8}}, 1: {"knn": {"val_auc": 0.9}}})
    assert two["seeds"] == [0, 1] and abs(two["members"]["knn"]["val_auc"]["mean"] - 0.85) < 1e-12
    assert abs(two["members"]["knn"]["val_auc"]["std"] - np.std([0.8, 0.9], ddof=1)) < 1e-12
    one = tune_module.summarize({3: {"knn": {"val_auc": 0.8}}})
    assert one["members"]["knn"]["val_auc"] == {"mean": 0.8, "std": None}
