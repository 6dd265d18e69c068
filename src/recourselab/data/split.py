"""Stratified train/val/test split, deterministic per seed."""

from __future__ import annotations

import numpy as np
from sklearn.model_selection import train_test_split

from recourselab.data.feature import python_scalar
from recourselab.errors import DataError


def stratified_split(y: np.ndarray, seed: int, fractions: tuple[float, float, float] = (0.6, 0.2, 0.2)
                     ) -> dict[str, np.ndarray]:
    """Row indices of a stratified split.

    Parameters
    ----------
    y : labels, shape (n,).
    seed : random seed; the same seed always gives the same split.
    fractions : train, val, test fractions (sum 1).

    Returns
    -------
    dict with sorted index arrays ``train``, ``val``, ``test``: disjoint, covering ``range(n)``.
    """
    y = np.asarray(y)
    labels, counts = np.unique(y, return_counts=True)
    if counts.size < 2:
        raise DataError("cannot split: the target has a single class")
    if counts.min() < 3:
        rare = {python_scalar(lv): int(c) for lv, c in zip(labels, counts, strict=True) if c < 3}
        raise DataError(f"cannot stratify: class(es) with fewer than 3 rows (label: rows) {rare}; "
                        "each class needs one row per split")
    idx = np.arange(len(y))
    f_train, f_val, f_test = fractions
    try:
        rest, test = train_test_split(idx, test_size=f_test, stratify=y, random_state=seed)
        train, val = train_test_split(rest, test_size=f_val / (f_train + f_val), stratify=y[rest],
                                      random_state=seed + 1)
    except ValueError as err:  # e.g. fewer test rows than classes
        raise DataError(f"cannot stratify {len(y)} rows of {counts.size} classes into fractions {fractions}: "
                        f"{err}") from err
    splits = {"train": np.sort(train), "val": np.sort(val), "test": np.sort(test)}
    for name, rows in splits.items():
        missing = sorted(set(labels.tolist()) - set(np.unique(y[rows]).tolist()))
        if missing:
            raise DataError(f"the {name} split (seed {seed}) has no rows of class(es) {missing[:10]}: too few rows "
                            f"of them ({ {python_scalar(lv): int(c) for lv, c in zip(labels, counts, strict=True)} })"
                            " for a stratified split; every class needs rows in train, val and test")
    return splits


def stratified_subsample(y: np.ndarray, n: int | None, seed: int) -> np.ndarray:
    """Sorted indices of a stratified subsample of exactly ``min(n, len(y))`` rows (all if ``n`` is None).

    Raises
    ------
    DataError
        The subsample would lose a class (too few rows of it for a cap of ``n``), naming it.
    """
    idx = np.arange(len(y))
    if n is None or n >= len(y):
        return idx
    values, counts = np.unique(y, return_counts=True)
    if counts.min() < 2 or n < len(values):  # train_test_split cannot stratify these
        keep, lost = None, values[counts < 2] if counts.min() < 2 else values
    else:
        keep, _ = train_test_split(idx, train_size=n, stratify=y, random_state=seed)
        lost = np.setdiff1d(values, y[keep])
    if len(lost):
        per_class = dict(zip(map(python_scalar, values), counts.tolist(), strict=True))
        raise DataError(f"a stratified subsample of {n} of {len(y)} rows cannot keep class(es) "
                        f"{[python_scalar(v) for v in lost]} (rows per class: {per_class}); raise the row cap or "
                        "drop the rare classes")
    return np.sort(keep)
