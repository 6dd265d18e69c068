"""DISCOVER's result: :class:`DiscoverResult`, its metrics and certificate verdicts, and the run's messages."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from recourselab.data.schema import Schema
from recourselab.discover.certify import CERTIFICATES, Certificate, is_feasible
from recourselab.discover.metrics import ares_cost, edited_rows, mmd2, ot_x, ot_x_minmax, ot_y
from recourselab.discover.ot import sorted_projections
from recourselab.discover.settings import DiscoverSettings
from recourselab.discover.setup import RunSetup, embed_rows, holdout_certified_x, input_threshold, output_threshold
from recourselab.errors import DataError
from recourselab.methods.base import Counterfactuals

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class DiscoverResult:
    """Outcome of one DISCOVER (or DCE) run.

    Attributes
    ----------
    counterfactuals : encoded counterfactual rows X, shape (n, d).
    counterfactuals_frame : the same rows in original units (``schema.inverse_transform``).
    factuals : encoded factual rows X', shape (n, d).
    scores : b(X), shape (n,); factual_scores : b(X'), shape (n,).
    target_values : the target outputs y*, shape (n,).
    log : one row per evaluated iterate: iteration, Q (under that iteration's eta), Q_selected,
        OT_x / OT_y (the solver's trimmed SW^2 over N directions / W^2, squared units), eta,
        eta_l, eta_r (the narrowed interval), branch, UCL_x, UCL_y, feasible, rows (the top-k
        indices), accepted, edited_rows,
        queries (cumulative model rows).
    row_scores : q_i of every row at every logged iteration (Prop. 3.1, under that iteration's
        plans and eta; row t sums to ``log["Q"][t]``), shape (len(log), n); None for DCE.
    metrics : reported metrics of the returned X: OT_x (5000 directions, delta 0.1), OT_y,
        MMD2, ares_cost, UCL_x, UCL_y, U_x, U_y, ... (squared units).
    feasible : True only if the returned X is certified (UCL_x < U_x and UCL_y < U_y).
    target : the target's description (``Target.to_dict()``).
    queries : model rows queried during the run (what a BlackBox oracle counted).
    wall_time : seconds.
    iteration : index of the returned iterate in ``log``.
    settings : the solver settings (``to_dict()``).
    method : "discover" or "dce".

    The model's verdict on each row, from the scores already computed (no query):
    :attr:`favourable`, :attr:`matched_target` and :attr:`valid`.
    """

    counterfactuals: np.ndarray
    counterfactuals_frame: pd.DataFrame
    factuals: np.ndarray
    scores: np.ndarray
    factual_scores: np.ndarray
    target_values: np.ndarray
    log: pd.DataFrame
    metrics: dict[str, Any]
    feasible: bool
    target: dict[str, Any]
    queries: int
    wall_time: float
    iteration: int
    settings: dict[str, Any] = field(default_factory=dict)
    method: str = "discover"
    row_scores: np.ndarray | None = None

    @property
    def favourable(self) -> np.ndarray:
        """Whether the model gives each counterfactual row a favourable-class probability above one
        half, b(x) > 0.5 (with two classes: it labels the row favourable). Shape (n,), bool."""
        return np.asarray(self.scores) > 0.5

    @property
    def matched_target(self) -> np.ndarray:
        """The target value each row is matched to in the output transport: the target of the
        same rank as the row's score (ties by row index). Shape (n,)."""
        out = np.empty(len(self.scores))
        out[np.argsort(self.scores, kind="stable")] = np.sort(self.target_values)
        return out

    @property
    def valid(self) -> np.ndarray:
        """Per-row validity with respect to the target: the row is favourable wherever its matched
        target value is (b(x) > 0.5 where y* > 0.5); rows matched to an unfavourable target value
        are valid. Shape (n,), bool."""
        return self.favourable | (self.matched_target <= 0.5)

    def to_counterfactuals(self) -> Counterfactuals:
        """This run as the common :class:`~recourselab.methods.base.Counterfactuals` (target: each row's
        matched target value; valid: :attr:`valid`; the run itself in ``result``)."""
        return Counterfactuals(
            method=self.method, factuals=self.factuals, counterfactuals=self.counterfactuals,
            counterfactuals_original=self.counterfactuals_frame, target=self.matched_target, queries=self.queries,
            wall_time=self.wall_time, valid=self.valid,
            log={"feasible": self.feasible, "iteration": self.iteration, "target": self.target} | self.metrics,
            result=self)

    def metadata(self) -> dict[str, Any]:
        """JSON-safe summary (metrics, feasibility, target, queries, time, settings)."""
        return {"method": self.method, "feasible": self.feasible, "metrics": self.metrics,
                "target": self.target, "queries": self.queries, "wall_time": self.wall_time,
                "iteration": self.iteration, "settings": self.settings}


def log_shortfall(result: DiscoverResult) -> None:
    """A warning with counts when some rows of ``result`` fall short of their matched target value."""
    short = int((~result.valid).sum())
    if short:
        n = len(result.scores)
        logger.warning("%s: %d of %d counterfactual rows are not favourable (b(x) <= 0.5) although their matched "
                       "target value is; %d of %d rows are favourable, the target asks for %d", result.method.upper(),
                       short, n, int(result.favourable.sum()), n, int((result.target_values > 0.5).sum()))


def original_frame(schema: Schema, X: np.ndarray, factuals: Any) -> pd.DataFrame:
    """Rows ``X`` (n, d) in original units, indexed like ``factuals`` when that is a DataFrame."""
    frame = schema.inverse_transform(X)
    if isinstance(factuals, pd.DataFrame):
        frame.index = factuals.index
    return frame


def not_certified_message(records: list[dict[str, Any]], U_y: float, accepted_at: list[int]) -> str:
    """The warning of a run without a certified edited iterate: the violated side(s) at the end and,
    when no candidate was accepted in the last quarter of the run (at least 10 searches), the stall."""
    last, searches = records[-1], len(records) - 1
    sides = [side for side, bad in (("input", last["UCL_x"] >= last["U_x"]), ("output", last["UCL_y"] >= U_y)) if bad]
    text = (f"DISCOVER found no certified feasible iterate in {searches} iterations (last UCL_x={last['UCL_x']:.4g} "
            f"vs U_x={last['U_x']:.4g}, UCL_y={last['UCL_y']:.4g} vs U_y={U_y:.4g}: "
            f"{' and '.join(sides) + ' side violated' if sides else 'no edited iterate'})")
    idle = searches - 1 - accepted_at[-1] if accepted_at else searches
    if idle >= max(10, searches // 4):
        text += (f"; the search stalled: no candidate improved Q in the last {idle} iterations, so the same top-k "
                 "rows stayed editable (a larger step, h or top_k, or strategy='genetic', can move rows that one "
                 "small edit cannot)")
    return text + "; returning the last iterate with feasible=False"


def stop_level_reached(s: DiscoverSettings, feasible: bool, ot_y_value: float) -> bool:
    """With ``stop="ot_y"``: whether the returned iterate is certified and at the OT(y) level (logged if not)."""
    reached = bool(feasible and s.at_level(ot_y_value))
    if not reached:
        logger.warning("stop_ot_y=%.4g not reached by a certified iterate in %d iterations (returned OT(y) "
                       "%.4g); the run went on to T and returns its best certified iterate (the last if none)",
                       s.stop_ot_y, s.max_iter, ot_y_value)
    return reached


def result_metrics(X: np.ndarray, Xf: np.ndarray, y: np.ndarray, ystar: np.ndarray, schema: Schema,
                   s: DiscoverSettings, rec: Mapping[str, Any], U_x: float, U_y: float,
                   eta: float, *, embed: Any = None, cert: Certificate | None = None) -> dict[str, Any]:
    """Reported metrics of the returned iterate (squared units, except UCLs and thresholds of the bootstrap
    rule). OT(x), MMD^2 and the holdout share are measured in the ``embed`` space when one is given."""
    cost = ares_cost(X, Xf, schema)
    edited = edited_rows(X, Xf)
    EX, EXf = embed_rows(embed, X), embed_rows(embed, Xf)
    scale = "squared" if cert is None else cert.scale
    space = "the encoded space" if embed is None else "the embed space"
    return {
        "OT_x": ot_x(EX, EXf, n_projections=s.metric_projections, delta=s.metric_delta, seed=s.seed),
        "OT_x_minmax": ot_x_minmax(X, Xf, schema, n_projections=s.metric_projections, delta=s.metric_delta,
                                   seed=s.seed),
        "OT_y": ot_y(y, ystar, delta=s.metric_delta),
        "MMD2": mmd2(EX, EXf, sigma=s.mmd_sigma),
        "ares_cost": float(cost.mean()),
        "ares_cost_edited": float(cost[edited].mean()) if edited.any() else None,  # no edited row: undefined
        "edited_rows": int(edited.sum()),
        "certified_x_holdout": holdout_certified_x(EX, EXf, s, cert=cert),
        "objective_OT_x": float(rec["OT_x"]), "objective_OT_y": float(rec["OT_y"]),
        "UCL_x": float(rec["UCL_x"]), "UCL_y": float(rec["UCL_y"]), "U_x": float(U_x), "U_y": float(U_y),
        "eta": float(rec["eta"]), "final_eta": float(eta), "returned_iteration": int(rec["iteration"]),
        "mean_score": float(y.mean()), "target_mean": float(ystar.mean()),
        "units": f"OT and objective values: squared Wasserstein-2 (SW^2 / W^2) in {space}; UCLs and U: {scale}",
    }


def both_verdicts(EX: np.ndarray, EXf: np.ndarray, y: np.ndarray, ystar: np.ndarray, s: DiscoverSettings,
                  run: RunSetup, edited: bool) -> dict[str, Any]:
    """The returned iterate's verdict under every certificate rule, on the run's first direction set.

    Parameters
    ----------
    EX, EXf : returned and factual rows in the transport space (n, D); y, ystar : scores and targets (n,).
    run : the run's setup (its rule, thresholds, first directions, reachability).
    edited : whether the returned iterate edits a row (an unedited iterate is never certified).

    Returns
    -------
    Flat dict: ``certificate`` (the rule of the run), then per rule r ``certified_r``, ``UCL_x_r``,
    ``UCL_y_r``, ``U_x_r``, ``U_y_r`` in r's scale. The chosen rule's thresholds are the run's; the
    other rule's are the same distances converted (squared / square-rooted) when U was given,
    else that rule's own calibration. Plus ``certificate_reachable`` and its reason.
    """
    ref_x = sorted_projections(EXf, run.theta)
    P = sorted_projections(EX, run.theta)
    out: dict[str, Any] = {"certificate": s.certificate}
    for rule in CERTIFICATES:
        cert = run.cert if rule == s.certificate else Certificate(rule, len(y), s.delta, s.alpha,
                                                                  s.bootstrap_resamples, s.seed)
        if rule == s.certificate:
            U_x, U_y = run.U_x, run.U_y
        else:
            try:  # the other rule is reported only: a threshold it cannot calibrate leaves it uncertified
                U_x = (run.cert.convert(s.U_x, rule) if s.U_x is not None
                       else input_threshold(ref_x, dataclasses.replace(s, certificate=rule), cert))
                U_y = (run.cert.convert(s.U_y, rule) if s.U_y is not None else
                       output_threshold(np.sort(run.yf), run.ref_y, dataclasses.replace(s, certificate=rule), cert))
            except DataError as err:
                logger.info("the %s verdict is not reported: %s", rule, err)
                U_x = U_y = float("nan")
        ux, uy = cert.input_bound(P, ref_x), cert.output_bound(np.sort(y), run.ref_y)
        out |= {f"certified_{rule}": bool(edited and is_feasible(ux, uy, U_x, U_y)), f"UCL_x_{rule}": float(ux),
                f"UCL_y_{rule}": float(uy), f"U_x_{rule}": float(U_x), f"U_y_{rule}": float(U_y)}
    out["certificate_reachable"] = run.reachable.get("reachable", True)
    out["certificate_unreachable_reason"] = run.reachable.get("reason")
    return out


def replace_settings(settings: DiscoverSettings, **changes: Any) -> DiscoverSettings:
    """A copy of ``settings`` with some fields changed (validated)."""
    return dataclasses.replace(settings, **changes)
