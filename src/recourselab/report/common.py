"""What every figure module shares: the atomic PNG writer, user text, and writers that never fail a run."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from recourselab.io import atomic_path

log = logging.getLogger(__name__)

DPI = 110


def save_figure(fig: Figure, path: str | Path) -> Path:
    """Render ``fig`` on the Agg canvas and write it as a PNG atomically (no timestamp: same bytes each run)."""
    FigureCanvasAgg(fig)
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=DPI, metadata={"Software": None})
    return Path(path)


def text(value: Any, limit: int = 0) -> str:
    """User text (feature, level, class and dataset names) for a figure: ``$`` is shown as itself, not
    read as mathtext; longer than ``limit`` characters (if set), it is shortened with an ellipsis."""
    out = str(value)
    if limit and len(out) > limit:
        out = out[:limit - 1] + "\u2026"
    return out.replace("$", r"\$")


def guarded(name: str, write: Callable[[Path], Path]) -> Callable[[Path], Path]:
    """``write``, or, if drawing fails, a small figure naming the error (and a warning).

    A stage stages all of a task's files or none, so a figure that raised would cost the run its
    results; this way the counterfactuals and metrics are kept.
    """
    def run(path: Path) -> Path:
        try:
            return write(path)
        except Exception as err:  # noqa: BLE001 - logged and shown in the figure's place
            log.warning("figure %s could not be drawn (%s: %s); it is replaced by a note", name,
                        type(err).__name__, err)
            fig = Figure(figsize=(5.0, 1.6))
            fig.text(0.5, 0.5, text(f"{name} could not be drawn:\n{type(err).__name__}: {err}", 300),
                     ha="center", va="center", wrap=True, fontsize="small")
            return save_figure(fig, path)
    return run


__all__ = ["DPI", "guarded", "save_figure", "text"]
