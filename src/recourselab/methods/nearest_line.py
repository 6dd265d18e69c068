"""Nearest unanimous neighbour plus a line search from the factual towards it.

Typical use::

    method = NearestLine(box, X_train, y_train, schema=schema, steps=8)
    cf = method.explain(X_query, target=1)

After :class:`~recourselab.methods.nearest.NearestNeighbour` finds a unanimous neighbour ``b``
of factual ``x``, bisection on ``t`` in [0, 1] probes ``x + t (b - x)`` (made valid: snapped to
categorical levels, integers and the training range, immutables copied from ``x``): a probe
that every member labels as the target becomes the new upper end, any other the lower end.
Each bisection step sends one probe per factual still searching, in one query. The result is
the closest (L2) unanimous point seen: a probe, or ``b`` itself.

Query accounting: the neighbour search's rows (see ``nearest``) plus one probe per factual with
a neighbour per bisection step (``steps`` steps). With ``budget`` B, the neighbour search may use
up to B rows (the nearest-first selection usually settles with far fewer; ``"sample"`` takes all
B), and the line search takes the steps that fit in what is left, whole steps only: the search
stops within the budget (``log["steps"]``: the steps run).
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any

import numpy as np
import pandas as pd

from recourselab.data.schema import Schema
from recourselab.methods.base import Counterfactuals
from recourselab.methods.common import SEARCH_BUDGET, Search, check_budget, original, positive, valid_points
from recourselab.methods.nearest import NearestNeighbour
from recourselab.models.oracle import BlackBox


class NearestLine(NearestNeighbour):
    """:class:`NearestNeighbour` followed by a bisection towards the neighbour.

    Parameters
    ----------
    steps : bisection steps (probes per factual). Default 8.
    Other parameters: as :class:`NearestNeighbour`.
    """

    name = "nearest_line"

    def __init__(self, oracle: BlackBox, X_train: np.ndarray | pd.DataFrame, y_train: Any = None, *,
                 schema: Schema | None = None, steps: int = 8, selection: str = "nearest", metric: str = "l2",
                 seed: int = 0, budget_name: str = SEARCH_BUDGET) -> None:
        super().__init__(oracle, X_train, y_train, schema=schema, selection=selection, metric=metric, seed=seed,
                         budget_name=budget_name)
        self.steps = positive(steps, "steps", self.name, integer=True)

    def explain(self, factuals: np.ndarray | pd.DataFrame, target: Any = None, *,
                budget: int | None = None) -> Counterfactuals:
        """The closest unanimous point on the segment from each factual to its nearest unanimous neighbour.

        Parameters and errors are those of :meth:`recourselab.methods.base.CounterfactualMethod.explain`.
        ``budget`` covers the neighbour labelling, then the whole bisection steps that fit (None: label
        the whole pool and run every step); the search stays within it.

        Returns
        -------
        Counterfactuals
            ``queries`` = labelled pool rows + probes; ``valid`` (n,) True where the point is unanimous.
        """
        t0 = time.perf_counter()
        limit = check_budget(budget, self.name)
        base = NearestNeighbour.explain(self, factuals, target, budget=limit)
        Xf, nb, tgt = base.factuals, base.counterfactuals, base.target
        found = np.asarray(base.valid, dtype=bool)
        rows = np.flatnonzero(found)
        lo = np.zeros(len(rows))
        hi = np.ones(len(rows))
        best = nb.copy()
        best_cost = np.linalg.norm(nb - Xf, axis=1)
        search = Search(self.oracle, self.budget_name, None if limit is None else limit - base.queries, self.name)
        steps_run = 0
        for _ in range(self.steps if len(rows) else 0):
            left = search.remaining()
            if left is not None and left < len(rows):
                break
            steps_run += 1
            mid = (lo + hi) / 2
            probe = valid_points(Xf[rows] + mid[:, None] * (nb[rows] - Xf[rows]), Xf[rows], self.schema)
            ok = search.query(probe).unanimous == tgt[rows]
            hi = np.where(ok, mid, hi)
            lo = np.where(ok, lo, mid)
            cost = np.linalg.norm(probe - Xf[rows], axis=1)
            better = ok & (cost < best_cost[rows])
            best[rows[better]] = probe[better]
            best_cost[rows[better]] = cost[better]
        log = base.log | {"steps": steps_run, "probes": search.rows, "neighbour_queries": base.queries}
        return replace(base, method=self.name, counterfactuals=best,
                       counterfactuals_original=original(self.schema, best, factuals),
                       queries=base.queries + search.rows, wall_time=time.perf_counter() - t0, log=log)

__all__ = ["NearestLine"]
