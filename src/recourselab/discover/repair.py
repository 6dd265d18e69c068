"""Certification repair: revert edited rows to their factuals until the certificate holds.

A search can end with one side of the certificate met and the other just missed, e.g. every
output-side bound under ``U_y`` but ``UCL_x`` a few percent above ``U_x``. Reverting an edited row
to its factual row moves the iterate back towards the factual sample on the input side and puts
that row's factual score back on the output side; both are known, so a revert costs no model query.
The repair reverts one row at a time, each time the row whose revert lowers the merit
``max(UCL_x / U_x, UCL_y / U_y)`` most, and stops at the first certified iterate (merit below 1 with
an edited row left) or when no revert lowers the merit.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from recourselab.discover.certify import Certificate, is_feasible


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


__all__ = ["RepairResult", "revert_rows"]
