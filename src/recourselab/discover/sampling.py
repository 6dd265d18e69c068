"""The factual sample of a DISCOVER run (the paper's protocol).

DISCOVER explains a *group*: ``n`` rows drawn (seeded, without replacement) among those the
model predicts unfavourable, ``b(x) < 0.5``. When fewer rows qualify, the ``n`` lowest-scoring
rows are taken instead, and when the data holds fewer than ``n`` rows, all of them.
"""

from __future__ import annotations

import logging
import numbers
from typing import Literal

import numpy as np

from recourselab.errors import DataError
from recourselab.rng import numpy_rng

logger = logging.getLogger(__name__)


def sample_factuals(scores: np.ndarray, n: int, *, seed: int = 0, pool: Literal["unfavourable", "all"] = "unfavourable",
                    threshold: float = 0.5) -> np.ndarray:
    """Indices of the factual rows, sorted ascending.

    Parameters
    ----------
    scores : model scores b(x) = P(favourable) of the candidate rows, shape (m,).
    n : sample size.
    seed : seed of the draw (same seed, same rows), stream ``[seed, 6]``: not ``default_rng(seed)``,
        which a target of the same seed draws from.
    pool : ``"unfavourable"``: rows with ``scores < threshold`` (the paper); ``"all"``: every row.
    threshold : decision threshold of the unfavourable pool.

    Returns
    -------
    int64 ndarray of shape (min(n, m),).
    """
    scores = np.asarray(scores, dtype=float)
    if scores.ndim != 1:
        raise DataError(f"scores must be 1-D, got shape {scores.shape}")
    if not np.isfinite(scores).all():
        raise DataError(f"scores must be finite, got {int((~np.isfinite(scores)).sum())} NaN or infinite of "
                        f"{len(scores)}")
    if isinstance(n, bool) or not isinstance(n, numbers.Integral) or n < 1:
        raise DataError(f"the factual sample needs an integer n >= 1 rows, got {n!r}")
    if pool not in ("unfavourable", "all"):
        raise DataError(f"unknown factual pool {pool!r}; valid: unfavourable, all")
    rng = numpy_rng("discover.factuals", seed=seed)
    candidates = np.flatnonzero(scores < threshold) if pool == "unfavourable" else np.arange(len(scores))
    if len(candidates) >= n:
        return np.sort(rng.choice(candidates, n, replace=False)).astype(np.int64)
    if len(scores) > len(candidates):
        logger.warning("only %d of %d rows are in the %r pool, fewer than n=%d: taking the %d lowest-scoring "
                       "rows", len(candidates), len(scores), pool, n, min(n, len(scores)))
    return np.sort(np.argsort(scores, kind="stable")[:n]).astype(np.int64)


__all__ = ["sample_factuals"]
