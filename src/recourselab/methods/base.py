"""One interface for every recourse method: ``explain(factuals, target, *, budget=None) -> Counterfactuals``.

Typical use::

    method = DensityFlow(schema=schema).fit(X, y).distill(box, X, y)    # or Discover(box, schema=schema), ...
    cf = method.explain(X_query, target=None, budget=None)
    cf.counterfactuals          # (n, d) encoded rows
    cf.counterfactuals_original # (n, p) DataFrame in original units (with a schema)
    cf.valid                    # (n,) bool, where an oracle checked the rows
    cf.queries, cf.wall_time    # search-time oracle rows and seconds
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Protocol, runtime_checkable

import numpy as np
import pandas as pd

from recourselab.errors import DataError
from recourselab.models.verdict import VERIFY_BUDGET, Verdict, verify


@dataclass(frozen=True)
class Counterfactuals:
    """Counterfactuals of ``n`` factual rows, as every recourse method returns them.

    Attributes
    ----------
    method : the method's registry name (``"densityflow"``, ``"discover"``, ...).
    factuals, counterfactuals : (n, d) rows in the schema's encoded space.
    counterfactuals_original : (n, p) DataFrame in original units and categories, or None without a schema.
    target : (n,) what each row was moved towards: a class index, or for distributional methods
        the row's matched target score.
    queries : oracle rows the search itself used (verification not included).
    wall_time : seconds of the search.
    valid : (n,) bool, whether the oracle gives each row its target, or None when no oracle answered.
    verdict : the ensemble's per-member verdict (:class:`~recourselab.models.verdict.Verdict`), or None.
    log : method-specific details (JSON-safe scalars and small tables).
    result : the method's own result object (for example a DensityFlow ``CounterfactualResult``).
    """

    method: str
    factuals: np.ndarray
    counterfactuals: np.ndarray
    counterfactuals_original: pd.DataFrame | None
    target: np.ndarray
    queries: int
    wall_time: float
    valid: np.ndarray | None = None
    verdict: Verdict | None = None
    log: dict[str, Any] = field(default_factory=dict)
    result: Any = None

    def __post_init__(self) -> None:
        n = len(self.factuals)
        if self.counterfactuals.shape != self.factuals.shape:
            raise DataError(f"{self.method}: counterfactuals have shape {self.counterfactuals.shape}, "
                            f"factuals {self.factuals.shape}")
        if len(self.target) != n:
            raise DataError(f"{self.method}: {len(self.target)} targets for {n} rows")
        if self.valid is not None and np.shape(self.valid) != (n,):
            raise DataError(f"{self.method}: valid has shape {np.shape(self.valid)}, expected ({n},)")

    def __len__(self) -> int:
        return len(self.factuals)

    @property
    def cost_l1(self) -> np.ndarray:
        """L1 distance of each row from its factual in the encoded space. Shape (n,)."""
        return np.abs(self.counterfactuals - self.factuals).sum(axis=1)

    @property
    def cost_l2(self) -> np.ndarray:
        """L2 distance of each row from its factual in the encoded space. Shape (n,)."""
        return np.linalg.norm(self.counterfactuals - self.factuals, axis=1)

    @property
    def changed(self) -> np.ndarray:
        """Whether each row differs from its factual. Shape (n,), bool."""
        return (self.counterfactuals != self.factuals).any(axis=1)

    def verify(self, oracle: Any, *, budget_name: str = VERIFY_BUDGET) -> Counterfactuals:
        """This result with the ensemble's verdict: ``valid`` becomes unanimous validity.

        One query of the n rows under ``budget_name``. Needs class targets.
        """
        t = np.asarray(self.target)
        if not np.issubdtype(t.dtype, np.integer):
            raise DataError(f"{self.method}: verify needs class targets, got {t.dtype} target values")
        verdict = verify(oracle, self.counterfactuals, t, budget_name=budget_name)
        return replace(self, verdict=verdict, valid=verdict.unanimous)


@runtime_checkable
class CounterfactualMethod(Protocol):
    """A fitted recourse method.

    ``name`` is its registry key. ``explain`` moves the (n, d) encoded factuals (or a raw
    DataFrame, with a schema) towards ``target`` (a class per row, one class, or None for the
    schema's favourable class; distributional methods take their target description), using at
    most ``budget`` oracle rows during the search (None: the method's own limit). It raises
    :class:`~recourselab.models.oracle.QueryBudgetExceeded` rather than exceed the budget, and
    never changes an immutable feature.
    """

    name: str

    def explain(self, factuals: np.ndarray | pd.DataFrame, target: Any = None, *,
                budget: int | None = None) -> Counterfactuals:
        """Counterfactuals of every factual row: the contract that each method's ``explain`` follows.

        Parameters
        ----------
        factuals : (n, d) encoded rows, or a raw DataFrame with the schema's features.
        target : class index per row (n,), one class for all rows, or None for the schema's favourable
            class (distributional methods take their own target description).
        budget : at most this many oracle rows during the search (None: no limit of the method's own).

        Returns
        -------
        Counterfactuals
            One counterfactual per factual; each method documents what its ``queries`` and ``valid`` mean.

        Raises
        ------
        DataError
            Bad factuals (width, NaN, inf) or targets.
        QueryBudgetExceeded
            Before the query that would pass ``budget`` (or the oracle's own limit).
        """


__all__ = ["CounterfactualMethod", "Counterfactuals"]
