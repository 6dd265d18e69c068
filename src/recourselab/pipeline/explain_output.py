"""Output of ``recourselab explain``: a before/after table, JSON or CSV, and the command itself.

The table shows, per row, only the features that changed, in original units (category levels
by name, integer features as integers), then which models accept the counterfactual and their
agreement; a bad row shows its error. JSON is a list with one object per row; CSV has one line
per row with every feature before (``input__<name>``) and after (``counterfactual__<name>``).
"""

from __future__ import annotations

import argparse
import io
import json
import logging
import sys
from pathlib import Path
from typing import Any

import pandas as pd

from recourselab.data.feature import python_scalar
from recourselab.errors import ConfigError, DataError, RecourselabError
from recourselab.io import write_bytes
from recourselab.pipeline.explain import Explanation, RowResult, explain

log = logging.getLogger(__name__)

FORMATS = ("table", "json", "csv")


#: ``--out`` suffixes that choose the format when ``--format`` is not given.
OUT_FORMATS = {".csv": "csv", ".json": "json"}


def show(value: Any) -> str:
    """A value in original units as text: floats to 6 significant digits, everything else as is."""
    value = python_scalar(value)
    if isinstance(value, float):
        text = f"{value:.6g}"
        return text if any(c in text for c in ".einf") else f"{text}.0"  # 1.0, not 1: a float feature
    return str(value)


def _budget(result: Explanation) -> str:
    return "unlimited" if result.budget is None else f"budget {result.budget}"


def _certificate(cert: dict[str, Any]) -> str:
    verdict = "certified" if cert["certified"] else "NOT certified"
    return (f"DISCOVER on {cert['model']} over {cert['n_rows']} rows: {verdict} (UCL_x {cert['UCL_x']:.4g} vs U_x "
            f"{cert['U_x']:.4g}, UCL_y {cert['UCL_y']:.4g} vs U_y {cert['U_y']:.4g}); {cert['edited_rows']} rows "
            f"edited, {cert['queries']} model rows queried")


def _row_lines(r: RowResult) -> list[str]:
    if r.counterfactual is None:
        return [f"row {r.row}: ERROR {r.error}"]
    lines = [f"row {r.row}: class {show(r.prediction)} -> target {show(r.target)}"]
    if r.changed:
        cells = [("feature", "before", "after")] + [(c, show(r.input[c]), show(r.counterfactual[c])) for c in r.changed]
        widths = [max(len(cell[i]) for cell in cells) for i in range(3)]
        lines += ["  " + "  ".join(cell[i].ljust(widths[i]) for i in range(3)).rstrip() for cell in cells]
    else:
        lines.append("  (no feature changed)")
    if r.validity is not None:
        votes = ", ".join(f"{m} {'yes' if ok else 'no'}" for m, ok in r.validity.items())
        accepted = sum(r.validity.values())
        lines.append(f"  valid for: {votes}; agreement {accepted}/{len(r.validity)} ({r.agreement:.0%})")
    if r.note:
        lines.append(f"  {r.note}")
    return lines


def render_table(result: Explanation) -> str:
    """The readable report: a header, each row's changed features and validity, a summary line."""
    what = {"discover": f"DISCOVER on {result.model}", "densityflow_r": "RobustFlow (densityflow_r)"}.get(
        result.method, "DensityFlow")
    lines = [f"explain {result.dataset} seed={result.seed}: {what}, checked by {', '.join(result.members)}"]
    if result.certification is not None:
        lines.append(_certificate(result.certification))
    for r in result.rows:
        lines += _row_lines(r)
    lines.append(f"{result.n_explained} of {len(result.rows)} rows explained; {result.queries} rows sent to the "
                 f"models ({_budget(result)})")
    split = sum(r.agreement is not None and r.agreement < 1 for r in result.rows)
    if split and result.method == "densityflow":
        lines.append(f"{split} counterfactual(s) are rejected by some model; `--method densityflow_r` repairs such "
                     "counterfactuals with the ensemble's help (more queries)")
    return "\n".join(lines) + "\n"


def row_record(result: Explanation, r: RowResult) -> dict[str, Any]:
    """One row as a JSON-safe object (the ``--format json`` element)."""
    values = {k: python_scalar(v) for k, v in r.input.items()}
    cf = None if r.counterfactual is None else {k: python_scalar(v) for k, v in r.counterfactual.items()}
    return {"row": r.row, "method": result.method, "input": values, "counterfactual": cf,
            "changed": {c: {"before": values[c], "after": cf[c]} for c in r.changed},
            "prediction": python_scalar(r.prediction), "target": python_scalar(r.target), "validity": r.validity,
            "agreement": r.agreement, "error": r.error, "note": r.note,
            "certified": None if result.certification is None else result.certification["certified"]}


def render_json(result: Explanation) -> str:
    return json.dumps([row_record(result, r) for r in result.rows], indent=2, allow_nan=False) + "\n"


def render_csv(result: Explanation) -> str:
    """One line per row: status, labels, agreement, changed features, per-model validity, values before/after."""
    features = list(dict.fromkeys(k for r in result.rows for k in [*r.input, *(r.counterfactual or {})]))
    lines = []
    for r in result.rows:
        line = {"row": r.row, "error": r.error, "note": r.note, "prediction": python_scalar(r.prediction),
                "target": python_scalar(r.target), "agreement": r.agreement, "changed": ";".join(r.changed)}
        line.update({f"valid__{m}": None if r.validity is None else r.validity[m] for m in result.members})
        line.update({f"input__{f}": python_scalar(r.input.get(f)) for f in features})
        line.update({f"counterfactual__{f}": None if r.counterfactual is None else python_scalar(r.counterfactual[f])
                     for f in features})
        lines.append(line)
    buf = io.StringIO()
    pd.DataFrame(lines, dtype=object).to_csv(buf, index=False)  # object: integers stay integers beside empty cells
    return buf.getvalue()


def render(result: Explanation, fmt: str = "table") -> str:
    """The report in format ``fmt`` (one of :data:`FORMATS`)."""
    renderers = {"table": render_table, "json": render_json, "csv": render_csv}
    if fmt not in renderers:
        raise ConfigError(f"unknown format {fmt!r}; valid formats: {', '.join(FORMATS)}")
    return renderers[fmt](result)


def run_command(args: argparse.Namespace) -> int:
    """``recourselab explain``: explain, render, write (``--out``, atomically) or print; 0 when a row was explained.

    ``--params`` and ``--data-root`` default to ``params.yaml`` and ``data/`` at the project root
    (the folder at or above the current one holding ``dvc.yaml``), else in the current folder.
    """
    from recourselab.pipeline.project import project_root
    from recourselab.pipeline.validate import load_checked_params

    try:
        root = project_root()
    except RecourselabError:
        root = Path.cwd()
    out = None if args.out is None or str(args.out) == "-" else Path(args.out)
    if out is not None and out.is_dir():
        raise DataError(f"--out {out} is a folder; give a file path")
    params_path = args.params if args.params is not None else root / "params.yaml"
    if not Path(params_path).is_file():
        raise ConfigError(f"params file not found: {params_path}; pass --params FILE (the parameters the artifacts "
                          "were made with)")
    result = explain(args.input, dataset=args.dataset, seed=args.seed, method=args.method, model=args.model,
                     budget=args.budget, params=load_checked_params(params_path),
                     data_root=args.data_root if args.data_root is not None else root / "data")
    fmt = args.format or (OUT_FORMATS.get(out.suffix.lower(), "table") if out is not None else "table")
    text = render(result, fmt)
    if out is not None:
        try:
            write_bytes(out, text.encode())
        except OSError as err:
            raise DataError(f"cannot write --out {out}: {err.strerror or err}") from None
        log.info("wrote %s", out)
    else:
        sys.stdout.write(text)
    if out is not None or fmt != "table":  # the table ends with this line itself
        log.info("%d of %d rows explained; %d rows sent to the models (%s)", result.n_explained, len(result.rows),
                 result.queries, _budget(result))
    return 0 if result.n_explained else 1


__all__ = ["FORMATS", "render", "render_csv", "render_json", "render_table", "row_record", "run_command"]
