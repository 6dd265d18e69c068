"""One scoring code for every recourse method: validity under the ensemble, cost, plausibility, queries.

Typical use::

    cf = method.explain(X_query, target)                  # a Counterfactuals
    verdict = verify(box, cf.counterfactuals, cf.target)  # the ensemble's verdict
    score = score_counterfactuals(cf, verdict, X_train=X, y_train=y, immutable=schema.immutable_mask(),
                                  monotone=schema.monotone_signs(), setting="default", seed=0)
    score.row()            # one row of the methods table (TABLE_KEYS)
    rows_frame(cf, verdict, setting="default", seed=0)   # one row per counterfactual
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from recourselab.errors import DataError
from recourselab.methods.base import Counterfactuals
from recourselab.metrics.plausibility import inlier_rates
from recourselab.models.verdict import Verdict

#: Numeric columns of the methods table, in order (each also appears with a ``_std`` suffix over seeds).
TABLE_KEYS = ("validity_mean", "validity_unanimous", "validity_majority", "cost_l1", "cost_l2",
              "plausibility_lof", "plausibility_iforest", "immutable_violations", "monotone_violations", "queries",
              "wall_time_s")
#: Columns of the per-counterfactual table (``rows.parquet``).
ROW_COLUMNS = ("method", "setting", "seed", "row", "valid_unanimous", "agreement", "cost_l1", "cost_l2")


@dataclass(frozen=True)
class RecourseScore:
    """The scores of one method, at one setting, on one seed's query set of ``n`` rows.

    Attributes
    ----------
    method, setting : the method's registry name and the name of its setting.
    seed : the seed of the run.
    n : rows scored.
    validity_per_model : member name -> share of counterfactuals it labels their target.
    validity_mean : mean of the per-model shares (the paper's headline).
    validity_unanimous, validity_majority : share of rows every member / more than half of them label the target.
    cost_l1, cost_l2 : mean distance from the factual in the encoded space.
    plausibility_lof, plausibility_iforest : share of counterfactuals that LOF / IsolationForest, fitted on the
        training rows of their target class, call inliers (NaN when not computed).
    immutable_violations : rows whose immutable columns differ from the factual (0 for a correct method).
    monotone_violations : rows where a monotone feature moved the forbidden way (0 for a correct method).
    queries : oracle rows the method's search used.
    wall_time_s : seconds of the method's search.
    """

    method: str
    setting: str
    seed: int
    n: int
    validity_per_model: dict[str, float]
    validity_mean: float
    validity_unanimous: float
    validity_majority: float
    cost_l1: float
    cost_l2: float
    plausibility_lof: float
    plausibility_iforest: float
    immutable_violations: int
    monotone_violations: int
    queries: int
    wall_time_s: float
    extra: dict[str, Any] = field(default_factory=dict)

    def row(self) -> dict[str, Any]:
        """``method``, ``setting``, ``seed``, ``n`` and every :data:`TABLE_KEYS` value (JSON-safe)."""
        return {"method": self.method, "setting": self.setting, "seed": self.seed, "n": self.n,
                **{k: _plain(getattr(self, k)) for k in TABLE_KEYS}}


def _plain(v: Any) -> Any:
    return int(v) if isinstance(v, (int, np.integer)) else float(v)


def immutable_violations(factuals: np.ndarray, counterfactuals: np.ndarray, immutable: np.ndarray) -> int:
    """Rows of ``counterfactuals`` (n, d) whose ``immutable`` columns ((d,) bool mask) differ from ``factuals``."""
    immutable = np.asarray(immutable, dtype=bool)
    if immutable.shape != (factuals.shape[1],):
        raise DataError(f"the immutable mask has shape {immutable.shape}; the rows have {factuals.shape[1]} columns")
    if not immutable.any():
        return 0
    return int((~np.isclose(counterfactuals[:, immutable], factuals[:, immutable], rtol=0.0, atol=1e-9))
               .any(axis=1).sum())


def monotone_violations(factuals: np.ndarray, counterfactuals: np.ndarray, signs: np.ndarray) -> int:
    """Rows of ``counterfactuals`` (n, d) where a column with sign +1 fell below, or one with sign -1
    rose above, its ``factuals`` value beyond 1e-9 (``signs``: (d,) of -1, 0, +1, as
    :meth:`~recourselab.data.schema.Schema.monotone_signs`)."""
    signs = np.asarray(signs)
    if signs.shape != (factuals.shape[1],):
        raise DataError(f"the monotone signs have shape {signs.shape}; the rows have {factuals.shape[1]} columns")
    ruled = signs != 0
    if not ruled.any():
        return 0
    wrong = (factuals[:, ruled] - counterfactuals[:, ruled]) * signs[ruled] > 1e-9
    return int(wrong.any(axis=1).sum())


def _check_pair(cf: Counterfactuals, verdict: Verdict) -> None:
    if len(verdict.target) != len(cf):
        raise DataError(f"{cf.method}: the verdict covers {len(verdict.target)} rows, the counterfactuals {len(cf)}")
    if len(cf) == 0:
        raise DataError(f"{cf.method}: nothing to score (0 counterfactuals)")


def score_counterfactuals(cf: Counterfactuals, verdict: Verdict, *, immutable: np.ndarray,
                          monotone: np.ndarray | None = None, setting: str = "default", seed: int = 0,
                          X_train: np.ndarray | None = None, y_train: np.ndarray | None = None,
                          queries: int | None = None) -> RecourseScore:
    """Score one method's counterfactuals ``cf`` with the ensemble's ``verdict`` on them.

    Parameters
    ----------
    cf : the method's result on n rows.
    verdict : the ensemble's verdict on ``cf.counterfactuals`` for ``cf``'s targets (n rows).
    immutable : (d,) bool, the encoded columns that must not change.
    monotone : (d,) -1 / 0 / +1, the encoded columns that may only shrink / move freely / only grow
        (None: no rule).
    setting, seed : names of the run, kept in the score.
    X_train, y_train : (m, d) and (m,) training rows; with them, LOF and IsolationForest plausibility
        (else NaN).
    queries : the method's search queries when they differ from ``cf.queries`` (e.g. with upstream queries
        such as a distillation budget added).

    Raises
    ------
    DataError
        The verdict does not match the counterfactuals, or there are no rows.
    """
    _check_pair(cf, verdict)
    per_model = {name: float(v.mean()) for name, v in verdict.per_model().items()}
    lof = iforest = math.nan
    if X_train is not None and y_train is not None:
        rates = inlier_rates(cf.counterfactuals, verdict.target, X_train, y_train, seed=seed)
        lof, iforest = rates["lof_inlier_rate"], rates["iforest_inlier_rate"]
    return RecourseScore(
        method=cf.method, setting=setting, seed=int(seed), n=len(cf), validity_per_model=per_model,
        validity_mean=float(np.mean(list(per_model.values()))),
        validity_unanimous=float(verdict.unanimous.mean()), validity_majority=float(verdict.majority.mean()),
        cost_l1=float(cf.cost_l1.mean()), cost_l2=float(cf.cost_l2.mean()), plausibility_lof=float(lof),
        plausibility_iforest=float(iforest),
        immutable_violations=immutable_violations(cf.factuals, cf.counterfactuals, immutable),
        monotone_violations=0 if monotone is None else monotone_violations(cf.factuals, cf.counterfactuals,
                                                                            monotone),
        queries=int(cf.queries if queries is None else queries), wall_time_s=float(cf.wall_time))


def rows_frame(cf: Counterfactuals, verdict: Verdict, *, setting: str, seed: int) -> pd.DataFrame:
    """One row per counterfactual, columns :data:`ROW_COLUMNS` (``row``: position in the query set)."""
    _check_pair(cf, verdict)
    n = len(cf)
    return pd.DataFrame({"method": [cf.method] * n, "setting": [setting] * n, "seed": np.full(n, seed, np.int64),
                         "row": np.arange(n, dtype=np.int64), "valid_unanimous": verdict.unanimous,
                         "agreement": verdict.agreement, "cost_l1": cf.cost_l1, "cost_l2": cf.cost_l2})


def summarize_scores(scores: Sequence[RecourseScore]) -> list[dict[str, Any]]:
    """The methods table: one entry per (method, setting), each :data:`TABLE_KEYS` value as the mean over
    seeds and ``<key>_std`` the sample standard deviation (0 for one seed), plus ``seeds`` (how many).

    Entries keep the order in which each (method, setting) first appears.
    """
    groups: dict[tuple[str, str], list[RecourseScore]] = {}
    for s in scores:
        groups.setdefault((s.method, s.setting), []).append(s)
    table = []
    for (method, setting), group in groups.items():
        entry: dict[str, Any] = {"method": method, "setting": setting}
        for k in TABLE_KEYS:
            values = np.array([getattr(s, k) for s in group], dtype=float)
            finite = values[np.isfinite(values)]
            entry[k] = float(finite.mean()) if len(finite) else math.nan
            entry[f"{k}_std"] = float(finite.std(ddof=1)) if len(finite) > 1 else (0.0 if len(finite) else math.nan)
        entry["seeds"] = len(group)
        table.append(entry)
    return table


__all__ = ["ROW_COLUMNS", "TABLE_KEYS", "RecourseScore", "immutable_violations", "monotone_violations", "rows_frame",
           "score_counterfactuals", "summarize_scores"]
