"""Figures of one DensityFlow run (one dataset and seed), written by the ``generate`` stage.

- ``validity.png``: validity of the counterfactuals for every ensemble member, with the mean
  per-model (the paper's headline) and the unanimous validity as lines;
- ``trajectories.png`` (2-D datasets only): the training data by class and the ODE paths of
  some queries from the factual (circle) to the counterfactual (cross), coloured by target.

Drawn on matplotlib's object-oriented Agg canvas (no pyplot state, safe in worker processes);
PNG files are written atomically (:mod:`recourselab.report.common`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib import colormaps
from matplotlib.figure import Figure

from recourselab.errors import DataError
from recourselab.report.common import guarded, text
from recourselab.report.common import save_figure as _save

CLASS_COLOURS = ("#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3")


def class_colours(n: int) -> list[Any]:
    """One distinct colour per class: the five house colours, tab20 beyond five classes."""
    return list(CLASS_COLOURS[:n]) if n <= len(CLASS_COLOURS) else [colormaps["tab20"](i % 20) for i in range(n)]


def plot_validity(path: str | Path, per_model: Mapping[str, float], *, mean: float, unanimous: float,
                  title: str = "") -> Path:
    """Bar chart of the per-member validity (fractions in [0, 1])."""
    if not per_model:
        raise DataError("plot_validity needs at least one member")
    fig = Figure(figsize=(6.0, 3.4))
    ax = fig.add_subplot()
    names = list(per_model)
    bars = ax.bar(np.arange(len(names)), [per_model[n] for n in names], color="#4c72b0")
    ax.bar_label(bars, fmt="%.2f", fontsize=7)  # low bars stay readable
    slanted = len(names) > 7 or max(len(str(n)) for n in names) > 9
    ax.set_xticks(np.arange(len(names)), [text(n, 24) for n in names], rotation=30 if slanted else 0,
                  ha="right" if slanted else "center", fontsize=8)
    ax.axhline(mean, color="#dd8452", lw=1.5, label=f"mean per-model {mean:.3f}")
    ax.axhline(unanimous, color="#55a868", lw=1.5, ls="--", label=f"unanimous {unanimous:.3f}")
    ax.set_ylim(-0.03, 1.1)  # a line at 0 stays above the axis
    ax.set_ylabel("validity")
    ax.legend(loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=2, fontsize=8, frameon=False)  # outside the bars
    ax.set_title(text(title or "counterfactual validity per ensemble member"), fontsize=10, pad=22)
    fig.tight_layout()
    return _save(fig, path)


def plot_trajectories(path: str | Path, X: np.ndarray, y: np.ndarray, trajectories: np.ndarray,
                      target: np.ndarray, *, factuals: np.ndarray | None = None,
                      counterfactuals: np.ndarray | None = None, feature_names: Sequence[str] = ("x0", "x1"),
                      class_names: Sequence[Any] | None = None, title: str = "") -> Path:
    """Training rows X (n, 2) by class y (n,) and ODE paths (n_points, m, 2) of m queries towards ``target`` (m,).

    ``factuals`` / ``counterfactuals`` (m, 2) mark the queries (o) and the reported
    counterfactuals (x); without them the paths' first and last points are marked. A path
    starts at its chosen (possibly jittered) start and ends before clamping and snapping;
    dotted black segments join the marks to the path ends where they differ. The axes show the
    training data and the marks (a path that leaves them is cut at the frame); the axes are
    named by ``feature_names`` (encoded, standardised units) and the classes by ``class_names``
    (index -> label; default the class indices).
    """
    X, trajectories = np.asarray(X, dtype=float), np.asarray(trajectories, dtype=float)
    if X.ndim != 2 or X.shape[1] != 2 or trajectories.ndim != 3 or trajectories.shape[2] != 2:
        raise DataError(f"trajectory plots need 2-D data: got rows {X.shape} and paths {trajectories.shape}")
    y, target = np.asarray(y).astype(int), np.asarray(target).astype(int)
    n_classes = int(max(y.max(initial=0), target.max(initial=0))) + 1
    colours = class_colours(n_classes if class_names is None else max(n_classes, len(class_names)))
    fig = Figure(figsize=(5.0, 5.0))
    ax = fig.add_subplot()
    for c in np.unique(y):
        pts = X[y == c]
        name = class_names[c] if class_names is not None and c < len(class_names) else c
        ax.scatter(pts[:, 0], pts[:, 1], s=4, alpha=0.25, color=colours[c], label=text(f"class {name}", 30))
    shown = [X]
    for i in range(trajectories.shape[1]):
        path_i = trajectories[:, i]
        ax.plot(path_i[:, 0], path_i[:, 1], color=colours[target[i]], lw=0.9)
        start = path_i[0] if factuals is None else np.asarray(factuals, dtype=float)[i]
        end = path_i[-1] if counterfactuals is None else np.asarray(counterfactuals, dtype=float)[i]
        shown.append(np.vstack([start, end]))
        for mark, near in ((start, path_i[0]), (end, path_i[-1])):
            if not np.allclose(mark, near):
                ax.plot(*np.column_stack([mark, near]), color="black", lw=0.9, ls=(0, (1, 1)))
        ax.scatter(*start, s=14, facecolors="none", edgecolors="black", lw=0.7)
        ax.scatter(*end, s=20, marker="x", color="black", lw=0.9)
    pts = np.vstack(shown)
    pts = pts[np.isfinite(pts).all(axis=1)]
    lo, hi = pts.min(axis=0), pts.max(axis=0)
    pad = 0.05 * np.maximum(hi - lo, 1e-9)
    ax.set_xlim(lo[0] - pad[0], hi[0] + pad[0])
    ax.set_ylim(lo[1] - pad[1], hi[1] + pad[1])
    ax.set_aspect("equal", adjustable="box")
    ax.set_xlabel(text(feature_names[0]))
    ax.set_ylabel(text(feature_names[1]))
    ax.legend(loc="upper right", fontsize=8, markerscale=3)
    ax.set_title(f"{text(title or 'DensityFlow paths')}\n(o factual, x counterfactual, dotted: jitter / clamping)",
                 fontsize=9)
    fig.tight_layout()
    return _save(fig, path)


def densityflow_figures(metrics: Mapping[str, Any], *, X: np.ndarray | None = None, y: np.ndarray | None = None,
                        trajectories: np.ndarray | None = None, target: np.ndarray | None = None,
                        factuals: np.ndarray | None = None, counterfactuals: np.ndarray | None = None,
                        feature_names: Sequence[str] = ("x0", "x1"), class_names: Sequence[Any] | None = None,
                        title: str = "") -> dict[str, Callable[[Path], Path]]:
    """File name -> writer of the figures of one run; ``trajectories.png`` only for 2-D data with paths.

    A figure that cannot be drawn is replaced by one naming the error, so the run's other files are kept.
    """
    prefix = f"{title}: " if title else ""
    writers: dict[str, Callable[[Path], Path]] = {
        "validity.png": lambda p: plot_validity(p, metrics["per_model"], mean=metrics["mean_per_model"],
                                                unanimous=metrics["unanimous"], title=f"{prefix}validity per member"),
    }
    if trajectories is not None and X is not None and X.shape[1] == 2:
        writers["trajectories.png"] = lambda p: plot_trajectories(
            p, X, y, trajectories, target, factuals=factuals, counterfactuals=counterfactuals,
            feature_names=feature_names, class_names=class_names, title=f"{prefix}DensityFlow paths")
    return {name: guarded(name, write) for name, write in writers.items()}


__all__ = ["CLASS_COLOURS", "class_colours", "densityflow_figures", "plot_trajectories", "plot_validity"]
