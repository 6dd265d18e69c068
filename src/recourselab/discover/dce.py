"""DCE baseline: the original gradient solver of the same certified objective (differentiable models).

Each iteration computes the sorted matchings, UCLs and eta exactly as DISCOVER does, then
takes one gradient step on X of Q(X; mu, nu, eta) with the plans fixed (autograd through a
torch model for the output side, the closed form for the sliced input side). All rows and
all mutable features move at every step; immutable / fixed features never move, numerical
features stay in their (row-wise, actionable) bounds and phase pairs in [-1, 1]^2. The
returned iterate (best feasible under the final eta, else the last) is snapped to valid,
actionable points (:func:`snap_rows`: exact phase pairs of allowed levels, integers, row
bounds; entries that never moved keep their factual value) and certified **after** snapping.

Because gradients of a mean over rows are O(1/n), the step is ``X <- X - lr * n * grad``.
Memory: feasible iterates are kept (O(T n d)), which is fine for a baseline.
"""

from __future__ import annotations

import logging
import math
import numbers
import time
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from recourselab.data.schema import Schema
from recourselab.discover.certify import eta_rule, is_feasible
from recourselab.discover.metrics import ot_y
from recourselab.discover.ot import match, sorted_projections
from recourselab.discover.proposals import ProposalSpace
from recourselab.discover.result import (
    DiscoverResult,
    both_verdicts,
    original_frame,
    result_metrics,
    stop_level_reached,
)
from recourselab.discover.settings import DiscoverSettings
from recourselab.discover.setup import (
    NotCertifiedWarning,
    charge,
    checked_scores,
    default_target,
    directions_at,
    favourable_scores,
    input_threshold,
    prepare_run,
)
from recourselab.discover.targets import Target
from recourselab.errors import DataError
from recourselab.methods.base import Counterfactuals

logger = logging.getLogger(__name__)


class TorchClassifier:
    """A torch module returning logits (n, K), exposed as ``predict_proba`` (numpy) and differentiably.

    Parameters
    ----------
    module : ``torch.nn.Module`` mapping float32 rows (n, d) to logits (n, K).
    """

    def __init__(self, module: Any) -> None:
        self.module = module.eval()

    def proba_tensor(self, X: Any) -> Any:
        """Differentiable class probabilities of a tensor (n, d). Shape (n, K), same dtype as X."""
        import torch

        return torch.softmax(self.module(X.float()), dim=1).to(X.dtype)

    def predict_proba(self, X: np.ndarray) -> np.ndarray:
        """Class probabilities (n, K), float64."""
        import torch

        with torch.no_grad():
            return self.proba_tensor(torch.as_tensor(np.asarray(X, dtype=np.float32))).double().numpy()


def fit_torch_mlp(X: np.ndarray, y: np.ndarray, *, n_classes: int = 2, hidden: Sequence[int] = (32,),
                  epochs: int = 200, lr: float = 0.01, weight_decay: float = 1e-4,
                  seed: int = 0) -> TorchClassifier:
    """Fit a small ReLU MLP (full-batch Adam, cross-entropy) for the differentiable setting.

    Parameters
    ----------
    X : encoded rows (n, d); y : class indices (n,).
    """
    import torch

    from recourselab.runtime import torch_seeded

    layers: list[Any] = []
    width = X.shape[1]
    with torch_seeded(seed):  # the initial weights come from the seed, also with tasks in threads
        for hdim in hidden:
            layers += [torch.nn.Linear(width, hdim), torch.nn.ReLU()]
            width = hdim
        layers.append(torch.nn.Linear(width, n_classes))
    module = torch.nn.Sequential(*layers)
    opt = torch.optim.Adam(module.parameters(), lr=lr, weight_decay=weight_decay)
    Xt = torch.as_tensor(np.asarray(X, dtype=np.float32))
    yt = torch.as_tensor(np.array(y, dtype=np.int64))
    for _ in range(epochs):
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(module(Xt), yt)
        loss.backward()
        opt.step()
    return TorchClassifier(module)


class DCE:
    """Gradient DCE on a differentiable model, with DISCOVER's objective, certificate and eta rule.

    Parameters
    ----------
    model : a :class:`TorchClassifier` (or any object with ``proba_tensor`` and ``predict_proba``).
    schema : encoded layout.
    lr : step size per row (see module docstring). Default 0.05.
    max_iter : gradient steps T. Default: ``settings.max_iter`` when settings are given, else 100.
    settings : a :class:`DiscoverSettings` for the shared options (N, delta, alpha, U_x, U_y,
        eta interval, kappa, actionability, metrics, seed); keyword options override it. Without
        settings, the eta interval is the paper's [0.2, 1].
    """

    def __init__(self, model: Any, *, schema: Schema, lr: float = 0.05, max_iter: int | None = None,
                 settings: DiscoverSettings | None = None, **options: Any) -> None:
        if not hasattr(model, "proba_tensor"):
            raise TypeError(f"DCE needs a differentiable model with proba_tensor (e.g. TorchClassifier), "
                            f"got {type(model).__name__}")
        if not isinstance(schema, Schema):
            raise TypeError(f"schema must be a recourselab Schema (the encoded layout), got {type(schema).__name__}")
        if isinstance(lr, bool | np.bool_) or not isinstance(lr, numbers.Real) or not (math.isfinite(lr) and lr > 0):
            raise DataError(f"lr must be a finite number > 0, got {lr!r}")
        base = settings.to_dict() if settings is not None else {"max_iter": 100, "eta_r": 1.0}
        if max_iter is not None:
            base |= {"max_iter": max_iter}
        self.settings = DiscoverSettings.from_kwargs(**(base | options))
        self.model = model
        self.schema = schema
        self.lr = float(lr)
        self.queries = 0
        self._limit: int | None = None

    name = "dce"

    def _scores(self, X: np.ndarray) -> np.ndarray:
        self.queries = charge(self.queries, len(X), self._limit, "DCE")
        return favourable_scores(self.model, X, self.schema, self.settings.budget)  # shape and range checked

    def explain(self, factuals: np.ndarray | pd.DataFrame, target: Target | Mapping[str, Any] | str | None = None, *,
                budget: int | None = None) -> Counterfactuals:
        """:meth:`solve` behind the common method interface (see :meth:`Discover.explain`)."""
        self._limit = budget
        try:
            return self.solve(factuals, default_target(target, self.settings.seed)).to_counterfactuals()
        finally:
            self._limit = None

    def solve(self, factuals: np.ndarray | pd.DataFrame,
                target: Target | Mapping[str, Any] | str) -> DiscoverResult:
        """Run gradient DCE from the factuals; same inputs and result type as :meth:`Discover.solve`."""
        import torch

        t0 = time.perf_counter()
        s = self.settings
        self.queries = 0
        run = prepare_run(factuals, target, self.schema, s, self._scores)
        Xf, yf, tgt, ystar, theta, w = run.Xf, run.yf, run.target, run.ystar, run.theta, run.w
        ref_x, ref_y, U_x, U_y = run.ref_x, run.ref_y, run.U_x, run.U_y
        n, d = Xf.shape
        space = run.space
        frozen = ~space.mutable_mask
        lo = np.where(self.schema.categorical_mask(), -1.0, -np.inf) * np.ones((n, d))
        hi = np.where(self.schema.categorical_mask(), 1.0, np.inf) * np.ones((n, d))
        lo[:, space.num_cols], hi[:, space.num_cols] = space.row_lo, space.row_hi
        theta_t = torch.as_tensor(theta)
        fav = self.schema.favourable_index

        X = Xf.copy()
        left, right = s.eta_l, s.eta_r
        records, kept = [], {}
        eta = left
        for t in range(s.max_iter + 1):
            if t > 0 and s.resample_directions:
                theta = directions_at(d, s, t)
                ref_x, theta_t = sorted_projections(Xf, theta), torch.as_tensor(theta)
                U_x = input_threshold(ref_x, s, run.cert)
            # one model pass per iterate gives its scores and, below, their gradient; every pass
            # counts, the one at t = 0 too, although prepare_run scored the factuals already
            Xt = torch.tensor(X, dtype=torch.float64, requires_grad=True)
            self.queries = charge(self.queries, n, self._limit, "DCE")
            proba = self.model.proba_tensor(Xt)
            y = yf if t == 0 else checked_scores(proba.detach().numpy(), n, self.schema)
            m = match(X @ theta.T, ref_x, y, ref_y, w)
            _, qx, qy = m.objective(0.0)
            ucl_x = run.cert.input_bound(m.sorted_x, ref_x)
            ucl_y = run.cert.output_bound(m.sorted_y, ref_y)
            feasible = is_feasible(ucl_x, ucl_y, U_x, U_y)
            step = eta_rule(ucl_x, ucl_y, U_x, U_y, left, right, s.kappa)
            eta, left, right = step.eta, step.left, step.right
            edited = int((X != Xf).any(axis=1).sum())
            records.append({"iteration": t, "Q": (1 - eta) * qx + eta * qy, "OT_x": qx, "OT_y": qy,
                            "eta": eta, "eta_l": left, "eta_r": right, "branch": step.branch,
                            "UCL_x": ucl_x, "UCL_y": ucl_y, "U_x": U_x, "feasible": feasible, "rows": [],
                            "accepted": True, "edited_rows": edited, "queries": self.queries,
                            "OT_y_metric": ot_y(y, ystar, delta=s.metric_delta)})
            if feasible and edited:
                kept[t] = X.copy()
            if t == s.max_iter or s.stops_early(bool(feasible and edited), records[-1]["OT_y_metric"]):
                break
            target_x = torch.as_tensor(np.take_along_axis(ref_x, m.rank_x, axis=1))  # (N, n)
            Qx = (torch.as_tensor(m.wx) * ((Xt @ theta_t.T).T - target_x) ** 2).sum() / s.n_projections
            yt = proba[:, fav]
            Qy = (torch.as_tensor(m.wy) * (yt - torch.as_tensor(ref_y[m.rank_y])) ** 2).sum()
            ((1 - eta) * Qx + eta * Qy).backward()
            grad = Xt.grad.numpy()
            grad[:, frozen] = 0.0
            X = np.clip(X - self.lr * n * grad, lo, hi)

        at_level = [t for t in kept if s.at_level(records[t]["OT_y_metric"])] or list(kept)
        scored = {t: (1 - eta) * records[t]["OT_x"] + eta * records[t]["OT_y"] for t in at_level}
        best = min(scored, key=lambda t: (scored[t], t)) if scored else len(records) - 1
        Xs = snap_rows(kept.get(best, X), Xf, self.schema, space)
        ys = self._scores(Xs)
        theta = directions_at(d, s, best)  # recheck on the returned iterate's own directions
        ref_x = sorted_projections(Xf, theta)
        U_x = input_threshold(ref_x, s, run.cert)
        ms = match(Xs @ theta.T, ref_x, ys, ref_y, w)
        _, qx, qy = ms.objective(0.0)
        rec = {"iteration": best, "eta": records[best]["eta"], "OT_x": qx, "OT_y": qy,
               "UCL_x": run.cert.input_bound(ms.sorted_x, ref_x), "UCL_y": run.cert.output_bound(ms.sorted_y, ref_y)}
        feasible = is_feasible(rec["UCL_x"], rec["UCL_y"], U_x, U_y) and bool((Xs != Xf).any())
        if not feasible:
            warnings.warn("DCE: the returned (snapped) counterfactuals are not certified feasible",
                          NotCertifiedWarning, stacklevel=2)
        metrics = result_metrics(Xs, Xf, ys, ystar, self.schema, s, rec, U_x, U_y, eta, cert=run.cert)
        metrics.update(both_verdicts(Xs, Xf, ys, ystar, s, run, bool((Xs != Xf).any())))
        metrics["feasible"] = feasible
        metrics["iterations_run"] = len(records) - 1
        # kept: iterates certified as the gradient left them (before snapping); ``feasible`` is the snapped one's
        metrics["first_certified_iteration"] = min(kept, default=None)
        if s.stop == "ot_y":
            metrics["stop_ot_y_reached"] = stop_level_reached(s, feasible, metrics["OT_y"])
        wall = time.perf_counter() - t0
        logger.info("DCE done in %.2fs: feasible=%s OT_x=%.4g OT_y=%.4g", wall, feasible, metrics["OT_x"],
                    metrics["OT_y"])
        settings = s.to_dict() | {"lr": self.lr}
        return DiscoverResult(
            counterfactuals=Xs, counterfactuals_frame=original_frame(self.schema, Xs, factuals), factuals=Xf,
            scores=ys, factual_scores=yf, target_values=ystar, log=pd.DataFrame.from_records(records),
            metrics=metrics, feasible=feasible, target=tgt.to_dict(), queries=self.queries, wall_time=wall,
            iteration=best, settings=settings, method="dce")


def snap_rows(X: np.ndarray, Xf: np.ndarray, schema: Schema, space: ProposalSpace) -> np.ndarray:
    """Valid, actionable points for a continuous iterate ``X`` (n, d) of factuals ``Xf`` (n, d).

    Categoricals take the row's nearest *allowed* level (actionability), numericals are
    rounded (integer features) and kept in the row's bounds (which contain its factual value,
    also one outside the training range), features the solver may not edit keep their
    factual values, and so does every feature the solver never moved (a numerical entry, or
    both columns of a categorical pair), so an unmoved row is never reported as edited.
    """
    Xs = Xf.copy()
    unmoved = X == Xf
    num = space.num_cols
    Xs[:, num] = np.where(unmoved[:, num], Xf[:, num], space.numerical_values(X[:, num], np.arange(len(X))))
    for cat in space.cats:
        cols = list(cat.cols)
        dist = ((X[:, None, cols] - cat.phases[None]) ** 2).sum(axis=2)  # (n, L)
        snapped = cat.phases[np.where(cat.allowed, dist, np.inf).argmin(axis=1)]
        Xs[:, cols] = np.where(unmoved[:, cols].all(axis=1, keepdims=True), Xf[:, cols], snapped)
    return Xs


__all__ = ["DCE", "TorchClassifier", "fit_torch_mlp", "snap_rows"]
