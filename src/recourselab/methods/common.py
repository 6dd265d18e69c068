"""Shared parts of the baseline methods: input checks, targets, counted search queries, valid points.

Every baseline moves encoded factual rows (n, d) of a :class:`~recourselab.data.schema.Schema`
towards class targets. The pieces here keep that uniform:

- :func:`encode_factuals` / :func:`class_targets` check the inputs (DataError on a wrong width,
  NaN or a bad target), both for one ``explain`` call: :func:`encode_factuals_and_targets`;
- :class:`Search` sends every search-time ensemble query through the
  :class:`~recourselab.models.BlackBox` under one named budget and counts the rows; a query that
  would pass the method's ``budget`` raises :class:`~recourselab.models.oracle.QueryBudgetExceeded`
  before any member is called;
- :func:`valid_points` snaps new points to valid ones (categorical levels, integers, training
  range), moves monotone features back where they went the forbidden way and copies the
  immutable columns from the factuals exactly;
- :func:`result` builds the :class:`~recourselab.methods.base.Counterfactuals`.
"""

from __future__ import annotations

import math
import numbers
from typing import Any

import numpy as np
import pandas as pd

from recourselab.data.rows import encode_rows
from recourselab.data.schema import Schema
from recourselab.errors import DataError
from recourselab.methods.base import Counterfactuals
from recourselab.models.oracle import BlackBox, EnsembleOutput, QueryBudgetExceeded

#: The oracle budget that search-time queries of the baselines count against by default.
SEARCH_BUDGET = "search"


def resolve_schema(oracle: BlackBox, schema: Schema | None, method: str) -> Schema:
    """``schema``, else the oracle's; a DataError naming ``method`` when neither is given."""
    if not isinstance(oracle, BlackBox):
        raise TypeError(f"{method}: the oracle must be a recourselab BlackBox (it counts the search queries), "
                        f"got {type(oracle).__name__}")
    schema = schema if schema is not None else oracle.schema
    if not isinstance(schema, Schema):
        raise DataError(f"{method}: needs a Schema (immutables, categorical levels, integers); pass schema= or "
                        f"an oracle built with one")
    return schema


def encode_factuals(factuals: np.ndarray | pd.DataFrame, schema: Schema, method: str) -> np.ndarray:
    """Factual rows as encoded float rows (n, d), n >= 1, checked (DataError on a wrong width, NaN, inf)."""
    X = encode_rows(factuals, schema, what=f"{method} factuals")
    if X.shape[0] == 0:
        raise DataError(f"{method}: no factual rows to explain")
    return X


def encode_train(X: np.ndarray | pd.DataFrame, y: Any, schema: Schema, method: str) -> tuple[np.ndarray, Any]:
    """Training rows (m, d) encoded and checked, with their labels (m,) int64 or None."""
    Xt = encode_rows(X, schema, what=f"{method} training rows")
    if Xt.shape[0] == 0:
        raise DataError(f"{method}: no training rows")
    if y is None:
        return Xt, None
    labels = class_targets(np.asarray(y), len(Xt), schema, f"{method} training labels")
    return Xt, labels


def class_targets(target: Any, n: int, schema: Schema, what: str) -> np.ndarray:
    """Targets as class indices (n,) int64: None is the schema's favourable class, a scalar is used for every row.

    Raises
    ------
    DataError
        Not one integer class index per row, or an index outside ``range(schema.n_classes)``.
    """
    if target is None:
        return np.full(n, schema.favourable_index, dtype=np.int64)
    t = np.asarray(target)
    if t.ndim == 0:
        t = np.full(n, t)
    if t.shape != (n,):
        raise DataError(f"{what}: expected one class index per row ({n},), got shape {t.shape}")
    ok = t.dtype == bool or np.issubdtype(t.dtype, np.number) or (
        t.dtype == object and all(isinstance(v, numbers.Real) for v in t))
    values = t.astype(float) if ok else None
    if values is None or not np.isfinite(values).all() or (values % 1 != 0).any():
        raise DataError(f"{what}: class indices must be finite integers, got e.g. {t[:3].tolist()}")
    labels = values.astype(np.int64)
    if n and (labels.min() < 0 or labels.max() >= schema.n_classes):
        raise DataError(f"{what}: class indices must lie in 0..{schema.n_classes - 1}, got "
                        f"{sorted(set(labels.tolist()))[:10]}")
    return labels


def encode_factuals_and_targets(factuals: np.ndarray | pd.DataFrame, target: Any, schema: Schema,
                                method: str) -> tuple[np.ndarray, np.ndarray]:
    """The factuals encoded and checked (n, d), with their class targets (n,) int64.

    See :func:`encode_factuals` and :func:`class_targets` (whose message names ``"{method} target"``).
    """
    X = encode_factuals(factuals, schema, method)
    return X, class_targets(target, len(X), schema, f"{method} target")


def check_budget(budget: Any, method: str) -> int | None:
    """``budget`` as a non-negative int, or None."""
    if budget is None:
        return None
    if isinstance(budget, bool) or not isinstance(budget, numbers.Integral) or budget < 0:
        raise DataError(f"{method}: budget must be a non-negative integer number of oracle rows or None, "
                        f"got {budget!r}")
    return int(budget)


def positive(value: Any, name: str, method: str, *, integer: bool = False, upper: float | None = None) -> Any:
    """``value`` checked: a finite number > 0 (an int with ``integer``), at most ``upper``."""
    bad = isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value) or value <= 0
    if not bad and integer and not isinstance(value, numbers.Integral):
        bad = True
    if bad or (upper is not None and value > upper):
        kind = "an integer" if integer else "a finite number"
        limit = f" and <= {upper}" if upper is not None else ""
        raise DataError(f"{method}: {name} must be {kind} > 0{limit}, got {value!r}")
    return int(value) if integer else float(value)


class Search:
    """The counted oracle of one search: every query goes through ``oracle`` under ``budget_name``.

    Parameters
    ----------
    oracle : the ensemble.
    budget_name : the oracle budget the rows count against.
    limit : at most this many rows in this search (None: no limit of its own; the oracle's
        own limit on ``budget_name`` still applies).
    method : named in errors.
    """

    def __init__(self, oracle: BlackBox, budget_name: str, limit: int | None, method: str) -> None:
        self.oracle = oracle
        self.budget_name = budget_name
        self.limit = limit
        self.method = method
        self.rows = 0

    def remaining(self) -> int | None:
        """Rows this search may still send (the smaller of its own and the oracle's limit), or None."""
        own = None if self.limit is None else self.limit - self.rows
        theirs = self.oracle.remaining(self.budget_name)
        if own is None:
            return theirs
        return own if theirs is None else min(own, theirs)

    def query(self, X: np.ndarray) -> EnsembleOutput:
        """All members on rows X (m, d), counted; QueryBudgetExceeded before the call that would pass the limit."""
        m = len(X)
        if self.limit is not None and self.rows + m > self.limit:
            raise QueryBudgetExceeded(f"{self.method}: {m} more oracle rows would make {self.rows + m}, over the "
                                      f"search budget of {self.limit}; raise budget= or explain fewer rows")
        out = self.oracle.query(X, budget=self.budget_name)
        self.rows += m
        return out


def member_votes(out: EnsembleOutput, target: np.ndarray) -> np.ndarray:
    """Number of members labelling each row its target (m,), for targets (m,)."""
    return (out.member_labels == target[None, :]).sum(axis=0)


def valid_points(X: np.ndarray, factuals: np.ndarray, schema: Schema) -> np.ndarray:
    """New points (m, d) made valid for their factuals (m, d): snapped, monotone rules kept, immutables
    copied exactly.

    Numericals are clipped to the training range (integers rounded), categoricals become the
    exact phase pair of their nearest level (:meth:`Schema.snap`); a monotone feature that moved
    the forbidden way takes its factual value (:meth:`Schema.project_monotone`); immutable columns
    take the factual values.
    """
    out = schema.snap(X)
    out = np.where(np.abs(out - factuals) <= 1e-12, factuals, out)  # unmoved entries: no rounding error
    out = schema.project_monotone(out, factuals)
    imm = schema.immutable_mask()
    out[:, imm] = factuals[:, imm]
    return out


def mutable_mask(schema: Schema) -> np.ndarray:
    """Encoded columns a method may move (d,), bool."""
    return ~schema.immutable_mask()


def original(schema: Schema, X: np.ndarray, factuals: np.ndarray | pd.DataFrame) -> pd.DataFrame:
    """Counterfactuals (n, d) in original units; immutables exactly as in raw ``factuals``, index kept."""
    raw = factuals if isinstance(factuals, pd.DataFrame) else None
    frame = schema.inverse_transform(X, raw)
    if raw is not None:
        frame.index = raw.index
    return frame


def result(method: str, schema: Schema, factuals_in: np.ndarray | pd.DataFrame, Xf: np.ndarray, cf: np.ndarray,
           target: np.ndarray, queries: int, wall_time: float, valid: np.ndarray | None,
           log: dict[str, Any], res: Any = None) -> Counterfactuals:
    """The :class:`Counterfactuals` of a baseline run."""
    return Counterfactuals(method=method, factuals=Xf, counterfactuals=cf,
                           counterfactuals_original=original(schema, cf, factuals_in), target=target,
                           queries=int(queries), wall_time=float(wall_time), valid=valid, log=log, result=res)


__all__ = ["SEARCH_BUDGET", "Search", "class_targets", "encode_factuals", "encode_factuals_and_targets",
           "encode_train", "member_votes", "mutable_mask", "original", "positive", "resolve_schema", "result",
           "valid_points"]
