"""Certification repair: revert edited rows to their factuals, then polish, until the certificate holds.

A search can end with one side of the certificate met and the other just missed, e.g. every
output-side bound under ``U_y`` but ``UCL_x`` a few percent above ``U_x``. Reverting an edited row
to its factual row moves the iterate back towards the factual sample on the input side and puts
that row's factual score back on the output side; both are known, so a revert costs no model query.
The repair reverts one row at a time, each time the row whose revert lowers the merit
``max(UCL_x / U_x, UCL_y / U_y)`` most, and stops at the first certified iterate (merit below 1 with
an edited row left) or when no revert lowers the merit.

When no sequence of reverts certifies the iterate, the polish (:func:`polish`) searches on the
bound ratios themselves (:func:`polish_merit`): each step proposes one-row edits (the run's own
proposal moves, one model call per step) and the reverts of the edited rows, and keeps the
candidate that lowers the merit most. The main search minimises the transport costs, not the
confidence bounds, and can end with both bounds a few percent above their thresholds, where a
revert only trades one side against the other.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from recourselab.discover.certify import Certificate, is_feasible

if TYPE_CHECKING:  # annotation only: proposals -> settings -> strategies
    from recourselab.discover.proposals import ProposalSpace


@dataclass(frozen=True)
class RepairResult:
    """Outcome of :func:`revert_rows`.

    Attributes
    ----------
    reverted : rows put back to their factuals, in the order they were reverted (m,), int64.
    ucl_x, ucl_y : the bounds of the repaired iterate.
    certified : whether the repaired iterate is certified with at least one edited row.
    """

    reverted: np.ndarray
    ucl_x: float
    ucl_y: float
    certified: bool


def _merit(ucl_x: float, ucl_y: float, U_x: float, U_y: float) -> float:
    return max(ucl_x / U_x, ucl_y / U_y)


def revert_rows(P: np.ndarray, y: np.ndarray, Pf: np.ndarray, yf: np.ndarray, edited: np.ndarray,
                ref_x: np.ndarray, ref_y: np.ndarray, cert: Certificate, U_x: float, U_y: float) -> RepairResult:
    """Greedy query-free reverts of edited rows towards a certified iterate.

    Parameters
    ----------
    P, Pf : projections (n, N) of the iterate and of the factuals on the run's directions.
    y, yf : scores (n,) of the iterate and of the factuals.
    edited : boolean mask (n,) of the rows the iterate edits.
    ref_x : sorted factual projections (N, n); ref_y : sorted target values (n,).
    cert : the run's certificate rule; U_x, U_y : its thresholds.

    Returns
    -------
    RepairResult
        The rows to revert (possibly none) and the bounds after reverting them. The inputs are
        not modified.
    """
    P, y = P.copy(), y.copy()
    left = np.flatnonzero(edited).tolist()

    def bounds(P_: np.ndarray, y_: np.ndarray) -> tuple[float, float]:
        return cert.input_bound(np.sort(P_.T, axis=1), ref_x), cert.output_bound(np.sort(y_), ref_y)

    ucl_x, ucl_y = bounds(P, y)
    merit = _merit(ucl_x, ucl_y, U_x, U_y)
    reverted: list[int] = []
    while len(left) > 1 and not is_feasible(ucl_x, ucl_y, U_x, U_y):
        best = None
        for i in left:
            Pi, yi = P[i].copy(), y[i]
            P[i], y[i] = Pf[i], yf[i]
            bx, by = bounds(P, y)
            P[i], y[i] = Pi, yi
            m = _merit(bx, by, U_x, U_y)
            if m < merit and (best is None or m < best[0]):
                best = (m, i, bx, by)
        if best is None:
            break
        merit, i, ucl_x, ucl_y = best
        P[i], y[i] = Pf[i], yf[i]
        left.remove(i)
        reverted.append(i)
    certified = bool(left) and is_feasible(ucl_x, ucl_y, U_x, U_y)
    return RepairResult(np.asarray(reverted, dtype=np.int64), float(ucl_x), float(ucl_y), certified)


@dataclass(frozen=True)
class PolishResult:
    """Outcome of :func:`polish`.

    Attributes
    ----------
    X, y : the polished iterate (n, d) and its scores (n,) (copies).
    ucl_x, ucl_y : its bounds.
    certified : whether it is certified with at least one edited row.
    steps : polish steps taken; queries : model rows scored.
    """

    X: np.ndarray
    y: np.ndarray
    ucl_x: float
    ucl_y: float
    certified: bool
    steps: int
    queries: int


#: Weight of the larger ratio in the polish's merit (a tie-break once one side is met).
POLISH_TIE_BREAK = 0.1


def polish_merit(rx: np.ndarray, ry: np.ndarray) -> np.ndarray:
    """The polish's merit of bound ratios ``rx = UCL_x / U_x`` and ``ry = UCL_y / U_y`` (any shape).

    The summed violation ``max(rx - 1, 0) + max(ry - 1, 0)`` plus ``POLISH_TIE_BREAK * max(rx, ry)``:
    a move may trade slack on the met side for progress on the other, which the plain
    ``max(rx, ry)`` refuses when both ratios sit close together (its greedy steps then stall).
    """
    return np.maximum(rx - 1.0, 0.0) + np.maximum(ry - 1.0, 0.0) + POLISH_TIE_BREAK * np.maximum(rx, ry)


def polish(X: np.ndarray, y: np.ndarray, Xf: np.ndarray, yf: np.ndarray, *, space: ProposalSpace,
           project: Callable[[np.ndarray], np.ndarray], scores: Callable[[np.ndarray], np.ndarray],
           ref_x: np.ndarray, ref_y: np.ndarray, cert: Certificate, U_x: float, U_y: float, steps: int,
           trials: int, rng: np.random.Generator) -> PolishResult:
    """Greedy search on the bound ratios (:func:`polish_merit`) until the iterate is certified.

    Each step draws ``trials`` rows (with replacement) and one proposal move of each
    (:meth:`ProposalSpace.perturb` without guidance: bounds, actionability, valid categories and
    restart moves as in the search), scores the distinct moved rows in one call of ``scores``, adds the
    revert of every edited row to its factual (no query), and applies the candidate with the
    lowest merit if it is below the current one. It stops at the first certified iterate with an
    edited row, or after ``steps`` steps.

    Parameters
    ----------
    X, y : the iterate (n, d) and its scores (n,), not modified.
    Xf, yf : the factual rows (n, d) and their scores (n,).
    space : the run's proposal space; project : rows (m, d) -> projections (m, N) on the run's directions.
    scores : rows (m, d) -> model scores (m,) (counted against the run's budget by the caller).
    ref_x : sorted factual projections (N, n); ref_y : sorted targets (n,).
    cert : the run's certificate rule; U_x, U_y : its thresholds.
    steps, trials : the step budget and the one-row candidates per step.
    rng : the random stream of the moves (the solver passes its proposal stream, continued).

    Returns
    -------
    PolishResult
    """
    X, y = X.copy(), y.copy()
    n, d = X.shape
    P = project(X)  # (n, N)
    P_sorted, y_sorted = np.sort(P.T, axis=1), np.sort(y)
    if cert.idx is None:
        ucl_x, ucl_y, offsets = cert.input_bound(P_sorted, ref_x), cert.output_bound(y_sorted, ref_y), None
    else:  # the bounds and the screen's offsets in one evaluation
        ucl_x, ucl_y, offsets = cert.bootstrap_eval(P_sorted, y_sorted, ref_x, ref_y)
    merit = float(polish_merit(np.asarray(ucl_x / U_x), np.asarray(ucl_y / U_y)))
    queries, step = 0, 0
    while step < steps and not ((X != Xf).any() and is_feasible(ucl_x, ucl_y, U_x, U_y)):
        step += 1
        rows = rng.integers(0, n, trials)
        moved = space.perturb(X[rows][None], rows, np.zeros((trials, d)), space.choose((1, trials), rng), rng)[0]
        fresh = (moved != X[rows]).any(axis=1)  # a move clipped back to its row changes nothing
        rows, moved = rows[fresh], moved[fresh]
        distinct, inverse = np.unique(moved, axis=0, return_inverse=True)  # each new row is scored once
        moved_y = scores(distinct)[inverse.reshape(-1)] if len(distinct) else np.zeros(0)
        queries += len(distinct)
        edited = np.flatnonzero((X != Xf).any(axis=1))
        rows = np.concatenate([rows, edited])
        new_x = np.concatenate([moved, Xf[edited]])
        new_y = np.concatenate([moved_y, yf[edited]])
        C = len(rows)
        if C == 0:
            continue
        Pc = np.repeat(P.T[None], C, axis=0)  # (C, N, n)
        Pc[np.arange(C), :, rows] = project(new_x)
        yc = np.repeat(y[None], C, axis=0)
        yc[np.arange(C), rows] = new_y
        Pcs, ycs = np.sort(Pc, axis=2), np.sort(yc, axis=1)
        if cert.idx is None:  # dkw: every candidate's bounds, exact and batched
            bx, by = cert.input_bounds(Pcs, ref_x), cert.output_bounds(ycs, ref_y)
            best = int(np.argmin(polish_merit(bx / U_x, by / U_y)))
            bx_b, by_b = float(bx[best]), float(by[best])
        else:  # bootstrap: rank by the screen, then the exact bounds of the best only
            sx, sy = cert.screen_bounds(Pcs, ycs, ref_x, ref_y, offsets)
            best = int(np.argmin(polish_merit(sx / U_x, sy / U_y)))
            bx_b, by_b, new_offsets = cert.bootstrap_eval(Pcs[best], ycs[best], ref_x, ref_y)
        m_b = float(polish_merit(np.asarray(bx_b / U_x), np.asarray(by_b / U_y)))
        if not m_b < merit:
            continue
        if cert.idx is not None:
            offsets = new_offsets
        i = rows[best]
        X[i], y[i], P[i] = new_x[best], new_y[best], Pc[best, :, i]
        merit, ucl_x, ucl_y = m_b, bx_b, by_b
    certified = bool((X != Xf).any()) and is_feasible(ucl_x, ucl_y, U_x, U_y)
    return PolishResult(X, y, float(ucl_x), float(ucl_y), certified, step, queries)


__all__ = ["POLISH_TIE_BREAK", "PolishResult", "RepairResult", "polish", "polish_merit", "revert_rows"]
