"""DISCOVER's objective on the sorted projections: exact and fixed-plan scores of a batch of candidates."""

from __future__ import annotations

import numpy as np

from recourselab.discover.ot import Matching
from recourselab.discover.strategies import Evaluation


class Objective:
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
