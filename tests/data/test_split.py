"""Stratified train/val/test splits: sizes, stratification, disjointness, determinism."""

from __future__ import annotations

import numpy as np
import pytest

from recourselab.data.split import stratified_split, stratified_subsample
from recourselab.errors import DataError

SPLITS = ("train", "val", "test")


def _labels(n: int, p: float, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    y = (rng.random(n) < p).astype(np.int64)
    y[:3], y[3:6] = 0, 1  # both classes have at least 3 rows
    return y


@pytest.mark.parametrize("n", [100, 997, 1000, 3000])
@pytest.mark.parametrize("p", [0.5, 0.23, 0.9])
@pytest.mark.parametrize("seed", [0, 7])
def test_split_is_stratified_disjoint_and_covering(n, p, seed):
    y = _labels(n, p, seed)
    parts = stratified_split(y, seed)
    assert set(parts) == set(SPLITS)
    allidx = np.concatenate([parts[s] for s in SPLITS])
    # disjoint and covering range(n)
    np.testing.assert_array_equal(np.sort(allidx), np.arange(n))
    for s in SPLITS:
        idx = parts[s]
        assert idx.dtype.kind == "i"
        np.testing.assert_array_equal(idx, np.sort(idx))  # returned sorted
        # class proportions within one row of the overall ones
        for c in (0, 1):
            expected = len(idx) * np.mean(y == c)
            assert abs(np.sum(y[idx] == c) - expected) <= 1.0, (s, c)


def test_multiclass_stratification():
    y = np.repeat([0, 1, 2], [500, 300, 200])
    np.random.default_rng(0).shuffle(y)
    parts = stratified_split(y, 0)
    np.testing.assert_array_equal(np.bincount(y[parts["train"]]), [300, 180, 120])
    np.testing.assert_array_equal(np.bincount(y[parts["val"]]), [100, 60, 40])
    np.testing.assert_array_equal(np.bincount(y[parts["test"]]), [100, 60, 40])


@pytest.mark.parametrize(("n", "sizes"), [(1000, (600, 200, 200)), (3000, (1800, 600, 600)),
                                          (50, (30, 10, 10))])
def test_622_sizes_exact(n, sizes):
    parts = stratified_split(_labels(n, 0.5, 1), 3)
    assert tuple(len(parts[s]) for s in SPLITS) == sizes


@pytest.mark.parametrize("n", [101, 997, 1234])
def test_622_sizes_close_for_awkward_n(n):
    parts = stratified_split(_labels(n, 0.4, 2), 0)
    for s, frac in zip(SPLITS, (0.6, 0.2, 0.2), strict=True):
        assert abs(len(parts[s]) - frac * n) < 2, s


def test_custom_fractions():
    parts = stratified_split(_labels(1000, 0.5, 0), 0, (0.8, 0.1, 0.1))
    assert tuple(len(parts[s]) for s in SPLITS) == (800, 100, 100)


def test_deterministic_per_seed():
    y = _labels(500, 0.3, 0)
    a, b = stratified_split(y, 11), stratified_split(y, 11)
    for s in SPLITS:
        np.testing.assert_array_equal(a[s], b[s])


def test_different_seeds_give_different_splits():
    y = _labels(500, 0.3, 0)
    splits = [stratified_split(y, seed) for seed in range(4)]
    for s in SPLITS:
        distinct = {tuple(parts[s]) for parts in splits}
        assert len(distinct) == 4, s


def test_independent_of_label_values():
    """Only the partition of the labels matters, not their type."""
    y = _labels(300, 0.4, 5)
    as_str = np.where(y == 1, "good", "bad")
    a, b = stratified_split(y, 2), stratified_split(as_str, 2)
    for s in SPLITS:
        np.testing.assert_array_equal(a[s], b[s])


def test_single_class_rejected():
    with pytest.raises(DataError, match="single class"):
        stratified_split(np.zeros(100, dtype=int), 0)


def test_a_split_without_some_class_is_refused():
    y = np.array([0] * 1000 + [1] * 3 + [2] * 3)  # 3 rows a class pass the count check but not the split
    with pytest.raises(DataError, match=r"split \(seed 0\) has no rows of class\(es\)|cannot stratify 1006 rows"):
        stratified_split(y, 0)
    with pytest.raises(DataError, match=r"cannot stratify 12 rows of 3 classes"):  # test_size 2 < 3 classes
        stratified_split(np.repeat([0, 1, 2], 4), 0, (0.7, 0.15, 0.15))


def test_tiny_class_rejected():
    y = np.array([0] * 50 + [1, 1])
    with pytest.raises(DataError, match=r"fewer than 3 rows \(label: rows\) \{1: 2\}"):
        stratified_split(y, 0)


def test_subsample_is_exact_stratified_and_keeps_every_class():
    y = np.zeros(1000, dtype=np.int64)
    y[:400], y[990:] = 1, 2  # 10 rows of class 2
    keep = stratified_subsample(y, 100, seed=0)
    assert len(keep) == 100 and np.array_equal(keep, np.sort(keep))
    assert np.bincount(y[keep]).tolist() == [59, 40, 1]
    assert np.array_equal(stratified_subsample(y, None, 0), np.arange(1000))


@pytest.mark.parametrize("rare", [[500, 600], [700]])  # dropped by the stratified cap / too rare to stratify
def test_subsample_that_would_lose_a_class_is_refused_naming_it(rare):
    y = np.zeros(1000, dtype=np.int64)
    y[:400], y[rare] = 1, 2
    with pytest.raises(DataError, match=r"cannot keep class\(es\) \[2\] \(rows per class: \{0: \d+, 1: 400, 2: "):
        stratified_subsample(y, 50, seed=0)
    with pytest.raises(DataError, match=r"cannot keep class\(es\) \[0, 1, 2\]"):
        stratified_subsample(np.repeat([0, 1, 2], 10), 2, seed=0)  # fewer rows than classes
