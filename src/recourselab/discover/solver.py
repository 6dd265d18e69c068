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
under the final eta) if there is one, else the last iterate with ``feasible=False``.

Objective values are squared Wasserstein-2 quantities; UCLs and thresholds are squared (DKW) or
unsquared (bootstrap), see ``docs/reference/certificates.md``. With ``embed`` the input side is
measured on the embedded rows; with ``row_choice="stall"`` the rows after a rejected step are drawn
in proportion to q_i, and with ``accept="best"`` the best edited candidate replaces X even when Q rises.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import time
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from recourselab.data.schema import Schema, encode_rows
from recourselab.discover.certify import CERTIFICATES, Certificate, eta_rule, is_feasible, ucl_sw2, ucl_w2
from recourselab.discover.metrics import ares_cost, edited_rows, mmd2, ot_x, ot_x_minmax, ot_y
from recourselab.discover.ot import Matching, match, random_directions, sorted_projections, trim_weights
from recourselab.discover.proposals import ProposalSpace, check_actionability
from recourselab.discover.settings import DiscoverSettings
from recourselab.discover.strategies import Evaluation, SearchContext, get_strategy, make_strategy
from recourselab.discover.targets import Target, make_target
from recourselab.errors import DataError
from recourselab.methods.base import Counterfactuals
from recourselab.models.oracle import QueryBudgetExceeded
from recourselab.progress import bar
from recourselab.rng import numpy_rng

logger = logging.getLogger(__name__)


class NotCertifiedWarning(UserWarning):
    """The run ended without a certified-feasible iterate."""


class UnreachableCertificateWarning(UserWarning):
    """Before the search: a threshold that no iterate can meet (its floor is already above it)."""


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


#: A step is accepted only if it lowers Q by more than this share of Q (rounding of batched scoring).
ACCEPT_RTOL = 1e-12


#: The target of ``explain(factuals, None)``: the pipeline's default, 1 - Beta(0.1, 0.9) scores.
DEFAULT_TARGET = {"kind": "beta", "a": 0.1, "b": 0.9}


def charge(used: int, n: int, limit: int | None, method: str) -> int:
    """``used + n`` model rows, or :class:`QueryBudgetExceeded` (before the call) when that passes ``limit``."""
    if limit is not None and used + n > limit:
        raise QueryBudgetExceeded(f"{method}: scoring {n} more rows would use {used + n} model rows, over the "
                                  f"search budget of {limit}; raise budget= or explain fewer rows")
    return used + n


def default_target(target: Target | Mapping[str, Any] | str | None, seed: int) -> Target | Mapping[str, Any] | str:
    """``target``, or :data:`DEFAULT_TARGET` drawn with ``seed`` when it is None."""
    if target is None:
        spec = dict(DEFAULT_TARGET)
        return make_target(spec.pop("kind"), seed=seed, **spec)
    return target


def favourable_scores(model: Any, X: np.ndarray, schema: Schema, budget: str) -> np.ndarray:
    """b(X) = P(favourable) through ``model.predict_proba`` (a BlackBox counts under ``budget``)."""
    from recourselab.models.oracle import BlackBox

    proba = model.predict_proba(X, budget=budget) if isinstance(model, BlackBox) else model.predict_proba(X)
    return checked_scores(proba, len(X), schema)


def checked_scores(proba: Any, n: int, schema: Schema) -> np.ndarray:
    """The favourable-class column (n,) of class probabilities ``proba`` (n, K), checked."""
    proba = np.asarray(proba, dtype=float)
    if proba.ndim != 2 or proba.shape != (n, schema.n_classes):
        raise DataError(f"model returned probabilities of shape {proba.shape}, expected ({n}, "
                        f"{schema.n_classes})")
    scores = proba[:, schema.favourable_index]
    bad = ~np.isfinite(scores) | (scores < -1e-9) | (scores > 1 + 1e-9)
    if bad.any():
        raise DataError(f"model returned favourable-class probabilities outside [0, 1] or non-finite in "
                        f"{int(bad.sum())} of {len(scores)} rows, e.g. {scores[bad][:3].tolist()}")
    return scores


def encode_factuals(factuals: np.ndarray | pd.DataFrame, schema: Schema) -> np.ndarray:
    """Validate factual rows: encoded (n, d) array or raw DataFrame -> float array (n, d), n >= 2.

    Encoded rows must hold valid categorical encodings (each (cos, sin) pair the exact phase
    of one level); numerical values may lie outside the training range.
    """
    X = encode_rows(factuals, schema, what="factuals")
    if X.shape[0] < 2:
        raise DataError(f"need at least 2 factual rows for a distribution, got {X.shape[0]}")
    snapped = schema.snap(X)
    off = [f.name for f, sl in zip(schema.features, schema.slices().values(), strict=True)
           if f.kind != "numerical" and not np.allclose(X[:, sl], snapped[:, sl], rtol=0.0, atol=1e-6)]
    if off:
        raise DataError(f"factuals: the encoded columns of categorical feature(s) {off} are not the phase pair "
                        "of any level; encode raw rows with the schema (schema.transform) or pass a DataFrame")
    return X


def as_target(target: Target | Mapping[str, Any] | str, n: int) -> Target:
    """A Target from itself, its dict or its kind name, checked against ``n`` factual rows."""
    if isinstance(target, str):
        target = make_target(target)
    elif isinstance(target, Mapping):
        target = Target.from_dict(target)
    if not isinstance(target, Target):
        raise DataError(f"target must be a Target (see make_target), got {type(target).__name__}")
    if target.n is not None and target.n != n:
        raise DataError(f"target {target.kind!r} has {target.n} values but there are {n} factual rows; "
                        "the target and the factual sample must have the same size")
    return target


def resolve_target(target: Target | Mapping[str, Any] | str, n: int,
                   factual_scores: np.ndarray) -> tuple[Target, np.ndarray]:
    """A Target (or its dict / kind name) and its ``n`` values, validated."""
    target = as_target(target, n)
    values = target.values(n, factual_scores)
    if values.shape != (n,) or not np.isfinite(values).all():
        raise DataError(f"target values must be {n} finite numbers, got shape {values.shape}")
    return target, values


@dataclass(frozen=True)
class RunSetup:
    """What a run derives from its factuals, target and settings (shared by DISCOVER and DCE).

    Xf (n, d) encoded factuals, yf (n,) their scores, target and ystar (n,) its drawn values,
    theta (N, d) directions, w (n,) trimming weights, ref_x (N, n) sorted factual projections,
    ref_y (n,) sorted targets, U_x / U_y the thresholds (squared units), space the run's
    proposal space (mutable features, bounds).
    """

    Xf: np.ndarray
    yf: np.ndarray
    target: Target
    ystar: np.ndarray
    theta: np.ndarray
    w: np.ndarray
    ref_x: np.ndarray
    ref_y: np.ndarray
    U_x: float
    U_y: float
    space: ProposalSpace
    cert: Certificate | None = None
    embed: Any = None
    reachable: dict[str, Any] = field(default_factory=dict)

    def embedded(self, X: np.ndarray) -> np.ndarray:
        """Rows (..., d) in the space of the input-side transport (..., D) (the encoded rows without ``embed``)."""
        return embed_rows(self.embed, X)


def embed_rows(embed: Any, X: np.ndarray) -> np.ndarray:
    """``embed(X)`` for rows (..., d) -> (..., D), checked; ``X`` itself when ``embed`` is None."""
    if embed is None:
        return X
    flat = X.reshape(-1, X.shape[-1])
    out = np.asarray(embed(flat), dtype=float)
    if out.ndim != 2 or out.shape[0] != flat.shape[0] or not np.isfinite(out).all():
        raise DataError(f"embed must map rows (m, d) to finite rows (m, D), got shape {out.shape} for m={len(flat)}")
    return out.reshape(*X.shape[:-1], out.shape[1])


def prepare_run(factuals: np.ndarray | pd.DataFrame, target: Target | Mapping[str, Any] | str, schema: Schema,
                s: DiscoverSettings, scores: Any, embed: Any = None) -> RunSetup:
    """Encode the factuals, score them with ``scores(X) -> (n,)``, draw y*, directions and thresholds.

    The factuals, the target, the actionability rules and that some feature can be edited are
    checked before the model is queried, so a mistake in them costs no queries. ``embed`` maps
    encoded rows (m, d) to the space of the input-side transport (m, D) (None: the encoded space).
    Thresholds that no iterate can meet are warned about here, before the search
    (:class:`UnreachableCertificateWarning`).
    """
    Xf = encode_factuals(factuals, schema)
    n, d = Xf.shape
    target = as_target(target, n)
    check_actionability(schema, s)
    space = ProposalSpace(schema, Xf, s)
    yf = scores(Xf)
    tgt, ystar = resolve_target(target, n, yf)
    EXf = embed_rows(embed, Xf)
    theta = directions_at(EXf.shape[1], s, 0)
    ref_x, ref_y = sorted_projections(EXf, theta), np.sort(ystar)
    cert = Certificate(s.certificate, n, s.delta, s.alpha, s.bootstrap_resamples, s.seed)
    U_x = input_threshold(ref_x, s, cert)
    U_y = output_threshold(np.sort(yf), ref_y, s, cert)
    reachable = check_reachable(ref_x, ref_y, U_x, U_y, cert)
    if not U_x > 0:
        raise DataError(f"the calibrated input threshold U_x is 0: the {n} factual rows are identical, so their "
                        "confidence band has no width and UCL_x < U_x can never hold; pass U_x (> 0) or "
                        "factual rows that differ")
    return RunSetup(Xf=Xf, yf=yf, target=tgt, ystar=ystar, theta=theta, w=trim_weights(n, s.delta),
                    ref_x=ref_x, ref_y=ref_y, U_x=float(U_x), U_y=float(U_y), space=space, cert=cert, embed=embed,
                    reachable=reachable)


def check_reachable(ref_x: np.ndarray, ref_y: np.ndarray, U_x: float, U_y: float, cert: Certificate) -> dict[str, Any]:
    """Whether each threshold can be met at all, warned about before the search.

    The floor of the input side is the bound of the unedited factuals against themselves (no
    iterate is closer to X' than X' itself); the floor of the output side is the bound of a
    perfect match, the targets against themselves. A threshold at or below its floor cannot be
    met by any iterate: :class:`UnreachableCertificateWarning` names the side and the numbers.

    Returns
    -------
    dict: ``reachable`` (bool), ``floor_x``, ``floor_y`` (in the rule's scale) and ``reason`` (None or text).
    """
    floor_x, floor_y = cert.input_bound(ref_x, ref_x), cert.output_bound(ref_y, ref_y)
    reasons = []
    if not floor_x < U_x:
        reasons.append(f"input side: the unedited factuals' own bound UCL_x(X', X') = {floor_x:.4g} is not below "
                       f"U_x = {U_x:.4g}")
    if not floor_y < U_y:
        reasons.append(f"output side: even scores equal to the targets give UCL_y(y*, y*) = {floor_y:.4g}, not below "
                       f"U_y = {U_y:.4g}")
    reason = None
    if reasons:
        reason = (f"the {cert.rule} certificate ({cert.scale} scale) cannot be met by any iterate: "
                  f"{'; '.join(reasons)}; raise the threshold(s), use more factual rows, or choose the other rule")
        logger.warning(reason)
        warnings.warn(reason, UnreachableCertificateWarning, stacklevel=3)
    return {"reachable": not reasons, "floor_x": float(floor_x), "floor_y": float(floor_y), "reason": reason}


def output_threshold(yf_sorted: np.ndarray, ref_y: np.ndarray, s: DiscoverSettings,
                     cert: Certificate | None = None) -> float:
    """U_y for the sorted factual scores ``yf_sorted`` (n,) and sorted targets ``ref_y`` (n,).

    ``s.U_y`` if given, else ``min(UCL_y(y*, y*) + U_y_margin, UCL_y(b(X'), y*))``: the floor of
    a perfect output match plus the margin, but never above the unedited factuals' own UCL_y,
    so the output certificate always asks for an improvement on the factuals (a threshold
    they already pass would certify nothing). A threshold the factuals pass is logged.
    """
    if cert is not None and cert.rule != "dkw":
        return bootstrap_output_threshold(yf_sorted, ref_y, s, cert)
    start = ucl_w2(yf_sorted, ref_y, s.delta, s.alpha)
    if s.U_y is not None:
        if start < s.U_y:
            logger.warning("the unedited factuals already pass the output threshold (UCL_y %.4g < U_y %.4g): "
                           "the output certificate asks for no change", start, s.U_y)
        return float(s.U_y)
    calibrated = ucl_w2(ref_y, ref_y, s.delta, s.alpha) + s.U_y_margin
    if not calibrated > 0:
        raise DataError("the calibrated output threshold U_y is 0 (a constant target with U_y_margin 0), so "
                        "UCL_y < U_y can never hold; set U_y_margin > 0 or pass U_y (> 0)")
    if not start > 0:
        raise DataError("every factual score already equals the constant target y*, so no change of the outputs "
                        "can be certified (U_y_margin cannot help); choose another target or pass U_y (> 0)")
    if start < calibrated:
        logger.info("U_y capped at the unedited factuals' UCL_y %.4g (floor + U_y_margin = %.4g), so that "
                    "the output certificate asks for an improvement", start, calibrated)
    return float(min(calibrated, start))


def bootstrap_output_threshold(yf_sorted: np.ndarray, ref_y: np.ndarray, s: DiscoverSettings,
                               cert: Certificate) -> float:
    """U_y of the bootstrap rule (unsquared): ``s.U_y``, else ``sqrt(U_y_margin)`` capped at the factuals' own bound."""
    start = cert.output_bound(yf_sorted, ref_y)
    if s.U_y is not None:
        if start < s.U_y:
            logger.warning("the unedited factuals already pass the output threshold (UCL_y %.4g < U_y %.4g): "
                           "the output certificate asks for no change", start, s.U_y)
        return float(s.U_y)
    if not s.U_y_margin > 0 or not start > 0:
        raise DataError("the calibrated bootstrap threshold U_y is 0 (U_y_margin 0, or every factual score already "
                        "equals the target), so UCL_y < U_y can never hold; set U_y_margin > 0 or pass U_y (> 0)")
    return float(min(np.sqrt(s.U_y_margin), start))


def input_threshold(ref_x: np.ndarray, s: DiscoverSettings, cert: Certificate | None = None) -> float:
    """U_x for sorted factual projections ``ref_x`` (N, n): ``s.U_x`` if given, else calibrated.

    DKW (``cert`` None or its rule ``"dkw"``): the floor of the unedited sample on those directions
    times ``1 + U_x_margin`` (squared). Bootstrap: ``sqrt(U_x_margin * mean_k Var(ref_x[k]))``
    (unsquared; the bootstrap floor of X' against itself is 0).
    """
    if s.U_x is not None:
        return float(s.U_x)
    if cert is not None and cert.rule != "dkw":
        return float(np.sqrt(s.U_x_margin * np.mean(np.var(ref_x, axis=1))))
    return float(ucl_sw2(ref_x, ref_x, s.delta, s.alpha) * (1.0 + s.U_x_margin))


def holdout_certified_x(X: np.ndarray, Xf: np.ndarray, s: DiscoverSettings, *, sets: int | None = None,
                        key: tuple[int, ...] | None = None, cert: Certificate | None = None) -> float | None:
    """Share of ``sets`` fresh sets of N directions on which ``X`` (n, d) still passes the input
    certificate against the factuals ``Xf`` (n, d): UCL_x < U_x, with U_x from
    :func:`input_threshold` on each set (the run's rule). Set k is drawn from
    ``default_rng([*key, k])``; defaults ``sets = s.holdout_sets``, ``key = (s.seed, 3)``, a
    stream the search never uses. None when ``sets`` is 0."""
    sets = s.holdout_sets if sets is None else sets
    key = (s.seed, 3) if key is None else key
    if sets == 0:
        return None
    passed = 0
    for k in range(sets):
        theta = random_directions(Xf.shape[1], s.n_projections, np.random.default_rng([*key, k]))
        ref = sorted_projections(Xf, theta)
        if cert is None:
            passed += ucl_sw2(sorted_projections(X, theta), ref, s.delta, s.alpha) < input_threshold(ref, s)
        else:
            passed += cert.input_bound(sorted_projections(X, theta), ref) < input_threshold(ref, s, cert)
    return passed / sets


def directions_at(d: int, s: DiscoverSettings, t: int) -> np.ndarray:
    """The N directions (N, d) of outer iteration ``t``: the run's one set (stream ``[seed, 4]``), or
    with ``resample_directions`` a fresh set for every iteration after the first (``[seed, 2, t]``).
    Not ``[seed, 0]``: numpy's SeedSequence drops trailing zeros, so that would be the stream of
    ``default_rng(seed)``, which a target or factual sample of the same seed may use."""
    if t == 0 or not s.resample_directions:
        return random_directions(d, s.n_projections, numpy_rng("discover.directions", seed=s.seed))
    return random_directions(d, s.n_projections, numpy_rng("discover.directions_at", seed=s.seed, t=t))


class _Objective:
    """Sorted references, trimming weights and the batched candidate evaluator.

    Exact scoring of C candidates: the current sorted projections (N, n) with the k edited
    rows' values replaced are nearly sorted, so one stable (run-detecting) sort per chunk of
    candidates re-sorts them; buffers are allocated once and reused (``max_elements`` floats).
    When C * N * n exceeds ``max_elements``, all candidates are screened with the fixed-plan
    row decomposition (Prop. 3.1, O(C k N)) and only the best ``max_elements // (N n)`` are
    scored exactly; the others are marked inexact and are never selected.
    """

    def __init__(self, theta: np.ndarray, ref_x: np.ndarray, ref_y: np.ndarray, w: np.ndarray,
                 max_elements: int) -> None:
        self.theta = theta
        self.ref_x = ref_x  # (N, n) sorted factual projections
        self.ref_y = ref_y  # (n,) sorted targets
        self.w = w
        N, n = ref_x.shape
        self.chunk = max(1, max_elements // (N * n))
        self._buf: np.ndarray | None = None

    def _buffer(self, c: int) -> np.ndarray:
        N, n = self.ref_x.shape
        if self._buf is None or self._buf.shape[0] < c:
            self._buf = np.empty((max(c, 1), N, n))
        return self._buf[:c]

    def qx_exact(self, m: Matching, rows: np.ndarray, Pc: np.ndarray) -> np.ndarray:
        """Exact Qx of C candidates whose rows ``rows`` have projections ``Pc`` (C, k, N). Shape (C,)."""
        C, k, N = Pc.shape
        n = self.ref_x.shape[1]
        pos = m.rank_x[:, rows]  # (N, k)
        out = np.empty(C)
        for c0 in range(0, C, self.chunk):
            part = Pc[c0:c0 + self.chunk].transpose(0, 2, 1)  # (c, N, k)
            arr = self._buffer(part.shape[0])
            np.copyto(arr, m.sorted_x[None])
            np.put_along_axis(arr, np.broadcast_to(pos, part.shape), part, axis=2)
            arr.sort(axis=2, kind="stable")  # nearly sorted: k values moved per direction
            np.subtract(arr, self.ref_x, out=arr)
            np.square(arr, out=arr)
            out[c0:c0 + self.chunk] = (arr.reshape(-1, n) @ self.w).reshape(-1, N).mean(axis=1)
        return out

    def qy_exact(self, m: Matching, rows: np.ndarray, yc: np.ndarray) -> np.ndarray:
        """Exact Qy of C candidates whose rows ``rows`` score ``yc`` (C, k). Shape (C,)."""
        arr = np.repeat(m.sorted_y[None], yc.shape[0], axis=0)
        arr[:, m.rank_y[rows]] = yc
        arr.sort(axis=1, kind="stable")
        np.subtract(arr, self.ref_y, out=arr)
        np.square(arr, out=arr)
        return arr @ self.w

    def row_deltas(self, m: Matching, rows: np.ndarray, Pc: np.ndarray,
                   yc: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Change of q_i^(x) and q_i^(y) of each edited row under the fixed plans. Shapes (C, k)."""
        N = Pc.shape[2]
        tx = np.take_along_axis(self.ref_x, m.rank_x[:, rows], axis=1).T  # (k, N)
        wx = m.wx[:, rows].T  # (k, N)
        dqx = (wx * ((Pc - tx) ** 2 - m.resid_x[:, rows].T ** 2)).sum(axis=2) / N
        dqy = m.wy[rows] * ((yc - self.ref_y[m.rank_y[rows]]) ** 2 - m.resid_y[rows] ** 2)
        return dqx, dqy

    def evaluate(self, m: Matching, rows: np.ndarray, eta: float, Pc: np.ndarray, yc: np.ndarray,
                 qx0: float) -> Evaluation:
        """Score C candidates (see the class docstring)."""
        C = Pc.shape[0]
        dqx, dqy = self.row_deltas(m, rows, Pc, yc)
        qy = self.qy_exact(m, rows, yc)
        exact = np.ones(C, dtype=bool)
        if C <= self.chunk:
            qx = self.qx_exact(m, rows, Pc)
        else:
            qx = qx0 + dqx.sum(axis=1)  # fixed-plan screen
            best = np.argsort((1.0 - eta) * qx + eta * qy, kind="stable")[:self.chunk]
            exact[:] = False
            exact[best] = True
            qx[best] = self.qx_exact(m, rows, Pc[best])
        return Evaluation(Q=(1.0 - eta) * qx + eta * qy, Qx=qx, Qy=qy, y=yc,
                          dq=(1.0 - eta) * dqx + eta * dqy, exact=exact)

    def current(self, m: Matching, rows: np.ndarray, P: np.ndarray, y: np.ndarray) -> tuple[float, float]:
        """(Qx, Qy) of the current iterate through the candidate path (the no-op candidate)."""
        return (float(self.qx_exact(m, rows, P[rows][None])[0]),
                float(self.qy_exact(m, rows, y[rows][None])[0]))


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

    def _evaluate(self, obj: _Objective, m: Matching, rows: np.ndarray, eta: float, qx0: float,
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
        obj = _Objective(theta, ref_x, ref_y, w, s.max_elements)
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

        log = pd.DataFrame.from_records(records).drop(columns=["improvement"], errors="ignore")
        # pick the returned iterate: best feasible edited one under the final eta, else the last
        scored = [(1.0 - eta) * rec["OT_x"] + eta * rec["OT_y"] for rec in records]
        certified = [i for i, rec in enumerate(records) if rec["feasible"] and rec["edited_rows"] > 0]
        ok = [i for i in certified if s.at_level(records[i]["OT_y_metric"])] or certified
        best = min(ok, key=lambda i: (scored[i], i)) if ok else len(records) - 1
        for t_edit, rows, old_x, old_y in reversed(history):
            if t_edit < best:
                break
            X[rows], y[rows] = old_x, old_y
        feasible = bool(records[best]["feasible"] and records[best]["edited_rows"] > 0)
        accepted_at = [rec["iteration"] for rec in records if rec["accepted"]]
        if not feasible:
            warnings.warn(not_certified_message(records, U_y, accepted_at), NotCertifiedWarning, stacklevel=2)
        metrics = result_metrics(X, Xf, y, ystar, self.schema, s, records[best], records[best]["U_x"], U_y, eta,
                                 embed=self.embed, cert=cert)
        metrics.update(both_verdicts(run.embedded(X), EXf, y, ystar, s, run, feasible))
        metrics["feasible"] = feasible
        metrics["iterations_run"] = len(records) - 1
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


def sampled_rows(scores: np.ndarray, k: int, rng: np.random.Generator) -> np.ndarray:
    """``k`` distinct rows drawn with probability proportional to their scores q_i (n,) (Gumbel top-k);
    rows with q_i = 0 only after every positive one. Shape (k,), int64."""
    q = np.maximum(np.asarray(scores, dtype=float), 0.0)
    with np.errstate(divide="ignore"):
        keys = np.log(q) - np.log(-np.log(rng.uniform(np.finfo(float).tiny, 1.0, len(q))))
    keys = np.where(q > 0, keys, -np.inf)
    order = np.lexsort((np.arange(len(q)), -keys))  # ties (all -inf) by row index
    return order[:k].astype(np.int64)


def replace_settings(settings: DiscoverSettings, **changes: Any) -> DiscoverSettings:
    """A copy of ``settings`` with some fields changed (validated)."""
    return dataclasses.replace(settings, **changes)


__all__ = ["Discover", "DiscoverResult", "NotCertifiedWarning", "UnreachableCertificateWarning", "encode_factuals",
           "favourable_scores",
           "holdout_certified_x", "log_shortfall", "original_frame", "resolve_target", "stop_level_reached"]
