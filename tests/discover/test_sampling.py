"""The factual sample of a DISCOVER run (paper protocol: predicted unfavourable rows, seeded)."""

from __future__ import annotations

import numpy as np
import pytest

from recourselab.discover import sample_factuals
from recourselab.errors import DataError


def test_unfavourable_pool_is_sampled_without_replacement_and_seeded():
    scores = np.random.default_rng(0).random(200)
    idx = sample_factuals(scores, 30, seed=3)
    assert len(idx) == 30 and len(set(idx.tolist())) == 30 and (np.diff(idx) > 0).all()
    assert (scores[idx] < 0.5).all()
    assert np.array_equal(idx, sample_factuals(scores, 30, seed=3))
    assert not np.array_equal(idx, sample_factuals(scores, 30, seed=4))
    everything = sample_factuals(scores, 150, seed=0, pool="all")
    assert (scores[everything] >= 0.5).any()


def test_the_sample_does_not_share_the_stream_of_a_target_with_the_same_seed():
    # a target of seed s draws from default_rng(s); the same stream would tie the rows to the target values
    scores = np.random.default_rng(0).random(200)
    pool = np.flatnonzero(scores < 0.5)
    for seed in (0, 1, 2):
        shared = np.sort(np.random.default_rng(seed).choice(pool, 30, replace=False))
        assert not np.array_equal(sample_factuals(scores, 30, seed=seed), shared)


def test_small_pools_fall_back_to_the_lowest_scores():
    scores = np.array([0.9, 0.1, 0.8, 0.7, 0.4, 0.95])
    assert sample_factuals(scores, 3).tolist() == [1, 3, 4]  # only 2 rows below 0.5
    assert sample_factuals(scores, 10).tolist() == list(range(6))  # fewer rows than n


def test_bad_arguments():
    with pytest.raises(DataError, match="n >= 1"):
        sample_factuals(np.zeros(3), 0)
    with pytest.raises(DataError, match="unknown factual pool 'some'"):
        sample_factuals(np.zeros(3), 2, pool="some")
    with pytest.raises(DataError, match="1-D"):
        sample_factuals(np.zeros((3, 2)), 2)
    with pytest.raises(DataError, match=r"integer n >= 1 rows, got 2\.0"):
        sample_factuals(np.zeros(3), 2.0)
    with pytest.raises(DataError, match="scores must be finite, got 2 NaN or infinite of 5"):
        sample_factuals(np.array([0.1, np.nan, 0.9, 0.2, np.inf]), 4)
