"""Synthetic 2-D benchmarks of DensityFlow (raw units; standardization happens in the encoder).

Each generator returns a DataFrame with columns ``x0``, ``x1`` and the label ``y`` in {0, 1},
with ``n // 2`` rows of class 0 and ``n - n // 2`` of class 1.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from sklearn.datasets import make_moons


def _frame(X: np.ndarray, y: np.ndarray, rng: np.random.Generator) -> pd.DataFrame:
    order = rng.permutation(len(y))
    return pd.DataFrame({"x0": X[order, 0], "x1": X[order, 1], "y": y[order].astype(np.int64)})


def _counts(n: int) -> tuple[int, int]:
    return n // 2, n - n // 2


def moons(n: int = 3000, *, seed: int = 0, noise: float = 0.05) -> pd.DataFrame:
    """sklearn ``make_moons`` with Gaussian noise ``noise``."""
    X, y = make_moons(n_samples=_counts(n), noise=noise, random_state=seed)
    return _frame(X, y, np.random.default_rng(seed))


def circles(n: int = 3000, *, seed: int = 0, noise: float = 0.05,
            radii: tuple[float, float] = (1.0, 0.5)) -> pd.DataFrame:
    """Outer circle (class 0, radius ``radii[0]``), inner circle (class 1), radial noise N(0, noise^2)."""
    rng = np.random.default_rng(seed)
    parts, labels = [], []
    for label, (count, radius) in enumerate(zip(_counts(n), radii, strict=True)):
        angle = rng.uniform(0.0, 2 * np.pi, count)
        r = radius + rng.normal(0.0, noise, count)
        parts.append(np.column_stack([r * np.cos(angle), r * np.sin(angle)]))
        labels.append(np.full(count, label))
    return _frame(np.vstack(parts), np.concatenate(labels), rng)


def spirals(n: int = 3000, *, seed: int = 0, noise: float = 0.05, turns: float = 2.5,
            max_radius: float = 5.0) -> pd.DataFrame:
    """Two arms: theta = sqrt(U) * turns * 2 pi, r = max_radius * theta / theta_max; arm 1 rotated by pi."""
    rng = np.random.default_rng(seed)
    theta_max = turns * 2 * np.pi
    parts, labels = [], []
    for label, count in enumerate(_counts(n)):
        theta = np.sqrt(rng.uniform(0.0, 1.0, count)) * theta_max
        r = max_radius * theta / theta_max
        phase = theta + np.pi * label
        arm = np.column_stack([r * np.cos(phase), r * np.sin(phase)])
        parts.append(arm + rng.normal(0.0, noise, arm.shape))
        labels.append(np.full(count, label))
    return _frame(np.vstack(parts), np.concatenate(labels), rng)


def chessboard(n: int = 3000, *, seed: int = 0, std: float = 0.05,
               centres: tuple[float, ...] = (-2.0, 0.0, 2.0)) -> pd.DataFrame:
    """3x3 grid of isotropic Gaussian clusters; cell (i, j) has label (i + j) mod 2.

    Each class gets half the rows, spread uniformly over that class's cells.
    """
    rng = np.random.default_rng(seed)
    cells = [(i, j) for i in range(len(centres)) for j in range(len(centres))]
    parts, labels = [], []
    for label, count in enumerate(_counts(n)):
        own = [c for c in cells if (c[0] + c[1]) % 2 == label]
        pick = rng.integers(0, len(own), count)
        mu = np.array([[centres[own[k][0]], centres[own[k][1]]] for k in pick])
        parts.append(mu + rng.normal(0.0, std, mu.shape))
        labels.append(np.full(count, label))
    return _frame(np.vstack(parts), np.concatenate(labels), rng)


GENERATORS = {"moons": moons, "circles": circles, "spirals": spirals, "chessboard": chessboard}
