"""Grid search with stratified k-fold CV on train, early stopping on val, refit, evaluation."""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from sklearn.metrics import accuracy_score, roc_auc_score
from sklearn.model_selection import ParameterGrid, StratifiedKFold

from recourselab.data.split import stratified_subsample
from recourselab.errors import DataError
from recourselab.models.registry import FitContext, FittedModel, fit_model, get_kind
from recourselab.progress import bar

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Split:
    """Encoded rows ``X`` (n, d) and class indices ``y`` (n,)."""

    X: np.ndarray
    y: np.ndarray


@dataclass(frozen=True)
class TuneResult:
    """The refitted best model of one kind with its search log and metrics."""

    model: FittedModel
    best_params: dict[str, Any]
    cv_score: float | None
    cv_results: list[dict[str, Any]] = field(default_factory=list)
    metrics: dict[str, float] = field(default_factory=dict)


def evaluate(model: FittedModel, split: Split) -> dict[str, float]:
    """Accuracy and ROC AUC (one-vs-rest for K > 2) of ``model`` on ``split``."""
    proba = model.predict_proba(split.X)
    if model.n_classes == 2:
        auc = roc_auc_score(split.y, proba[:, 1])
    else:
        auc = roc_auc_score(split.y, proba, multi_class="ovr", labels=np.arange(model.n_classes))
    return {"accuracy": float(accuracy_score(split.y, proba.argmax(1))), "auc": float(auc)}


def cross_validate(name: str, params: Mapping[str, Any], train: Split, ctx: FitContext,
                   folds: int) -> float:
    """Mean held-out accuracy of ``params`` over stratified ``folds`` folds of ``train``."""
    kind = get_kind(name)
    counts = np.bincount(train.y, minlength=ctx.n_classes)
    if counts.min() < folds:
        raise DataError(f"model {name!r}: class {int(counts.argmin())} has {int(counts.min())} tuning rows, fewer than "
                        f"the {folds} CV folds (tune_ensemble.cv_folds); lower cv_folds or use more rows")
    cv_ctx = dataclasses.replace(ctx, tuning=True)
    scores = []
    splitter = StratifiedKFold(folds, shuffle=True, random_state=ctx.seed)
    for fit_idx, hold_idx in splitter.split(train.X, train.y):
        model = fit_model(name, params, train.X[fit_idx], train.y[fit_idx], cv_ctx)
        Xh = train.X[hold_idx]
        if kind.predict_tuning is not None:
            pred = kind.predict_tuning(model.estimator, Xh, ctx.n_classes)
        else:
            pred = model.predict_proba(Xh).argmax(1)
        scores.append(accuracy_score(train.y[hold_idx], pred))
    return float(np.mean(scores))


def tune_model(name: str, grid: Mapping[str, list[Any]], fixed: Mapping[str, Any], *, train: Split,
               val: Split, test: Split, seed: int, n_classes: int, folds: int = 3,
               max_tune_rows: int | None = None, max_fit_rows: int | None = None,
               n_threads: int = 1, device: str = "cpu", progress: bool | None = None) -> TuneResult:
    """Tune model ``name`` and refit the best configuration.

    Grid search: ``folds``-fold stratified CV on (a stratified subsample of at most
    ``max_tune_rows`` rows of) ``train``; early-stopping models stop on ``val``, never on
    ``test``. The best configuration is refitted on (at most ``max_fit_rows`` rows of)
    ``train`` and evaluated on ``val`` and ``test``. A grid with a single configuration
    skips the CV. ``progress``: a bar over the grid points (True shows it, False hides it,
    None shows it only on an interactive terminal outside CI, see :func:`recourselab.progress.bar`).

    Returns
    -------
    TuneResult with metrics ``val_accuracy``, ``val_auc``, ``test_accuracy``, ``test_auc``,
    ``fit_time_s`` (refit), ``tune_time_s`` (CV), ``n_fit_rows``, ``n_tune_rows``.
    """
    ctx = FitContext(X_val=val.X, y_val=val.y, seed=seed, n_classes=n_classes, n_threads=n_threads,
                     device=device)
    candidates = [{**fixed, **p} for p in ParameterGrid(dict(grid))] if grid else [dict(fixed)]
    cv_results: list[dict[str, Any]] = []
    t0 = time.perf_counter()
    tune_idx = stratified_subsample(train.y, max_tune_rows, seed)
    if len(candidates) > 1:
        tune_split = Split(train.X[tune_idx], train.y[tune_idx])
        points = bar(candidates, desc=f"tune {name} (seed {seed})", unit="config", enabled=progress)
        for params in points:
            score = cross_validate(name, params, tune_split, ctx, folds)
            cv_results.append({"params": params, "cv_accuracy": score})
            log.debug("%s %s: cv accuracy %.4f", name, params, score)
            if not points.disable:
                points.set_postfix(best=f"{max(r['cv_accuracy'] for r in cv_results):.4f}", refresh=False)
        best = max(cv_results, key=lambda r: r["cv_accuracy"])
        best_params, cv_score = best["params"], best["cv_accuracy"]
    else:
        best_params, cv_score = candidates[0], None
    tune_time = time.perf_counter() - t0

    fit_idx = stratified_subsample(train.y, max_fit_rows, seed)
    t0 = time.perf_counter()
    model = fit_model(name, best_params, train.X[fit_idx], train.y[fit_idx], ctx)
    fit_time = time.perf_counter() - t0
    metrics: dict[str, float] = {"fit_time_s": fit_time, "tune_time_s": tune_time,
                                 "n_fit_rows": len(fit_idx),
                                 "n_tune_rows": len(tune_idx) if len(candidates) > 1 else 0}
    for split_name, split in (("val", val), ("test", test)):
        for metric, value in evaluate(model, split).items():
            metrics[f"{split_name}_{metric}"] = value
    log.info("%s: val acc %.4f test acc %.4f (fit %.1fs, tune %.1fs, %s)", name, metrics["val_accuracy"],
             metrics["test_accuracy"], fit_time, tune_time, best_params)
    return TuneResult(model=model, best_params=best_params, cv_score=cv_score, cv_results=cv_results,
                      metrics=metrics)
