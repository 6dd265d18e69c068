"""The ensemble's verdict on counterfactuals: per-model validity and agreement, queried through a BlackBox.

Typical use::

    verdict = verify(box, counterfactuals, target)      # one query of n rows, budget "verify"
    verdict.agreement            # (n,) share of members predicting each row's target
    verdict.frame()              # one row per counterfactual: valid__<member>, agreement, ...
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from recourselab.errors import DataError
from recourselab.models.oracle import BlackBox, EnsembleOutput, Predictor, QueryBudgetExceeded

#: The oracle budget that verification queries count against unless the caller names another.
VERIFY_BUDGET = "verify"


@dataclass(frozen=True)
class Verdict:
    """What each member of an ensemble says about ``n`` counterfactuals with targets.

    Attributes
    ----------
    member_names : tuple of M member names, in ensemble order.
    member_labels : (n, M) int64, the class each member predicts for each counterfactual.
    target : (n,) int64, the class each counterfactual should get.
    queries : rows this verdict charged to the oracle (n, or 0 when built from an earlier query).
    budget_name : the oracle budget those rows were counted under.
    """

    member_names: tuple[str, ...]
    member_labels: np.ndarray
    target: np.ndarray
    queries: int = 0
    budget_name: str = VERIFY_BUDGET

    def __post_init__(self) -> None:
        n = len(self.target)
        if self.member_labels.shape != (n, len(self.member_names)):
            raise DataError(f"member_labels must have shape (n={n}, M={len(self.member_names)}), "
                            f"got {self.member_labels.shape}")

    @classmethod
    def from_output(cls, output: EnsembleOutput, target: Any, *, queries: int = 0,
                    budget_name: str = VERIFY_BUDGET) -> Verdict:
        """The verdict of ``output`` (members' answers on n rows) for targets ``target`` (n,) or one class."""
        n = output.member_proba.shape[1]
        t = np.asarray(target)
        t = np.full(n, t) if t.ndim == 0 else t
        if t.shape != (n,) or not np.issubdtype(t.dtype, np.integer) or ((t < 0) | (t >= output.n_classes)).any():
            raise DataError(f"verdict targets must be {n} class indices in range({output.n_classes}), got shape "
                            f"{t.shape} and values {np.unique(t)[:5].tolist()}")
        return cls(member_names=output.member_names, member_labels=output.member_labels.T.copy(),
                   target=t.astype(np.int64), queries=int(queries), budget_name=budget_name)

    @property
    def n_members(self) -> int:
        return len(self.member_names)

    @property
    def member_valid(self) -> np.ndarray:
        """Whether each member labels each counterfactual its target. Shape (n, M), bool."""
        return self.member_labels == self.target[:, None]

    @property
    def agreement(self) -> np.ndarray:
        """Share of members predicting each row's target. Shape (n,), float64 in [0, 1]."""
        return self.member_valid.mean(axis=1)

    @property
    def unanimous(self) -> np.ndarray:
        """Every member labels the row its target. Shape (n,), bool."""
        return self.member_valid.all(axis=1)

    @property
    def majority(self) -> np.ndarray:
        """More than half of the members label the row its target (a tie is not valid). Shape (n,), bool."""
        return 2 * self.member_valid.sum(axis=1) > self.n_members

    @property
    def rejected_by_majority(self) -> np.ndarray:
        """More than half of the members label the row another class. Shape (n,), bool."""
        return 2 * (~self.member_valid).sum(axis=1) > self.n_members

    def per_model(self) -> dict[str, np.ndarray]:
        """Member name -> whether it labels each counterfactual its target, (n,) bool."""
        return {name: self.member_valid[:, m] for m, name in enumerate(self.member_names)}

    def counts(self) -> dict[str, Any]:
        """Row counts: ``n``, ``rejected_by_any`` (some member), ``rejected_by_majority``,
        ``rejected_by_all``, ``mean_agreement`` and ``valid_per_model`` (name -> rows it accepts)."""
        valid = self.member_valid
        return {"n": int(len(self.target)), "rejected_by_any": int((~self.unanimous).sum()),
                "rejected_by_majority": int(self.rejected_by_majority.sum()),
                "rejected_by_all": int((~valid.any(axis=1)).sum()),
                "mean_agreement": float(self.agreement.mean()) if len(self.target) else float("nan"),
                "valid_per_model": {name: int(v.sum()) for name, v in self.per_model().items()}}

    def frame(self, index: pd.Index | None = None) -> pd.DataFrame:
        """One row per counterfactual: ``valid__<member>`` per member, ``agreement``,
        ``valid_unanimous`` and ``valid_majority``."""
        columns: dict[str, Any] = {f"valid__{name}": v for name, v in self.per_model().items()}
        columns |= {"agreement": self.agreement, "valid_unanimous": self.unanimous, "valid_majority": self.majority}
        return pd.DataFrame(columns, index=index)


def as_oracle(oracle: BlackBox | Mapping[str, Predictor] | Predictor) -> BlackBox:
    """``oracle`` itself when it is a BlackBox; a mapping of members or one model wrapped in one."""
    if isinstance(oracle, BlackBox):
        return oracle
    if isinstance(oracle, Mapping):
        return BlackBox(oracle)
    if isinstance(oracle, Predictor):
        return BlackBox({type(oracle).__name__: oracle})
    raise TypeError(f"the oracle must be a recourselab BlackBox, a mapping of named models or one model with "
                    f"predict_proba, got {type(oracle).__name__}")


def require_budget(oracle: BlackBox, n: int, budget_name: str = VERIFY_BUDGET) -> None:
    """Raise :class:`QueryBudgetExceeded` when budget ``budget_name`` of ``oracle`` has fewer than ``n`` rows left."""
    left = oracle.remaining(budget_name)
    if left is not None and left < n:
        raise QueryBudgetExceeded(f"verifying {n} counterfactuals needs {n} rows of the oracle's query budget "
                                  f"{budget_name!r}, but only {left} are left ({oracle.used(budget_name)} used); "
                                  f"raise it (oracle.set_budget({budget_name!r}, ...)) or verify fewer rows")


def verify(oracle: BlackBox | Mapping[str, Predictor] | Predictor, X: np.ndarray | pd.DataFrame, target: Any, *,
           budget_name: str = VERIFY_BUDGET) -> Verdict:
    """The ensemble's verdict on counterfactuals ``X`` (n, d) for ``target`` (n,) or one class.

    One query of the n rows, counted under ``budget_name``; a budget that cannot take them
    raises before any member is called.

    Raises
    ------
    QueryBudgetExceeded
        Fewer than n rows left in ``budget_name``.
    DataError
        Bad rows (see :meth:`BlackBox.query`) or targets that are not class indices of the ensemble.
    """
    box = as_oracle(oracle)
    n = len(X)
    require_budget(box, n, budget_name)
    output = box.query(X, budget=budget_name)
    return Verdict.from_output(output, target, queries=n, budget_name=budget_name)


__all__ = ["VERIFY_BUDGET", "Verdict", "as_oracle", "require_budget", "verify"]
