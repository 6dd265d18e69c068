"""The eight model kinds of the zoo: how each is built from hyperparameters, fitted (early stopping on
the *validation* split only), asked for probabilities, and saved / loaded in a native or safe format
(xgboost UBJ, LightGBM text, CatBoost .cbm, TabNet zip, scikit-learn via skops with an allow-list of
types). :mod:`recourselab.models.registry` fits and loads them by name."""

from __future__ import annotations

import contextlib
import copy
import io
import logging
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from recourselab.errors import DataError, RecourselabError

log = logging.getLogger(__name__)


@dataclass
class FitContext:
    """What a fit may use besides the training rows."""

    X_val: np.ndarray
    y_val: np.ndarray
    seed: int
    n_classes: int
    n_threads: int = 1
    device: str = "cpu"
    tuning: bool = False


@dataclass(frozen=True)
class ModelKind:
    """How to build, fit, predict with, save and load one kind of model."""

    name: str
    ext: str
    hyperparameters: tuple[str, ...]
    build: Callable[[dict[str, Any], FitContext], Any]
    fit: Callable[[Any, np.ndarray, np.ndarray, FitContext], Any]
    save: Callable[[Any, Path], Path]
    load: Callable[[Path], Any]
    predict_proba: Callable[[Any, np.ndarray, int], np.ndarray] = (
        lambda est, X, k: np.asarray(est.predict_proba(X), dtype=np.float64))
    #: Labels of a model fitted with ``FitContext(tuning=True)`` (CV scoring only).
    predict_tuning: Callable[[Any, np.ndarray, int], np.ndarray] | None = None
    #: Number of input columns of a fitted estimator.
    width: Callable[[Any], int] = lambda est: est.n_features_in_


# ---------------------------------------------------------------------------- scikit-learn
def _skops_save(est: Any, path: Path) -> Path:
    import skops.io as sio

    from recourselab.io import atomic_path

    with atomic_path(path) as tmp:
        sio.dump(est, tmp)
    return path


#: The only types beyond skops' own defaults that a model file may contain: exactly those the
#: scikit-learn kinds of this zoo produce (kd / ball trees and their distance metrics for knn,
#: Platt calibration for svm, trees for rf, optimizers for mlp). Exact names, not prefixes: a
#: prefix such as "builtins." or "numpy." would let a crafted file call ``exec`` while loading.
SKOPS_TRUSTED_TYPES = frozenset({
    "sklearn.calibration._CalibratedClassifier", "sklearn.calibration._SigmoidCalibration",
    "sklearn.neighbors._kd_tree.KDTree", "sklearn.neighbors._ball_tree.BallTree",
    *(f"sklearn.metrics._dist_metrics.{m}Distance{b}" for m in ("Euclidean", "Manhattan", "Minkowski", "Chebyshev")
      for b in ("64", "32")),
    "sklearn.tree._tree.Tree",
    "sklearn.neural_network._stochastic_optimizers.AdamOptimizer",
    "sklearn.neural_network._stochastic_optimizers.SGDOptimizer",
})


def _skops_load(path: Path) -> Any:
    import skops.io as sio

    untrusted = sio.get_untrusted_types(file=path)
    bad = sorted(t for t in untrusted if t not in SKOPS_TRUSTED_TYPES)
    if bad:
        raise RecourselabError(f"{path} contains types outside the allow-list: {bad}; it was not loaded")
    return sio.load(path, trusted=untrusted)


def _plain_fit(est: Any, X: np.ndarray, y: np.ndarray, ctx: FitContext) -> Any:
    return est.fit(X, y)


def _build_knn(p: dict[str, Any], ctx: FitContext) -> Any:
    from sklearn.neighbors import KNeighborsClassifier

    return KNeighborsClassifier(**p, n_jobs=ctx.n_threads)


def _build_svm(p: dict[str, Any], ctx: FitContext) -> Any:
    from sklearn.calibration import CalibratedClassifierCV
    from sklearn.svm import SVC

    svc = SVC(kernel="rbf", random_state=ctx.seed, **p)
    if ctx.tuning:  # CV scores labels only: no need for the 5 extra fits of Platt scaling
        return svc
    return CalibratedClassifierCV(svc, method="sigmoid", cv=SVM_CALIBRATION_FOLDS, ensemble=False)


SVM_CALIBRATION_FOLDS = 5


def _fit_svm(est: Any, X: np.ndarray, y: np.ndarray, ctx: FitContext) -> Any:
    """Platt scaling uses 5 folds, or as many as the smallest class has rows (at least 2)."""
    smallest = int(np.bincount(y, minlength=ctx.n_classes).min())
    if hasattr(est, "cv") and smallest < est.cv:
        if smallest < 2:
            raise DataError(f"model 'svm': a class has {smallest} training row(s); its probability calibration "
                            "needs at least 2 rows per class")
        log.info("svm: the smallest class has %d training rows; calibrating with %d folds", smallest, smallest)
        est.cv = smallest
    return est.fit(X, y)


def _build_rf(p: dict[str, Any], ctx: FitContext) -> Any:
    from sklearn.ensemble import RandomForestClassifier

    return RandomForestClassifier(random_state=ctx.seed, n_jobs=ctx.n_threads, **p)


def _build_mlp(p: dict[str, Any], ctx: FitContext) -> Any:
    from sklearn.neural_network import MLPClassifier

    p = dict(p)
    sizes = p.get("hidden_layer_sizes", (64, 64))
    p["hidden_layer_sizes"] = (sizes,) if isinstance(sizes, int) else tuple(sizes)  # 16 means one layer of 16
    return MLPClassifier(random_state=ctx.seed, **p)


MLP_PATIENCE = 10
MLP_TOL = 1e-4  # minimum improvement of the validation log-loss


def _fit_mlp(est: Any, X: np.ndarray, y: np.ndarray, ctx: FitContext) -> Any:
    """Epochs of ``partial_fit``; keep the weights of the best validation log-loss (patience 10)."""
    from sklearn.metrics import log_loss

    classes = np.arange(ctx.n_classes)
    max_epochs = est.max_iter
    if isinstance(max_epochs, bool) or not isinstance(max_epochs, int) or max_epochs < 1:
        raise RecourselabError(f"model 'mlp': max_iter must be an integer >= 1 (epochs), got {max_epochs!r}")
    rng = np.random.default_rng(ctx.seed)
    best, best_loss, best_epoch, since = None, np.inf, 0, 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # partial_fit's ConvergenceWarning is meaningless here
        for epoch in range(1, max_epochs + 1):
            order = rng.permutation(len(y))
            est.partial_fit(X[order], y[order], classes=classes)
            loss = log_loss(ctx.y_val, est.predict_proba(ctx.X_val), labels=classes)
            if loss < best_loss - MLP_TOL:
                best = (copy.deepcopy(est.coefs_), copy.deepcopy(est.intercepts_))
                best_loss, best_epoch, since = loss, epoch, 0
            else:
                since += 1
                if since >= MLP_PATIENCE:
                    break
    est.coefs_, est.intercepts_ = best
    est.best_epoch_, est.n_epochs_ = best_epoch, epoch
    return est


# ---------------------------------------------------------------------------- boosting
def _build_xgb(p: dict[str, Any], ctx: FitContext) -> Any:
    import xgboost as xgb

    return xgb.XGBClassifier(tree_method="hist", n_jobs=ctx.n_threads, random_state=ctx.seed,
                             early_stopping_rounds=p.pop("early_stopping_rounds", 30), **p)


def _fit_xgb(est: Any, X: np.ndarray, y: np.ndarray, ctx: FitContext) -> Any:
    return est.fit(X, y, eval_set=[(ctx.X_val, ctx.y_val)], verbose=False)


def _save_xgb(est: Any, path: Path) -> Path:
    from recourselab.io import atomic_path

    with atomic_path(path) as tmp:
        est.save_model(str(tmp.with_suffix(".ubj")))
        tmp.with_suffix(".ubj").replace(tmp)
    return path


def _load_xgb(path: Path) -> Any:
    import xgboost as xgb

    est = xgb.XGBClassifier()
    est.load_model(str(path))
    return est


def _build_catboost(p: dict[str, Any], ctx: FitContext) -> Any:
    from catboost import CatBoostClassifier

    p = {"iterations": 500, "od_type": "Iter", "od_wait": 30, **p}
    return CatBoostClassifier(random_seed=ctx.seed, thread_count=ctx.n_threads, verbose=False,
                              allow_writing_files=False, use_best_model=True, **p)


def _fit_catboost(est: Any, X: np.ndarray, y: np.ndarray, ctx: FitContext) -> Any:
    return est.fit(X, y, eval_set=(ctx.X_val, ctx.y_val))


def _save_catboost(est: Any, path: Path) -> Path:
    from recourselab.io import atomic_path

    with atomic_path(path) as tmp:
        est.save_model(str(tmp), format="cbm")
    return path


def _load_catboost(path: Path) -> Any:
    from catboost import CatBoostClassifier

    est = CatBoostClassifier()
    est.load_model(str(path), format="cbm")
    return est


def _build_lgbm(p: dict[str, Any], ctx: FitContext) -> dict[str, Any]:
    """LightGBM is trained with ``lightgbm.train``: the "estimator" is its parameter dict."""
    p = dict(p)
    multi = ctx.n_classes > 2
    out = {"objective": "multiclass" if multi else "binary", "seed": ctx.seed, "num_threads": ctx.n_threads,
           "deterministic": True, "force_row_wise": True, "verbose": -1,
           "num_boost_round": p.pop("n_estimators", 300), **p}
    if multi:
        out["num_class"] = ctx.n_classes
    if out.get("subsample", 1.0) < 1.0:
        out["bagging_freq"] = 1
    return out


def _fit_lgbm(params: dict[str, Any], X: np.ndarray, y: np.ndarray, ctx: FitContext) -> Any:
    import lightgbm as lgb

    params = dict(params)
    rounds = params.pop("num_boost_round")
    train = lgb.Dataset(X, y)
    val = lgb.Dataset(ctx.X_val, ctx.y_val, reference=train)
    return lgb.train(params, train, num_boost_round=rounds, valid_sets=[val],
                     callbacks=[lgb.early_stopping(30, verbose=False)])


def _lgbm_proba(booster: Any, X: np.ndarray, k: int) -> np.ndarray:
    p = np.asarray(booster.predict(X, num_iteration=booster.best_iteration or None), dtype=np.float64)
    return np.column_stack([1.0 - p, p]) if p.ndim == 1 else p


def _save_lgbm(booster: Any, path: Path) -> Path:
    from recourselab.io import write_bytes

    return write_bytes(path, booster.model_to_string(num_iteration=booster.best_iteration or None).encode())


def _load_lgbm(path: Path) -> Any:
    """LightGBM aborts the whole process on some incomplete model files: check the text first."""
    import lightgbm as lgb

    text = path.read_text(encoding="utf-8")
    sizes = next((line for line in text.splitlines() if line.startswith("tree_sizes=")), None)
    n_trees = text.count("\nTree=")
    complete = (sizes is not None and "end of trees" in text and len(sizes.split("=", 1)[1].split()) == n_trees
                and ("\nparameters:" not in text or "end of parameters" in text))
    if not complete:
        raise ValueError(f"incomplete LightGBM model text ({n_trees} trees; its tree_sizes header, 'end of trees' "
                         "or 'end of parameters' line is missing or does not match)")
    return lgb.Booster(model_str=text)


# ---------------------------------------------------------------------------- TabNet
def _tabnet_cls() -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from pytorch_tabnet.tab_model import TabNetClassifier
    return TabNetClassifier


TABNET_FIT_KEYS = ("max_epochs", "patience", "batch_size", "virtual_batch_size")


def _build_tabnet(p: dict[str, Any], ctx: FitContext) -> Any:
    import torch

    p = dict(p)
    fit_kw = {k: p.pop(k) for k in TABNET_FIT_KEYS if k in p}
    lr = p.pop("lr", 2e-2)
    est = _tabnet_cls()(seed=ctx.seed, verbose=0, mask_type=p.pop("mask_type", "sparsemax"),
                        optimizer_fn=torch.optim.Adam, optimizer_params={"lr": lr},
                        device_name=ctx.device, **p)
    est._recourselab_fit = fit_kw
    return est


def _fit_tabnet(est: Any, X: np.ndarray, y: np.ndarray, ctx: FitContext) -> Any:
    from recourselab.runtime import torch_seeded

    kw = {"max_epochs": 100, "patience": 10, "batch_size": 1024, "virtual_batch_size": 128,
          **getattr(est, "_recourselab_fit", {})}
    kw["batch_size"] = min(kw["batch_size"], len(y))
    kw["virtual_batch_size"] = min(kw["virtual_batch_size"], kw["batch_size"])
    # A last batch of one row fails in batch normalisation: leave that row out of the epoch.
    drop_last = len(y) % kw["batch_size"] == 1
    with torch_seeded(ctx.seed), warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")  # "best weights from best epoch are automatically used"
        est.fit(X.astype(np.float32), y, eval_set=[(ctx.X_val.astype(np.float32), ctx.y_val)],
                eval_metric=["logloss"], compute_importance=False, drop_last=drop_last, **kw)
    return est


def _save_tabnet(est: Any, path: Path) -> Path:
    import tempfile

    from recourselab.io import copy_atomic

    with tempfile.TemporaryDirectory() as tmp:
        # save_model prints "Successfully saved model at ..." (a temporary path) to stdout
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
            warnings.simplefilter("ignore")
            written = est.save_model(str(Path(tmp) / "model"))  # appends .zip
        copy_atomic(written, path)
    return path


def _load_tabnet(path: Path) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # "Device used : cpu"
        est = _tabnet_cls()(device_name="cpu")
        est.load_model(str(path))
    return est


def _tabnet_proba(est: Any, X: np.ndarray, k: int) -> np.ndarray:
    return np.asarray(est.predict_proba(X.astype(np.float32)), dtype=np.float64)


MODEL_KINDS: dict[str, ModelKind] = {
    "knn": ModelKind("knn", "skops", ("n_neighbors", "weights", "p"), _build_knn, _plain_fit,
                     _skops_save, _skops_load),
    "svm": ModelKind("svm", "skops", ("C", "gamma"), _build_svm, _fit_svm, _skops_save, _skops_load,
                     predict_tuning=lambda est, X, k: est.predict(X)),
    "rf": ModelKind("rf", "skops", ("n_estimators", "max_depth", "min_samples_split",
                                    "min_samples_leaf", "max_features"),
                    _build_rf, _plain_fit, _skops_save, _skops_load),
    "mlp": ModelKind("mlp", "skops", ("hidden_layer_sizes", "alpha", "learning_rate_init", "max_iter",
                                      "batch_size"),
                     _build_mlp, _fit_mlp, _skops_save, _skops_load),
    "xgboost": ModelKind("xgboost", "ubj", ("n_estimators", "max_depth", "learning_rate", "subsample",
                                            "colsample_bytree", "min_child_weight", "early_stopping_rounds"),
                         _build_xgb, _fit_xgb, _save_xgb, _load_xgb),
    "catboost": ModelKind("catboost", "cbm",
                          ("depth", "learning_rate", "l2_leaf_reg", "iterations", "od_wait"),
                          _build_catboost, _fit_catboost, _save_catboost, _load_catboost,
                          width=lambda est: len(est.feature_names_)),
    "tabnet": ModelKind("tabnet", "zip", ("lr", "n_d", "n_a", "n_steps", "gamma", "mask_type",
                                          *TABNET_FIT_KEYS),
                        _build_tabnet, _fit_tabnet, _save_tabnet, _load_tabnet, _tabnet_proba,
                        width=lambda est: est.input_dim),
    "lightgbm": ModelKind("lightgbm", "txt", ("n_estimators", "num_leaves", "learning_rate", "max_depth",
                                              "min_child_samples", "subsample", "colsample_bytree"),
                          _build_lgbm, _fit_lgbm, _save_lgbm, _load_lgbm, _lgbm_proba,
                          width=lambda booster: booster.num_feature()),
}
