"""Synthetic 2-D generators: shapes, balance, and the geometry of DENSITYFLOW.md."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from sklearn.datasets import make_moons

from recourselab.data.synthetic import GENERATORS, chessboard, circles, moons, spirals

NAMES = sorted(GENERATORS)


def _xy(frame: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    return frame[["x0", "x1"]].to_numpy(), frame["y"].to_numpy()


def _radius(X: np.ndarray) -> np.ndarray:
    return np.hypot(X[:, 0], X[:, 1])


def _wrap(angle: np.ndarray) -> np.ndarray:
    """Angle difference wrapped to [-pi, pi)."""
    return (angle + np.pi) % (2 * np.pi) - np.pi


def test_registry_of_generators():
    assert set(GENERATORS) == {"moons", "circles", "spirals", "chessboard"}


# ---------------------------------------------------------------------------- common contract
@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("n", [3000, 301, 20])
def test_shape_columns_and_balance(name, n):
    frame = GENERATORS[name](n, seed=0)
    assert frame.shape == (n, 3)
    assert list(frame.columns) == ["x0", "x1", "y"]
    assert frame["y"].dtype == np.int64
    assert frame["x0"].dtype == np.float64 and frame["x1"].dtype == np.float64
    assert np.all(np.isfinite(frame[["x0", "x1"]].to_numpy()))
    counts = frame["y"].value_counts().to_dict()
    assert counts == {0: n // 2, 1: n - n // 2}
    assert frame.index.equals(pd.RangeIndex(n))


@pytest.mark.parametrize("name", NAMES)
def test_rows_are_shuffled(name):
    y = GENERATORS[name](400, seed=0)["y"].to_numpy()
    # not sorted by class: both classes appear in the first and the last quarter
    assert set(y[:100]) == {0, 1}
    assert set(y[-100:]) == {0, 1}


@pytest.mark.parametrize("name", NAMES)
def test_deterministic_per_seed(name):
    pd.testing.assert_frame_equal(GENERATORS[name](500, seed=4), GENERATORS[name](500, seed=4))


@pytest.mark.parametrize("name", NAMES)
def test_different_seeds_differ(name):
    a, b = GENERATORS[name](500, seed=0), GENERATORS[name](500, seed=1)
    assert np.abs(a[["x0", "x1"]].to_numpy() - b[["x0", "x1"]].to_numpy()).max() > 0.1


# ---------------------------------------------------------------------------- moons
def test_moons_is_sklearn_make_moons():
    n, seed = 1001, 5
    frame = moons(n, seed=seed)
    X, y = make_moons(n_samples=(n // 2, n - n // 2), noise=0.05, random_state=seed)
    ours = frame.sort_values(["x0", "x1"]).to_numpy()
    ref = pd.DataFrame({"x0": X[:, 0], "x1": X[:, 1], "y": y}).sort_values(["x0", "x1"]).to_numpy()
    np.testing.assert_array_equal(ours, ref)  # the same points with the same labels, shuffled


def test_moons_geometry():
    X, y = _xy(moons(3000, seed=0, noise=0.0))
    # noiseless: class 0 is the upper unit half circle centred at (0, 0),
    # class 1 the lower one centred at (1, 0.5)
    np.testing.assert_allclose(_radius(X[y == 0]), 1.0, atol=1e-12)
    np.testing.assert_allclose(_radius(X[y == 1] - [1.0, 0.5]), 1.0, atol=1e-12)
    assert np.all(X[y == 0, 1] >= -1e-12)
    assert np.all(X[y == 1, 1] <= 0.5 + 1e-12)


# ---------------------------------------------------------------------------- circles
def test_circles_radii_and_noise():
    X, y = _xy(circles(3000, seed=0))
    r0, r1 = _radius(X[y == 0]), _radius(X[y == 1])
    assert abs(r0.mean() - 1.0) < 0.01
    assert abs(r1.mean() - 0.5) < 0.01
    # radial noise N(0, 0.05^2)
    assert abs(r0.std() - 0.05) < 0.006
    assert abs(r1.std() - 0.05) < 0.006


def test_circles_noiseless_radii_exact_and_angles_uniform():
    X, y = _xy(circles(3000, seed=2, noise=0.0))
    np.testing.assert_allclose(_radius(X[y == 0]), 1.0, atol=1e-12)
    np.testing.assert_allclose(_radius(X[y == 1]), 0.5, atol=1e-12)
    angle = np.arctan2(X[:, 1], X[:, 0])
    hist, _ = np.histogram(angle, bins=8, range=(-np.pi, np.pi))
    assert hist.min() > 0.75 * len(angle) / 8  # roughly uniform over the circle


# ---------------------------------------------------------------------------- spirals
def test_spirals_radius_bounded():
    X, _ = _xy(spirals(3000, seed=0))
    r = _radius(X)
    # max radius 5 plus isotropic noise of std 0.05 (a 6-sigma margin)
    assert r.max() <= 5.0 + 6 * 0.05 * np.sqrt(2)
    assert r.max() > 4.8  # the arms reach out to the max radius


def test_spirals_noiseless_geometry_arms_rotated_by_pi():
    turns, max_r = 2.5, 5.0
    X, y = _xy(spirals(3000, seed=1, noise=0.0))
    r = _radius(X)
    assert r.max() <= max_r + 1e-12
    theta = r / max_r * turns * 2 * np.pi  # r proportional to theta
    angle = np.arctan2(X[:, 1], X[:, 0])
    # arm 0 at phase theta, arm 1 at theta + pi
    np.testing.assert_allclose(_wrap(angle - theta - np.pi * y), 0.0, atol=1e-9)
    # reflecting arm 1 through the origin lands it on arm 0
    Xr = -X[y == 1]
    theta_r = _radius(Xr) / max_r * turns * 2 * np.pi
    np.testing.assert_allclose(_wrap(np.arctan2(Xr[:, 1], Xr[:, 0]) - theta_r), 0.0, atol=1e-9)


def test_spirals_theta_is_sqrt_uniform():
    X, _ = _xy(spirals(4000, seed=3, noise=0.0))
    u = (_radius(X) / 5.0) ** 2  # theta = sqrt(U) * theta_max  =>  (r / r_max)^2 ~ U(0, 1)
    assert abs(u.mean() - 0.5) < 0.02
    hist, _ = np.histogram(u, bins=5, range=(0, 1))
    assert hist.min() > 0.8 * len(u) / 5


def test_spirals_noisy_points_stay_near_their_arm():
    X, y = _xy(spirals(3000, seed=0))
    r = _radius(X)
    far = r > 1.0  # close to the origin the angle is dominated by the noise
    theta = r / 5.0 * 2.5 * 2 * np.pi
    resid = np.abs(_wrap(np.arctan2(X[:, 1], X[:, 0]) - theta - np.pi * y))[far]
    assert np.median(resid) < 0.15
    assert np.quantile(resid, 0.99) < 0.8  # nowhere near the other arm (pi away)


# ---------------------------------------------------------------------------- chessboard
def test_chessboard_points_near_nine_centres_with_checker_labels():
    std = 0.05
    X, y = _xy(chessboard(3000, seed=0, std=std))
    centres = np.array([-2.0, 0.0, 2.0])
    i = np.abs(X[:, [0]] - centres).argmin(axis=1)
    j = np.abs(X[:, [1]] - centres).argmin(axis=1)
    resid = X - np.column_stack([centres[i], centres[j]])
    assert np.abs(resid).max() < 6 * std
    np.testing.assert_array_equal(y, (i + j) % 2)
    # isotropic clusters of std ``std``
    np.testing.assert_allclose(resid.std(axis=0), [std, std], rtol=0.06)
    # all nine cells used; each class spread uniformly over its own cells
    cells = np.bincount(3 * i + j, minlength=9)
    assert cells.min() > 0
    even = cells[[0, 2, 4, 6, 8]]  # (i + j) even -> class 0, 5 cells
    odd = cells[[1, 3, 5, 7]]  # class 1, 4 cells
    assert np.abs(even - 1500 / 5).max() < 60
    assert np.abs(odd - 1500 / 4).max() < 60


def test_chessboard_std_parameter_is_honoured():
    def spread(std: float) -> float:
        X, _ = _xy(chessboard(2000, seed=0, std=std))
        return float(np.abs(X - np.round(X / 2) * 2).std())

    assert spread(0.2) > 3 * spread(0.05)

