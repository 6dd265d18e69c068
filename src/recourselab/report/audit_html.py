"""Render an audit (sections of tables, figures and notes) as one self-contained HTML page and as Markdown.

The HTML page embeds its figures as base64 PNGs and carries a small script that, once the page has
loaded, checks every image decoded (``naturalWidth > 0``), logs a console error for one that did not,
and writes the outcome into ``<div id="audit-check">`` (read back by the browser test).
"""

from __future__ import annotations

import base64
import html
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from recourselab.report.common import save_figure, text


@dataclass
class Section:
    """One part of the report: a title, an anchor, notes, tables (caption, frame) and figure files."""

    title: str
    anchor: str
    notes: list[str] = field(default_factory=list)
    tables: list[tuple[str, pd.DataFrame]] = field(default_factory=list)
    figures: list[Path] = field(default_factory=list)
    absent: str | None = None  # why the section has no content (shown instead of it)


def fmt(value: Any) -> str:
    """A cell: numbers to 4 significant digits, booleans as yes/no, missing values as an en dash."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "\u2013"
    if isinstance(value, (bool, np.bool_)):
        return "yes" if value else "no"
    if isinstance(value, (float, np.floating)):
        return f"{value:.4g}"
    return str(value)


def _html_table(caption: str, frame: pd.DataFrame) -> str:
    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in frame.columns)
    body = []
    for row in frame.itertuples(index=False):
        flagged = any(isinstance(v, (bool, np.bool_)) and v and c in ("flagged", "changed")
                      for c, v in zip(frame.columns, row, strict=True))
        cells = "".join(f"<td>{html.escape(fmt(v))}</td>" for v in row)
        body.append(f"<tr class=\"flag\">{cells}</tr>" if flagged else f"<tr>{cells}</tr>")
    return (f"<table class=\"audit\"><caption>{html.escape(caption)}</caption><thead><tr>{head}</tr></thead>"
            f"<tbody>{''.join(body)}</tbody></table>")


def _md_table(caption: str, frame: pd.DataFrame) -> str:
    def cell(v: Any) -> str:
        return fmt(v).replace("|", "\\|").replace("\n", " ")

    lines = [f"*{caption}*", "", "| " + " | ".join(cell(c) for c in frame.columns) + " |",
             "|" + "---|" * len(frame.columns)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in frame.itertuples(index=False)]
    return "\n".join(lines)


STYLE = """
body{font-family:system-ui,sans-serif;margin:2em auto;max-width:1100px;color:#222}
table.audit{border-collapse:collapse;margin:.8em 0 1.6em;font-size:.85em}
table.audit caption{text-align:left;font-weight:600;padding:.3em 0}
table.audit th,table.audit td{border:1px solid #ccc;padding:.2em .5em;text-align:right}
table.audit th{background:#f2f2f2}
tr.flag td{background:#fde2e2}
.absent{color:#8a5a00;font-style:italic}
.alert{background:#fde2e2;border-left:4px solid #c00;padding:.5em 1em}
.ok{background:#e5f5e5;border-left:4px solid #2a2;padding:.5em 1em}
img{max-width:100%;display:block;margin:.5em 0}
nav a{margin-right:1em}
"""

#: Runs on load: counts the images, logs a console error for each one not decoded, writes the marker.
CHECK_SCRIPT = """
window.addEventListener('load', function () {
  var imgs = Array.prototype.slice.call(document.images);
  var broken = imgs.filter(function (i) { return !(i.complete && i.naturalWidth > 0); });
  broken.forEach(function (i) { console.error('audit image not loaded: ' + i.alt); });
  var mark = document.getElementById('audit-check');
  mark.setAttribute('data-images', String(imgs.length));
  mark.setAttribute('data-broken', String(broken.length));
  mark.setAttribute('data-tables', String(document.querySelectorAll('table.audit').length));
  mark.setAttribute('data-status', broken.length === 0 ? 'ok' : 'broken');
});
"""


NO_FLAGS = ("No flags: no immutable-feature violation, no subgroup gap above its threshold, every DISCOVER run "
            "certified.")


def render_html(title: str, summary: Sequence[str], sections: Sequence[Section], *, alerts: Sequence[str] = (),
                no_flags: str = NO_FLAGS) -> str:
    """The whole report as one HTML page (figures read from their files and embedded as base64 PNGs);
    ``alerts`` are listed at the top, or ``no_flags`` when there is none."""
    parts = [f"<h1>{html.escape(title)}</h1>",
             "<nav>" + "".join(f"<a href=\"#{s.anchor}\">{html.escape(s.title)}</a>" for s in sections) + "</nav>"]
    if alerts:
        parts.append("<div class=\"alert\"><b>Flags</b><ul>" + "".join(f"<li>{html.escape(a)}</li>" for a in alerts)
                     + "</ul></div>")
    else:
        parts.append(f"<div class=\"ok\">{html.escape(no_flags)}</div>")
    parts += [f"<p>{html.escape(s)}</p>" for s in summary]
    for s in sections:
        parts.append(f"<section id=\"{s.anchor}\"><h2>{html.escape(s.title)}</h2>")
        if s.absent:
            parts.append(f"<p class=\"absent\">{html.escape(s.absent)}</p>")
        parts += [f"<p>{html.escape(n)}</p>" for n in s.notes]
        parts += [_html_table(c, f) for c, f in s.tables]
        for fig in s.figures:
            data = base64.b64encode(Path(fig).read_bytes()).decode()
            parts.append(f"<img alt=\"{html.escape(fig.stem)}\" src=\"data:image/png;base64,{data}\">")
        parts.append("</section>")
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{html.escape(title)}</title><style>{STYLE}</style></head><body>\n"
            + "\n".join(parts)
            + "\n<div id=\"audit-check\" data-status=\"pending\"></div>\n"
            f"<script>{CHECK_SCRIPT}</script>\n</body></html>\n")


def render_markdown(title: str, summary: Sequence[str], sections: Sequence[Section], *, alerts: Sequence[str] = (),
                    figure_dir: str = "figures") -> str:
    """The report as Markdown; figures are linked as ``<figure_dir>/<name>.png``."""
    lines = [f"# {title}", ""]
    lines += ([f"**Flags:** {a}" for a in alerts] or ["No flags."]) + [""]
    lines += [*summary, ""]
    for s in sections:
        lines += [f"## {s.title}", ""]
        if s.absent:
            lines += [f"_{s.absent}_", ""]
        lines += [*(n + "\n" for n in s.notes)]
        for caption, frame in s.tables:
            lines += [_md_table(caption, frame), ""]
        lines += [f"![{f.stem}]({figure_dir}/{f.name})" for f in s.figures]
        lines.append("")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------- figures

def _finish(fig: Figure, ax: Any, path: Path, *, title: str, xlabel: str, ylabel: str | None = None,
            legend: bool = True) -> Path:
    """Label ``ax`` (``title`` through :func:`text`), add its legend, lay ``fig`` out and save it to ``path``."""
    ax.set_xlabel(xlabel)
    if ylabel is not None:
        ax.set_ylabel(ylabel)
    ax.set_title(text(title), fontsize="medium")
    if legend:
        ax.legend(fontsize="small")
    fig.tight_layout()
    return save_figure(fig, path)


def bar_figure(path: Path, frame: pd.DataFrame, *, x: str, y: Sequence[str], title: str, ylabel: str,
               ylim: tuple[float, float] | None = (0, 1.05)) -> Path:
    """Horizontal grouped bars of the columns ``y`` of ``frame``, one group per value of its column ``x``
    (labels in full on the vertical axis); ``ylabel`` names the values, ``ylim`` their range."""
    fig = Figure(figsize=(6.5, 0.9 + 0.32 * len(frame) * max(len(y), 1)))
    ax = fig.subplots()
    height = 0.8 / max(len(y), 1)
    pos = np.arange(len(frame))[::-1]
    for i, col in enumerate(y):
        ax.barh(pos - i * height, frame[col].astype(float).fillna(0).to_numpy(), height, label=text(col))
    ax.set_yticks(pos - height * (len(y) - 1) / 2, [text(v, 48) for v in frame[x]], fontsize="small")
    if ylim:
        ax.set_xlim(*ylim)
    return _finish(fig, ax, path, title=title, xlabel=ylabel, legend=len(y) > 1)


def hist_figure(path: Path, samples: dict[str, np.ndarray], *, title: str, xlabel: str) -> Path:
    """Overlaid step histograms of each named sample (NaN left out)."""
    fig = Figure(figsize=(5.5, 3.2))
    ax = fig.subplots()
    finite = {k: v[np.isfinite(v)] for k, v in samples.items()}
    values = np.concatenate([v for v in finite.values()] or [np.zeros(1)])
    bins = np.histogram_bin_edges(values if values.size else np.zeros(1), bins=30)
    for name, v in finite.items():
        if v.size:
            ax.hist(v, bins=bins, histtype="step", label=text(name, 30), density=True)
    return _finish(fig, ax, path, title=title, xlabel=xlabel, ylabel="density")


def cdf_figure(path: Path, samples: dict[str, np.ndarray], *, title: str, xlabel: str) -> Path:
    """Empirical CDFs of each named sample (NaN left out)."""
    fig = Figure(figsize=(5.5, 3.2))
    ax = fig.subplots()
    for name, v in samples.items():
        v = np.sort(v[np.isfinite(v)])
        if v.size:
            ax.step(v, np.arange(1, v.size + 1) / v.size, where="post", label=text(name, 30))
    ax.set_ylim(0, 1.02)
    return _finish(fig, ax, path, title=title, xlabel=text(xlabel), ylabel="CDF")
