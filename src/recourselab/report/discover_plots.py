"""Figures of one DISCOVER run (one dataset, model and seed).

- ``output_cdf.png``: empirical CDFs of the model output b(X') (factuals), b(X)
  (counterfactuals) and the target y*;
- ``feature_cdfs.png``: factual vs counterfactual distributions of the most-changed features
  (empirical CDFs in original units for numerical features, level frequencies for categoricals);
- ``shift.png``: per-row shifts in the plane of two features (arrows factual -> counterfactual
  for the edited rows, unedited rows as grey points);
- ``row_scores.png``: heatmap of the row scores q_i (Prop. 3.1) over the iterations, with the
  editable top-k rows of every iteration marked (filled: the selected candidate was accepted);
- ``trajectory.png``: the run over the iterations: the objective terms OT_x, OT_y, the
  certificate (UCL_x / U_x and UCL_y / U_y, certified while both are below 1) and eta with its
  narrowed interval; the first certified edited iterate and the returned one are marked.

Figures are drawn on matplotlib's object-oriented Agg canvas (no pyplot state, safe in worker
threads and processes, no display needed) and every PNG is written atomically
(:func:`recourselab.io.atomic_path`). :func:`discover_figures` returns file name -> writer
callables for the staging mechanism of :mod:`recourselab.orchestration`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.colors import PowerNorm
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from recourselab.data.schema import Schema
from recourselab.discover.certify import first_certified
from recourselab.errors import DataError
from recourselab.report.common import guarded
from recourselab.report.common import save_figure as _save
from recourselab.report.common import text as _text

FIGURES = ("output_cdf.png", "feature_cdfs.png", "shift.png", "row_scores.png", "trajectory.png")
#: Columns of a run log that :func:`plot_trajectory` reads.
TRAJECTORY_COLUMNS = ("iteration", "OT_x", "OT_y", "UCL_x", "UCL_y", "eta", "eta_l", "eta_r", "feasible",
                      "edited_rows")
COLOURS = {"factual": "#4c72b0", "counterfactual": "#dd8452", "target": "#55a868"}


def _category_ticks(ax: Any, axis: str, levels: Sequence[str]) -> None:
    """Level names on a categorical axis: shortened, slanted on x, thinned to about 15 labels."""
    every = max(1, int(np.ceil(len(levels) / 15)))
    pos = np.arange(len(levels))[::every]
    names = [_text(v, 20) for v in levels[::every]]
    if axis == "x":
        ax.set_xticks(pos, names, rotation=30, ha="right", fontsize="small")
    else:
        ax.set_yticks(pos, names, fontsize="small")


def _ecdf(ax: Any, values: np.ndarray, label: str, colour: str, **kw: Any) -> None:
    v = np.sort(np.asarray(values, dtype=float))
    ax.step(np.concatenate([[v[0]], v]), np.arange(len(v) + 1) / len(v), where="post", label=label,
            color=colour, **kw)


def _check_pair(factuals: np.ndarray, counterfactuals: np.ndarray, schema: Schema) -> None:
    if factuals.shape != counterfactuals.shape or factuals.ndim != 2 or factuals.shape[1] != schema.n_encoded:
        raise DataError(f"factuals {factuals.shape} and counterfactuals {counterfactuals.shape} must both be "
                        f"encoded rows (n, {schema.n_encoded})")


def feature_changes(factuals: np.ndarray, counterfactuals: np.ndarray, schema: Schema) -> pd.Series:
    """Mean change of every feature over the rows, as a share of the feature's span, in [0, 1].

    A numerical feature's change is its mean absolute move in units of its training range; a
    categorical's is the share of rows whose level changed (whichever levels, however far apart
    in the phase encoding). Returns a Series indexed by feature name, sorted by decreasing change
    (ties in schema order).
    """
    factuals, counterfactuals = np.asarray(factuals, dtype=float), np.asarray(counterfactuals, dtype=float)
    _check_pair(factuals, counterfactuals, schema)
    change = {}
    for f, sl in zip(schema.features, schema.slices().values(), strict=True):
        if f.kind == "numerical":
            span = (f.upper - f.lower) / f.std if f.upper > f.lower else 1.0
            change[f.name] = float(np.abs(counterfactuals[:, sl.start] - factuals[:, sl.start]).mean() / span)
        else:
            moved = schema.decode_categorical(counterfactuals, f.name) != schema.decode_categorical(factuals, f.name)
            change[f.name] = float(moved.mean())
    order = sorted(change, key=lambda name: (-change[name], schema.feature_names.index(name)))
    return pd.Series({name: change[name] for name in order}, dtype=float)


def most_changed_features(factuals: np.ndarray, counterfactuals: np.ndarray, schema: Schema, n: int = 3) -> list[str]:
    """Names of the ``n`` features with the largest mean change (see :func:`feature_changes`)."""
    return list(feature_changes(factuals, counterfactuals, schema).index[:n])


def plot_output_cdfs(path: str | Path, factual_scores: np.ndarray, scores: np.ndarray, target_values: np.ndarray,
                     *, title: str = "") -> Path:
    """Empirical CDFs of b(X') (n,), b(X) (n,) and y* (n,) on one axis; writes a PNG."""
    fig = Figure(figsize=(5.5, 4.0))
    ax = fig.add_subplot()
    _ecdf(ax, factual_scores, "factual b(X')", COLOURS["factual"])
    _ecdf(ax, scores, "counterfactual b(X)", COLOURS["counterfactual"])
    _ecdf(ax, target_values, "target y*", COLOURS["target"], linestyle="--")
    ax.set_xlim(-0.02, 1.02)
    ax.set_ylim(0, 1.01)
    ax.set_xlabel("model output b(x) = P(favourable)")
    ax.set_ylabel("empirical CDF")
    ax.set_title(_text(title or "model output"))
    ax.legend(loc="upper left", fontsize="small")
    fig.tight_layout()
    return _save(fig, path)


def _feature_panel(ax: Any, name: str, before: pd.Series, after: pd.Series, schema: Schema) -> None:
    f = schema.features[schema.feature_names.index(name)]
    if f.kind == "numerical":
        _ecdf(ax, after.to_numpy(dtype=float), "counterfactual", COLOURS["counterfactual"])
        _ecdf(ax, before.to_numpy(dtype=float), "factual", COLOURS["factual"], linestyle="--")  # on top, visible
        ax.set_ylabel("empirical CDF")
        ax.set_ylim(0, 1.01)
    else:
        levels = [str(v) for v in f.levels]
        x = np.arange(len(levels))
        for shift, (label, values) in zip((-0.2, 0.2), (("factual", before), ("counterfactual", after)),
                                          strict=True):
            freq = values.astype(str).value_counts(normalize=True).reindex(levels, fill_value=0.0)
            ax.bar(x + shift, freq.to_numpy(), width=0.4, label=label, color=COLOURS[label])
        _category_ticks(ax, "x", levels)
        ax.set_ylabel("frequency")
    ax.set_xlabel(_text(name) + (" (immutable)" if f.immutable else ""))


def plot_feature_cdfs(path: str | Path, factuals: np.ndarray, counterfactuals: np.ndarray, schema: Schema, *,
                      features: Sequence[str] | None = None, n: int = 3, title: str = "") -> Path:
    """Factual vs counterfactual distributions of ``features`` (default: the ``n`` most changed).

    Parameters
    ----------
    factuals, counterfactuals : encoded rows (n_rows, d), decoded to original units for the plot.
    """
    factuals, counterfactuals = np.asarray(factuals, dtype=float), np.asarray(counterfactuals, dtype=float)
    _check_pair(factuals, counterfactuals, schema)
    names = list(features) if features is not None else most_changed_features(factuals, counterfactuals, schema, n)
    unknown = [f for f in names if f not in schema.feature_names]
    if unknown:
        raise DataError(f"unknown features {unknown}; valid: {', '.join(schema.feature_names)}")
    before, after = schema.inverse_transform(factuals), schema.inverse_transform(counterfactuals)
    fig = Figure(figsize=(4.2 * len(names), 3.8))
    axes = fig.subplots(1, len(names), squeeze=False)[0]
    for ax, name in zip(axes, names, strict=True):
        _feature_panel(ax, name, before[name], after[name], schema)
    axes[0].legend(loc="best", fontsize="small")
    unedited = features is None and np.array_equal(factuals, counterfactuals)
    fig.suptitle(_text(title or "most-changed features") + (" (no row was edited)" if unedited else ""))
    fig.tight_layout()
    return _save(fig, path)


def _axis_values(schema: Schema, name: str | None, frame: pd.DataFrame, rng: np.random.Generator,
                 n: int) -> tuple[np.ndarray, list[str] | None]:
    if name is None:
        return np.arange(n, dtype=float), None
    f = schema.features[schema.feature_names.index(name)]
    if f.kind == "numerical":
        return frame[name].to_numpy(dtype=float), None
    levels = [str(v) for v in f.levels]
    codes = pd.Categorical(frame[name].astype(str), categories=levels).codes.astype(float)
    return codes + rng.uniform(-0.15, 0.15, n), levels


def plot_shift(path: str | Path, factuals: np.ndarray, counterfactuals: np.ndarray, schema: Schema, *,
               features: Sequence[str] | None = None, title: str = "") -> Path:
    """Per-row shifts factual -> counterfactual in the plane of two features (default: the two most changed).

    A schema with a single feature is drawn against the row index. Categorical axes show level
    indices with a small fixed jitter (seed 0) so that rows on the same level stay visible.
    """
    factuals, counterfactuals = np.asarray(factuals, dtype=float), np.asarray(counterfactuals, dtype=float)
    _check_pair(factuals, counterfactuals, schema)
    names: list[str | None] = list(features) if features is not None else sorted(
        most_changed_features(factuals, counterfactuals, schema, 2), key=schema.feature_names.index)
    if len(names) == 1:
        names.append(None)
    if len(names) != 2:
        raise DataError(f"the shift plot needs two features, got {names}")
    before, after = schema.inverse_transform(factuals), schema.inverse_transform(counterfactuals)
    n = len(factuals)
    edited = ~np.isclose(factuals, counterfactuals, rtol=0.0, atol=1e-12).all(axis=1)
    coords, ticks = [], []
    for i, name in enumerate(names):
        # the same jitter before and after (unedited rows do not move), another one on each axis
        xb, tick = _axis_values(schema, name, before, np.random.default_rng([0, i]), n)
        xa, _ = _axis_values(schema, name, after, np.random.default_rng([0, i]), n)
        coords.append((xb, xa))
        ticks.append(tick)
    (x0, x1), (y0, y1) = coords
    fig = Figure(figsize=(5.5, 4.8))
    ax = fig.add_subplot()
    ax.scatter(x0[~edited], y0[~edited], s=10, color="0.7", label=f"unedited ({int((~edited).sum())})")
    ax.scatter(x0[edited], y0[edited], s=14, color=COLOURS["factual"], label=f"factual ({int(edited.sum())} edited)")
    ax.scatter(x1[edited], y1[edited], s=14, color=COLOURS["counterfactual"], label="counterfactual")
    if edited.any():
        ax.quiver(x0[edited], y0[edited], (x1 - x0)[edited], (y1 - y0)[edited], angles="xy", scale_units="xy",
                  scale=1.0, width=0.003, color="0.3", alpha=0.7)
    for axis, name, tick in (("x", names[0], ticks[0]), ("y", names[1], ticks[1])):
        getattr(ax, f"set_{axis}label")(_text(name) if name is not None else "row")
        if tick is not None:
            _category_ticks(ax, axis, tick)
    ax.legend(loc="best", fontsize="small")
    ax.set_title(_text(title or "per-row shifts"))
    fig.tight_layout()
    return _save(fig, path)


def plot_row_scores(path: str | Path, row_scores: np.ndarray, *, selected: Sequence[Sequence[int]] | None = None,
                    accepted: Sequence[bool] | None = None, max_rows: int = 100, title: str = "") -> Path:
    """Heatmap of the row scores q_i (squared units) over the iterations.

    Parameters
    ----------
    row_scores : shape (T, n), one row per logged iteration (``DiscoverResult.row_scores``).
    selected : per iteration, the editable top-k row indices (``log["rows"]``), marked on the map.
    accepted : per iteration, whether the selected candidate was applied (filled markers).
    max_rows : at most this many rows are drawn: those with the largest total score.
    """
    q = np.asarray(row_scores, dtype=float)
    if q.ndim != 2 or q.size == 0:
        raise DataError(f"row_scores must be a non-empty (iterations, rows) array, got shape {q.shape}")
    T, n = q.shape
    shown = np.sort(np.argsort(-q.sum(axis=0), kind="stable")[:max_rows])
    where = {int(r): i for i, r in enumerate(shown)}
    fig = Figure(figsize=(min(4.0 + 0.12 * T, 12.0), min(3.0 + 0.06 * len(shown), 9.0)))
    ax = fig.add_subplot()
    vmax = float(q[:, shown].max()) if float(q[:, shown].max()) > 0 else 1.0
    im = ax.imshow(q[:, shown].T, aspect="auto", origin="lower", cmap="viridis", interpolation="nearest",
                   norm=PowerNorm(gamma=0.5, vmin=0.0, vmax=vmax), extent=(-0.5, T - 0.5, -0.5, len(shown) - 0.5))
    fig.colorbar(im, ax=ax, label="q_i (squared units)")
    if selected is not None:
        acc = list(accepted) if accepted is not None else [True] * len(selected)
        for t, (rows, ok) in enumerate(zip(selected, acc, strict=False)):
            pts = [where[int(r)] for r in rows if int(r) in where]
            if pts:
                ax.scatter([t] * len(pts), pts, s=12, marker="o", facecolors="white" if ok else "none",
                           edgecolors="white", linewidths=0.8)
    ax.set_xlabel("iteration")
    ax.set_ylabel("row" if len(shown) == n else f"row (top {len(shown)} of {n} by total q_i)")
    every = max(1, int(np.ceil(len(shown) / 30)))  # at most about 30 labels, always the rows' own numbers
    ax.set_yticks(np.arange(len(shown))[::every], [str(r) for r in shown[::every]], fontsize="x-small")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_title(_text(title or "row scores q_i (markers: editable rows; filled: accepted)"))
    fig.tight_layout()
    return _save(fig, path)


def plot_trajectory(path: str | Path, log: pd.DataFrame, *, U_x: float, U_y: float, returned: int | None = None,
                    title: str = "") -> Path:
    """The run over its iterations in three panels sharing the iteration axis.

    Parameters
    ----------
    log : one row per iteration with the columns :data:`TRAJECTORY_COLUMNS`
        (``DiscoverResult.log``, DISCOVER or DCE).
    U_x, U_y : the thresholds (squared units) of the certificate; a ``U_x`` column of ``log``
        (per iteration: recalibrated with ``resample_directions``) takes precedence over ``U_x``.
    returned : position in ``log`` of the returned iterate (``DiscoverResult.iteration``).
    """
    missing = [c for c in TRAJECTORY_COLUMNS if c not in log.columns]
    if missing or len(log) == 0:
        raise DataError(f"a run log with the columns {list(TRAJECTORY_COLUMNS)} and at least one row is needed; "
                        f"missing {missing}, rows {len(log)}")
    if not (U_x > 0 and U_y > 0):
        raise DataError(f"thresholds must be positive, got U_x={U_x}, U_y={U_y}")
    it = log["iteration"].to_numpy(dtype=float)
    dot = {"marker": "o", "markersize": 4} if len(log) < 3 else {}  # one or two iterations: points, not lines
    fig = Figure(figsize=(7.5, 7.0))
    ax_ot, ax_cert, ax_eta = fig.subplots(3, 1, sharex=True)
    ax_ot.plot(it, log["OT_x"], color=COLOURS["factual"], label="OT_x (objective, N directions)", **dot)
    ax_ot.plot(it, log["OT_y"], color=COLOURS["counterfactual"], label="OT_y", **dot)
    ax_ot.set_ylabel("squared W2")
    per_iteration_U_x = log["U_x"].to_numpy(dtype=float) if "U_x" in log.columns else U_x
    ax_cert.plot(it, log["UCL_x"] / per_iteration_U_x, color=COLOURS["factual"], label="UCL_x / U_x", **dot)
    ax_cert.plot(it, log["UCL_y"] / U_y, color=COLOURS["counterfactual"], label="UCL_y / U_y", **dot)
    ax_cert.axhline(1.0, color="black", lw=0.8, ls=":")
    ax_cert.set_ylabel("UCL / threshold\n(certified: both < 1)")
    if len(log) == 1:  # fill_between draws nothing for one point
        ax_eta.errorbar(it, log["eta"], yerr=[log["eta"] - log["eta_l"], log["eta_r"] - log["eta"]], fmt="none",
                        ecolor="0.6", capsize=6, label="[eta_l, eta_r]")
    else:
        ax_eta.fill_between(it, log["eta_l"], log["eta_r"], color="0.85", label="[eta_l, eta_r]")
    ax_eta.plot(it, log["eta"], color="black", label="eta", **dot)
    ax_eta.set_ylim(-0.02, 1.02)
    ax_eta.set_ylabel("eta")
    ax_eta.set_xlabel("iteration")
    first = first_certified(log)
    for ax in (ax_ot, ax_cert, ax_eta):  # the markers are named once, in the top panel
        top = ax is ax_ot
        if first is not None:
            ax.axvline(it[first], color=COLOURS["target"], ls="--", lw=1.0, label="first certified" if top else None)
        if returned is not None:
            ax.axvline(it[returned], color=COLOURS["target"], lw=1.5, label="returned" if top else None)
        ax.legend(fontsize="x-small", loc="best")
    ax_eta.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax_ot.set_title(_text(title or "objective, certificate and eta over the iterations"))
    fig.tight_layout()
    return _save(fig, path)


def discover_figures(result: Any, schema: Schema, *, title: str = "") -> dict[str, Callable[[Path], Path]]:
    """File name -> writer of every figure of a :class:`~recourselab.discover.DiscoverResult`.

    The heatmap needs ``result.row_scores``; a result without them (DCE) gets no ``row_scores.png``.
    A figure that cannot be drawn is replaced by a figure naming the error (and a warning), so the
    run's other outputs are kept.
    """
    prefix = f"{title}: " if title else ""
    writers: dict[str, Callable[[Path], Path]] = {
        "output_cdf.png": lambda p: plot_output_cdfs(p, result.factual_scores, result.scores, result.target_values,
                                                     title=f"{prefix}model output"),
        "feature_cdfs.png": lambda p: plot_feature_cdfs(p, result.factuals, result.counterfactuals, schema,
                                                        title=f"{prefix}most-changed features"),
        "shift.png": lambda p: plot_shift(p, result.factuals, result.counterfactuals, schema,
                                          title=f"{prefix}per-row shifts"),
    }
    if getattr(result, "row_scores", None) is not None:
        writers["row_scores.png"] = lambda p: plot_row_scores(
            p, result.row_scores, selected=result.log["rows"].tolist(), accepted=result.log["accepted"].tolist(),
            title=f"{prefix}row scores q_i")
    writers["trajectory.png"] = lambda p: plot_trajectory(
        p, result.log, U_x=result.metrics["U_x"], U_y=result.metrics["U_y"], returned=result.iteration,
        title=f"{prefix}objective, certificate, eta")
    return {name: guarded(name, write) for name, write in writers.items()}


def write_discover_figures(result: Any, schema: Schema, out_dir: str | Path, *, title: str = "") -> list[Path]:
    """Write every figure of :func:`discover_figures` into ``out_dir``; returns the paths."""
    return [write(Path(out_dir) / name) for name, write in discover_figures(result, schema, title=title).items()]


__all__ = ["FIGURES", "TRAJECTORY_COLUMNS", "discover_figures", "feature_changes", "most_changed_features",
           "plot_feature_cdfs", "plot_output_cdfs", "plot_row_scores", "plot_shift", "plot_trajectory",
           "write_discover_figures"]
