"""Certification: DKW quantile-band upper confidence limits and DCE's eta rule.

All limits are in **squared** units, like the objective: ``UCL_y`` bounds the trimmed
``W^2(b(X), y*)`` and ``UCL_x`` the trimmed ``SW^2(X, X')``.

UCL (DCE Thm. 3.2 with DKW bands). For samples ``a``, ``b`` of size ``n`` and level
``alpha'``, ``eps = sqrt(log(2 / alpha') / (2 n))``, ``qbar(u) = min(u + eps, 1)``,
``qlow(u) = max(u - eps, 0)`` and

    D(u) = max(F_a^{-1}(qbar(u)) - F_b^{-1}(qlow(u)), F_b^{-1}(qbar(u)) - F_a^{-1}(qlow(u))),
    UCL  = 1 / (1 - 2 delta) * integral_delta^{1-delta} D(u)^2 du.

Empirical quantile functions are step functions, so ``D`` is piecewise constant with
breakpoints at ``j/n`` and ``j/n -/+ eps``: the integral is computed **exactly** on that
grid (no quadrature error). Because ``D(u) >= |F_a^{-1}(u) - F_b^{-1}(u)|`` at every ``u``
and the same grid holds the breakpoints of the empirical distance, ``UCL >= W^2_delta``
holds exactly. The input side averages the per-direction UCLs, each at level
``alpha / N`` (Bonferroni over the ``N`` directions). This is the DKW variant; no
bootstrap is used.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import pandas as pd

from recourselab.errors import DataError


def dkw_epsilon(n: int, alpha: float) -> float:
    """Half-width of the DKW band on the CDF: ``sqrt(log(2 / alpha) / (2 n))``."""
    if not 0.0 < alpha < 1.0:
        raise DataError(f"alpha must be in (0, 1), got {alpha}")
    return math.sqrt(math.log(2.0 / alpha) / (2.0 * n))


@lru_cache(maxsize=64)
def _band_grid(n: int, eps: float, delta: float) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Pieces of ``[delta, 1 - delta]`` on which the band quantiles are constant.

    Returns (index at qbar, index at qlow, index at u, piece length / (1 - 2 delta)).
    """
    j = np.arange(n + 1, dtype=float) / n
    cuts = np.concatenate([[delta, 1.0 - delta], j, j - eps, j + eps])
    cuts = np.unique(np.clip(cuts, delta, 1.0 - delta))
    length = np.diff(cuts)
    mid = 0.5 * (cuts[:-1] + cuts[1:])
    keep = length > 0
    mid, length = mid[keep], length[keep]

    def index(q: np.ndarray) -> np.ndarray:  # F^{-1}(q) = x_(ceil(q n)), q = 0 -> the minimum
        return np.clip(np.ceil(q * n).astype(np.int64) - 1, 0, n - 1)

    hi = index(np.minimum(mid + eps, 1.0))
    lo = index(np.maximum(mid - eps, 0.0))
    at = index(mid)
    for arr in (hi, lo, at, length):
        arr.setflags(write=False)
    return hi, lo, at, length / (1.0 - 2.0 * delta)


def ucl_w2(a_sorted: np.ndarray, b_sorted: np.ndarray, delta: float, alpha: float) -> np.ndarray:
    """DKW upper confidence limit of the trimmed W^2, batched over leading axes.

    Parameters
    ----------
    a_sorted, b_sorted : ndarrays (..., n), sorted along the last axis.
    delta : trimming constant in ``[0, 1/2)``.
    alpha : level of each band (``1 - alpha`` confidence per sample).

    Returns
    -------
    ndarray of shape (...) (a float for 1-D input), squared units.
    """
    n = a_sorted.shape[-1]
    if b_sorted.shape[-1] != n:
        raise DataError(f"samples must have the same size, got {n} and {b_sorted.shape[-1]}")
    if not 0.0 <= delta < 0.5:
        raise DataError(f"trimming constant delta must be in [0, 1/2), got {delta}")
    hi, lo, _, length = _band_grid(n, round(dkw_epsilon(n, alpha), 15), float(delta))
    D = np.maximum(a_sorted[..., hi] - b_sorted[..., lo], b_sorted[..., hi] - a_sorted[..., lo])
    out = (D ** 2 * length).sum(axis=-1)
    return float(out) if np.ndim(out) == 0 else out


def ucl_sw2(P_sorted: np.ndarray, ref_sorted: np.ndarray, delta: float, alpha: float) -> float:
    """UCL of the trimmed sliced W^2: mean of per-direction UCLs at level ``alpha / N``.

    Parameters
    ----------
    P_sorted, ref_sorted : sorted projections, shape (N, n).
    """
    N = P_sorted.shape[0]
    return float(np.mean(ucl_w2(P_sorted, ref_sorted, delta, alpha / N)))


@dataclass(frozen=True)
class EtaStep:
    """One application of DCE's eta rule with interval narrowing.

    Attributes
    ----------
    eta : the new trade-off in ``[left, right]`` (before narrowing).
    left, right : the narrowed interval [l, r] carried to the next iteration.
    branch : "x_violated" (a < 0 <= b, eta = l), "y_violated" (b < 0 <= a, eta = r),
        "both_violated" or "both_hold" (eta = l + p (r - l)).
    """

    eta: float
    left: float
    right: float
    branch: str


def eta_rule(ucl_x: float, ucl_y: float, U_x: float, U_y: float, left: float, right: float,
             kappa: float) -> EtaStep:
    """DCE Alg. 2: choose eta from the UCL gaps, then narrow ``[l, r]``.

    ``a = U_x - UCL_x``, ``b = U_y - UCL_y``. If ``a < 0 <= b``: eta = l (input side violated,
    weigh it more); if ``b < 0 <= a``: eta = r; otherwise eta = l + p (r - l) with
    p = b / (a + b) when both are violated and p = a / (a + b) when both hold (p = 1/2 when
    a + b = 0). Narrowing: if eta > (l + r) / 2 then l += kappa (r - l) else r -= kappa (r - l).
    Non-finite UCLs count as infinitely violated: with the other side violated by a finite gap,
    p takes its limit (eta = l when UCL_x is the infinite one, r when UCL_y is), and p = 1/2
    when both are. ``left``, ``right`` are the current l, r.
    """
    lo, hi = left, right
    a = U_x - ucl_x if math.isfinite(ucl_x) else -math.inf
    b = U_y - ucl_y if math.isfinite(ucl_y) else -math.inf
    if a < 0 <= b:
        eta, branch = lo, "x_violated"
    elif b < 0 <= a:
        eta, branch = hi, "y_violated"
    else:
        both_violated = a < 0 and b < 0
        branch = "both_violated" if both_violated else "both_hold"
        s = a + b
        if math.isinf(a) and math.isinf(b):  # both infinitely violated: no information
            p = 0.5
        elif math.isinf(a) or math.isinf(b):  # the limit of b / (a + b)
            p = 0.0 if math.isinf(a) else 1.0
        elif s == 0:
            p = 0.5
        else:
            p = (b if both_violated else a) / s
        eta = lo + p * (hi - lo)
    if eta > 0.5 * (lo + hi):
        lo = lo + kappa * (hi - lo)
    else:
        hi = hi - kappa * (hi - lo)
    return EtaStep(eta=float(eta), left=float(lo), right=float(hi), branch=branch)


def is_feasible(ucl_x: float, ucl_y: float, U_x: float, U_y: float) -> bool:
    """Certified feasibility: ``UCL_x < U_x`` and ``UCL_y < U_y``."""
    return bool(ucl_x < U_x and ucl_y < U_y)


def first_certified(log: pd.DataFrame) -> int | None:
    """Position in a run ``log`` of the first certified iterate with an edited row, else None.

    ``log`` needs the columns ``feasible`` and ``edited_rows`` (``DiscoverResult.log``).
    """
    ok = (log["feasible"].astype(bool) & (log["edited_rows"] > 0)).to_numpy()
    return int(np.argmax(ok)) if ok.any() else None


__all__ = ["EtaStep", "dkw_epsilon", "eta_rule", "first_certified", "is_feasible", "ucl_sw2", "ucl_w2"]
