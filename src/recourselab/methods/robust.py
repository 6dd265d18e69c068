"""RobustFlow (``densityflow_r``): DensityFlow counterfactuals, verified by the ensemble, repaired where not unanimous.

DensityFlow optimises its surrogate's validity, which tracks the ensemble's *mean* vote; a row that
one member rejects is still invalid for a user who needs recourse that holds across the models.
RobustFlow targets agreement:

1. DensityFlow moves every factual (no oracle query).
2. The ensemble checks each counterfactual once (one query per row).
3. A row that is not unanimous is pushed further along its own move: the points
   ``x + t (x' - x)`` for the factors ``extend`` in increasing order, one query per row and
   factor, until one is unanimous.
4. A row still not unanimous is repaired towards an *anchor*: the nearest point (L2 from the
   factual) that the ensemble has labelled its target unanimously and that has the factual's
   immutable values. Anchors are the unanimous counterfactuals of step 2 (no extra query) and up
   to ``pool`` nearest training rows per repaired row (target class first, distance over the
   mutable columns) with the factual's immutable values copied in, which the ensemble labels now
   (one query per distinct point); rows still without an anchor label their next ``pool``
   candidates, for at most ``rounds`` rounds.
5. A bisection of ``steps`` queries per row on the segment factual -> its point of steps 3-4
   keeps the closest point found unanimous; with ``shrink`` > 0 the rows unanimous in step 2 get
   a bisection of ``shrink`` queries on their own segment factual -> x' (DensityFlow's
   counterfactuals overshoot the boundary). Every probe is snapped to a valid point.
6. With ``shortcut`` > 0, every unanimous row also tries its nearest anchor: each row's nearest
   target-class training row is labelled (one query per distinct point), and a bisection of
   ``shortcut`` queries on the segment factual -> nearest anchor replaces the row's point when it
   ends closer to the factual (the density-guided move can take a longer way round than a straight
   line to the other class).

Queries counted: the verification, the extension probes, the anchor labels and the bisection probes (the upstream
distillation queries are the flow's ``queries_used_``, reported in ``log``). Setting ``paper``
(``repair=False``) is DensityFlow as published: no verification, no repair, no query.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from recourselab.data.schema import Schema
from recourselab.errors import DataError
from recourselab.methods.base import Counterfactuals
from recourselab.methods.common import (
    SEARCH_BUDGET,
    Search,
    check_budget,
    encode_factuals_and_targets,
    encode_train,
    member_votes,
    resolve_schema,
    result,
    valid_points,
)
from recourselab.models.oracle import BlackBox, QueryBudgetExceeded

log = logging.getLogger(__name__)

NAME = "densityflow_r"


@dataclass(frozen=True)
class RobustSettings:
    """Settings of :class:`RobustFlow`.

    Attributes
    ----------
    repair : verify and repair (False: DensityFlow as published, no query).
    extend : factors t > 1 tried in order on a non-unanimous row's move, x + t (x' - x).
    pool : training rows per repaired row and round that the ensemble labels as anchor candidates (0: only
        the unanimous counterfactuals of other rows are anchors).
    rounds : rounds of ``pool`` labels; a round labels the next candidates of the rows still without an anchor
        (rows anchored in an earlier round cost nothing more).
    steps : bisection probes per repaired row on the segment factual -> repaired point (0: that point).
    shrink : bisection probes per row that was unanimous at once, on the segment factual -> x' (0: x' kept).
    shortcut : bisection probes per unanimous row on the segment factual -> its nearest anchor, kept when
        closer (0: no shortcut).
    """

    repair: bool = True
    extend: tuple[float, ...] = (1.25, 1.5, 2.0)
    pool: int = 3
    rounds: int = 8
    steps: int = 5
    shrink: int = 4
    shortcut: int = 8

    def __post_init__(self) -> None:
        for name in ("pool", "rounds", "steps", "shrink", "shortcut"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 0:
                raise DataError(f"{NAME}: {name} must be an integer >= 0, got {v!r}")
        ext = tuple(self.extend)
        if any(not np.isfinite(t) or t <= 1 for t in ext) or list(ext) != sorted(set(ext)):
            raise DataError(f"{NAME}: extend must be increasing factors > 1, got {self.extend!r}")


#: Named settings: ``paper`` reproduces DensityFlow's defaults, ``default`` is the robust method; the others
#: trace its frontier (fewer queries, or anchors only).
SETTINGS = {"paper": RobustSettings(repair=False), "default": RobustSettings(),
            "no_shrink": RobustSettings(shrink=0, shortcut=0),
            "no_shortcut": RobustSettings(shortcut=0),
            "anchors_only": RobustSettings(extend=(), shrink=0, steps=6, shortcut=0),
            "lean": RobustSettings(extend=(1.5,), pool=1, rounds=6, steps=3, shrink=2, shortcut=2),
            "thorough": RobustSettings(extend=(1.1, 1.25, 1.5, 2.0, 3.0), pool=8, steps=7, shrink=6)}


class RobustFlow:
    """DensityFlow with ensemble verification and anchor repair (see module docstring).

    Parameters
    ----------
    flow : a fitted (and usually distilled) :class:`~recourselab.densityflow.DensityFlow`.
    oracle : the ensemble; every search query goes through it under ``budget_name``.
    X_train, y_train : (m, d) encoded training rows and (m,) labels: the anchor candidates.
    schema : the dataset schema (default: the oracle's).
    settings : a :class:`RobustSettings` or the name of one of :data:`SETTINGS`.
    """

    name = NAME

    def __init__(self, flow: Any, oracle: BlackBox, X_train: np.ndarray | pd.DataFrame, y_train: Any, *,
                 schema: Schema | None = None, settings: RobustSettings | str = "default",
                 budget_name: str = SEARCH_BUDGET) -> None:
        self.schema = resolve_schema(oracle, schema, NAME)
        if isinstance(settings, str):
            if settings not in SETTINGS:
                raise DataError(f"{NAME}: unknown setting {settings!r}; valid settings: {', '.join(SETTINGS)}")
            settings = SETTINGS[settings]
        self.settings = settings
        self.flow = flow
        self.oracle = oracle
        self.budget_name = budget_name
        self.X_train, self.y_train = encode_train(X_train, y_train, self.schema, NAME)
        self._immutable = self.schema.immutable_mask()
        self._monotone = self.schema.monotone_signs()

    def explain(self, factuals: np.ndarray | pd.DataFrame, target: Any = None, *,
                budget: int | None = None) -> Counterfactuals:
        """Counterfactuals of ``factuals`` (n, d) towards ``target`` (class per row, one class, or None: favourable).

        With ``budget`` the search sends at most that many oracle rows: the verification needs n
        (QueryBudgetExceeded before any query otherwise); anchor labels and probes use what is left.
        """
        t0 = time.perf_counter()
        budget = check_budget(budget, NAME)
        X, tgt = encode_factuals_and_targets(factuals, target, self.schema, NAME)
        search = Search(self.oracle, self.budget_name, budget, NAME)
        if self.settings.repair:
            left = search.remaining()
            if left is not None and left < len(X):
                raise QueryBudgetExceeded(f"{NAME}: verifying {len(X)} counterfactuals needs {len(X)} oracle rows, "
                                          f"only {left} are left; raise budget= or use setting 'paper'")
        base = self.flow.generate(X, tgt)
        cf = base.counterfactuals.copy()
        info: dict[str, Any] = {"distill_queries": int(getattr(self.flow, "queries_used_", 0))}
        valid = None
        if self.settings.repair:
            votes = member_votes(search.query(cf), tgt)
            ok = votes == self.oracle.n_members
            info["unanimous_before_repair"] = float(ok.mean())
            cf, ok, repair_log = self._repair(X, tgt, cf, ok, search)
            info |= repair_log
            valid = ok
        return result(NAME, self.schema, factuals, X, cf, tgt, search.rows, time.perf_counter() - t0, valid,
                      info, base)

    # ------------------------------------------------------------------ repair
    def _allowed(self, A: np.ndarray, x: np.ndarray) -> np.ndarray:
        """Which points of ``A`` (k, d) may answer factual ``x`` (d,): its immutables, and no monotone feature on
        the forbidden side of ``x``'s value. Shape (k,)."""
        ok = np.ones(len(A), dtype=bool)
        imm, ruled = self._immutable, self._monotone != 0
        if imm.any():
            ok &= np.isclose(A[:, imm], x[imm], rtol=0.0, atol=1e-9).all(axis=1)
        if ruled.any():
            ok &= ((x[ruled] - A[:, ruled]) * self._monotone[ruled] <= 1e-9).all(axis=1)
        return ok

    def _label_pool(self, X: np.ndarray, tgt: np.ndarray, bad: np.ndarray, search: Search,
                    start: int = 0, k: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Anchor candidates labelled now: for each row of ``bad``, its nearest training rows number ``start`` to
        ``start + k`` (default ``pool``; target class first, distance over the mutable columns) with the factual's
        immutable values copied in. Returns the distinct candidate points (k, d) and their member labels (M, k)."""
        k = self.settings.pool if k is None else k
        empty = np.empty((0, X.shape[1])), np.empty((self.oracle.n_members, 0), np.int64)
        if k == 0 or not len(bad):
            return empty
        mutable = ~self._immutable
        points = []
        for i in bad:
            d = np.linalg.norm(self.X_train[:, mutable] - X[i, mutable], axis=1)
            picked = np.lexsort((d, self.y_train != tgt[i]))[start:start + k]  # the target class first
            if not len(picked):
                continue
            points.append(valid_points(self.X_train[picked], np.repeat(X[i:i + 1], len(picked), axis=0),
                                       self.schema))
        if not points:
            return empty
        P = np.unique(np.concatenate(points), axis=0)
        left = search.remaining()
        if left is not None:
            P = P[:max(left - len(bad) * self.settings.steps, 0)]
        if not len(P):
            return empty
        return P, search.query(P).member_labels

    def _bisect(self, X: np.ndarray, tgt: np.ndarray, ends: np.ndarray, lo: np.ndarray, steps: int,
                search: Search) -> np.ndarray:
        """Closest unanimous point found by ``steps`` bisection probes on each segment X -> ends (m rows, each end
        unanimous, ``lo`` (m,) a fraction known not to be); the ends where no probe is."""
        best = ends.copy()
        hi = np.ones(len(X))
        for _ in range(steps):
            left = search.remaining()
            if not len(X) or (left is not None and left < len(X)):
                break
            mid = (lo + hi) / 2
            probe = valid_points(X + mid[:, None] * (ends - X), X, self.schema)
            good = member_votes(search.query(probe), tgt) == self.oracle.n_members
            best[good] = probe[good]
            hi = np.where(good, mid, hi)
            lo = np.where(good, lo, mid)
        return best

    def _extend(self, X: np.ndarray, tgt: np.ndarray, cf: np.ndarray, ok: np.ndarray,
                search: Search) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Step 3: rows of ``~ok`` pushed along their move. Returns the points, whether each is unanimous now and
        the known-invalid fraction of its segment (for the bisection)."""
        points, lo = cf.copy(), np.zeros(len(X))
        ok = ok.copy()
        prev = np.ones(len(X))
        for t in self.settings.extend:
            rows = np.flatnonzero(~ok)
            left = search.remaining()
            if not len(rows) or (left is not None and left < len(rows)):
                break
            probe = valid_points(X[rows] + t * (cf[rows] - X[rows]), X[rows], self.schema)
            good = member_votes(search.query(probe), tgt[rows]) == self.oracle.n_members
            won = rows[good]
            points[won], ok[won], lo[won] = probe[good], True, prev[won] / t
            prev[rows] = t
        return points, ok, lo

    def _anchors(self, X: np.ndarray, tgt: np.ndarray, rows: np.ndarray, A: np.ndarray,
                 A_cls: np.ndarray) -> np.ndarray:
        """Index into ``A`` of the nearest anchor of each of ``rows`` (its target, its immutables, its monotone
        rules), -1 without one; (n,) for all rows of X."""
        out = np.full(len(X), -1)
        for i in rows:
            cand = np.flatnonzero((A_cls == tgt[i]) & self._allowed(A, X[i]))
            if len(cand):
                out[i] = cand[np.linalg.norm(A[cand] - X[i], axis=1).argmin()]
        return out

    def _repair(self, X: np.ndarray, tgt: np.ndarray, cf: np.ndarray, ok: np.ndarray,
                search: Search) -> tuple[np.ndarray, np.ndarray, dict[str, Any]]:
        first = ok.copy()
        cf, ok = cf.copy(), ok.copy()
        spent = {"verify": search.rows}
        points, extended, lo = self._extend(X, tgt, cf, ok, search)
        spent["extend"] = search.rows - sum(spent.values())
        by_extension = extended & ~first
        bad = np.flatnonzero(~extended)
        A, A_cls = cf[first], tgt[first]  # anchors: points the ensemble labels one class unanimously
        anchor = np.full(len(X), -1)
        labelled = 0
        for r in range(self.settings.rounds if self.settings.pool else 0):
            todo = bad[anchor[bad] < 0] if r else bad
            pool, pool_labels = self._label_pool(X, tgt, todo, search, start=r * self.settings.pool)
            if not len(pool):
                break
            labelled += len(pool)
            agreed = (pool_labels == pool_labels[:1]).all(axis=0)
            A, A_cls = np.concatenate([A, pool[agreed]]), np.concatenate([A_cls, pool_labels[0, agreed]])
            anchor = self._anchors(X, tgt, bad, A, A_cls)
            if (anchor[bad] >= 0).all():  # every row has an anchor: no further round
                break
        anchor = self._anchors(X, tgt, bad, A, A_cls)
        spent["pool"] = search.rows - sum(spent.values())
        by_anchor = anchor >= 0
        points[by_anchor] = A[anchor[by_anchor]]
        rows = np.flatnonzero(by_extension | by_anchor)
        if len(rows):
            cf[rows] = self._bisect(X[rows], tgt[rows], points[rows], lo[rows], self.settings.steps, search)
            ok[rows] = True
        kept = np.flatnonzero(first)
        if self.settings.shrink and len(kept):
            cf[kept] = self._bisect(X[kept], tgt[kept], cf[kept], np.zeros(len(kept)), self.settings.shrink, search)
        spent["bisect"] = search.rows - sum(spent.values())
        shortcuts = self._shortcut(X, tgt, cf, ok, A, A_cls, search) if self.settings.shortcut else 0
        spent["shortcut"] = search.rows - sum(spent.values())
        log.info("%s: %d of %d rows unanimous at once, %d by extension, %d by an anchor (%d training rows labelled), "
                 "%d without a unanimous point", NAME, len(kept), len(X), int(by_extension.sum()),
                 int(by_anchor.sum()), labelled, int((~ok).sum()))
        return cf, ok, {"extended": int(by_extension.sum()), "anchored": int(by_anchor.sum()),
                        "repaired": int(len(rows)), "no_anchor": int(len(bad) - by_anchor.sum()),
                        "pool_labelled": int(labelled), "shortcuts": int(shortcuts), "queries_by_step": spent}

    def _shortcut(self, X: np.ndarray, tgt: np.ndarray, cf: np.ndarray, ok: np.ndarray, A: np.ndarray,
                  A_cls: np.ndarray, search: Search) -> int:
        """Step 6, in place on ``cf``: each unanimous row bisects towards its nearest anchor and keeps the result
        when it is closer to the factual. ``A`` (k, d) / ``A_cls`` (k,): the anchors labelled so far; the unanimous
        rows' own points and each row's nearest target-class training row (labelled now) join them. Returns the
        number of rows whose point was replaced."""
        rows = np.flatnonzero(ok)
        A, A_cls = np.concatenate([A, cf[rows]]), np.concatenate([A_cls, tgt[rows]])
        pool, labels = self._label_pool(X, tgt, rows, search, k=1)  # each row's nearest target-class training row
        agreed = (labels == labels[:1]).all(axis=0)
        A, A_cls = np.concatenate([A, pool[agreed]]), np.concatenate([A_cls, labels[0, agreed]])
        anchor = self._anchors(X, tgt, rows, A, A_cls)
        rows = rows[anchor[rows] >= 0]
        ends = A[anchor[rows]]
        moved = ~np.isclose(ends, cf[rows], rtol=0.0, atol=1e-12).all(axis=1)  # not the row's own point
        rows, ends = rows[moved], ends[moved]
        if not len(rows):
            return 0
        short = self._bisect(X[rows], tgt[rows], ends, np.zeros(len(rows)), self.settings.shortcut, search)
        closer = np.linalg.norm(short - X[rows], axis=1) < np.linalg.norm(cf[rows] - X[rows], axis=1)
        cf[rows[closer]] = short[closer]
        return int(closer.sum())


__all__ = ["NAME", "SETTINGS", "RobustFlow", "RobustSettings"]
