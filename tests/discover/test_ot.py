"""Sorted 1-D optimal transport, trimmed sliced W^2, row decomposition and guidance."""

from __future__ import annotations

import numpy as np
import ot as pot
import pytest

from recourselab.discover.ot import (
    match,
    random_directions,
    sliced_wasserstein_sq,
    sorted_projections,
    trim_weights,
    wasserstein_1d_sq,
)
from recourselab.errors import DataError


@pytest.mark.parametrize("n,delta", [(1, 0.0), (7, 0.0), (10, 0.1), (33, 0.25), (50, 0.01)])
def test_trim_weights_sum_to_one_and_trim_the_tails(n, delta):
    w = trim_weights(n, delta)
    assert w.shape == (n,)
    assert abs(w.sum() - 1.0) < 1e-12
    assert (w >= 0).all()
    if delta == 0:
        assert np.allclose(w, 1.0 / n, rtol=0, atol=1e-15)
    if n * delta >= 1:
        assert w[0] == 0.0 and w[-1] == 0.0


def test_trim_weights_rejects_bad_delta():
    with pytest.raises(DataError, match="delta"):
        trim_weights(10, 0.5)


def test_sorted_matching_agrees_with_pot():
    rng = np.random.default_rng(1)
    for n in (5, 50, 301):
        a, b = rng.normal(size=n), rng.gamma(2.0, size=n)
        ours = wasserstein_1d_sq(a, b, 0.0)
        assert abs(ours - float(pot.wasserstein_1d(a, b, p=2))) < 1e-9
        assert abs(ours - float(pot.emd2_1d(a, b, metric="sqeuclidean"))) < 1e-9


def test_trimmed_distance_is_the_quantile_integral():
    rng = np.random.default_rng(2)
    a, b = rng.normal(size=40), rng.normal(1.0, 2.0, size=40)
    delta = 0.1
    u = delta + (np.arange(400_000) + 0.5) / 400_000 * (1 - 2 * delta)
    qa = np.sort(a)[np.minimum(np.ceil(u * 40).astype(int) - 1, 39)]
    qb = np.sort(b)[np.minimum(np.ceil(u * 40).astype(int) - 1, 39)]
    assert abs(wasserstein_1d_sq(a, b, delta) - np.mean((qa - qb) ** 2)) < 1e-4


def test_batched_1d_matches_loop():
    rng = np.random.default_rng(3)
    A, B = rng.normal(size=(4, 6, 20)), rng.normal(size=(4, 6, 20))
    batched = wasserstein_1d_sq(A, B, 0.05)
    loop = np.array([[wasserstein_1d_sq(A[i, j], B[i, j], 0.05) for j in range(6)] for i in range(4)])
    assert batched.shape == (4, 6)
    assert np.abs(batched - loop).max() < 1e-12


def test_untrimmed_sliced_agrees_with_pot_same_directions():
    rng = np.random.default_rng(4)
    X, Y = rng.normal(size=(60, 5)), rng.normal(0.5, 1.5, size=(60, 5))
    theta = random_directions(5, 25, rng)
    assert np.allclose(np.linalg.norm(theta, axis=1), 1.0)
    ours = sliced_wasserstein_sq(X, Y, theta, 0.0)
    theirs = float(pot.sliced_wasserstein_distance(X, Y, projections=theta.T, p=2)) ** 2
    assert abs(ours - theirs) < 1e-9


def _fixture(delta=0.1, seed=5):
    rng = np.random.default_rng(seed)
    n, d, N = 30, 4, 8
    Xf = rng.normal(size=(n, d))
    X = Xf + rng.normal(scale=0.3, size=(n, d))
    theta = random_directions(d, N, rng)
    y, ystar = rng.random(n), rng.random(n)
    w = trim_weights(n, delta)
    ref_x = np.sort((Xf @ theta.T).T, axis=1)
    m = match(X @ theta.T, ref_x, y, np.sort(ystar), w)
    return X, Xf, theta, y, ystar, w, ref_x, m


@pytest.mark.parametrize("eta", [0.0, 0.3, 1.0])
def test_objective_equals_sum_of_row_scores(eta):
    X, Xf, theta, y, ystar, w, ref_x, m = _fixture()
    Q, qx, qy = m.objective(eta)
    q = m.row_scores(eta)
    assert q.shape == (len(X),) and (q >= 0).all()
    assert Q == float(q.sum())  # exact: Q is defined as the sum of the row scores
    # and it is the trimmed objective computed independently (sorted samples)
    assert abs(qx - sliced_wasserstein_sq(X, Xf, theta, 0.1)) < 1e-12
    assert abs(qy - wasserstein_1d_sq(y, ystar, 0.1)) < 1e-12
    assert abs(Q - ((1 - eta) * qx + eta * qy)) < 1e-12


def test_guidance_is_the_gradient_of_the_fixed_plan_objective():
    X, Xf, theta, y, ystar, w, ref_x, m = _fixture(delta=0.0)
    rows = np.array([0, 7, 19])
    g = m.guidance(rows, theta)
    target = np.take_along_axis(ref_x, m.rank_x, axis=1)  # (N, n), plans fixed

    def qx(Xv):
        return float((m.wx * ((Xv @ theta.T).T - target) ** 2).sum() / theta.shape[0])

    eps = 1e-6
    for a, i in enumerate(rows):
        for j in range(X.shape[1]):
            Xp, Xm = X.copy(), X.copy()
            Xp[i, j] += eps
            Xm[i, j] -= eps
            assert abs((qx(Xp) - qx(Xm)) / (2 * eps) - g[a, j]) < 1e-7


def test_matching_is_sorted_and_deterministic():
    X, Xf, theta, y, ystar, w, ref_x, m = _fixture()
    assert (np.diff(m.sorted_x, axis=1) >= 0).all() and (np.diff(m.sorted_y) >= 0).all()
    m2 = match(X @ theta.T, ref_x, y, np.sort(ystar), w, previous=m)
    assert np.array_equal(m.rank_x, m2.rank_x) and np.array_equal(m.rank_y, m2.rank_y)


def test_incremental_matching_equals_a_fresh_one_after_edits():
    X, Xf, theta, y, ystar, w, ref_x, m = _fixture()
    rng = np.random.default_rng(9)
    X2, y2 = X.copy(), y.copy()
    rows = np.array([2, 11, 25])
    X2[rows] += rng.normal(size=(3, X.shape[1]))
    y2[rows] = rng.random(3)
    fresh = match(X2 @ theta.T, ref_x, y2, np.sort(ystar), w)
    incr = match(X2 @ theta.T, ref_x, y2, np.sort(ystar), w, previous=m)
    for name in ("rank_x", "rank_y", "sorted_x", "sorted_y", "resid_x", "resid_y"):
        assert np.array_equal(getattr(fresh, name), getattr(incr, name))


def test_sorted_projections_sort_each_direction_of_the_projected_rows():
    rng = np.random.default_rng(0)
    X, theta = rng.normal(size=(7, 3)), rng.normal(size=(4, 3))
    out = sorted_projections(X, theta)
    assert out.shape == (4, 7) and (np.diff(out, axis=1) >= 0).all()
    for j in range(4):
        assert np.allclose(out[j], sorted(X @ theta[j]))
