"""The RQ2 and RQ3 figures: density score vs ensemble disagreement, validity vs distillation budget."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.figure import Figure

from recourselab.errors import DataError
from recourselab.report.common import save_figure, text

#: The distillation budgets of the RQ3 sweep (queried rows).
RQ3_BUDGETS = (0, 60, 120, 240, 480, 960)


def rq2_figure(density: np.ndarray, variance: np.ndarray, stats: Mapping[str, Any], path: str | Path, *,
               title: str = "") -> Path:
    """Scatter of the density score -S(x | y) (n,) against the ensemble variance Var_m p_m(y | x) (n,), titled
    with Spearman's rho and its bootstrap CI from ``stats`` (:func:`~recourselab.metrics.plausibility.
    density_variance_spearman`)."""
    s, v = -np.asarray(density, dtype=float), np.asarray(variance, dtype=float)
    if s.shape != v.shape or s.ndim != 1 or not len(s):
        raise DataError(f"rq2_figure needs two 1-D arrays of one length, got {s.shape} and {v.shape}")
    fig = Figure(figsize=(5.5, 4.2))
    ax = fig.subplots()
    ax.scatter(s, v, s=5, alpha=0.4)
    ax.set_xlabel("density score -S(x | y)")
    ax.set_ylabel("ensemble variance of p(y | x)")
    rho, lo, hi = (stats.get(k, math.nan) for k in ("rho", "ci_low", "ci_high"))
    ax.set_title(text(f"{title}  Spearman {_num(rho)} [{_num(lo)}, {_num(hi)}], n={stats.get('n', len(s))}"),
                 fontsize="small")
    fig.tight_layout()
    return save_figure(fig, path)


def rq3_figure(table: Sequence[Mapping[str, Any]], path: str | Path, *, title: str = "") -> Path:
    """Validity (mean per-model and unanimous) against the distillation budget; ``table`` rows hold ``budget``,
    ``validity_mean``, ``validity_unanimous`` and optionally their ``_std``."""
    if not table:
        raise DataError("rq3_figure needs at least one budget row")
    rows = sorted(table, key=lambda r: r["budget"])
    b = np.array([r["budget"] for r in rows], dtype=float)
    fig = Figure(figsize=(5.5, 4.0))
    ax = fig.subplots()
    for key, label in (("validity_mean", "mean per-model"), ("validity_unanimous", "unanimous")):
        m = np.array([r[key] for r in rows], dtype=float)
        sd = np.array([r.get(f"{key}_std", 0.0) or 0.0 for r in rows], dtype=float)
        ax.errorbar(b, m, yerr=sd, marker="o", capsize=3, label=label)
    ax.set_xlabel("distillation budget (ensemble queries)")
    ax.set_ylabel("validity")
    ax.set_ylim(-0.02, 1.05)
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")
    ax.set_title(text(f"{title}: validity vs distillation budget" if title else "validity vs distillation budget"),
                 fontsize="small")
    fig.tight_layout()
    return save_figure(fig, path)


def _num(v: Any) -> str:
    return "n/a" if v is None or not math.isfinite(float(v)) else f"{float(v):.3f}"


__all__ = ["RQ3_BUDGETS", "rq2_figure", "rq3_figure"]
