"""Figure of the ``ablate`` stage: validity and cost of DensityFlow with parts removed.

``ablate.png``: per variant (full method first), the mean per-model, majority and unanimous
validity as grouped bars on the left and the mean L2 cost on the right.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.figure import Figure

from recourselab.errors import DataError
from recourselab.report.common import save_figure as _save
from recourselab.report.common import text
from recourselab.report.densityflow_plots import CLASS_COLOURS

VALIDITIES = ("mean_per_model", "majority", "unanimous")


def plot_ablation(path: str | Path, rows: Mapping[str, Mapping[str, Any]], *, title: str = "") -> Path:
    """Grouped validity bars and L2 cost per variant; ``rows`` maps variant -> its metrics."""
    missing = {name: [k for k in (*VALIDITIES, "cost_l2") if k not in m] for name, m in rows.items()}
    missing = {name: keys for name, keys in missing.items() if keys}
    if not rows or missing:
        raise DataError(f"plot_ablation needs validity and cost_l2 for every variant; missing: {missing or 'rows'}")
    names = list(rows)
    # a metric missing its value (NaN written as null) is drawn as no bar, not a TypeError
    value = {(n, k): np.nan if rows[n][k] is None else float(rows[n][k])
             for n in names for k in (*VALIDITIES, "cost_l2")}
    labels = [text(n, 24) for n in names]
    x = np.arange(len(names))
    fig = Figure(figsize=(8.0, 3.4))
    left, right = fig.subplots(1, 2, gridspec_kw={"width_ratios": [2, 1]})
    width = 0.8 / len(VALIDITIES)
    for i, key in enumerate(VALIDITIES):
        left.bar(x + (i - 1) * width, [value[n, key] for n in names], width, color=CLASS_COLOURS[i],
                 label=key.replace("_", " "))
    left.set_xticks(x, labels, rotation=20, ha="right", fontsize=8)
    left.set_ylim(0.0, 1.2)
    left.set_yticks(np.linspace(0.0, 1.0, 6))
    left.set_ylabel("validity")
    left.legend(loc="upper center", ncol=len(VALIDITIES), fontsize=7, frameon=False)
    right.bar(x, [value[n, "cost_l2"] for n in names], color=CLASS_COLOURS[3])
    right.set_xticks(x, labels, rotation=20, ha="right", fontsize=8)
    right.set_ylabel("mean L2 cost")
    fig.suptitle(text(title or "DensityFlow ablation"), fontsize=10)
    fig.tight_layout()
    return _save(fig, path)
