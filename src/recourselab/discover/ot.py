"""One-dimensional optimal transport by sorting, trimmed sliced W^2, row scores and guidance.

Everything here is in **squared** units: ``W^2`` and ``SW^2`` are squared Wasserstein-2
distances (no square roots anywhere), in the encoded feature space of the schema
(numerical z-scores, categorical (cos, sin) phase pairs).

Between two samples of the same size ``n`` with uniform weights, the optimal 1-D coupling
matches the ``r``-th smallest value of one sample with the ``r``-th smallest of the other
(the sorted, or rank, matching), so no LP solver is needed. The trimmed distance with
constant ``delta`` in ``[0, 1/2)`` is

    W^2_delta(a, b) = 1 / (1 - 2 delta) * integral_delta^{1-delta} (F_a^{-1}(u) - F_b^{-1}(u))^2 du
                    = sum_r w_r (a_(r) - b_(r))^2,

where ``w_r = |[(r-1)/n, r/n] & [delta, 1-delta]| / (1 - 2 delta)`` (see :func:`trim_weights`;
the weights sum to one, ``w_r = 1/n`` when ``delta = 0``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from recourselab.errors import DataError


def trim_weights(n: int, delta: float) -> np.ndarray:
    """Mass of each rank under the trimmed quantile integral.

    Parameters
    ----------
    n : sample size (both samples have ``n`` points).
    delta : trimming constant in ``[0, 1/2)``; the lowest and highest ``delta`` quantiles
        get no mass.

    Returns
    -------
    ndarray of shape (n,), non-negative, summing to 1.
    """
    if not 0.0 <= delta < 0.5:
        raise DataError(f"trimming constant delta must be in [0, 1/2), got {delta}")
    if n < 1:
        raise DataError(f"need at least one sample, got n={n}")
    r = np.arange(n, dtype=float)
    lo = np.maximum(r / n, delta)
    hi = np.minimum((r + 1) / n, 1.0 - delta)
    return np.clip(hi - lo, 0.0, None) / (1.0 - 2.0 * delta)


def wasserstein_1d_sq(a: np.ndarray, b: np.ndarray, delta: float = 0.0, *,
                      presorted: bool = False) -> np.ndarray:
    """Trimmed squared W_2 between equal-size 1-D samples, batched over leading axes.

    Parameters
    ----------
    a, b : ndarrays of shape (..., n); the last axis holds the samples.
    delta : trimming constant in ``[0, 1/2)``.
    presorted : the last axes are already sorted ascending.

    Returns
    -------
    ndarray of shape (...) (a float for 1-D input): squared distance.
    """
    a = np.asarray(a, dtype=float)
    b = np.asarray(b, dtype=float)
    if a.shape[-1] != b.shape[-1]:
        raise DataError(f"samples must have the same size, got {a.shape[-1]} and {b.shape[-1]}")
    if not presorted:
        a = np.sort(a, axis=-1)
        b = np.sort(b, axis=-1)
    w = trim_weights(a.shape[-1], delta)
    out = ((a - b) ** 2 * w).sum(axis=-1)
    return float(out) if np.ndim(out) == 0 else out


def random_directions(d: int, n_projections: int, rng: np.random.Generator) -> np.ndarray:
    """``n_projections`` directions drawn uniformly on the unit sphere of R^d. Shape (N, d)."""
    if d < 1 or n_projections < 1:
        raise DataError(f"need d >= 1 and n_projections >= 1, got d={d}, n_projections={n_projections}")
    theta = rng.standard_normal((n_projections, d))
    norms = np.linalg.norm(theta, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    return theta / norms


def sorted_projections(X: np.ndarray, theta: np.ndarray) -> np.ndarray:
    """Projections of the rows of ``X`` (n, d) on the directions ``theta`` (N, d), sorted per
    direction. Shape (N, n)."""
    return np.sort((X @ theta.T).T, axis=1)


def sliced_wasserstein_sq(X: np.ndarray, Y: np.ndarray, theta: np.ndarray, delta: float = 0.0, *,
                          chunk: int = 512) -> float:
    """Trimmed sliced squared W_2: the mean over directions of the 1-D trimmed W^2.

    Parameters
    ----------
    X, Y : ndarrays of shape (n, d).
    theta : unit directions, shape (N, d).
    delta : trimming constant.
    chunk : directions projected at a time (memory ``O(n * chunk)``).

    Returns
    -------
    float, squared units.
    """
    X = np.asarray(X, dtype=float)
    Y = np.asarray(Y, dtype=float)
    if X.shape != Y.shape:
        raise DataError(f"X and Y must have the same shape, got {X.shape} and {Y.shape}")
    total = 0.0
    for start in range(0, theta.shape[0], chunk):
        th = theta[start:start + chunk]
        total += float(wasserstein_1d_sq((X @ th.T).T, (Y @ th.T).T, delta).sum())
    return total / theta.shape[0]


@dataclass(frozen=True)
class Matching:
    """Sorted matchings of the current sample to its references, with row scores.

    Attributes
    ----------
    rank_x : ndarray (N, n) int: rank of row ``i`` along direction ``k`` (the plan pi_k maps
        row ``i`` to the reference point of the same rank).
    rank_y : ndarray (n,) int: rank of ``b(x_i)`` among the scores (plan sigma).
    order_x, order_y : the inverse permutations (row index at each rank).
    resid_x : ndarray (N, n): ``theta_k . x_i - theta_k . x'_{pi_k(i)}``.
    resid_y : ndarray (n,): ``b(x_i) - y*_{sigma(i)}``.
    wx : ndarray (N, n): trimming mass of row ``i`` along direction ``k``.
    wy : ndarray (n,): trimming mass of row ``i`` on the output side.
    sorted_x : ndarray (N, n): the current projections sorted along each direction.
    sorted_y : ndarray (n,): the current scores sorted.
    """

    rank_x: np.ndarray
    rank_y: np.ndarray
    order_x: np.ndarray
    order_y: np.ndarray
    resid_x: np.ndarray
    resid_y: np.ndarray
    wx: np.ndarray
    wy: np.ndarray
    sorted_x: np.ndarray
    sorted_y: np.ndarray

    @property
    def qx_rows(self) -> np.ndarray:
        """Input-side row scores q_i^(x) = 1/N sum_k w (residual)^2. Shape (n,); they sum to Qx."""
        return (self.wx * self.resid_x ** 2).sum(axis=0) / self.resid_x.shape[0]

    @property
    def qy_rows(self) -> np.ndarray:
        """Output-side row scores q_i^(y) = w (b(x_i) - y*_sigma(i))^2. Shape (n,); they sum to Qy."""
        return self.wy * self.resid_y ** 2

    def row_scores(self, eta: float) -> np.ndarray:
        """q_i = (1 - eta) q_i^(x) + eta q_i^(y) (paper Prop. 3.1). Shape (n,); sum = Q(X; eta)."""
        return (1.0 - eta) * self.qx_rows + eta * self.qy_rows

    def objective(self, eta: float) -> tuple[float, float, float]:
        """(Q, Qx, Qy) computed as sums of the row scores, so ``Q == row_scores(eta).sum()``."""
        qx = float(self.qx_rows.sum())
        qy = float(self.qy_rows.sum())
        return float(self.row_scores(eta).sum()), qx, qy

    def guidance(self, rows: np.ndarray, theta: np.ndarray) -> np.ndarray:
        """Closed-form gradient of SW^2 w.r.t. the given rows, plans fixed.

        ``g_i = 2/N sum_k w_ik (theta_k . x_i - theta_k . x'_{pi_k(i)}) theta_k``.

        Parameters
        ----------
        rows : int ndarray (k,).
        theta : directions (N, d).

        Returns
        -------
        ndarray of shape (k, d).
        """
        coef = (self.wx[:, rows] * self.resid_x[:, rows]).T  # (k, N)
        return 2.0 / theta.shape[0] * coef @ theta


def ranks_of(order: np.ndarray) -> np.ndarray:
    """Inverse permutation along the last axis: ``ranks[..., order[..., r]] = r``."""
    ranks = np.empty_like(order)
    np.put_along_axis(ranks, order, np.broadcast_to(np.arange(order.shape[-1]), order.shape), axis=-1)
    return ranks


def _stable_order(values: np.ndarray, prev: np.ndarray | None) -> np.ndarray:
    """Stable argsort along the last axis; with ``prev`` (a previous order) ties keep it and the
    nearly sorted input makes the (run-detecting) sort fast."""
    if prev is None:
        return np.argsort(values, axis=-1, kind="stable")
    inner = np.argsort(np.take_along_axis(values, prev, axis=-1), axis=-1, kind="stable")
    return np.take_along_axis(prev, inner, axis=-1)


def match(P: np.ndarray, ref_sorted_x: np.ndarray, y: np.ndarray, ref_sorted_y: np.ndarray,
          w: np.ndarray, previous: Matching | None = None) -> Matching:
    """Sorted matchings of projections ``P`` (n, N) and scores ``y`` (n,) to sorted references.

    Parameters
    ----------
    P : projections ``X @ theta.T`` of the current rows, shape (n, N).
    ref_sorted_x : sorted reference projections, shape (N, n).
    y : current scores, shape (n,).
    ref_sorted_y : sorted target outputs, shape (n,).
    w : trimming weights (n,) from :func:`trim_weights`.
    previous : the matching of the previous iterate (only a few rows changed): its orders
        seed the sorts, which are then nearly sorted.

    Ties are broken by row index, or by the previous order when ``previous`` is given, so
    the matching is deterministic.
    """
    PT = np.ascontiguousarray(P.T)
    order_x = _stable_order(PT, None if previous is None else previous.order_x)  # (N, n)
    rank_x = ranks_of(order_x)
    order_y = _stable_order(y, None if previous is None else previous.order_y)
    rank_y = ranks_of(order_y)
    resid_x = PT - np.take_along_axis(ref_sorted_x, rank_x, axis=1)
    resid_y = y - ref_sorted_y[rank_y]
    return Matching(rank_x=rank_x, rank_y=rank_y, order_x=order_x, order_y=order_y, resid_x=resid_x,
                    resid_y=resid_y, wx=w[rank_x], wy=w[rank_y],
                    sorted_x=np.take_along_axis(PT, order_x, axis=1), sorted_y=y[order_y])


__all__ = [
    "Matching", "match", "random_directions", "ranks_of", "sliced_wasserstein_sq", "sorted_projections",
    "trim_weights", "wasserstein_1d_sq",
]
