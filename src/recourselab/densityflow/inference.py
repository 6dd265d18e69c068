"""DensityFlow inference: batched ODE solves from jittered starts, the result type and the
common method interface (:class:`InferenceMixin` of :class:`~recourselab.densityflow.DensityFlow`).
"""

from __future__ import annotations

import dataclasses
import logging
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import torch

from recourselab.densityflow.config import class_labels, is_int
from recourselab.densityflow.ode import integrate
from recourselab.errors import (
    DataError,
)
from recourselab.methods.base import Counterfactuals
from recourselab.models.verdict import VERIFY_BUDGET, Verdict, as_oracle, require_budget, verify
from recourselab.rng import torch_generator

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CounterfactualResult:
    """Counterfactuals of ``n`` queries.

    Attributes
    ----------
    factuals, counterfactuals : (n, d) encoded rows.
    counterfactuals_original : DataFrame (n, p) in original units and categories (None without schema).
    target : (n,) target classes y*.
    cost_l1, cost_l2 : (n,) distances in the encoded (standardized) space.
    density : (n,) worst-case density score S(x' | y*).
    surrogate_valid : (n,) bool, both proxies label x' as y*.
    trajectories : (n_points, n, d) ODE path of the chosen start, or None. It starts at that
        start (the factual or one of its jitters) and ends at the raw end state, before the
        clamping to the noise box, the snapping to valid points, the monotone rules (a feature that
        moved the forbidden way takes its factual value) and the immutable copy that give
        ``counterfactuals``.
    verdict : the ensemble's verdict on the counterfactuals (per-model validity, agreement),
        or None when no oracle checked them (see :meth:`verify`).
    """

    factuals: np.ndarray
    counterfactuals: np.ndarray
    counterfactuals_original: pd.DataFrame | None
    target: np.ndarray
    cost_l1: np.ndarray
    cost_l2: np.ndarray
    density: np.ndarray
    surrogate_valid: np.ndarray
    trajectories: np.ndarray | None = None
    verdict: Verdict | None = None

    def verify(self, oracle: Any, *, budget_name: str = VERIFY_BUDGET) -> CounterfactualResult:
        """This result with the ensemble's verdict on its counterfactuals.

        One query of the n counterfactuals through ``oracle`` (a
        :class:`~recourselab.models.BlackBox`, a mapping of named models or one model), counted
        under its budget ``budget_name``. Rows that some member rejects are logged as a warning
        with their counts.

        Raises
        ------
        QueryBudgetExceeded
            The budget has fewer than n rows left (no member is called).
        """
        verdict = verify(oracle, self.counterfactuals, self.target, budget_name=budget_name)
        _log_rejections(verdict)
        return dataclasses.replace(self, verdict=verdict)


def _log_rejections(verdict: Verdict) -> None:
    """A warning with counts when some member rejects some of the verdict's counterfactuals."""
    c = verdict.counts()
    if c["rejected_by_any"]:
        log.warning("%d of %d counterfactuals are rejected by at least one of the %d ensemble members; %d by a "
                    "majority, %d by all (mean agreement %.2f); see the result's verdict for each row",
                    c["rejected_by_any"], c["n"], verdict.n_members, c["rejected_by_majority"],
                    c["rejected_by_all"], c["mean_agreement"])


class InferenceMixin:
    """:meth:`generate` and :meth:`explain` of :class:`~recourselab.densityflow.DensityFlow`."""

    def default_target(self, n: int) -> np.ndarray:
        """The schema's favourable class for every row (the ``target=None`` of :meth:`generate`)."""
        if self.schema is None:
            raise DataError("target=None needs a schema (its favourable class); pass target explicitly")
        return np.full(n, self.schema.favourable_index, dtype=np.int64)

    name = "densityflow"

    def explain(self, factuals: np.ndarray | pd.DataFrame, target: np.ndarray | int | None = None, *,
                budget: int | None = None, oracle: Any = None,
                budget_name: str = VERIFY_BUDGET) -> Counterfactuals:
        """:meth:`generate` behind the common method interface.

        The search queries no model (``queries`` 0, so any ``budget`` holds); with ``oracle`` the n
        rows are verified (one query under ``budget_name``) and ``valid`` is unanimous validity.
        The :class:`CounterfactualResult` is the result's ``result``.
        """
        t0 = time.perf_counter()
        res = self.generate(factuals, target, oracle=oracle, budget_name=budget_name)
        counts = res.verdict.counts() if res.verdict is not None else {}
        return Counterfactuals(
            method=self.name, factuals=res.factuals, counterfactuals=res.counterfactuals,
            counterfactuals_original=res.counterfactuals_original, target=res.target, queries=0,
            wall_time=time.perf_counter() - t0, valid=None if res.verdict is None else res.verdict.unanimous,
            verdict=res.verdict, log={"surrogate_valid": float(res.surrogate_valid.mean()),
                                      "mean_density": float(res.density.mean())} | counts, result=res)

    @torch.no_grad()
    def generate(self, factuals: np.ndarray | pd.DataFrame, target: np.ndarray | int | None = None, *,
                 return_trajectories: bool = False, n_points: int = 20, oracle: Any = None,
                 budget_name: str = VERIFY_BUDGET) -> CounterfactualResult:
        """Counterfactuals for ``factuals`` (n, d) towards ``target`` (n,) or one class.

        ``n_starts`` starts per query (the query itself and Gaussian jitters on mutable
        coordinates, the same offsets for every query) are integrated in batched solves of
        ``solve_queries`` queries each;
        the closest (L2) end state that both proxies label ``target`` is kept, else the closest
        overall. With a schema, end states are snapped to valid points (categorical levels,
        integers) and immutable columns are copied from the factuals.

        Parameters
        ----------
        factuals : encoded rows (n, d), or a raw DataFrame with a schema (its index is kept
            in ``counterfactuals_original``).
        target : class index per row (n,) or one for all. ``None``: the schema's favourable
            class for every row (recourse towards the favourable outcome). Rows the surrogate
            already labels as their target are logged, whichever way the target was given:
            their "counterfactual" is a move further into that class. For binary data pass
            the other class of each row's label to flip every row.
        return_trajectories : also return each query's ODE path.
        n_points : points per path (an integer >= 2), evenly spaced in ODE time.
        oracle : the ensemble (a :class:`~recourselab.models.BlackBox`, a mapping of named models
            or one model) that checks the counterfactuals: the result then carries its
            ``verdict`` (per-model validity and agreement, :meth:`CounterfactualResult.verify`),
            and rows that some member rejects are logged as a warning with counts. None: no
            check, no query.
        budget_name : the oracle budget that the n verification rows count against; one that
            cannot take them raises before any work is done.

        Returns
        -------
        CounterfactualResult

        Raises
        ------
        QueryBudgetExceeded
            ``budget_name`` of ``oracle`` has fewer than n rows left.
        """
        self._require_fit()
        cfg = self.config
        if not is_int(n_points) or n_points < 2:
            raise DataError(f"n_points must be an integer >= 2 (path points), got {n_points!r}")
        n_points = int(n_points)
        X = self._encode(factuals, "factuals")
        n, d = X.shape
        if n == 0:
            raise DataError("generate: no factual rows")
        if oracle is not None:
            oracle = as_oracle(oracle)
            require_budget(oracle, n, budget_name)  # before the solves, not after them
        if target is None:
            tgt = self.default_target(n)
        else:
            t = np.asarray(target)
            tgt = class_labels(np.full(n, t) if t.ndim == 0 else t, n, "generate target", self.n_classes)
        already = int((self.surrogate.labels(self._tensor(X)).cpu().numpy() == tgt).sum())
        if already:
            log.warning("generate: %d of %d factual rows are already labelled their target class by the surrogate; "
                        "the flow was trained to change the class, so their counterfactuals are moves further "
                        "into it (cost > 0)%s", already, n,
                        "; pass target= to choose the class per row" if target is None else "")
        gen = torch_generator("densityflow.generate", cfg.seed)
        # One set of N offsets for every query, so a query's starts do not depend on the batch (the
        # adaptive solver's steps do, within its tolerance: a snapped integer can differ by one unit).
        jit = torch.randn(cfg.n_starts, d, generator=gen).to(self.device) * cfg.jitter * self.field.mutable
        jit[0] = 0.0
        chunks = [self._solve(X[i:i + cfg.solve_queries], tgt[i:i + cfg.solve_queries], jit,
                              n_points if return_trajectories else None)
                  for i in range(0, n, cfg.solve_queries)]
        cf = np.concatenate([c[0] for c in chunks])
        ok = np.concatenate([c[1] for c in chunks])
        traj = np.concatenate([c[2] for c in chunks], axis=1) if return_trajectories else None
        density = self.surrogate.score(self._tensor(cf), torch.as_tensor(tgt, device=self.device)).cpu().numpy()
        original = None
        if self.schema is not None:
            original = self.schema.inverse_transform(cf)
            if isinstance(factuals, pd.DataFrame):
                original.index = factuals.index
        result = CounterfactualResult(
            factuals=X, counterfactuals=cf, counterfactuals_original=original,
            target=tgt, cost_l1=np.abs(cf - X).sum(1), cost_l2=np.linalg.norm(cf - X, axis=1),
            density=density.astype(float), surrogate_valid=ok, trajectories=traj)
        return result if oracle is None else result.verify(oracle, budget_name=budget_name)

    def _solve(self, X: np.ndarray, tgt: np.ndarray, jit: torch.Tensor,
               n_points: int | None) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        """One batched solve of :meth:`generate` for queries ``X`` (m, d) towards ``tgt`` (m,).

        Returns the chosen end states (m, d), whether the surrogate labels them their target
        (m,) and, with ``n_points``, their paths (n_points, m, d); ``jit`` (N, d) holds the offsets.
        """
        cfg = self.config
        (m, d), N = X.shape, len(jit)
        starts = (self._tensor(X)[:, None, :] + jit).reshape(m * N, d)
        targets = torch.as_tensor(np.repeat(tgt, N), device=self.device)
        try:
            z, _, path = integrate(self.field, starts, targets, rtol=cfg.rtol_test, atol=cfg.atol_test,
                                   method=cfg.method, n_points=n_points or 2)
        except AssertionError as e:  # torchdiffeq's adaptive solvers assert on a vanishing step
            if "underflow in dt" not in str(e):
                raise
            raise DataError(f"the flow's ODE solve diverged ({cfg.method}: step size underflow) on a batch of {m} "
                            f"queries; the velocity field is NaN or stiff there (re-run train_flow if its weights "
                            f"are damaged, or pass fewer queries per solve with solve_queries)") from e
        if not torch.isfinite(z).all():
            bad = int((~torch.isfinite(z)).any(dim=1).reshape(m, N).any(dim=1).sum())
            raise DataError(f"the flow's ODE solve diverged (NaN or infinite end states) for {bad} of {m} "
                            f"queries; the model's weights may be damaged (re-run train_flow)")
        z = z.clamp(-self.C, self.C).cpu().numpy().astype(float)
        mutable = self.field.mutable.cpu().numpy().astype(bool)
        starts_X = np.repeat(X, N, axis=0)
        if self.schema is not None:
            z = self.schema.snap(z)
        sign = self.field.monotone.cpu().numpy()  # a jittered start may lie on the forbidden side
        z = np.where(sign > 0, np.maximum(z, starts_X), np.where(sign < 0, np.minimum(z, starts_X), z))
        z[:, ~mutable] = starts_X[:, ~mutable]
        ok = (self.surrogate.labels(self._tensor(z)) == targets).cpu().numpy().reshape(m, N)
        l2 = np.linalg.norm(z.reshape(m, N, d) - X[:, None, :], axis=2)
        choice = np.where(ok.any(1), np.where(ok, l2, np.inf).argmin(1), l2.argmin(1))
        rows = np.arange(m) * N + choice
        traj = None
        if n_points is not None:
            traj = path[:, torch.as_tensor(rows, device=path.device)].cpu().numpy().astype(float)
        return z[rows], ok[np.arange(m), choice], traj
