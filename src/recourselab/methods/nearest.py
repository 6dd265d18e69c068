"""Nearest unanimous neighbour: the closest training row that every ensemble member labels as the target.

Typical use::

    method = NearestNeighbour(box, X_train, y_train, schema=schema)
    cf = method.explain(X_query, target=1)               # labels the whole pool: queries = pool size
    cf = method.explain(X_query, target=1, budget=480)   # labels at most 480 pool rows

A candidate has every immutable feature equal to the factual's, and no monotone feature on the
forbidden side of the factual's value (an ``increasing`` age is never younger). The pool is the training rows
(with training labels ``y``: only those whose label is one of the requested targets; a
training label is known data, not a query). Without a budget every pool row is labelled by
the oracle once (``queries`` = pool size). With a budget of B rows, ``selection`` chooses which
pool rows are labelled:

- ``"nearest"`` (default, deterministic): rounds over the factuals in order; in each round every
  factual that is not settled takes its nearest candidate that is not labelled yet (a row two
  factuals pick is labelled once), and the round's rows are labelled in one query, cut to the
  rows left in the budget. A factual is settled once all its candidates nearer than its
  nearest unanimous one are labelled, so with enough budget it gets the same row as the
  unbudgeted search. The search stops within the budget (it never raises for it).
  A factual's nearest candidates often lie near the decision boundary, where members
  disagree: below a few labelled rows per factual, this selection can find few unanimous rows.
- ``"sample"``: a seeded uniform sample of B pool rows is labelled in one query (it reaches the
  core of the target class at small budgets, at a higher cost than the nearest rows).

Each factual gets its nearest labelled candidate that all members label as its target; a
factual without one keeps its own row (``valid`` False, counted in ``log["no_neighbour"]``).
"""

from __future__ import annotations

import logging
import time
from typing import Any

import numpy as np
import pandas as pd

from recourselab.data.schema import Schema
from recourselab.errors import UnknownKeyError
from recourselab.methods.base import Counterfactuals
from recourselab.methods.common import (
    SEARCH_BUDGET,
    Search,
    check_budget,
    encode_factuals_and_targets,
    encode_train,
    resolve_schema,
    result,
)
from recourselab.models.oracle import BlackBox

logger = logging.getLogger(__name__)

#: How a budgeted search picks the pool rows it labels.
SELECTIONS = ("nearest", "sample")
#: Tolerance of "immutables equal" on encoded values (the counterfactual takes the factual's exact values).
IMMUTABLE_ATOL = 1e-9


class NearestNeighbour:
    """The nearest training row that all members label as the target, immutables equal.

    Parameters
    ----------
    oracle : the ensemble; every pool row it labels counts under ``budget_name``.
    X_train : (m, d) encoded training rows, or a raw DataFrame (encoded through the schema).
    y_train : (m,) training class indices, or None (then every row is a candidate for every target).
    schema : the dataset schema (default: the oracle's).
    selection : ``"nearest"`` or ``"sample"``, which pool rows a budgeted search labels (module docstring).
    metric : ``"l2"`` or ``"l1"`` distance in the encoded space.
    seed : seed of ``"sample"``.
    budget_name : the oracle budget of the search queries. Default ``"search"``.
    """

    name = "nearest"

    def __init__(self, oracle: BlackBox, X_train: np.ndarray | pd.DataFrame, y_train: Any = None, *,
                 schema: Schema | None = None, selection: str = "nearest", metric: str = "l2", seed: int = 0,
                 budget_name: str = SEARCH_BUDGET) -> None:
        self.schema = resolve_schema(oracle, schema, self.name)
        if selection not in SELECTIONS:
            raise UnknownKeyError(f"{self.name}: unknown selection {selection!r}; valid: {', '.join(SELECTIONS)}")
        if metric not in ("l1", "l2"):
            raise UnknownKeyError(f"{self.name}: unknown metric {metric!r}; valid: l1, l2")
        self.oracle = oracle
        self.X_train, self.y_train = encode_train(X_train, y_train, self.schema, self.name)
        self.selection = selection
        self.metric = metric
        self.seed = int(seed)
        self.budget_name = budget_name

    # ------------------------------------------------------------------ pieces
    def _distances(self, Xf: np.ndarray, pool: np.ndarray) -> np.ndarray:
        """Distances (n, p) from factuals to pool rows; inf where an immutable differs or a monotone feature
        would move the forbidden way."""
        P = self.X_train[pool]
        imm, sign = self.schema.immutable_mask(), self.schema.monotone_signs()
        dist = np.empty((len(Xf), len(P)))
        step = max(1, 4_000_000 // max(1, P.size))  # factuals per block: bounded memory
        for s in range(0, len(Xf), step):
            diff = Xf[s:s + step, None, :] - P[None, :, :]
            d = np.abs(diff).sum(axis=2) if self.metric == "l1" else np.sqrt((diff ** 2).sum(axis=2))
            if imm.any():
                d[~(np.abs(diff[:, :, imm]) <= IMMUTABLE_ATOL).all(axis=2)] = np.inf
            if sign.any():  # a monotone feature moved the forbidden way (diff = factual - row)
                d[((diff[:, :, sign != 0] * sign[sign != 0]) > IMMUTABLE_ATOL).any(axis=2)] = np.inf
            dist[s:s + step] = d
        return dist

    def _pool(self, tgt: np.ndarray) -> np.ndarray:
        """Indices of the training rows that may answer one of the targets."""
        if self.y_train is None:
            return np.arange(len(self.X_train))
        return np.flatnonzero(np.isin(self.y_train, np.unique(tgt)))

    def candidates(self, Xf: np.ndarray, tgt: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Pool indices (p,) and distances (n, p), inf where a row cannot answer a factual.

        A pool row cannot answer factual i when an immutable feature differs, a monotone feature would
        move the forbidden way, or (with training labels) its label is not ``tgt[i]``.
        """
        pool = self._pool(tgt)
        dist = self._distances(Xf, pool)
        if self.y_train is not None:
            dist = np.where(self.y_train[pool][None, :] == tgt[:, None], dist, np.inf)
        return pool, dist

    def _label(self, search: Search, rows: np.ndarray, unanimous: np.ndarray) -> None:
        """Label pool rows (indices into the training rows) in one query; store each row's unanimous label."""
        if len(rows):
            unanimous[rows] = search.query(self.X_train[rows]).unanimous

    def _nearest_first(self, search: Search, dist: np.ndarray, pool: np.ndarray, tgt: np.ndarray,
                       budget: int, unanimous: np.ndarray) -> None:
        """Budgeted nearest-first labelling (module docstring), at most ``budget`` rows."""
        n = len(tgt)
        order = np.argsort(dist, axis=1, kind="stable")
        finite = np.isfinite(dist).sum(axis=1)
        ptr = np.zeros(n, dtype=np.int64)
        settled = finite == 0
        left = budget
        while left > 0 and not settled.all():
            batch: list[int] = []
            chosen = set()
            for i in np.flatnonzero(~settled):
                while ptr[i] < finite[i]:  # skip rows labelled already; settle on a unanimous one
                    j = pool[order[i, ptr[i]]]
                    if unanimous[j] == -2:
                        break
                    if unanimous[j] == tgt[i]:
                        settled[i] = True
                        break
                    ptr[i] += 1
                if ptr[i] >= finite[i]:
                    settled[i] = True
                if settled[i]:
                    continue
                j = int(pool[order[i, ptr[i]]])
                if j not in chosen:
                    chosen.add(j)
                    batch.append(j)
            if not batch:
                break
            batch = batch[:left]
            self._label(search, np.asarray(batch), unanimous)
            left -= len(batch)

    def explain(self, factuals: np.ndarray | pd.DataFrame, target: Any = None, *,
                budget: int | None = None) -> Counterfactuals:
        """The nearest unanimous training row of every factual.

        Parameters
        ----------
        factuals : (n, d) encoded rows, or a raw DataFrame with the schema's features.
        target : class index per row (n,), one for all, or None for the schema's favourable class.
        budget : at most this many pool rows are labelled (None: the whole pool). The search
            stops within it.

        Returns
        -------
        Counterfactuals
            ``queries`` = labelled pool rows; ``valid`` (n,) True where a unanimous neighbour was found.

        Raises
        ------
        DataError
            Bad factuals (width, NaN) or targets.
        QueryBudgetExceeded
            The oracle's own limit on ``budget_name`` cannot take the labelling.
        """
        t0 = time.perf_counter()
        limit = check_budget(budget, self.name)
        Xf, tgt = encode_factuals_and_targets(factuals, target, self.schema, self.name)
        pool, dist = self.candidates(Xf, tgt)
        search = Search(self.oracle, self.budget_name, limit, self.name)
        unanimous = np.full(len(self.X_train), -2, dtype=np.int64)  # -2: not labelled
        if limit is None:
            self._label(search, pool, unanimous)
        elif self.selection == "sample":
            rng = np.random.default_rng([self.seed, 34])
            take = np.sort(rng.choice(pool, size=min(limit, len(pool)), replace=False))
            self._label(search, take, unanimous)
        else:
            self._nearest_first(search, dist, pool, tgt, limit, unanimous)
        ok = unanimous[pool][None, :] == tgt[:, None]
        masked = np.where(ok, dist, np.inf)
        best = masked.argmin(axis=1)
        found = np.isfinite(masked[np.arange(len(Xf)), best])
        cf = Xf.copy()
        cf[found] = self.X_train[pool[best[found]]]
        cf[:, self.schema.immutable_mask()] = Xf[:, self.schema.immutable_mask()]
        if (~found).any():
            logger.info("%s: %d of %d factuals have no unanimous neighbour among %d labelled pool rows",
                        self.name, int((~found).sum()), len(Xf), int((unanimous >= -1).sum()))
        log = {"pool": int(len(pool)), "labelled": int((unanimous >= -1).sum()),
               "no_neighbour": int((~found).sum()), "selection": self.selection if limit is not None else "all",
               "neighbour_index": np.where(found, pool[best], -1).tolist()}
        return result(self.name, self.schema, factuals, Xf, cf, tgt, search.rows, time.perf_counter() - t0,
                      found, log)


__all__ = ["SELECTIONS", "NearestNeighbour"]
