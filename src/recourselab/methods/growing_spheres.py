"""Growing Spheres (Laugel et al., 2018) on the ensemble majority.

Typical use::

    method = GrowingSpheres(box, schema=schema, n_samples=100, seed=0)
    cf = method.explain(X_query, target=1)

An "enemy" of a factual is a point that more than half of the members label as the target
(:attr:`Verdict.majority`). Per factual, in the encoded space, over the mutable columns only:

1. **Shrink**: draw ``n_samples`` points uniformly in the ball of radius ``radius``; while an
   enemy is among them, halve the radius and draw again (at most ``max_halvings`` times).
2. **Grow**: draw ``n_samples`` points uniformly in the spherical layer ``a0 <= |x' - x| <= a1``,
   starting at ``a0 = r, a1 = 2 r`` (``r``, the last radius whose ball held no enemy; ``a0 = 0``
   for a row still finding enemies after ``max_halvings``), and move the layer out by ``r`` until
   it holds an enemy (at most ``max_layers`` layers). The closest enemy wins.
3. **Sparsify** (``sparsify=True``): features of the winner go back to their factual values one
   at a time, smallest change first, while the point stays an enemy (one probe per feature).

Every drawn point is made valid before it is queried (categorical levels, integers, training
range; immutables copied from the factual). All factuals of a phase share one query per step.

Query accounting: the sum of the drawn points (``n_samples`` per active factual per step) and
of the sparsify probes; ``log`` holds them per phase. With ``budget``, a step that would pass it
raises :class:`~recourselab.models.oracle.QueryBudgetExceeded` before its query.
Randomness: one ``numpy`` generator seeded with ``seed``; the same inputs give the same result.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import numpy as np
import pandas as pd

from recourselab.data.schema import Schema
from recourselab.methods.base import Counterfactuals
from recourselab.methods.common import (
    SEARCH_BUDGET,
    Search,
    check_budget,
    encode_factuals_and_targets,
    member_votes,
    positive,
    resolve_schema,
    result,
    valid_points,
)
from recourselab.models.oracle import BlackBox

logger = logging.getLogger(__name__)


def sample_layer(center: np.ndarray, a0: np.ndarray, a1: np.ndarray, k: int, mask: np.ndarray,
                 rng: np.random.Generator) -> np.ndarray:
    """``k`` points per row uniform in the layer ``a0 <= |x - center| <= a1`` over the ``mask`` columns.

    Parameters
    ----------
    center : (m, d) rows; a0, a1 : (m,) radii; mask : (d,) bool columns that move.

    Returns
    -------
    ndarray (m, k, d).
    """
    m, d = center.shape
    p = int(mask.sum())
    z = rng.standard_normal((m, k, p))
    z /= np.maximum(np.linalg.norm(z, axis=2, keepdims=True), 1e-300)
    u = rng.random((m, k))
    r = (a0[:, None] ** p + u * (a1[:, None] ** p - a0[:, None] ** p)) ** (1.0 / p)
    out = np.repeat(center[:, None, :], k, axis=1)
    out[:, :, mask] += r[:, :, None] * z
    return out


class GrowingSpheres:
    """Growing Spheres on the ensemble majority (module docstring).

    Parameters
    ----------
    oracle : the ensemble; every probe counts under ``budget_name``.
    schema : the dataset schema (default: the oracle's).
    n_samples : points drawn per factual and step. Default 100.
    radius : first radius in the encoded (standardised) space. Default 1.0.
    max_halvings, max_layers : caps of the shrink and grow phases. Defaults 10 and 50.
    sparsify : run the feature-selection phase. Default True.
    seed : seed of the sampling.
    budget_name : the oracle budget of the search queries. Default ``"search"``.
    """

    name = "growing_spheres"

    def __init__(self, oracle: BlackBox, *, schema: Schema | None = None, n_samples: int = 100,
                 radius: float = 1.0, max_halvings: int = 10, max_layers: int = 50, sparsify: bool = True,
                 seed: int = 0, budget_name: str = SEARCH_BUDGET) -> None:
        self.schema = resolve_schema(oracle, schema, self.name)
        self.oracle = oracle
        self.n_samples = positive(n_samples, "n_samples", self.name, integer=True)
        self.radius = positive(radius, "radius", self.name)
        self.max_halvings = positive(max_halvings, "max_halvings", self.name, integer=True)
        self.max_layers = positive(max_layers, "max_layers", self.name, integer=True)
        self.sparsify = bool(sparsify)
        self.seed = int(seed)
        self.budget_name = budget_name

    def _enemies(self, search: Search, pts: np.ndarray, tgt: np.ndarray) -> np.ndarray:
        """Majority-enemy flags of points (m, k, d) for targets (m,): (m, k) bool, one query."""
        m, k, d = pts.shape
        out = search.query(pts.reshape(m * k, d))
        votes = member_votes(out, np.repeat(tgt, k)).reshape(m, k)
        return 2 * votes > self.oracle.n_members

    def _draw(self, Xf: np.ndarray, a0: np.ndarray, a1: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        mask = ~self.schema.immutable_mask()
        pts = sample_layer(Xf, a0, a1, self.n_samples, mask, rng)
        m, k, d = pts.shape
        return valid_points(pts.reshape(m * k, d), np.repeat(Xf, k, axis=0), self.schema).reshape(m, k, d)

    def explain(self, factuals: np.ndarray | pd.DataFrame, target: Any = None, *,
                budget: int | None = None) -> Counterfactuals:
        """The closest majority enemy found for every factual.

        Parameters and errors are those of :meth:`recourselab.methods.base.CounterfactualMethod.explain`.

        Returns
        -------
        Counterfactuals
            ``valid`` (n,): the point is a majority enemy (factuals without one keep their row, False).
        """
        t0 = time.perf_counter()
        search = Search(self.oracle, self.budget_name, check_budget(budget, self.name), self.name)
        Xf, tgt = encode_factuals_and_targets(factuals, target, self.schema, self.name)
        n, d = Xf.shape
        rng = np.random.default_rng([self.seed, 34])
        cf, found = Xf.copy(), np.zeros(n, dtype=bool)
        counts = {"shrink": 0, "grow": 0, "sparsify": 0}

        # 1. shrink while the ball holds an enemy
        r = np.full(n, self.radius)
        active = np.arange(n)
        for _ in range(self.max_halvings + 1):
            before = search.rows
            hit = self._enemies(search, self._draw(Xf[active], np.zeros(len(active)), r[active], rng),
                                tgt[active]).any(axis=1)
            counts["shrink"] += search.rows - before
            active = active[hit]
            if not len(active):
                break
            r[active] /= 2
        # 2. grow the layer until it holds an enemy; the ball of radius r is known empty, except for rows
        #    still hitting after max_halvings (their r was never drawn)
        a0 = np.where(np.isin(np.arange(n), active), 0.0, r)
        a1 = a0 + r
        active = np.arange(n)
        for _ in range(self.max_layers):
            before = search.rows
            pts = self._draw(Xf[active], a0[active], a1[active], rng)
            hit = self._enemies(search, pts, tgt[active])
            counts["grow"] += search.rows - before
            dist = np.where(hit, np.linalg.norm(pts - Xf[active, None, :], axis=2), np.inf)
            best = dist.argmin(axis=1)
            got = np.isfinite(dist[np.arange(len(active)), best])
            cf[active[got]] = pts[np.flatnonzero(got), best[got]]
            found[active[got]] = True
            active = active[~got]
            if not len(active):
                break
            a0[active], a1[active] = a1[active], a1[active] + r[active]
        # 3. sparsify: move features back to the factual, smallest change first
        if self.sparsify and found.any():
            before = search.rows
            cf[found] = self._sparsify(search, Xf[found], cf[found], tgt[found])
            counts["sparsify"] = search.rows - before
        if (~found).any():
            logger.info("%s: no majority enemy for %d of %d factuals within %d layers", self.name,
                        int((~found).sum()), n, self.max_layers)
        log = {"queries_" + k: v for k, v in counts.items()} | {
            "no_enemy": int((~found).sum()), "final_radius": r.tolist()}
        return result(self.name, self.schema, factuals, Xf, cf, tgt, search.rows, time.perf_counter() - t0,
                      found, log)

    def _sparsify(self, search: Search, Xf: np.ndarray, cf: np.ndarray, tgt: np.ndarray) -> np.ndarray:
        """Feature selection of Growing Spheres on enemies ``cf`` (m, d); one probe per changed feature."""
        out = cf.copy()
        slices = list(self.schema.slices().values())
        change = np.stack([np.abs(cf[:, sl] - Xf[:, sl]).sum(axis=1) for sl in slices], axis=1)  # (m, p)
        order = np.argsort(change, axis=1, kind="stable")
        for step in range(len(slices)):
            feat = order[:, step]
            rows = np.flatnonzero(change[np.arange(len(out)), feat] > 0)
            if not len(rows):
                continue
            probe = out[rows].copy()
            for f in np.unique(feat[rows]):
                sel = feat[rows] == f
                probe[sel, slices[f]] = Xf[rows[sel], slices[f]]
            keep = 2 * member_votes(search.query(probe), tgt[rows]) > self.oracle.n_members
            out[rows[keep]] = probe[keep]
        return out


__all__ = ["GrowingSpheres", "sample_layer"]
