"""Plausibility and robustness-under-multiplicity metrics of counterfactuals (DensityFlow paper, section 5).

- LOF and IsolationForest inlier rates: per target class, both detectors are fitted on the
  training rows of that class (encoded space) and asked whether each counterfactual of that
  target is an inlier.
- Ensemble disagreement: variance over the members of p_m(y* | x'), averaged over rows.
- Mutual information (epistemic uncertainty of the ensemble): H(mean_m p_m) - mean_m H(p_m).
- RQ2 check: Spearman correlation of -S(x | y) (the density score) with the ensemble
  variance Var_m p_m(y | x) on test points, with a percentile bootstrap confidence interval.
"""

from __future__ import annotations

import logging
import numbers
import warnings
from typing import Any

import numpy as np
from scipy.stats import ConstantInputWarning, spearmanr
from sklearn.ensemble import IsolationForest
from sklearn.neighbors import LocalOutlierFactor

from recourselab.errors import DataError
from recourselab.models.oracle import EnsembleOutput

log = logging.getLogger(__name__)


def inlier_rates(cf: np.ndarray, target: np.ndarray, X_train: np.ndarray, y_train: np.ndarray, *,
                 reference: tuple[np.ndarray, np.ndarray] | None = None, seed: int = 0, n_neighbors: int = 20,
                 max_fit_rows: int = 5000) -> dict[str, float]:
    """Fraction of counterfactuals (n, d) that LOF and IsolationForest call inliers of their target class.

    The detectors of class c are fitted on at most ``max_fit_rows`` training rows (n_train, d)
    labelled c, drawn at random (``seed``). LOF uses ``n_neighbors`` neighbours, or one more than
    the largest number of copies of one row in its fitting rows when that is larger (with fewer,
    a point beside a repeated row gets an unbounded outlier score).

    Returns ``lof_inlier_rate`` and ``iforest_inlier_rate`` in [0, 1]. With ``reference`` =
    (X_ref (m, d), y_ref (m,)), held-out real rows, also ``lof_inlier_rate_real`` and
    ``iforest_inlier_rate_real``: the same detectors' rates on the real rows of each target
    class, weighted like the counterfactuals' targets (the level a real row of that class
    reaches; NaN if a target class has no reference row).
    """
    cf, target = np.asarray(cf, dtype=float), np.asarray(target)
    if len(cf) != len(target):
        raise DataError(f"{len(cf)} counterfactuals but {len(target)} targets")
    if len(cf) == 0:
        raise DataError("inlier rates need at least one counterfactual, got 0 rows")
    lof_ok = np.zeros(len(cf), dtype=bool)
    iso_ok = np.zeros(len(cf), dtype=bool)
    real = {"lof_inlier_rate_real": 0.0, "iforest_inlier_rate_real": 0.0}
    for c in np.unique(target):
        rows = np.flatnonzero(y_train == c)
        if len(rows) < 3:
            raise DataError(f"class {c} has {len(rows)} training rows; plausibility needs at least 3")
        if len(rows) > max_fit_rows:
            rows = np.sort(np.random.default_rng(seed).choice(rows, max_fit_rows, replace=False))
        ref = X_train[rows]
        mine = target == c
        copies = int(np.unique(ref, axis=0, return_counts=True)[1].max())
        k = max(n_neighbors, copies + 1)
        if k > n_neighbors:
            log.info("class %s: a row occurs %d times in LOF's fitting rows; LOF uses %d neighbours", c, copies,
                     min(k, len(ref) - 1))
        lof = LocalOutlierFactor(n_neighbors=min(k, len(ref) - 1), novelty=True).fit(ref)
        lof_ok[mine] = lof.predict(cf[mine]) == 1
        iso = IsolationForest(random_state=seed, n_jobs=1).fit(ref)
        iso_ok[mine] = iso.predict(cf[mine]) == 1
        if reference is not None:
            X_ref = np.asarray(reference[0], dtype=float)[np.asarray(reference[1]) == c]
            weight = mine.mean()
            for key, det in (("lof_inlier_rate_real", lof), ("iforest_inlier_rate_real", iso)):
                real[key] += weight * ((det.predict(X_ref) == 1).mean() if len(X_ref) else np.nan)
    rates = {"lof_inlier_rate": float(lof_ok.mean()), "iforest_inlier_rate": float(iso_ok.mean())}
    return rates if reference is None else {**rates, **{k: float(v) for k, v in real.items()}}


def ensemble_uncertainty(output: EnsembleOutput, target: np.ndarray) -> dict[str, float]:
    """Mean disagreement Var_m p_m(y* | x') and mean mutual information of the ensemble (nats)."""
    P = output.member_proba  # (M, n, K)
    target = np.asarray(target)
    if P.shape[1] == 0:
        raise DataError("ensemble uncertainty needs at least one row, got 0")
    p_target = P[:, np.arange(P.shape[1]), target]  # (M, n)

    def entropy(p: np.ndarray) -> np.ndarray:
        return -(p * np.log(np.clip(p, 1e-12, 1.0))).sum(axis=-1)

    mi = entropy(P.mean(axis=0)) - entropy(P).mean(axis=0)
    return {"disagreement": float(p_target.var(axis=0).mean()), "mutual_information": float(mi.mean())}


def density_variance_spearman(density: np.ndarray, variance: np.ndarray, *, n_boot: int = 1000, seed: int = 0,
                              level: float = 0.95) -> dict[str, Any]:
    """RQ2: Spearman(-S, Var p) over test points (n,), with a percentile bootstrap CI.

    Pairs with a non-finite value are left out (and logged). Returns ``rho``, ``ci_low``,
    ``ci_high``, ``n`` (pairs used) and ``n_boot`` (resamples with a defined correlation);
    ``rho`` is NaN when either input is constant or fewer than 3 pairs remain, and the CI is NaN
    unless ``rho`` is defined and at least half of the resamples are.
    """
    if isinstance(n_boot, bool) or not isinstance(n_boot, numbers.Integral) or n_boot < 1:
        raise DataError(f"n_boot must be an integer >= 1 (bootstrap resamples), got {n_boot!r}")
    if not 0.0 < level < 1.0:
        raise DataError(f"level must be a confidence level in (0, 1), e.g. 0.95, got {level!r}")
    s, v = -np.asarray(density, dtype=float), np.asarray(variance, dtype=float)
    if s.shape != v.shape or s.ndim != 1:
        raise DataError(f"density and variance must be 1-D of the same length, got {s.shape} and {v.shape}")
    finite = np.isfinite(s) & np.isfinite(v)
    if not finite.all():
        log.warning("RQ2: %d of %d pairs have a non-finite density or variance and are left out",
                    int((~finite).sum()), len(s))
        s, v = s[finite], v[finite]
    nan = {"rho": np.nan, "ci_low": np.nan, "ci_high": np.nan, "n": int(len(s)), "n_boot": 0}
    if len(s) < 3 or np.ptp(s) == 0 or np.ptp(v) == 0:
        return nan
    rho = float(spearmanr(s, v).statistic)
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(s), size=(n_boot, len(s)))
    with warnings.catch_warnings():  # a resample of few distinct rows can be constant: NaN, dropped below
        warnings.simplefilter("ignore", ConstantInputWarning)
        boots = np.array([spearmanr(s[i], v[i]).statistic for i in idx], dtype=float)
    boots = boots[np.isfinite(boots)]
    if 2 * len(boots) < n_boot:
        return {**nan, "rho": rho, "n_boot": int(len(boots))}
    tail = (1.0 - level) / 2.0
    low, high = np.quantile(boots, [tail, 1.0 - tail])
    return {"rho": rho, "ci_low": float(low), "ci_high": float(high), "n": int(len(s)), "n_boot": int(len(boots))}


__all__ = ["density_variance_spearman", "ensemble_uncertainty", "inlier_rates"]
