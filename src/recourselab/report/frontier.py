"""The validity-vs-cost frontier of recourse methods: the dominance check, the methods table and its figures.

A point is (unanimous validity, L2 cost, search queries): validity higher-better, cost and
queries lower-better. A baseline *dominates* a method's point when it uses no more queries,
is at least as valid and costs no more, and is strictly better on validity or cost.

Typical use::

    points = frontier_points(table)                    # table: methods.json's "methods" entries
    dominated_by(points["densityflow_r/default"], [p for p in points.values() if p.method != "densityflow_r"])
    frontier_figure(table, "frontier.png", title="compas")
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.figure import Figure

from recourselab.errors import DataError
from recourselab.report.common import save_figure, text

#: Columns of the Markdown methods table: (key, header, digits).
MD_COLUMNS = (("validity_mean", "mean validity", 3), ("validity_unanimous", "unanimous", 3),
              ("validity_majority", "majority", 3), ("cost_l1", "L1", 2), ("cost_l2", "L2", 2),
              ("plausibility_lof", "LOF inliers", 2), ("plausibility_iforest", "IF inliers", 2),
              ("immutable_violations", "immutable viol.", 0), ("monotone_violations", "monotone viol.", 0),
              ("queries", "queries", 0),
              ("wall_time_s", "time (s)", 1))


@dataclass(frozen=True)
class FrontierPoint:
    """One method at one setting: ``validity`` (unanimous, higher-better), ``cost`` (L2, lower-better),
    ``queries`` (search queries, lower-better)."""

    method: str
    setting: str
    validity: float
    cost: float
    queries: float

    @property
    def key(self) -> str:
        return f"{self.method}/{self.setting}"


def dominates(a: FrontierPoint, b: FrontierPoint, *, tol: float = 0.0) -> bool:
    """Whether ``a`` dominates ``b``: ``a.queries <= b.queries``, ``a.validity >= b.validity - tol``,
    ``a.cost <= b.cost + tol``, and ``a`` is better than ``b`` by more than ``tol`` in validity or cost.

    A point with a NaN coordinate neither dominates nor is dominated.
    """
    values = (a.validity, a.cost, a.queries, b.validity, b.cost, b.queries)
    if any(not math.isfinite(v) for v in values):
        return False
    no_worse = a.queries <= b.queries and a.validity >= b.validity - tol and a.cost <= b.cost + tol
    better = a.validity > b.validity + tol or a.cost < b.cost - tol
    return no_worse and better


def dominated_by(point: FrontierPoint, baselines: Iterable[FrontierPoint], *, tol: float = 0.0) -> list[FrontierPoint]:
    """The ``baselines`` that dominate ``point`` (see :func:`dominates`), in their given order."""
    return [b for b in baselines if dominates(b, point, tol=tol)]


def frontier_points(table: Sequence[Mapping[str, Any]]) -> dict[str, FrontierPoint]:
    """``method/setting`` -> its point, from methods-table entries (``validity_unanimous``, ``cost_l2``,
    ``queries``)."""
    points = {}
    for entry in table:
        p = FrontierPoint(method=str(entry["method"]), setting=str(entry["setting"]),
                          validity=float(entry["validity_unanimous"]), cost=float(entry["cost_l2"]),
                          queries=float(entry["queries"]))
        if p.key in points:
            raise DataError(f"the methods table has two entries for {p.key}")
        points[p.key] = p
    return points


def frontier_check(table: Sequence[Mapping[str, Any]], method: str, setting: str, *,
                   own: Iterable[str] = (), tol: float = 0.0) -> dict[str, Any]:
    """Whether ``method/setting`` is dominated by any baseline of ``table`` (every entry whose method is neither
    ``method`` nor in ``own``, e.g. the method's own ancestor). Returns ``point`` (its coordinates),
    ``dominated`` (bool) and ``dominated_by`` (``method/setting`` keys)."""
    points = frontier_points(table)
    key = f"{method}/{setting}"
    if key not in points:
        raise DataError(f"the methods table has no entry {key}; entries: {', '.join(points)}")
    mine = {method, *own}
    rivals = [p for p in points.values() if p.method not in mine]
    beaten = dominated_by(points[key], rivals, tol=tol)
    p = points[key]
    return {"point": {"validity_unanimous": p.validity, "cost_l2": p.cost, "queries": p.queries},
            "dominated": bool(beaten), "dominated_by": [b.key for b in beaten]}


def _cell(value: Any, std: Any, digits: int) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    if std is None or (isinstance(std, float) and math.isnan(std)):
        return f"{value:.{digits}f}"
    return f"{value:.{digits}f} ± {std:.{digits}f}"


def methods_markdown(table: Sequence[Mapping[str, Any]], *, title: str = "") -> str:
    """The methods table as Markdown, one row per (method, setting), cells ``mean ± std`` over seeds
    (``n/a`` where a value is not defined, e.g. plausibility not computed)."""
    head = ["method", "setting", *(h for _, h, _ in MD_COLUMNS)]
    lines = ([f"### {title}", ""] if title else []) + ["| " + " | ".join(head) + " |",
                                                       "|" + "---|" * len(head)]
    for e in table:
        cells = [str(e["method"]), str(e["setting"])]
        cells += [_cell(e.get(k), e.get(f"{k}_std"), d) for k, _, d in MD_COLUMNS]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _curves(table: Sequence[Mapping[str, Any]]) -> dict[str, list[Mapping[str, Any]]]:
    """Method -> its entries sorted by cost (the method's sweep over settings)."""
    out: dict[str, list[Mapping[str, Any]]] = {}
    for e in table:
        out.setdefault(str(e["method"]), []).append(e)
    return {m: sorted(es, key=lambda e: (float(e["cost_l2"]), float(e["validity_unanimous"])))
            for m, es in out.items()}


def frontier_figure(table: Sequence[Mapping[str, Any]], path: str | Path, *, title: str = "",
                    zoom: float = 0.9) -> Path:
    """Validity vs L2 cost of every method: unanimous validity (left), mean per-model validity (middle) and
    the top of the unanimous panel, validity >= ``zoom`` (right).

    Each method's settings (its threshold / lambda / budget sweep) are joined into one curve in
    order of cost; every point is labelled with its setting and search queries.
    """
    if not table:
        raise DataError("the frontier figure needs at least one method entry")
    fig = Figure(figsize=(17.0, 5.2))
    axes = fig.subplots(1, 3)
    curves = _curves(table)
    colours = _colours(len(curves))
    panels = ((axes[0], "validity_unanimous", "unanimous validity", None),
              (axes[1], "validity_mean", "mean per-model validity", None),
              (axes[2], "validity_unanimous", f"unanimous validity (>= {zoom})", zoom))
    for ax, key, label, floor in panels:
        shown, low = 0, 1.0
        for (method, entries), colour in zip(curves.items(), colours, strict=True):
            if floor is not None:
                entries = [e for e in entries if float(e[key]) >= floor]
            if not entries:
                continue
            x = np.array([float(e["cost_l2"]) for e in entries])
            y = np.array([float(e[key]) for e in entries])
            ax.plot(x, y, "-o", color=colour, label=text(method, 30), markersize=5, linewidth=1.2)
            low = min(low, float(np.nanmin(y)))
            for e, xi, yi in zip(entries, x, y, strict=True):
                if math.isfinite(xi) and math.isfinite(yi):
                    shown += 1
                    dy = -12 + 8 * (shown % 4) if floor is not None else 3
                    ax.annotate(f"{text(e['setting'], 14)} q={_queries(e['queries'])}", (xi, yi), fontsize=6,
                                xytext=(3, dy), textcoords="offset points", color=colour)
        ax.set_xlabel("mean L2 cost (encoded space)")
        ax.set_ylabel(label)
        pad = max((1.0 - low) * 0.15, 0.002)
        ax.set_ylim(-0.02, 1.05) if floor is None else ax.set_ylim(low - pad, 1.0 + pad)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize="x-small", loc="lower right")
    fig.suptitle(text(f"{title}: validity vs cost (q = search queries)" if title else
                      "validity vs cost (q = search queries)"))
    fig.tight_layout()
    return save_figure(fig, path)


def _queries(q: Any) -> str:
    q = float(q)
    if not math.isfinite(q):
        return "?"
    return f"{q / 1000:.1f}k" if q >= 10000 else f"{int(round(q))}"


def _colours(n: int) -> list[Any]:
    from matplotlib import colormaps

    cmap = colormaps["tab10" if n <= 10 else "tab20"]
    return [cmap(i % cmap.N) for i in range(n)]


__all__ = ["MD_COLUMNS", "FrontierPoint", "dominated_by", "dominates", "frontier_check", "frontier_figure",
           "frontier_points", "methods_markdown"]
