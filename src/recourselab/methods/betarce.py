"""BetaRCE-style robustifier: move a base counterfactual until member agreement is credibly high.

Typical use::

    base = Wachter(box, schema=schema, threshold=0.5)          # or GrowingSpheres(box, ...)
    method = BetaRCE(box, base, delta=0.5, beta=0.9, seed=0)
    cf = method.explain(X_query, target=1)

Robustness of a point (after Stępka et al., BetaRCE): with ``k`` of the ``M`` ensemble members
labelling it the target, member agreement has the posterior Beta(1 + k, 1 + M - k) (uniform
prior); the point is robust when that posterior's lower bound at confidence ``beta`` (its
``1 - beta`` quantile) is at least ``delta``. With M members the largest reachable bound is
``(1 - beta) ** (1 / (M + 1))`` (all agree); a ``delta`` above it is refused.

Per factual: the base method's counterfactual ``c`` is checked (one row). A row that is not
robust then grows a ball around ``c``: in step ``s`` (1..``max_steps``), ``n_samples`` points
are drawn uniformly in the ball of radius ``s * step`` around ``c`` over the mutable columns
(made valid: categorical levels, integers, training range, immutables copied) and the robust
point closest to the factual wins; rows still without one go on to the next step. A row that
is never robust keeps the base counterfactual (``valid`` False).

Query accounting: the base method's search rows, plus one check per factual, plus
``n_samples`` per searching row per step; ``log`` splits them. With ``budget``, the base
method gets the whole budget and the robustifier what is left; a step that would pass it
raises :class:`~recourselab.models.oracle.QueryBudgetExceeded` before its query.
"""

from __future__ import annotations

import logging
import time
from dataclasses import replace
from typing import Any

import numpy as np
import pandas as pd
from scipy.stats import beta as beta_dist

from recourselab.errors import DataError
from recourselab.methods.base import CounterfactualMethod, Counterfactuals
from recourselab.methods.common import (
    SEARCH_BUDGET,
    Search,
    check_budget,
    member_votes,
    original,
    positive,
    resolve_schema,
    valid_points,
)
from recourselab.methods.growing_spheres import sample_layer
from recourselab.models.oracle import BlackBox

logger = logging.getLogger(__name__)


def agreement_lower_bound(k: np.ndarray, m: int, beta: float) -> np.ndarray:
    """Lower bound at confidence ``beta`` of member agreement with ``k`` (n,) of ``m`` members agreeing.

    The ``1 - beta`` quantile of Beta(1 + k, 1 + m - k). Shape (n,).
    """
    k = np.asarray(k, dtype=float)
    return beta_dist.ppf(1.0 - beta, 1.0 + k, 1.0 + m - k)


class BetaRCE:
    """Make a base method's counterfactuals robust to the ensemble's disagreement (module docstring).

    Parameters
    ----------
    oracle : the ensemble; the robustifier's rows count under ``budget_name``.
    base : a fitted :class:`CounterfactualMethod` (its own queries, if any, through the same oracle).
    schema : the dataset schema (default: the oracle's).
    delta : the agreement to reach, in (0, 1). Default 0.5.
    beta : the confidence of the lower bound, in (0, 1). Default 0.9.
    n_samples : points per searching row and step. Default 50.
    step : radius growth per step in the encoded space. Default 0.25.
    max_steps : at most this many steps. Default 20.
    seed : seed of the sampling.
    budget_name : the oracle budget of the robustifier's queries. Default ``"search"``.
    """

    name = "betarce"

    def __init__(self, oracle: BlackBox, base: CounterfactualMethod, *, schema: Any = None, delta: float = 0.5,
                 beta: float = 0.9, n_samples: int = 50, step: float = 0.25, max_steps: int = 20, seed: int = 0,
                 budget_name: str = SEARCH_BUDGET) -> None:
        self.schema = resolve_schema(oracle, schema, self.name)
        if not isinstance(base, CounterfactualMethod):
            raise TypeError(f"{self.name}: base must be a counterfactual method (with name and explain), "
                            f"got {type(base).__name__}")
        self.oracle = oracle
        self.base = base
        self.delta = positive(delta, "delta", self.name, upper=1.0)
        self.beta = positive(beta, "beta", self.name, upper=1.0)
        if self.delta >= 1 or self.beta >= 1:
            raise DataError(f"{self.name}: delta and beta must lie in (0, 1), got delta={delta!r}, beta={beta!r}")
        reachable = float(agreement_lower_bound(np.array([oracle.n_members]), oracle.n_members, self.beta)[0])
        if self.delta > reachable:
            raise DataError(f"{self.name}: delta={self.delta} cannot be reached with {oracle.n_members} members at "
                            f"beta={self.beta}: even unanimous agreement gives a lower bound of {reachable:.3f}; "
                            f"lower delta or beta")
        self.n_samples = positive(n_samples, "n_samples", self.name, integer=True)
        self.step = positive(step, "step", self.name)
        self.max_steps = positive(max_steps, "max_steps", self.name, integer=True)
        self.seed = int(seed)
        self.budget_name = budget_name

    @property
    def min_votes(self) -> int:
        """The fewest agreeing members whose lower bound reaches ``delta``."""
        m = self.oracle.n_members
        bounds = agreement_lower_bound(np.arange(m + 1), m, self.beta)
        return int(np.flatnonzero(bounds >= self.delta)[0])

    def explain(self, factuals: np.ndarray | pd.DataFrame, target: Any = None, *,
                budget: int | None = None) -> Counterfactuals:
        """The base method's counterfactuals, moved until robust.

        Parameters
        ----------
        factuals : (n, d) encoded rows, or a raw DataFrame.
        target : as the base method takes it (class index per row, one for all, or None).
        budget : at most this many search rows, base method included (None: no limit of its own).

        Returns
        -------
        Counterfactuals
            ``valid`` (n,): the returned point is robust (lower bound >= delta); ``queries``
            includes the base method's.

        Raises
        ------
        DataError
            Bad factuals or targets (from the base method).
        QueryBudgetExceeded
            Before the query that would pass ``budget``.
        """
        t0 = time.perf_counter()
        limit = check_budget(budget, self.name)
        base = self.base.explain(factuals, target, budget=limit)
        search = Search(self.oracle, self.budget_name, None if limit is None else limit - base.queries, self.name)
        Xf, tgt = base.factuals, np.asarray(base.target)
        if not np.issubdtype(tgt.dtype, np.integer):
            raise DataError(f"{self.name}: the base method {base.method!r} gives no class targets")
        need = self.min_votes
        cf = base.counterfactuals.copy()
        robust = member_votes(search.query(cf), tgt) >= need
        checks = search.rows
        rng = np.random.default_rng([self.seed, 34])
        mask = ~self.schema.immutable_mask()
        active = np.flatnonzero(~robust)
        steps_run = 0
        for s in range(1, self.max_steps + 1):
            if not len(active):
                break
            steps_run = s
            k = self.n_samples
            pts = sample_layer(base.counterfactuals[active], np.zeros(len(active)), np.full(len(active), s * self.step),
                               k, mask, rng)
            m, _, d = pts.shape
            pts = valid_points(pts.reshape(m * k, d), np.repeat(Xf[active], k, axis=0), self.schema).reshape(m, k, d)
            ok = (member_votes(search.query(pts.reshape(m * k, d)), np.repeat(tgt[active], k)) >= need).reshape(m, k)
            dist = np.where(ok, np.linalg.norm(pts - Xf[active, None, :], axis=2), np.inf)
            best = dist.argmin(axis=1)
            got = np.isfinite(dist[np.arange(m), best])
            cf[active[got]] = pts[np.flatnonzero(got), best[got]]
            robust[active[got]] = True
            active = active[~got]
        if len(active):
            logger.info("%s: %d of %d counterfactuals of %s are not robust (delta %.2f, beta %.2f) after %d steps",
                        self.name, len(active), len(Xf), base.method, self.delta, self.beta, steps_run)
        log = {"base": base.method, "base_queries": base.queries, "check_queries": checks,
               "grow_queries": search.rows - checks, "min_votes": need, "steps_run": steps_run,
               "not_robust": int(len(active)), "base_log": base.log}
        return replace(base, method=self.name, counterfactuals=cf,
                       counterfactuals_original=original(self.schema, cf, factuals),
                       queries=base.queries + search.rows, wall_time=time.perf_counter() - t0, valid=robust,
                       verdict=None, log=log, result=base)


__all__ = ["BetaRCE", "agreement_lower_bound"]
