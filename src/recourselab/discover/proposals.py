"""OT-guided cone sampling: the proposal primitive shared by every strategy.

Numerical features: a direction ``u`` is drawn **uniformly inside** the cone of half-angle
``phi`` around ``-g_i`` (``g`` = input-side guidance field restricted to the mutable
numerical coordinates; isotropic when ``g_i = 0`` or guidance is off), restricted to the
row's edited numerical features and renormalised, then
``x_p <- clip(x_p + lambda * (R_max - R_min)_p * u_p, R_min, R_max)`` with
``lambda ~ U(0, step)``; integer features are rounded in original units.

Categorical features (one (cos, sin) phase pair = one feature, always moved as a unit): a
fixed seeded embedding ``E_p`` (|V_p| x r). The guidance on the phase pair is mapped to the
embedding space as ``a = sum_v s_v (E_p[v] - E_p[cur])`` with ``s_v = <-g_pair, phase_v - phase_cur>``
(first-order decrease of SW^2 when switching to ``v``); a direction is drawn in the cone
around ``a``, ``z = E_p[cur] + lambda_c u`` with ``lambda_c ~ U(0, categorical_step)``, and the
new level is sampled with ``p(v) ~ exp(-||E_p[v] - z||^2 / tau)`` over the row's allowed
levels, written back as that level's exact phase pair.

Restart moves (``restart_prob``): a numerical move of an edited row may first jump to the values
of a random factual row (the donor, one per edited row and candidate) and take its cone step from
there, as the DISCOVER reference code's continuous moves do.

With an ``embed`` (the input-side transport measured in another space), the guidance is pulled
back to the mutable features (:meth:`ProposalSpace.pull_back`): a numerical feature gets the
directional derivative of the embedded row, a categorical the exact change of ``<-g, embed(x)>``
when the row switches to each level.

Immutable (schema) and ``"fixed"`` features are never proposed; ``"increasing"`` /
``"decreasing"`` rules bound each row by its factual value (numerical) or level index
(categorical), so every proposal is actionable by construction.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from scipy.special import betainc, betaincinv

from recourselab.data.schema import Schema
from recourselab.discover.settings import DiscoverSettings
from recourselab.errors import DataError
from recourselab.rng import numpy_rng

logger = logging.getLogger(__name__)

_TINY = 1e-12


def embedding_dim(n_levels: int) -> int:
    """Deterministic rule for r: min(|V|, max(2, ceil(log2 |V|) + 1))."""
    return int(min(n_levels, max(2, math.ceil(math.log2(max(n_levels, 2))) + 1)))


def sample_cone(axis: np.ndarray, phi: float, rng: np.random.Generator) -> np.ndarray:
    """Unit vectors uniform inside the cone of half-angle ``phi`` around ``axis``.

    Parameters
    ----------
    axis : ndarray (..., m); rows of (near) zero norm get directions uniform on the sphere.
    phi : half-angle in (0, pi]; ``pi`` gives the whole sphere.

    Returns
    -------
    ndarray (..., m) of unit vectors.

    Notes
    -----
    On S^{m-1}, ``(1 - cos angle) / 2 ~ Beta((m-1)/2, (m-1)/2)``; it is drawn truncated to
    ``angle <= phi`` by inverse CDF, then combined with a uniform direction orthogonal to the axis.
    """
    axis = np.asarray(axis, dtype=float)
    m = axis.shape[-1]
    z = rng.standard_normal(axis.shape)
    unif = rng.random(axis.shape[:-1])
    norm = np.linalg.norm(axis, axis=-1, keepdims=True)
    guided = norm[..., 0] > _TINY
    if m == 1:
        flip = np.where(unif < 0.5, 1.0, -1.0)
        sign = np.where(guided & (phi < math.pi), np.sign(axis[..., 0]), flip)  # S^0: -axis is pi away
        return sign[..., None]
    znorm = np.linalg.norm(z, axis=-1, keepdims=True)
    uniform = z / np.where(znorm > 0, znorm, 1.0)
    if phi >= math.pi:
        return uniform
    a = axis / np.where(guided[..., None], norm, 1.0)
    half = 0.5 * (m - 1)
    cap = betainc(half, half, 0.5 * (1.0 - math.cos(phi)))
    s = betaincinv(half, half, unif * cap)
    t = np.clip(1.0 - 2.0 * s, -1.0, 1.0)
    v = z - (z * a).sum(axis=-1, keepdims=True) * a
    vnorm = np.linalg.norm(v, axis=-1, keepdims=True)
    v = v / np.where(vnorm > 0, vnorm, 1.0)
    cone = t[..., None] * a + np.sqrt(1.0 - t ** 2)[..., None] * v
    return np.where(guided[..., None], cone, uniform)


@dataclass(frozen=True)
class CategoricalFeature:
    """A mutable categorical feature of the proposal space.

    Attributes
    ----------
    name : feature name; cols : its (cos, sin) encoded columns.
    phases : (L, 2) exact phase pair of every level.
    embedding : (L, r) fixed seeded embedding E_p.
    allowed : (n, L) levels each factual row may take (actionability).
    """

    name: str
    cols: tuple[int, int]
    phases: np.ndarray
    embedding: np.ndarray
    allowed: np.ndarray

    def levels_of(self, X: np.ndarray) -> np.ndarray:
        """Level index nearest in phase to encoded rows ``X`` (..., d). Shape (...)."""
        L = self.phases.shape[0]
        angle = np.arctan2(X[..., self.cols[1]], X[..., self.cols[0]])
        return np.mod(np.rint(angle * L / (2 * math.pi)), L).astype(np.int64)


def check_actionability(schema: Schema, settings: DiscoverSettings, *, warn: bool = True) -> None:
    """Raise a :class:`DataError` if an actionability rule names a feature the schema lacks or goes
    against one of the schema's monotone rules (only ``"fixed"`` or the same direction may name such a
    feature); with ``warn``, log rules on immutable features (they never move, whatever the rule says)."""
    unknown = sorted(set(settings.actionability) - set(schema.feature_names))
    if unknown:
        raise DataError(f"actionability names unknown features {unknown}; features: {schema.feature_names}")
    against = {f.name: (f.monotone, settings.actionability[f.name]) for f in schema.features
               if f.monotone and settings.actionability.get(f.name, "fixed") not in ("fixed", f.monotone)}
    if against:
        raise DataError("actionability goes against the schema's monotone rules "
                        + ", ".join(f"{n}: {rule} (schema: {mono})" for n, (mono, rule) in against.items())
                        + "; lift a rule under prepare.monotone (null), not here")
    fixed = [f.name for f in schema.features if f.immutable and f.name in settings.actionability]
    if fixed and warn:
        logger.warning("actionability rules on immutable features %s have no effect: immutable features never "
                       "change", fixed)


def actionability_rules(schema: Schema, settings: DiscoverSettings) -> dict[str, str]:
    """Feature -> rule of one run: the schema's monotone features, with ``settings.actionability`` on top."""
    return {**{f.name: f.monotone for f in schema.features if f.monotone}, **settings.actionability}


class ProposalSpace:
    """Mutable features, bounds and embeddings of one run; applies the cone-sampling primitive.

    Parameters
    ----------
    schema : encoded layout.
    factuals : encoded factual rows (n, d) (bounds and actionability are per row).
    settings : solver settings (cone angle, steps, temperature, actionability...); the schema's
        monotone features follow their rule unless ``settings.actionability`` fixes them.
    """

    def __init__(self, schema: Schema, factuals: np.ndarray, settings: DiscoverSettings) -> None:
        self.settings = settings
        check_actionability(schema, settings, warn=False)  # the solvers warned before querying the model
        rules = actionability_rules(schema, settings)
        train_lo, train_hi = schema.encoded_bounds()
        lo = np.minimum(train_lo, factuals.min(axis=0))  # the sample-wide range sets the step scale
        hi = np.maximum(train_hi, factuals.max(axis=0))
        slices = schema.slices()
        num_cols, num_int, num_mean, num_std, num_names = [], [], [], [], []
        cats: list[CategoricalFeature] = []
        n = factuals.shape[0]
        for fi, f in enumerate(schema.features):
            rule = rules.get(f.name)
            if f.immutable or rule == "fixed":
                continue
            sl = slices[f.name]
            if f.kind == "numerical":
                if not settings.edit_numerical or hi[sl.start] <= lo[sl.start]:  # off, or constant: cannot move
                    continue
                num_cols.append(sl.start)
                num_int.append(f.integer)
                num_mean.append(f.mean)
                num_std.append(f.std)
                num_names.append(f.name)
            else:
                if not settings.edit_categorical or len(f.levels) < 2:
                    continue
                L = len(f.levels)
                ang = 2 * math.pi * np.arange(L) / L
                phases = np.column_stack([np.cos(ang), np.sin(ang)])
                r = settings.embedding_dim or embedding_dim(L)
                emb = numpy_rng("discover.embedding", seed=settings.seed, feature=fi).standard_normal((L, r))
                emb /= math.sqrt(r)
                allowed = np.ones((n, L), dtype=bool)
                if rule in ("increasing", "decreasing"):
                    cat = CategoricalFeature(f.name, (sl.start, sl.start + 1), phases, emb, allowed)
                    fact = cat.levels_of(factuals)[:, None]
                    idx = np.arange(L)[None, :]
                    allowed = idx >= fact if rule == "increasing" else idx <= fact
                cats.append(CategoricalFeature(f.name, (sl.start, sl.start + 1), phases, emb, allowed))
        self.num_cols = np.array(num_cols, dtype=np.int64)
        self.num_names = tuple(num_names)
        self.num_integer = np.array(num_int, dtype=bool)
        self.num_mean = np.array(num_mean, dtype=float)
        self.num_std = np.array(num_std, dtype=float)
        self.num_range = (hi - lo)[self.num_cols]
        if settings.step_range == "factuals":  # the sample's own spread; constant features keep the training range
            spread = np.ptp(factuals[:, self.num_cols], axis=0)
            # an integer feature's full step reaches at least one unit (in z-units 1 / std): otherwise every
            # move of a count spanning a unit or two in the sample would round back to its current value
            unit = np.where(self.num_integer, 1.0 / (settings.step * self.num_std), 0.0)
            self.num_range = np.where(spread > 0, np.minimum(np.maximum(spread, unit), self.num_range),
                                      self.num_range)
        # each row's bounds: the training range, widened only to that row's own factual value, so that one
        # out-of-range factual neither gets clipped nor lets the other rows leave the training range
        row_lo = np.minimum(train_lo[self.num_cols], factuals[:, self.num_cols])
        row_hi = np.maximum(train_hi[self.num_cols], factuals[:, self.num_cols])
        for j, name in enumerate(num_names):
            rule = rules.get(name)
            if rule == "increasing":
                row_lo[:, j] = np.maximum(row_lo[:, j], factuals[:, self.num_cols[j]])
            elif rule == "decreasing":
                row_hi[:, j] = np.minimum(row_hi[:, j], factuals[:, self.num_cols[j]])
        self.row_lo, self.row_hi = row_lo, row_hi
        self.factual_num = factuals[:, self.num_cols].copy()  # donors of restart moves
        self.cats = tuple(cats)
        self.n_features = len(num_cols) + len(cats)
        if self.n_features == 0:
            raise DataError("no feature can be edited: every feature is immutable, fixed, excluded or constant")
        mutable = np.zeros(schema.n_encoded, dtype=bool)
        mutable[self.num_cols] = True
        for c in cats:
            mutable[list(c.cols)] = True
        self.mutable_mask = mutable

    # ------------------------------------------------------------------ feature choice
    @property
    def feature_names(self) -> tuple[str, ...]:
        """Mutable features in proposal order: numerical first, then categorical."""
        return self.num_names + tuple(c.name for c in self.cats)

    def choose(self, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
        """``min(h, F)`` distinct mutable features per row. Bool (..., F).

        Uniform draws without replacement (the ``h`` smallest of ``F`` uniform keys).
        """
        F = self.n_features
        h = min(self.settings.h, F)
        keys = rng.random((*shape, F))
        kth = np.sort(keys, axis=-1)[..., h - 1:h]
        return keys <= kth

    def edited(self, cands: np.ndarray, base: np.ndarray) -> np.ndarray:
        """Mutable features where ``cands`` (..., k, d) differs from ``base`` (k, d). Bool (..., k, F)."""
        diff = cands != base
        parts = [diff[..., self.num_cols]] + [diff[..., list(c.cols)].any(axis=-1, keepdims=True)
                                               for c in self.cats]
        return np.concatenate(parts, axis=-1)

    # ------------------------------------------------------------------ primitive
    def numerical_values(self, values: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """Encoded numerical values (..., k, n_numerical) of factual rows ``rows`` (k,) made valid:
        kept in each row's bounds (the training range widened to the factual sample's values,
        narrowed by actionability), integer features rounded in original units."""
        val = np.clip(values, self.row_lo[rows], self.row_hi[rows])
        if self.num_integer.any():
            orig = np.rint(val * self.num_std + self.num_mean)
            rounded = np.clip((orig - self.num_mean) / self.num_std, self.row_lo[rows], self.row_hi[rows])
            val = np.where(self.num_integer, rounded, val)
        return val

    def pull_back(self, embed: Callable[[np.ndarray], np.ndarray], base: np.ndarray,
                  g: np.ndarray) -> tuple[np.ndarray, tuple[np.ndarray, ...]]:
        """Guidance ``g`` (k, D) of the embedded rows ``embed(base)`` pulled back to the mutable features.

        Returns
        -------
        g_enc : (k, d), on the numerical columns the directional derivative
            ``(embed(x + h e_j) - embed(x)) / h . g`` (h = 1e-3); zero elsewhere.
        level_scores : per mutable categorical, (k, L): ``-g . embed(x with level v)``; switching a row
            from level a to b changes the embedded objective by about ``-(score_b - score_a)``.
        """
        k, d = base.shape
        variants = []
        h = 1e-3
        for col in self.num_cols:
            v = base.copy()
            v[:, col] += h
            variants.append(v)
        for cat in self.cats:
            for ph in cat.phases:
                v = base.copy()
                v[:, list(cat.cols)] = ph
                variants.append(v)
        stack = np.concatenate([base[None], *[v[None] for v in variants]])  # (1 + V, k, d)
        E = np.asarray(embed(stack.reshape(-1, d)), dtype=float).reshape(len(stack), k, -1)
        g_enc = np.zeros((k, d))
        for j, col in enumerate(self.num_cols):
            g_enc[:, col] = ((E[1 + j] - E[0]) / h * g).sum(axis=-1)
        scores, at = [], 1 + len(self.num_cols)
        for cat in self.cats:
            L = len(cat.phases)
            scores.append(-(E[at:at + L] * g[None]).sum(axis=-1).T)  # (k, L)
            at += L
        return g_enc, tuple(scores)

    def perturb(self, base: np.ndarray, rows: np.ndarray, g: np.ndarray, chosen: np.ndarray,
                rng: np.random.Generator, level_scores: tuple[np.ndarray, ...] | None = None) -> np.ndarray:
        """Apply one cone-guided step to the ``chosen`` features of ``base``.

        Parameters
        ----------
        base : candidate rows (C, k, d), edited in a copy.
        rows : factual row indices (k,) of the k editable rows (bounds, allowed levels).
        g : guidance field on those rows (k, d) (the gradient of SW^2; moves follow -g).
        chosen : (C, k, F) bool, features to move (see :meth:`choose`).
        level_scores : per mutable categorical (k, L), the guidance on its levels from :meth:`pull_back`;
            None: from ``g`` on the categorical's phase pair.

        Returns
        -------
        ndarray (C, k, d).
        """
        s = self.settings
        out = base.copy()
        C, k, _ = base.shape
        Fn = len(self.num_cols)
        if Fn:
            sel = chosen[..., :Fn]
            axis = np.broadcast_to(-g[:, self.num_cols], (C, k, Fn)) if s.guidance else np.zeros((C, k, Fn))
            u = sample_cone(axis, s.cone_angle, rng) * sel
            norm = np.linalg.norm(u, axis=-1, keepdims=True)
            u = u / np.where(norm > 0, norm, 1.0)
            lam = rng.uniform(0.0, s.step, (C, k, 1))
            cur = base[..., self.num_cols]
            start = cur
            if s.restart_prob > 0:  # jump to a random factual row's values first (one donor per row)
                restart = rng.random((C, k, 1)) < s.restart_prob
                donor = rng.integers(0, len(self.factual_num), (C, k))
                start = np.where(restart, self.factual_num[donor], cur)
            val = self.numerical_values(start + lam * self.num_range * u, rows)
            out[..., self.num_cols] = np.where(sel, val, cur)
        for j, cat in enumerate(self.cats):
            sel = chosen[..., Fn + j]
            cur = cat.levels_of(base)  # (C, k)
            E, ph = cat.embedding, cat.phases
            if s.guidance and level_scores is not None:
                ls = level_scores[j]  # (k, L)
                score = ls[None, :, :] - np.take_along_axis(np.broadcast_to(ls, (C, *ls.shape)), cur[..., None], axis=2)
                a = score @ E - score.sum(axis=-1, keepdims=True) * E[cur]
            elif s.guidance:
                gp = -g[:, list(cat.cols)]  # (k, 2)
                score = (ph[None, None, :, :] - ph[cur][..., None, :]) @ gp[None, :, :, None]  # (C,k,L,1)
                score = score[..., 0]
                a = score @ E - score.sum(axis=-1, keepdims=True) * E[cur]
            else:
                a = np.zeros((C, k, E.shape[1]))
            u = sample_cone(a, s.cone_angle, rng)
            lam = rng.uniform(0.0, s.categorical_step, (C, k, 1))
            z = E[cur] + lam * u
            dist = ((E[None, None, :, :] - z[..., None, :]) ** 2).sum(axis=-1)  # (C, k, L)
            dist = np.where(cat.allowed[rows][None, :, :], dist, np.inf)
            # relative to the nearest allowed level: a tiny temperature cannot make every logit -inf
            with np.errstate(over="ignore"):  # far levels of a tiny temperature: -inf, never drawn
                logits = -(dist - dist.min(axis=-1, keepdims=True)) / s.temperature
            gumbel = -np.log(-np.log(rng.uniform(np.finfo(float).tiny, 1.0, logits.shape)))
            level = np.argmax(logits + gumbel, axis=-1)
            new = ph[level]  # (C, k, 2)
            for c_i, col in enumerate(cat.cols):
                out[..., col] = np.where(sel, new[..., c_i], base[..., col])
        return out

    def propose(self, base_rows: np.ndarray, rows: np.ndarray, g: np.ndarray, M: int,
                rng: np.random.Generator, level_scores: tuple[np.ndarray, ...] | None = None) -> np.ndarray:
        """``M`` candidates: every editable row moves ``h`` random mutable features. Shape (M, k, d)."""
        k = base_rows.shape[0]
        base = np.broadcast_to(base_rows, (M, *base_rows.shape))
        return self.perturb(base, rows, g, self.choose((M, k), rng), rng, level_scores)


__all__ = ["CategoricalFeature", "ProposalSpace", "actionability_rules", "check_actionability", "embedding_dim",
           "sample_cone"]
