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
``alpha / N`` (Bonferroni over the ``N`` directions).

Bootstrap bound (the DISCOVER reference code's rule, **unsquared**). ``T_d(a, b)`` trims each
sample at its own ``d`` and ``1 - d`` quantiles (linear interpolation, ties at the cut kept),
puts uniform mass on the kept points and takes the exact squared-distance OT cost divided by
``1 - 2 d`` (:func:`trimmed_ot_sq`). With ``B`` fixed resampling index vectors,
``W = T_d(a, b)``, ``D_b = T_d(a*_b, b*_b) - W`` and ``upper = W - quantile_{level/2}(D)``
(the basic, reverse-percentile bootstrap); the bound is ``sqrt(upper)`` (0 when ``upper < 0``),
see :func:`bootstrap_bound`. The input side combines the per-direction bounds at level
``alpha / N`` as ``sqrt(mean_k bound_k^2)`` (:func:`bootstrap_sw`). It is an asymptotic bound,
not a finite-sample one (docs/reference/certificates.md).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import pandas as pd

from recourselab.errors import DataError
from recourselab.rng import numpy_rng


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


#: Confidence rules of the certificate (``DiscoverSettings.certificate``): the scale of their bounds.
CERTIFICATES = {"dkw": "squared", "bootstrap": "unsquared"}


def _lerp_quantile(s_sorted: np.ndarray, q: float) -> np.ndarray:
    """``np.quantile(s, q, axis=-1)`` (linear method, numpy's own arithmetic) of sorted samples (..., n)."""
    n = s_sorted.shape[-1]
    pos = (n - 1) * q
    f = int(math.floor(pos))
    t = pos - f
    a, b = s_sorted[..., f], s_sorted[..., min(f + 1, n - 1)]
    diff = b - a
    return a + diff * t if t < 0.5 else b - diff * (1.0 - t)


@dataclass(frozen=True)
class _Kept:
    """Sorted samples (..., n) and their kept block: ``start`` and size ``size`` (..., 1), ints."""

    values: np.ndarray
    start: np.ndarray
    size: np.ndarray


def _kept(s_sorted: np.ndarray, delta: float) -> _Kept:
    """The values of sorted samples between their own ``delta`` and ``1 - delta`` quantiles (ties at a cut stay in)."""
    lo, hi = _lerp_quantile(s_sorted, delta), _lerp_quantile(s_sorted, 1.0 - delta)
    start = (s_sorted < lo[..., None]).sum(axis=-1, keepdims=True)
    stop = (s_sorted <= hi[..., None]).sum(axis=-1, keepdims=True)
    return _Kept(s_sorted, start, stop - start)


def _gather(values: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """``np.take_along_axis(values, idx, axis=-1)`` for ``idx`` with the same leading shape, by flat indexing."""
    L, K = values.shape[-1], idx.shape[-1]
    rows = np.arange(idx.size // K).reshape(*idx.shape[:-1], 1) * L
    return values.reshape(-1)[idx + rows]


def _kept_cost(A: _Kept, Bk: _Kept) -> np.ndarray:
    """Exact squared-distance OT cost between uniform masses on two kept blocks. Shape (...).

    ``int (F_A^{-1} - F_B^{-1})^2 = mean(A^2) + mean(B^2) - 2 int F_A^{-1} F_B^{-1}``; the cross term is
    ``sum_i A_i (G_B((i+1)/p) - G_B(i/p))`` with ``G_B(u) = int_0^u F_B^{-1}``, piecewise linear with
    knots at ``j/q``: ``G_B(i/p) = (C_k + (r/p) B_k) / q`` for ``i q = k p + r`` (C: cumulative sums of B).
    """
    p, q = A.size, Bk.size  # (..., 1)
    n, m = A.values.shape[-1], Bk.values.shape[-1]
    a = np.where(np.arange(n) < p, _gather(A.values, np.minimum(A.start + np.arange(n), n - 1)), 0.0)  # by rank
    jb = np.arange(m) - Bk.start
    b = np.where((jb >= 0) & (jb < q), Bk.values, 0.0)
    C = np.concatenate([np.zeros((*b.shape[:-1], 1)), np.cumsum(b, axis=-1)], axis=-1)  # (..., m + 1)
    iq = np.arange(n + 1) * q  # G_B at i/p, i = 0..n
    k = iq // p
    G = _gather(C, np.minimum(Bk.start + k, m)) + (iq - k * p) / p * _gather(Bk.values, np.minimum(Bk.start + k, m - 1))
    cross = (a * np.diff(G, axis=-1)).sum(axis=-1) / q[..., 0]
    return (a ** 2).sum(axis=-1) / p[..., 0] + (b ** 2).sum(axis=-1) / q[..., 0] - 2.0 * cross


def trimmed_ot_sq(a: np.ndarray, b: np.ndarray, delta: float, *, presorted: bool = False) -> np.ndarray:
    """``T_d(a, b)``: each sample trimmed at its own quantiles, exact 1-D OT of the kept points, / (1 - 2 d).

    Parameters
    ----------
    a, b : ndarrays (..., n) and (..., m) with the same leading axes.
    delta : trimming constant d in ``[0, 1/2)``.
    presorted : the last axes are already sorted ascending.

    Returns
    -------
    ndarray (...) (a float for 1-D input), squared units. The kept sets have sizes p and q; the
    cost integrates ``(F_A^{-1}(u) - F_B^{-1}(u))^2`` over the merged breakpoints ``i/p`` and ``j/q``,
    exactly (the sorted matching when p = q).
    """
    if not 0.0 <= delta < 0.5:
        raise DataError(f"trimming constant delta must be in [0, 1/2), got {delta}")
    a = np.asarray(a, dtype=float)
    b = np.asarray(b, dtype=float)
    if not presorted:
        a, b = np.sort(a, axis=-1), np.sort(b, axis=-1)
    out = _kept_cost(_kept(a, delta), _kept(b, delta)) / (1.0 - 2.0 * delta)
    return float(out) if np.ndim(out) == 0 else out


def bootstrap_indices(n: int, m: int, resamples: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """``resamples`` resampling index vectors for samples of sizes n and m: shapes (B, n), (B, m)."""
    return rng.integers(0, n, (resamples, n)), rng.integers(0, m, (resamples, m))


def bootstrap_bound(a: np.ndarray, b: np.ndarray, delta: float, level: float, idx_a: np.ndarray,
                    idx_b: np.ndarray, *, b_resampled: _Kept | None = None) -> np.ndarray:
    """Basic-bootstrap upper bound of ``sqrt(T_d(a, b))`` (unsquared), batched over leading axes.

    Parameters
    ----------
    a, b : samples (..., n), (..., m).
    delta : trimming constant of :func:`trimmed_ot_sq`.
    level : ``1 - level`` is the confidence; the bootstrap quantile is taken at ``level / 2``.
    idx_a, idx_b : resampling indices (B, n), (B, m), the same for every call of a run.
    b_resampled : the kept blocks of ``b``'s sorted resamples (:func:`resampled`), when cached.

    Returns
    -------
    ndarray (...) (a float for 1-D input): ``sqrt(max(W - quantile_{level/2}(D), 0))`` with
    ``W = T_d(a, b)`` and ``D_b = T_d(a[idx_a_b], b[idx_b_b]) - W``.
    """
    out = _from_terms(*bootstrap_terms(a, b, delta, level, idx_a, idx_b, b_resampled=b_resampled))
    return float(out) if np.ndim(out) == 0 else out


def _from_terms(W: np.ndarray, offset: np.ndarray) -> np.ndarray:
    """The bootstrap bound ``sqrt(max(W + offset, 0))`` from its terms (:func:`bootstrap_terms`)."""
    return np.sqrt(np.maximum(W + offset, 0.0))


def _over_directions(bounds: np.ndarray) -> float:
    """The input side's bound from its per-direction bounds (N,): ``sqrt(mean_k bound_k^2)``."""
    return float(np.sqrt(np.mean(np.square(bounds))))


def bootstrap_terms(a: np.ndarray, b: np.ndarray, delta: float, level: float, idx_a: np.ndarray,
                    idx_b: np.ndarray, *, b_resampled: _Kept | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The two terms of :func:`bootstrap_bound`: ``W = T_d(a, b)`` and the offset ``-quantile_{level/2}(D)``,
    each of shape (...); the bound is ``sqrt(max(W + offset, 0))``."""
    a = np.asarray(a, dtype=float)
    b = np.asarray(b, dtype=float)
    W = np.asarray(trimmed_ot_sq(a, b, delta))
    rb = resampled(b, idx_b, delta) if b_resampled is None else b_resampled
    D = _kept_cost(resampled(a, idx_a, delta), rb) / (1.0 - 2.0 * delta) - W[..., None]
    return W, -np.quantile(D, level / 2.0, axis=-1)


def resampled(a: np.ndarray, idx: np.ndarray, delta: float) -> _Kept:
    """Kept blocks of the sorted resamples ``a[..., idx]`` (..., B, n) of samples (..., n)."""
    return _kept(np.sort(np.asarray(a, dtype=float)[..., idx], axis=-1), delta)


def bootstrap_sw(P: np.ndarray, ref: np.ndarray, delta: float, alpha: float, idx_a: np.ndarray,
                 idx_b: np.ndarray, *, ref_resampled: _Kept | None = None) -> float:
    """Input-side bootstrap bound: ``sqrt(mean_k bound_k^2)`` over the N directions, each at level ``alpha / N``.

    Parameters
    ----------
    P, ref : projections of the current and the factual rows, shape (N, n) each (any order).
    ref_resampled : ``resampled(ref, idx_b, delta)``, when cached.
    """
    N = P.shape[0]
    return _over_directions(bootstrap_bound(P, ref, delta, alpha / N, idx_a, idx_b, b_resampled=ref_resampled))


class Certificate:
    """The bounds (UCL_x, UCL_y) of one run under one confidence rule.

    Parameters
    ----------
    rule : a key of :data:`CERTIFICATES`: ``"dkw"`` (squared scale) or ``"bootstrap"`` (unsquared).
    n : sample size (factual rows = target values).
    delta, alpha : trimming constant and level (the input side uses ``alpha / N`` per direction).
    resamples : B of the bootstrap rule.
    seed : the run seed; the bootstrap indices come from stream ``[seed, 8]``, drawn once and reused.
    """

    def __init__(self, rule: str, n: int, delta: float, alpha: float, resamples: int = 200, seed: int = 0) -> None:
        if rule not in CERTIFICATES:
            raise DataError(f"unknown certificate rule {rule!r}; valid: {', '.join(CERTIFICATES)}")
        self.rule, self.delta, self.alpha = rule, delta, alpha
        self.scale = CERTIFICATES[rule]
        self.idx = None
        if rule == "bootstrap":
            self.idx = bootstrap_indices(n, n, resamples, numpy_rng("discover.bootstrap", seed=seed))
        self._cache: dict[str, tuple[np.ndarray, _Kept]] = {}

    def _reference(self, side: str, ref: np.ndarray) -> _Kept:
        """The resampled kept blocks of a reference sample, computed once per reference array."""
        hit = self._cache.get(side)
        if hit is None or not (hit[0] is ref or np.array_equal(hit[0], ref)):
            hit = (ref, resampled(ref, self.idx[1], self.delta))
            self._cache[side] = hit
        return hit[1]

    def input_bound(self, P_sorted: np.ndarray, ref_sorted: np.ndarray) -> float:
        """UCL_x of sorted projections (N, n) against the sorted factual projections (N, n)."""
        if self.idx is None:
            return ucl_sw2(P_sorted, ref_sorted, self.delta, self.alpha)
        return bootstrap_sw(P_sorted, ref_sorted, self.delta, self.alpha, *self.idx,
                            ref_resampled=self._reference("x", ref_sorted))

    def output_bound(self, y_sorted: np.ndarray, ref_sorted: np.ndarray) -> float:
        """UCL_y of sorted scores (n,) against the sorted targets (n,)."""
        if self.idx is None:
            return ucl_w2(y_sorted, ref_sorted, self.delta, self.alpha)
        return float(bootstrap_bound(y_sorted, ref_sorted, self.delta, self.alpha, *self.idx,
                                     b_resampled=self._reference("y", ref_sorted)))

    def input_bounds(self, P_sorted: np.ndarray, ref_sorted: np.ndarray) -> np.ndarray:
        """UCL_x of C candidates' sorted projections (C, N, n) against the factuals' (N, n). Shape (C,)."""
        if self.idx is None:
            N = P_sorted.shape[1]
            return ucl_w2(P_sorted, ref_sorted[None], self.delta, self.alpha / N).reshape(len(P_sorted), N).mean(axis=1)
        return np.array([self.input_bound(P, ref_sorted) for P in P_sorted])

    def output_bounds(self, y_sorted: np.ndarray, ref_sorted: np.ndarray) -> np.ndarray:
        """UCL_y of C candidates' sorted scores (C, n) against the sorted targets (n,). Shape (C,)."""
        if self.idx is None:
            return np.asarray(ucl_w2(y_sorted, ref_sorted[None], self.delta, self.alpha)).reshape(len(y_sorted))
        return np.array([self.output_bound(y, ref_sorted) for y in y_sorted])

    def bootstrap_eval(self, P_sorted: np.ndarray, y_sorted: np.ndarray, ref_x: np.ndarray,
                       ref_y: np.ndarray) -> tuple[float, float, tuple[np.ndarray, np.ndarray]]:
        """Under ``bootstrap``: ``(input_bound, output_bound)`` of one iterate (sorted projections (N, n),
        sorted scores (n,)) with the same arithmetic, and its offsets (:func:`bootstrap_terms`; (N,), ())."""
        N = ref_x.shape[0]
        W_x, off_x = bootstrap_terms(P_sorted, ref_x, self.delta, self.alpha / N, *self.idx,
                                     b_resampled=self._reference("x", ref_x))
        W_y, off_y = bootstrap_terms(y_sorted, ref_y, self.delta, self.alpha, *self.idx,
                                     b_resampled=self._reference("y", ref_y))
        return _over_directions(_from_terms(W_x, off_x)), float(_from_terms(W_y, off_y)), (off_x, off_y)

    def screen_bounds(self, P_sorted: np.ndarray, y_sorted: np.ndarray, ref_x: np.ndarray, ref_y: np.ndarray,
                      offsets: tuple[np.ndarray, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        """Stand-ins of the bootstrap ``(input_bounds, output_bounds)`` of C candidates, to rank them. Shapes (C,).

        Each candidate's trimmed distances ``W`` with the ``offsets`` of the iterate it was made from
        (:meth:`bootstrap_eval`): a candidate that differs from it in one row moves ``W`` much more
        than the resampling quantiles.
        """
        W_x = trimmed_ot_sq(P_sorted, np.broadcast_to(ref_x, P_sorted.shape), self.delta, presorted=True)
        W_y = trimmed_ot_sq(y_sorted, np.broadcast_to(ref_y, y_sorted.shape), self.delta, presorted=True)
        return np.sqrt(np.maximum(W_x + offsets[0], 0.0).mean(axis=-1)), _from_terms(np.asarray(W_y), offsets[1])

    def convert(self, U: float, rule: str) -> float:
        """A threshold ``U`` of this rule's scale in the scale of ``rule`` (the same distance)."""
        if CERTIFICATES[rule] == self.scale:
            return float(U)
        return float(U) ** 2 if self.scale == "unsquared" else math.sqrt(float(U))


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


__all__ = ["CERTIFICATES", "Certificate", "EtaStep", "bootstrap_bound", "bootstrap_indices", "bootstrap_sw",
           "bootstrap_terms",
           "resampled",
           "dkw_epsilon", "eta_rule", "first_certified", "is_feasible", "trimmed_ot_sq", "ucl_sw2", "ucl_w2"]
