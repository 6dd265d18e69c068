"""The DISCOVER solver: certified propose-and-select search for distributional counterfactuals.

One outer iteration on the current iterate X (n, d):

1. sorted matchings of the projections ``P = X theta^T`` (cached, updated only for edited
   rows) and of the scores ``b(X)`` (cached) to the sorted factual projections / targets;
   ``Qx``, ``Qy``, the UCLs of the chosen certificate rule (DKW or bootstrap), feasibility,
   and eta by DCE's rule with interval narrowing;
2. row scores q_i (Prop. 3.1; they sum to Q exactly) and the top-k editable set I;
3. the guidance field ``g = grad SW^2`` on the rows of I in closed form;
4. the strategy proposes candidates editing only rows of I; all candidates of a batch are
   scored in one vectorised pass: one model call on the C*k edited rows (cached b(X) for
   the others) and one batched stable sort of the nearly sorted (C, N, n) projections
   (a reused buffer of ``max_elements`` floats); by default the row-wise recombination of
   the candidates (each row keeps its best edit under the fixed plans, or stays) is scored
   too, without any model query; the current X is the no-op candidate, so Q under this
   iteration's eta never increases;
5. the arg-min is applied (ties keep X).

With ``resample_directions`` the N directions are drawn afresh at every iteration (the
projections and matchings are then recomputed once per iteration), so the search cannot fit
one fixed set of N projections.

The run stops after ``max_iter`` iterations or when the iterate is certified feasible and Q
has stalled for ``patience`` iterations (``stop="stalled"``), or at the first certified edited
iterate (``stop="certified"``). It returns the best feasible edited iterate (min Q
under the final eta) if there is one; else, with ``repair``, the edited iterate closest to
certification with some rows reverted to their factuals when that certifies it (no model query,
:mod:`recourselab.discover.repair`); else the last iterate with ``feasible=False``.

Objective values are squared Wasserstein-2 quantities; UCLs and thresholds are squared (DKW) or
unsquared (bootstrap), see ``docs/reference/certificates.md``. With ``embed`` the input side is
measured on the embedded rows; with ``row_choice="stall"`` the rows after a rejected step are drawn
in proportion to q_i, and with ``accept="best"`` the best edited candidate replaces X even when Q rises.
"""

from __future__ import annotations

import functools
import logging
import time
import warnings
from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from recourselab.data.schema import Schema
from recourselab.discover.certify import eta_rule, is_feasible
from recourselab.discover.metrics import ot_y
from recourselab.discover.objective import Objective
from recourselab.discover.ot import Matching, match, sorted_projections
from recourselab.discover.repair import polish, revert_rows
from recourselab.discover.result import (
    DiscoverResult,
    both_verdicts,
    log_shortfall,
    not_certified_message,
    original_frame,
    result_metrics,
    stop_level_reached,
)
from recourselab.discover.settings import DiscoverSettings
from recourselab.discover.setup import (
    NotCertifiedWarning,
    charge,
    default_target,
    directions_at,
    embed_rows,
    favourable_scores,
    input_threshold,
    prepare_run,
)
from recourselab.discover.strategies import Evaluation, SearchContext, get_strategy, make_strategy
from recourselab.discover.targets import Target
from recourselab.methods.base import Counterfactuals
from recourselab.progress import bar
from recourselab.rng import numpy_rng

logger = logging.getLogger(__name__)


#: A step is accepted only if it lowers Q by more than this share of Q (rounding of batched scoring).
ACCEPT_RTOL = 1e-12


_DEFAULTS = DiscoverSettings()


class Discover:
    """DISCOVER: model-agnostic certified distributional counterfactuals (propose-and-select).

    Parameters
    ----------
    model : a :class:`~recourselab.models.BlackBox` (queries are counted under
        ``settings.budget``) or any object with ``predict_proba(X (n, d)) -> (n, K)``.
        The score is ``b(X) = predict_proba(X)[:, schema.favourable_index]``.
    schema : the encoded layout of the data the model was trained on.
    n_projections, top_k, h, trials, max_iter, strategy, seed : the main settings
        (N, k, h, M, T; see :class:`DiscoverSettings`).
    embed : optional row-wise map of encoded rows (m, d) to the space in which the input-side
        transport is measured (m, D), e.g. numericals as z-scores and each categorical as its
        standardized one-hot block, the space of a metric computed elsewhere. The sliced objective,
        its guidance (pulled back to the mutable features through ``embed``), the certificate and
        the reported OT(x) and MMD^2 then use that space; proposals still edit encoded features, so
        categories stay valid. None (default): the encoded space.
    **options : any other :class:`DiscoverSettings` field (unknown names list the valid ones).
        :meth:`from_settings` builds a solver from a settings object.

    Notes
    -----
    One ``explain`` call at a time per instance (the query counter is per run).

    Examples
    --------
    >>> solver = Discover(BlackBox({"lgbm": fitted}, schema=schema), schema=schema)  # doctest: +SKIP
    >>> result = solver.solve(X_factual, make_target("beta", a=0.1, b=0.9, seed=0))  # doctest: +SKIP
    >>> result.feasible, result.metrics["OT_y"]  # doctest: +SKIP
    """

    def __init__(self, model: Any, *, schema: Schema, n_projections: int = _DEFAULTS.n_projections,
                 top_k: int = _DEFAULTS.top_k, h: int = _DEFAULTS.h, trials: int = _DEFAULTS.trials,
                 max_iter: int = _DEFAULTS.max_iter, strategy: str = _DEFAULTS.strategy, seed: int = 0,
                 embed: Any = None, **options: Any) -> None:
        if not hasattr(model, "predict_proba"):
            raise TypeError(f"model ({type(model).__name__}) has no predict_proba method")
        if not isinstance(schema, Schema):
            raise TypeError(f"schema must be a recourselab Schema (the encoded layout), got {type(schema).__name__}")
        self.settings = DiscoverSettings.from_kwargs(
            n_projections=n_projections, top_k=top_k, h=h, trials=trials, max_iter=max_iter,
            strategy=strategy, seed=seed, **options)
        get_strategy(self.settings.strategy)  # an unknown name lists the registered ones
        if embed is not None and not callable(embed):
            raise TypeError(f"embed must be a callable rows (m, d) -> (m, D), got {type(embed).__name__}")
        self.model = model
        self.schema = schema
        self.embed = embed
        self._queries = 0
        self._limit: int | None = None

    name = "discover"

    @classmethod
    def from_settings(cls, model: Any, *, schema: Schema, settings: DiscoverSettings) -> Discover:
        """A solver with every option taken from ``settings``."""
        return cls(model, schema=schema, **settings.to_dict())

    # ------------------------------------------------------------------ helpers
    def _scores(self, X: np.ndarray) -> np.ndarray:
        self._queries = charge(self._queries, len(X), self._limit, "DISCOVER")
        return favourable_scores(self.model, X, self.schema, self.settings.budget)

    def _evaluate(self, obj: Objective, m: Matching, rows: np.ndarray, eta: float, qx0: float,
                  base: np.ndarray, base_y: np.ndarray, cands: np.ndarray,
                  yc: np.ndarray | None = None) -> Evaluation:
        C, k, d = cands.shape
        Pc = embed_rows(self.embed, cands) @ obj.theta.T  # (C, k, N)
        if yc is None:
            yc = self._candidate_scores(cands, base, base_y)
        return obj.evaluate(m, rows, eta, Pc, yc, qx0)

    def _candidate_scores(self, cands: np.ndarray, base: np.ndarray, base_y: np.ndarray) -> np.ndarray:
        """Scores (C, k) of candidates (C, k, d): rows equal to their current row ``base`` (k, d)
        keep its score ``base_y`` (k,); the distinct other rows go to the model in one call."""
        C, k, d = cands.shape
        yc = np.broadcast_to(base_y, (C, k)).copy()
        edited = ~(cands == base[None]).all(axis=2)  # (C, k)
        if edited.any():
            distinct, inverse = np.unique(cands[edited], axis=0, return_inverse=True)
            yc[edited] = self._scores(distinct)[inverse.reshape(-1)]
        return yc

    def _repair(self, X: np.ndarray, y: np.ndarray, run: Any, theta: np.ndarray, ref_x: np.ndarray,
                obj: Objective, last: dict[str, Any], ystar: np.ndarray, eta: float, U_x: float,
                rng: np.random.Generator) -> tuple[dict[str, Any], np.ndarray] | None:
        """Revert edited rows of the uncertified iterate (X, y), whose log record is ``last``, in place
        until it is certified on the directions ``theta`` (:func:`~recourselab.discover.repair.revert_rows`);
        with ``polish_iter`` > 0 and no such reverts, polish it (:func:`~recourselab.discover.repair.polish`)
        with the run's proposal stream ``rng``, continued.
        Returns the certified iterate's record and row scores q_i (n,), or None (X, y untouched)."""
        Xf, yf, s = run.Xf, run.yf, self.settings
        rep = None
        if s.repair:
            P, Pf = run.embedded(X) @ theta.T, run.embedded(Xf) @ theta.T
            rep = revert_rows(P, y, Pf, yf, (X != Xf).any(axis=1), ref_x, obj.ref_y, run.cert, U_x, run.U_y)
        if rep is not None and rep.certified:
            X[rep.reverted], y[rep.reverted] = Xf[rep.reverted], yf[rep.reverted]
            logger.info("repair: %d edited row(s) reverted to their factuals certify the iterate (UCL_x %.4g < "
                        "%.4g, UCL_y %.4g < %.4g)", len(rep.reverted), rep.ucl_x, U_x, rep.ucl_y, run.U_y)
            return self._certified_record(X, y, run, theta, ref_x, obj, last, ystar, eta, U_x, rep.ucl_x,
                                          rep.ucl_y, "repair", rep.reverted.tolist())
        if rep is not None:
            logger.info("repair: no sequence of reverted rows certifies iterate %d", last["iteration"])
        steps = s.polish_iter  # within the run's query budget: the polish stops short instead of failing
        if self._limit is not None:
            steps = min(steps, max(self._limit - self._queries, 0) // s.trials)
        if steps == 0:
            return None
        pol = polish(X, y, Xf, yf, space=run.space, project=lambda rows: run.embedded(rows) @ theta.T,
                     scores=self._scores, ref_x=ref_x, ref_y=obj.ref_y, cert=run.cert, U_x=U_x, U_y=run.U_y,
                     steps=steps, trials=s.trials, rng=rng)
        if not pol.certified:
            logger.info("polish: %d step(s) (%d model rows) did not certify iterate %d", pol.steps, pol.queries,
                        last["iteration"])
            return None
        changed = np.flatnonzero((X != pol.X).any(axis=1))
        X[:], y[:] = pol.X, pol.y
        logger.info("polish: %d step(s) (%d model rows) certify the iterate (UCL_x %.4g < %.4g, UCL_y %.4g < %.4g)",
                    pol.steps, pol.queries, pol.ucl_x, U_x, pol.ucl_y, run.U_y)
        return self._certified_record(X, y, run, theta, ref_x, obj, last, ystar, eta, U_x, pol.ucl_x, pol.ucl_y,
                                      "polish", changed.tolist())

    def _certified_record(self, X: np.ndarray, y: np.ndarray, run: Any, theta: np.ndarray, ref_x: np.ndarray,
                          obj: Objective, last: dict[str, Any], ystar: np.ndarray, eta: float, U_x: float,
                          ucl_x: float, ucl_y: float, branch: str,
                          rows: list[int]) -> tuple[dict[str, Any], np.ndarray]:
        """The log record and row scores q_i (n,) of the iterate (X, y) that the repair (``branch``
        ``"repair"``: ``rows`` reverted) or the polish (``"polish"``: ``rows`` changed) certified."""
        P = run.embedded(X) @ theta.T
        m = match(P, ref_x, y, obj.ref_y, obj.w)
        qx, qy = obj.current(m, np.arange(1), P, y)
        Q = (1.0 - eta) * qx + eta * qy
        rec = {**last, "repaired_from": last["iteration"], "Q": Q, "Q_selected": Q, "OT_x": qx, "OT_y": qy,
               "eta": eta, "branch": branch, "UCL_x": ucl_x, "UCL_y": ucl_y, "U_x": U_x, "feasible": True,
               "rows": rows, "accepted": False, "edited_rows": int((X != run.Xf).any(axis=1).sum()),
               "queries": self._queries, "OT_y_metric": ot_y(y, ystar, delta=self.settings.metric_delta)}
        return rec, m.row_scores(eta)

    # ------------------------------------------------------------------ main entry
    def explain(self, factuals: np.ndarray | pd.DataFrame, target: Target | Mapping[str, Any] | str | None = None, *,
                budget: int | None = None, progress: bool | None = None) -> Counterfactuals:
        """:meth:`solve` behind the common method interface.

        ``target`` None draws the default 1 - Beta(0.1, 0.9) target with the solver's seed;
        ``budget`` caps the model rows of the run (:class:`QueryBudgetExceeded` before the call
        that would pass it). The full :class:`DiscoverResult` is the result's ``result``.
        """
        self._limit = budget
        try:
            result = self.solve(factuals, default_target(target, self.settings.seed), progress=progress)
            return result.to_counterfactuals()
        finally:
            self._limit = None

    def solve(self, factuals: np.ndarray | pd.DataFrame,
                target: Target | Mapping[str, Any] | str, *, progress: bool | None = None) -> DiscoverResult:
        """Find a certified counterfactual distribution for ``factuals``.

        Rows that fall short of their matched target value (:attr:`DiscoverResult.valid`) are
        logged as a warning with counts.

        Parameters
        ----------
        factuals : encoded rows (n, d) or a raw DataFrame (encoded through the schema).
        target : a :class:`Target` (or its dict, or a kind name with default parameters);
            its ``n`` values are drawn for this sample.
        progress : a bar over the outer iterations: True shows it, False hides it, None shows it
            only on an interactive terminal outside CI (:func:`recourselab.progress.bar`).

        Returns
        -------
        DiscoverResult
        """
        t0 = time.perf_counter()
        s = self.settings
        self._queries = 0
        run = prepare_run(factuals, target, self.schema, s, self._scores, self.embed)
        Xf, yf, tgt, ystar, theta, w = run.Xf, run.yf, run.target, run.ystar, run.theta, run.w
        ref_x, ref_y, U_x, U_y = run.ref_x, run.ref_y, run.U_x, run.U_y
        n, d = Xf.shape
        rng = numpy_rng("discover.proposals", seed=s.seed)
        cert, EXf = run.cert, run.embedded(Xf)
        obj = Objective(theta, ref_x, ref_y, w, s.max_elements)
        space = run.space
        strategy = make_strategy(s.strategy, s)
        k = min(s.top_k, n)
        logger.info("DISCOVER %s: n=%d d=%d N=%d k=%d h=%d M=%d T=%d U_x=%.4g U_y=%.4g", s.strategy, n, d,
                    s.n_projections, k, s.h, s.trials, s.max_iter, U_x, U_y)

        X, P, y = Xf.copy(), EXf @ theta.T, yf.copy()
        changed = np.zeros(n, dtype=bool)
        left, right = s.eta_l, s.eta_r
        history: list[tuple[int, np.ndarray, np.ndarray, np.ndarray]] = []
        records: list[dict[str, Any]] = []
        q_rows: list[np.ndarray] = []
        stall = 0
        eta = left
        m = None
        # the bar closes itself when the loop ends (at max_iter or a stop rule)
        iterations = bar(range(s.max_iter + 1), desc=f"DISCOVER {s.strategy} seed {s.seed}", unit="iter",
                         enabled=progress)
        for t in iterations:
            if t > 0 and s.resample_directions:  # fresh directions: the old sort orders do not carry over
                theta = directions_at(EXf.shape[1], s, t)
                ref_x = sorted_projections(EXf, theta)
                obj.theta, obj.ref_x, P, m = theta, ref_x, run.embedded(X) @ theta.T, None
                U_x = input_threshold(ref_x, s, cert)  # the floor of these directions
            m = match(P, ref_x, y, ref_y, w, previous=m)
            all_rows = np.arange(min(k, n))
            qx, qy = obj.current(m, all_rows, P, y)
            ucl_x = cert.input_bound(m.sorted_x, ref_x)
            ucl_y = cert.output_bound(m.sorted_y, ref_y)
            feasible = is_feasible(ucl_x, ucl_y, U_x, U_y)
            step = eta_rule(ucl_x, ucl_y, U_x, U_y, left, right, s.kappa)
            eta, left, right = step.eta, step.left, step.right
            Q = (1.0 - eta) * qx + eta * qy
            rec = {"iteration": t, "Q": Q, "Q_selected": Q, "OT_x": qx, "OT_y": qy, "eta": eta,
                   "eta_l": left, "eta_r": right, "branch": step.branch, "UCL_x": ucl_x, "UCL_y": ucl_y,
                   "U_x": U_x, "feasible": feasible, "rows": [], "accepted": False, "edited_rows": int(changed.sum()),
                   "queries": self._queries}
            rec["OT_y_metric"] = ot_y(y, ystar, delta=s.metric_delta)
            records.append(rec)
            q_rows.append(m.row_scores(eta))
            if not iterations.disable:
                iterations.set_postfix(Q=f"{Q:.4g}", certified=bool(feasible), refresh=False)
            stall = stall + 1 if feasible and t > 0 and records[-2]["improvement"] <= s.tol else 0
            done = (s.stops_early(feasible and changed.any(), rec["OT_y_metric"])
                    or (s.stop == "stalled" and feasible and stall >= s.patience))
            if t == s.max_iter or done:
                rec["improvement"] = 0.0
                break
            scores = q_rows[-1]
            stalled = s.row_choice == "stall" and t > 0 and not records[-2]["accepted"]
            rows = sampled_rows(scores, k, rng) if stalled else np.argsort(-scores, kind="stable")[:k]
            level_scores = None
            if not s.guidance:
                g = np.zeros((k, d))
            elif self.embed is None:
                g = m.guidance(rows, theta)
            else:
                g, level_scores = space.pull_back(self.embed, X[rows], m.guidance(rows, theta))
            Q0 = Q  # the no-op candidate
            evaluate = functools.partial(self._evaluate, obj, m, rows, eta, qx, X[rows], y[rows])
            ctx = SearchContext(base=X[rows].copy(), base_y=y[rows].copy(), rows=rows, guidance=g,
                                space=space, evaluate=evaluate, rescore=evaluate, trials=s.trials,
                                recombine=s.recombine, level_scores=level_scores)
            sel = strategy.search(ctx, rng)
            # a candidate scored in a batch can land a rounding error below Q0 without being better
            # (e.g. an edit the model does not notice): it must beat Q0 by more than rounding
            moved = not np.array_equal(sel.candidate, X[rows])
            accepted = moved and (s.accept == "best" or sel.Q < Q0 - ACCEPT_RTOL * abs(Q0))
            rec.update(rows=rows.tolist(), accepted=bool(accepted), Q_selected=sel.Q if accepted else Q0,
                       improvement=max(Q0 - sel.Q, 0.0) / max(abs(Q0), 1e-300) if accepted else 0.0,
                       queries=self._queries)
            if accepted:
                history.append((t, rows, X[rows].copy(), y[rows].copy()))
                X[rows] = sel.candidate
                P[rows] = run.embedded(sel.candidate) @ theta.T
                y[rows] = sel.y
                changed[rows] = (X[rows] != Xf[rows]).any(axis=1)
            logger.debug("iter %d Q=%.6g Qx=%.4g Qy=%.4g eta=%.3f UCLx=%.4g UCLy=%.4g feasible=%s "
                         "accepted=%s", t, Q, qx, qy, eta, ucl_x, ucl_y, feasible, accepted)

        # pick the returned iterate: best feasible edited one under the final eta, else the last
        scored = [(1.0 - eta) * rec["OT_x"] + eta * rec["OT_y"] for rec in records]
        certified = [i for i, rec in enumerate(records) if rec["feasible"] and rec["edited_rows"] > 0]
        ok = [i for i in certified if s.at_level(records[i]["OT_y_metric"])] or certified
        best = min(ok, key=lambda i: (scored[i], i)) if ok else len(records) - 1
        feasible = bool(records[best]["feasible"] and records[best]["edited_rows"] > 0)
        iterations_run = len(records) - 1
        repaired, certified_by = 0, "search" if feasible else None
        if not feasible and (s.repair or s.polish_iter):
            # the edited iterate closest to certification, max(UCL_x / U_x, UCL_y / U_y), is repaired / polished
            merit = [max(r["UCL_x"] / r["U_x"], r["UCL_y"] / U_y) if r["edited_rows"] else np.inf for r in records]
            start = int(np.argmin(merit))
            Xr, yr = rewound(X, y, history, start)
            repair = (self._repair(Xr, yr, run, theta, ref_x, obj, records[start], ystar, eta, records[-1]["U_x"],
                                   rng) if merit[start] < np.inf else None)
            if repair is not None:
                records.append({**repair[0], "iteration": len(records)})
                q_rows.append(repair[1])
                best, feasible, repaired = len(records) - 1, True, len(repair[0]["rows"])
                certified_by = repair[0]["branch"]
                certified.append(best)
                X, y = Xr, yr
        X, y = rewound(X, y, history, best)
        log = pd.DataFrame.from_records(records).drop(columns=["improvement"], errors="ignore")
        accepted_at = [rec["iteration"] for rec in records if rec["accepted"]]
        if not feasible:
            warnings.warn(not_certified_message(records, U_y, accepted_at), NotCertifiedWarning, stacklevel=2)
        metrics = result_metrics(X, Xf, y, ystar, self.schema, s, records[best], records[best]["U_x"], U_y, eta,
                                 embed=self.embed, cert=cert)
        metrics.update(both_verdicts(run.embedded(X), EXf, y, ystar, s, run, feasible))
        metrics["feasible"] = feasible
        metrics["iterations_run"] = iterations_run
        metrics["repaired_rows"] = repaired
        metrics["certified_by"] = certified_by
        metrics["last_accepted_iteration"] = accepted_at[-1] if accepted_at else None
        metrics["first_certified_iteration"] = certified[0] if certified else None
        if s.stop == "ot_y":
            metrics["stop_ot_y_reached"] = stop_level_reached(s, feasible, records[best]["OT_y_metric"])
        wall = time.perf_counter() - t0
        logger.info("DISCOVER done in %.2fs: feasible=%s OT_x=%.4g OT_y=%.4g queries=%d", wall, feasible,
                    metrics["OT_x"], metrics["OT_y"], self._queries)
        result = DiscoverResult(
            counterfactuals=X, counterfactuals_frame=original_frame(self.schema, X, factuals), factuals=Xf,
            scores=y, factual_scores=yf, target_values=ystar, log=log, metrics=metrics, feasible=feasible,
            target=tgt.to_dict(), queries=self._queries, wall_time=wall, iteration=best,
            settings=s.to_dict(), method="discover", row_scores=np.stack(q_rows))
        log_shortfall(result)
        return result


def rewound(X: np.ndarray, y: np.ndarray, history: list[tuple[int, np.ndarray, np.ndarray, np.ndarray]],
            t: int) -> tuple[np.ndarray, np.ndarray]:
    """Copies of the iterate X (n, d) and its scores y (n,) as they were at iteration ``t``: the edits
    of ``history`` (iteration, rows, their old values, their old scores) accepted at ``t`` or later undone."""
    X, y = X.copy(), y.copy()
    for t_edit, rows, old_x, old_y in reversed(history):
        if t_edit < t:
            break
        X[rows], y[rows] = old_x, old_y
    return X, y


def sampled_rows(scores: np.ndarray, k: int, rng: np.random.Generator) -> np.ndarray:
    """``k`` distinct rows drawn with probability proportional to their scores q_i (n,) (Gumbel top-k);
    rows with q_i = 0 only after every positive one. Shape (k,), int64."""
    q = np.maximum(np.asarray(scores, dtype=float), 0.0)
    with np.errstate(divide="ignore"):
        keys = np.log(q) - np.log(-np.log(rng.uniform(np.finfo(float).tiny, 1.0, len(q))))
    keys = np.where(q > 0, keys, -np.inf)
    order = np.lexsort((np.arange(len(q)), -keys))  # ties (all -inf) by row index
    return order[:k].astype(np.int64)


__all__ = ["Discover", "sampled_rows"]
