"""Every model kind: fit, predict, save/load round trip, determinism, registry errors."""

from __future__ import annotations

import os

import numpy as np
import pytest

from recourselab.errors import ConfigError, DataError, RecourselabError
from recourselab.models.registry import (
    ENSEMBLE,
    MODEL_KINDS,
    FitContext,
    UnknownModelError,
    fit_model,
    get_kind,
    load_model,
)
from tests.models.conftest import accuracy

# Small, fast settings per kind (the registry's defaults are exercised by the tuning tests).
FAST = {
    "knn": {"n_neighbors": 7},
    "svm": {"C": 10, "gamma": 1.0},
    "rf": {"n_estimators": 30, "max_depth": 8},
    "mlp": {"hidden_layer_sizes": [32, 32], "max_iter": 60, "learning_rate_init": 0.01},
    "xgboost": {"n_estimators": 60, "max_depth": 3},
    "catboost": {"iterations": 80, "depth": 4},
    "tabnet": {"max_epochs": 15, "patience": 5, "n_d": 8, "n_a": 8},
    "lightgbm": {"n_estimators": 60, "num_leaves": 15},
}


def _ctx(val, seed=0):
    return FitContext(X_val=val.X, y_val=val.y, seed=seed, n_classes=2)


def test_registry_holds_eight_kinds_and_the_ensemble_is_the_first_seven():
    assert list(MODEL_KINDS) == [*ENSEMBLE, "lightgbm"]
    assert set(FAST) == set(MODEL_KINDS)


@pytest.mark.parametrize("name", list(MODEL_KINDS))
def test_fit_predict_save_load_round_trip(name, moons_small, tmp_path, capsys):
    train, val, test = moons_small
    model = fit_model(name, FAST[name], train.X, train.y, _ctx(val))
    proba = model.predict_proba(test.X)
    assert proba.shape == (len(test.y), 2)
    np.testing.assert_allclose(proba.sum(1), 1.0, atol=1e-6)
    assert accuracy(model, test) >= (0.8 if name == "tabnet" else 0.9)

    path = model.save(tmp_path / f"model.{get_kind(name).ext}")
    assert path.is_file() and not list(tmp_path.glob(".*tmp"))
    loaded = load_model(name, path, model.params, 2)
    np.testing.assert_array_equal(loaded.predict_proba(test.X), proba)
    assert capsys.readouterr().out == ""  # libraries' prints (TabNet's "Successfully saved") are muted


@pytest.mark.parametrize("name", list(MODEL_KINDS))
def test_same_seed_gives_identical_probabilities(name, moons_small):
    train, val, test = moons_small
    a = fit_model(name, FAST[name], train.X, train.y, _ctx(val)).predict_proba(test.X)
    b = fit_model(name, FAST[name], train.X, train.y, _ctx(val)).predict_proba(test.X)
    np.testing.assert_array_equal(a, b)


def test_unknown_model_lists_the_valid_ones():
    with pytest.raises(UnknownModelError, match="unknown model 'xgb'.*valid models: knn, svm"):
        get_kind("xgb")
    assert str(UnknownModelError("plain")) == "plain"


def test_unknown_hyperparameter_is_rejected(moons_small):
    train, val, _ = moons_small
    match = r"model 'knn': unknown hyperparameters \['k'\]; valid: n_neighbors"
    with pytest.raises(RecourselabError, match=match):
        fit_model("knn", {"k": 3}, train.X, train.y, _ctx(val))


def test_skops_loader_refuses_types_outside_the_allow_list(tmp_path):
    import skops.io as sio
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import FunctionTransformer

    path = tmp_path / "evil.skops"
    sio.dump(make_pipeline(FunctionTransformer(os.system)), path)
    with pytest.raises(RecourselabError, match="outside the allow-list"):
        load_model("knn", path, {}, 2)
    # callables under trusted-looking module names are refused too: exact type names only
    import numpy as np

    for func, name in ((exec, "builtins.exec"), (np.load, "numpy.load")):
        sio.dump(make_pipeline(FunctionTransformer(func)), path)
        assert name in sio.get_untrusted_types(file=path)
        with pytest.raises(RecourselabError, match=f"outside the allow-list: .*{name}"):
            load_model("knn", path, {}, 2)


def test_mlp_early_stopping_restores_the_best_validation_epoch(moons_small):
    train, val, _ = moons_small
    model = fit_model("mlp", {"hidden_layer_sizes": [16], "max_iter": 40}, train.X, train.y, _ctx(val))
    est = model.estimator
    assert 1 <= est.best_epoch_ <= est.n_epochs_ <= 40
    assert est.n_epochs_ == 40 or est.n_epochs_ - est.best_epoch_ == 10  # ran out, or patience 10 spent
    # A run that stops on patience returns the best epoch's weights: the same as a run that ends there.
    spec = {"hidden_layer_sizes": [16], "max_iter": 300, "learning_rate_init": 0.05}
    stopped = fit_model("mlp", spec, train.X, train.y, _ctx(val)).estimator
    assert stopped.n_epochs_ - stopped.best_epoch_ == 10 and stopped.n_epochs_ < 300
    ends = fit_model("mlp", {**spec, "max_iter": stopped.best_epoch_}, train.X, train.y, _ctx(val)).estimator
    assert ends.n_epochs_ == ends.best_epoch_ == stopped.best_epoch_
    np.testing.assert_array_equal(stopped.predict_proba(val.X), ends.predict_proba(val.X))


def test_mlp_needs_at_least_one_epoch(moons_small):
    train, val, _ = moons_small
    with pytest.raises(RecourselabError, match=r"model 'mlp': max_iter must be an integer >= 1 \(epochs\), got 0"):
        fit_model("mlp", {"hidden_layer_sizes": [4], "max_iter": 0}, train.X, train.y, _ctx(val))


def test_a_hyperparameter_of_the_wrong_type_is_a_config_error(moons_small):
    train, val, _ = moons_small
    with pytest.raises(ConfigError, match=r"model 'mlp' could not be fitted with hyperparameters .*check models\.mlp"):
        fit_model("mlp", {"hidden_layer_sizes": 3.5, "max_iter": 5}, train.X, train.y, _ctx(val))


# ---------------------------------------------------------------------------- bad input, edge cases
@pytest.mark.parametrize("name", ["knn", "xgboost", "catboost", "lightgbm"])
def test_predict_proba_refuses_nan_and_another_width(name, moons_small):
    train, val, test = moons_small
    model = fit_model(name, FAST[name], train.X, train.y, _ctx(val))
    assert model.n_features == 2
    bad = test.X[:3].copy()
    bad[1, 0] = np.nan
    with pytest.raises(DataError, match=rf"{name} model input contains non-finite values \(NaN\) in 1 rows"):
        model.predict_proba(bad)
    with pytest.raises(DataError, match=rf"{name} model input width 3 does not match the model's 2"):
        model.predict_proba(np.zeros((2, 3)))


@pytest.mark.parametrize("name", list(MODEL_KINDS))
def test_loaded_models_know_their_width(name, moons_small, tmp_path):
    train, val, _ = moons_small
    path = fit_model(name, FAST[name], train.X, train.y, _ctx(val)).save(tmp_path / f"m.{get_kind(name).ext}")
    assert load_model(name, path, FAST[name], 2).n_features == 2


def test_fit_refuses_nan_rows_and_labels_that_are_not_class_indices(moons_small):
    train, val, _ = moons_small
    X = train.X.copy()
    X[5, 1] = np.nan
    with pytest.raises(DataError, match=r"xgboost training rows contains non-finite values \(NaN\)"):
        fit_model("xgboost", FAST["xgboost"], X, train.y, _ctx(val))
    with pytest.raises(DataError, match=r"model 'rf': class\(es\) \[1\] have no training rows"):
        fit_model("rf", FAST["rf"], train.X, np.zeros_like(train.y), _ctx(val))
    with pytest.raises(DataError, match=r"model 'knn': labels \[2\] are outside range\(2\)"):
        fit_model("knn", FAST["knn"], train.X, np.where(train.y == 1, 2, 0), _ctx(val))
    with pytest.raises(DataError, match=r"model 'knn': labels must be 1-D with one per training row"):
        fit_model("knn", FAST["knn"], train.X, train.y[:-1], _ctx(val))
    with pytest.raises(DataError, match=r"labels must be class indices \(integers\), got dtype <U1"):
        fit_model("knn", FAST["knn"], train.X, np.where(train.y == 1, "b", "a"), _ctx(val))


def test_hyperparameters_the_library_refuses_are_config_errors(moons_small):
    from recourselab.errors import ConfigError

    train, val, _ = moons_small
    with pytest.raises(ConfigError, match=r"model 'knn' could not be fitted with hyperparameters "
                                          r"\{'n_neighbors': 0\}: .*check models\.knn in params\.yaml"):
        fit_model("knn", {"n_neighbors": 0}, train.X, train.y, _ctx(val))


def test_mlp_takes_one_layer_size_as_an_integer(moons_small):
    train, val, _ = moons_small
    model = fit_model("mlp", {"hidden_layer_sizes": 16, "max_iter": 5}, train.X, train.y, _ctx(val))
    assert [w.shape for w in model.estimator.coefs_] == [(2, 16), (16, 1)]  # binary: one output unit


def test_svm_calibrates_with_fewer_folds_for_a_small_class(moons_small):
    train, val, test = moons_small
    keep = np.r_[np.flatnonzero(train.y == 0), np.flatnonzero(train.y == 1)[:3]]  # class 1: 3 rows
    model = fit_model("svm", FAST["svm"], train.X[keep], train.y[keep], _ctx(val))
    assert model.estimator.cv == 3 and model.predict_proba(test.X).shape == (len(test.y), 2)
    one = np.r_[np.flatnonzero(train.y == 0), np.flatnonzero(train.y == 1)[:1]]
    with pytest.raises(DataError, match=r"model 'svm': a class has 1 training row\(s\)"):
        fit_model("svm", FAST["svm"], train.X[one], train.y[one], _ctx(val))


def test_tabnet_fits_when_the_last_batch_would_hold_one_row(moons_small):
    train, val, _ = moons_small
    n = 65  # batch size 32: two full batches and one row, which batch normalisation cannot train on
    model = fit_model("tabnet", {"max_epochs": 1, "batch_size": 32, "virtual_batch_size": 16, "n_d": 4, "n_a": 4},
                      train.X[:n], train.y[:n], _ctx(val))
    assert model.predict_proba(val.X).shape == (len(val.y), 2)


def test_truncated_lightgbm_file_is_an_artifact_error_not_an_abort(moons_small, tmp_path):
    import subprocess
    import sys
    import textwrap

    train, val, _ = moons_small
    path = fit_model("lightgbm", FAST["lightgbm"], train.X, train.y, _ctx(val)).save(tmp_path / "m.txt")
    text = path.read_text()
    cut = text[:text.rindex("\nTree=")]  # the last tree cut off: LightGBM used to abort the process
    (tmp_path / "cut.txt").write_text(cut)
    (tmp_path / "half.txt").write_text(text[:len(text) // 2])
    params_cut = text[:text.index("end of parameters") - 40]  # cut inside the parameters: a segfault
    (tmp_path / "params.txt").write_text(params_cut)
    code = textwrap.dedent("""
        import sys
        from recourselab.errors import ArtifactError
        from recourselab.models.registry import load_model
        for f in sys.argv[1:]:
            try:
                load_model("lightgbm", f, {}, 2)
            except ArtifactError as e:
                print("ArtifactError", e)
        """)
    files = [str(tmp_path / f) for f in ("cut.txt", "half.txt", "params.txt")]
    run = subprocess.run([sys.executable, "-c", code, *files], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-500:]
    assert run.stdout.count("ArtifactError cannot load the lightgbm model") == 3
    assert "incomplete LightGBM model text" in run.stdout
    assert load_model("lightgbm", path, {}, 2).n_features == 2  # the whole file still loads
