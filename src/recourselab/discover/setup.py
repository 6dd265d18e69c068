"""DISCOVER's run set-up: encoded factuals, scores, the target draw, directions, thresholds and the query budget.

Shared by :class:`~recourselab.discover.solver.Discover` and :class:`~recourselab.discover.dce.DCE`.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from recourselab.data.rows import encode_rows
from recourselab.data.schema import Schema
from recourselab.discover.certify import Certificate, ucl_sw2, ucl_w2
from recourselab.discover.ot import random_directions, sorted_projections, trim_weights
from recourselab.discover.proposals import ProposalSpace, check_actionability
from recourselab.discover.settings import DiscoverSettings
from recourselab.discover.targets import Target, make_target
from recourselab.errors import DataError
from recourselab.models.oracle import QueryBudgetExceeded
from recourselab.rng import numpy_rng

logger = logging.getLogger(__name__)


class NotCertifiedWarning(UserWarning):
    """The run ended without a certified-feasible iterate."""


class UnreachableCertificateWarning(UserWarning):
    """Before the search: a threshold that no iterate can meet (its floor is already above it)."""



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
