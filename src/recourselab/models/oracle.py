"""The ``BlackBox`` oracle: every query to a fitted model or ensemble goes through it.

A ``BlackBox`` wraps named members (anything with ``predict_proba``), validates inputs
(encoded arrays or raw DataFrames encoded through a :class:`~recourselab.data.schema.Schema`)
and counts queried rows in named budgets. One call counts each of its rows once, whatever
the number of members. A query that would exceed its budget raises
:class:`QueryBudgetExceeded` before any member is called; the check-and-reserve step holds a
lock, so concurrent callers never exceed a budget in total.
"""

from __future__ import annotations

import logging
import operator
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np
import pandas as pd

from recourselab.data.rows import encode_rows
from recourselab.data.schema import Schema
from recourselab.errors import DataError, RecourselabError, UnknownKeyError

logger = logging.getLogger(__name__)

DEFAULT_BUDGET = "default"


class QueryBudgetExceeded(RecourselabError, RuntimeError):
    """A query that would take a budget past its limit (raised before any model is called)."""


class UnknownMemberError(UnknownKeyError):
    """A member name that the ensemble does not hold."""


@runtime_checkable
class Predictor(Protocol):
    """Any fitted classifier: ``predict_proba(X (n, d)) -> (n, K)`` class probabilities."""

    def predict_proba(self, X: np.ndarray) -> np.ndarray: ...


@dataclass(frozen=True)
class EnsembleOutput:
    """Per-member class probabilities of one query, with ensemble summaries.

    Attributes
    ----------
    member_names : tuple of str, length M, in ensemble order.
    member_proba : ndarray of shape (M, n, K).
    """

    member_names: tuple[str, ...]
    member_proba: np.ndarray

    def __post_init__(self) -> None:
        if self.member_proba.ndim != 3 or self.member_proba.shape[0] != len(self.member_names):
            raise DataError(f"member_proba must have shape (M={len(self.member_names)}, n, K), "
                            f"got {self.member_proba.shape}")

    @property
    def n_classes(self) -> int:
        return self.member_proba.shape[2]

    @property
    def mean_proba(self) -> np.ndarray:
        """Mean class probability over members. Shape (n, K)."""
        return self.member_proba.mean(axis=0)

    @property
    def member_labels(self) -> np.ndarray:
        """Predicted label (argmax) of every member. Shape (M, n), int64."""
        return self.member_proba.argmax(axis=2).astype(np.int64)

    @property
    def mean_label(self) -> np.ndarray:
        """Argmax of the mean probability. Shape (n,), int64."""
        return self.mean_proba.argmax(axis=1).astype(np.int64)

    @property
    def majority(self) -> np.ndarray:
        """Most frequent member label; ties go to the smallest label index. Shape (n,), int64."""
        return self.vote_counts().argmax(axis=1).astype(np.int64)

    @property
    def unanimous(self) -> np.ndarray:
        """The label where all members agree, else -1. Shape (n,), int64."""
        labels = self.member_labels
        agree = (labels == labels[0]).all(axis=0)
        return np.where(agree, labels[0], -1).astype(np.int64)

    def vote_counts(self) -> np.ndarray:
        """Number of members voting for each class. Shape (n, K), int64."""
        labels = self.member_labels
        return (labels[:, :, None] == np.arange(self.n_classes)).sum(axis=0).astype(np.int64)

    def agreement(self, target: int | np.ndarray) -> np.ndarray:
        """Fraction of members predicting ``target`` on each row.

        Parameters
        ----------
        target : int, or ndarray of shape (n,) with one target label per row.

        Returns
        -------
        ndarray of shape (n,), float64, in [0, 1].
        """
        labels = self.member_labels
        target = np.asarray(target)
        if target.ndim not in (0, 1) or (target.ndim == 1 and target.shape[0] != labels.shape[1]):
            raise DataError(f"target must be an int or an array of shape ({labels.shape[1]},), "
                            f"got shape {target.shape}")
        if not np.issubdtype(target.dtype, np.integer) or ((target < 0) | (target >= self.n_classes)).any():
            raise DataError(f"target must hold class indices in range({self.n_classes}), got "
                            f"{np.unique(target)[:5].tolist()}")
        return (labels == target).mean(axis=0)


class _Ledger:
    """Row counters and limits per budget name, shared by a BlackBox and its member views."""

    def __init__(self, limits: Mapping[str, int]) -> None:
        self.lock = threading.Lock()
        self.used: dict[str, int] = {}
        self.limits: dict[str, int] = {}
        for name, limit in limits.items():
            self.set_limit(name, limit)

    def set_limit(self, name: str, limit: int | None) -> None:
        with self.lock:
            if limit is None:
                self.limits.pop(name, None)
                return
            if isinstance(limit, bool):
                raise DataError(f"budget {name!r}: limit must be a non-negative int, got {limit!r}")
            try:
                value = operator.index(limit)
            except TypeError as err:
                raise DataError(f"budget {name!r}: limit must be a non-negative int, got {limit!r}") from err
            if value < 0:
                raise DataError(f"budget {name!r}: limit must be a non-negative int, got {limit!r}")
            self.limits[name] = value

    def reserve(self, name: str, n: int) -> int:
        """Atomically add ``n`` rows to ``name`` or raise; returns the new count."""
        with self.lock:
            used = self.used.get(name, 0)
            limit = self.limits.get(name)
            if limit is not None and used + n > limit:
                raise QueryBudgetExceeded(
                    f"query budget {name!r} exceeded: limit {limit} rows, {used} already used, "
                    f"{n} requested ({limit - used if limit > used else 0} remaining)")
            self.used[name] = used + n
            return used + n


class BlackBox:
    """Query-counted oracle over one fitted model or an ensemble.

    Parameters
    ----------
    members : mapping name -> Predictor, non-empty; order is kept.
    schema : encodes raw DataFrame queries and fixes the expected input width
        (``schema.n_encoded``) and number of classes (``schema.n_classes``).
    budgets : mapping budget name -> limit in rows. Names without a limit are counted
        but unlimited.

    Notes
    -----
    Rows are reserved before the members are called; a query whose members then fail
    still counts (the rows were sent).
    """

    def __init__(
        self,
        members: Mapping[str, Predictor],
        *,
        schema: Schema | None = None,
        budgets: Mapping[str, int] | None = None,
    ) -> None:
        if not members:
            raise DataError("BlackBox needs at least one member, got an empty mapping")
        for name, model in members.items():
            if not isinstance(model, Predictor):
                raise TypeError(f"member {name!r} ({type(model).__name__}) has no predict_proba method")
        self._members: dict[str, Predictor] = dict(members)
        self.schema = schema
        self._ledger = _Ledger(budgets or {})

    # ------------------------------------------------------------------ members
    @property
    def member_names(self) -> tuple[str, ...]:
        return tuple(self._members)

    @property
    def n_members(self) -> int:
        return len(self._members)

    def member(self, name: str) -> BlackBox:
        """A BlackBox over member ``name`` alone, sharing this oracle's counters and budgets."""
        if name not in self._members:
            raise UnknownMemberError(f"unknown member {name!r}; valid members: {list(self._members)}")
        view = BlackBox({name: self._members[name]}, schema=self.schema)
        view._ledger = self._ledger
        return view

    def model(self, name: str) -> Predictor:
        """Member ``name`` itself (white-box use, e.g. gradients; its calls are not counted)."""
        if name not in self._members:
            raise UnknownMemberError(f"unknown member {name!r}; valid members: {list(self._members)}")
        return self._members[name]

    def __repr__(self) -> str:
        return f"BlackBox(members={list(self._members)}, queries={self.queries})"

    # ------------------------------------------------------------------ budgets
    def set_budget(self, name: str, limit: int | None) -> None:
        """Set (or, with ``None``, remove) the row limit of budget ``name``."""
        self._ledger.set_limit(name, limit)

    def used(self, name: str = DEFAULT_BUDGET) -> int:
        """Rows already queried under budget ``name``."""
        with self._ledger.lock:
            return self._ledger.used.get(name, 0)

    def remaining(self, name: str = DEFAULT_BUDGET) -> int | None:
        """Rows left under budget ``name`` (never negative), or ``None`` when unlimited."""
        with self._ledger.lock:
            limit = self._ledger.limits.get(name)
            return None if limit is None else max(limit - self._ledger.used.get(name, 0), 0)

    @property
    def queries(self) -> dict[str, int]:
        """Copy of the row counters, budget name -> rows queried."""
        with self._ledger.lock:
            return dict(self._ledger.used)

    # ------------------------------------------------------------------ queries
    def _encode(self, X: np.ndarray | pd.DataFrame) -> np.ndarray:
        width = None
        if self.schema is None:  # the members' own input width, where they know it (fitted zoo models do)
            widths = {int(m.n_features) for m in self._members.values() if hasattr(m, "n_features")}
            width = widths.pop() if len(widths) == 1 else None
        return encode_rows(X, self.schema, what="query", width=width)

    def query(self, X: np.ndarray | pd.DataFrame, *, budget: str = DEFAULT_BUDGET) -> EnsembleOutput:
        """Query every member once on rows ``X``, counting ``n`` rows under ``budget``.

        Parameters
        ----------
        X : encoded ndarray of shape (n, d), or a raw DataFrame in original units (needs a schema).
        budget : name of the budget the rows count against.

        Returns
        -------
        EnsembleOutput with ``member_proba`` of shape (M, n, K).

        Raises
        ------
        DataError
            Not 2-D, wrong width, non-finite values, DataFrame without schema, bad member output,
            0 rows without a schema (with one, 0 rows give an empty output and count nothing).
        QueryBudgetExceeded
            ``used + n > limit``; no member is called and the counter is unchanged.
        """
        X = self._encode(X)
        n = X.shape[0]
        if n == 0:  # estimators reject empty inputs; nothing is sent, nothing is counted
            if self.schema is None:
                raise DataError("cannot query 0 rows without a schema (the number of classes is unknown)")
            return EnsembleOutput(member_names=self.member_names,
                                  member_proba=np.zeros((self.n_members, 0, self.schema.n_classes)))
        total = self._ledger.reserve(budget, n)
        logger.debug("query budget=%r rows=%d members=%d used=%d limit=%s", budget, n, self.n_members,
                     total, self._ledger.limits.get(budget))
        probas = [self._call(name, model, X) for name, model in self._members.items()]
        ks = {p.shape[1] for p in probas}
        if len(ks) > 1:
            raise DataError(f"members disagree on the number of classes: "
                            f"{ {name: p.shape[1] for name, p in zip(self._members, probas, strict=True)} }")
        return EnsembleOutput(member_names=self.member_names, member_proba=np.stack(probas))

    def _call(self, name: str, model: Predictor, X: np.ndarray) -> np.ndarray:
        proba = np.asarray(model.predict_proba(X), dtype=float)
        if proba.ndim != 2 or proba.shape[0] != X.shape[0]:
            raise DataError(f"member {name!r} returned probabilities of shape {proba.shape}, "
                            f"expected ({X.shape[0]}, K)")
        if self.schema is not None and proba.shape[1] != self.schema.n_classes:
            raise DataError(f"member {name!r} returned {proba.shape[1]} classes, the schema of dataset "
                            f"{self.schema.dataset!r} has {self.schema.n_classes}")
        bad = ~np.isfinite(proba) | (proba < 0.0) | (proba > 1.0)
        if bad.any():
            rows = np.flatnonzero(bad.any(axis=1))
            raise DataError(f"member {name!r} returned probabilities outside [0, 1] or NaN in {len(rows)} rows, "
                            f"e.g. rows {rows[:5].tolist()}")
        return proba

    def predict_proba(self, X: np.ndarray | pd.DataFrame, *, budget: str = DEFAULT_BUDGET) -> np.ndarray:
        """Mean class probability over members (one query). Shape (n, K)."""
        return self.query(X, budget=budget).mean_proba

    def predict(self, X: np.ndarray | pd.DataFrame, *, budget: str = DEFAULT_BUDGET) -> np.ndarray:
        """Argmax of the mean probability (one query). Shape (n,), int64."""
        return self.query(X, budget=budget).mean_label

    def member_proba(self, X: np.ndarray | pd.DataFrame, *,
                     budget: str = DEFAULT_BUDGET) -> dict[str, np.ndarray]:
        """Class probabilities of each member (one query): name -> ndarray (n, K)."""
        out = self.query(X, budget=budget)
        return dict(zip(out.member_names, out.member_proba, strict=True))


__all__ = [
    "DEFAULT_BUDGET", "BlackBox", "EnsembleOutput", "Predictor", "QueryBudgetExceeded",
    "UnknownMemberError",
]
