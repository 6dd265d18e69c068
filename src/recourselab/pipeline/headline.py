"""Headline numbers of one dataset and the data of its DVC plots (the ``summary`` stage).

``data/metrics/<dataset>/summary.json`` is the pipeline's default DVC metric: a few flat numbers,
so that ``dvc metrics show`` prints one short row per dataset and ``dvc metrics diff`` one line
per changed number. Its keys (:data:`HEADLINE_KEYS`; a key whose source is missing is left out):

- ``accuracy_min``, ``accuracy_max``: range of the ensemble members' mean test accuracy;
- ``validity``, ``unanimous``, ``cost_l2``, ``queries``: DensityFlow's mean per-model and
  unanimous validity, mean L2 cost and search-time (distillation) queries, means over seeds;
- ``certified``, ``ot_x``, ``ot_y``: DISCOVER's certified share of (model, seed) runs and its
  OT(x) / OT(y), means over models;
- ``methods``: a list (DVC's table leaves lists out) with one entry per method of
  ``data/evaluate/<dataset>/methods.json`` when that file exists: ``method``, ``setting``,
  ``validity``, ``unanimous``, ``cost_l2``, ``queries``.

The detailed files (``tune_ensemble.json``, ``densityflow.json``, ``discover.json``, ...) stay
beside it; ``dvc metrics show <file>`` prints any of them. The plot tables (:data:`PLOTS`) go to
``data/plots/<dataset>/`` as CSV.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from recourselab.errors import ArtifactError
from recourselab.io import read_json, read_recourse
from recourselab.pipeline.summary import nested

#: The flat keys of ``summary.json``, in the order they are written.
HEADLINE_KEYS = ("accuracy_min", "accuracy_max", "validity", "unanimous", "cost_l2", "queries", "certified",
                 "ot_x", "ot_y")
SUMMARY_FILE = "summary.json"
#: Plot tables of one dataset: file name -> columns.
PLOTS: dict[str, tuple[str, ...]] = {
    "validity_cost.csv": ("method", "setting", "validity", "unanimous", "cost_l2"),
    "model_validity.csv": ("model", "validity"),
    "discover_cdf.csv": ("series", "value", "cdf"),
}
#: Points per series of ``discover_cdf.csv`` (quantiles 0, 1/(n-1), ..., 1).
CDF_POINTS = 101
#: DISCOVER's table columns of each CDF series.
CDF_SERIES = {"factual b(x')": "factual_score", "counterfactual b(x)": "score", "target y*": "target"}


def _number(value: Any) -> float | None:
    ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    return float(value) if ok else None


def _optional_json(path: Path) -> Any:
    """The content of the JSON file ``path``; None when it does not exist (a damaged file raises)."""
    return read_json(path) if path.is_file() else None


def _ensemble(tune: Any) -> dict[str, float]:
    members = nested(tune, "members")
    accuracy = [a for m in (members or {}).values() if (a := _number(nested(m, "test_accuracy", "mean"))) is not None]
    return {"accuracy_min": min(accuracy), "accuracy_max": max(accuracy)} if accuracy else {}


def _densityflow(flow: Any) -> dict[str, float]:
    summary = nested(flow, "summary")
    found = {"validity": _number(nested(summary, "mean_per_model", "mean")),
             "unanimous": _number(nested(summary, "unanimous", "mean")),
             "cost_l2": _number(nested(summary, "cost_l2", "mean")),
             "queries": _number(nested(summary, "queries_used", "mean"))}
    return {k: v for k, v in found.items() if v is not None}


def _discover(disc: Any) -> dict[str, float]:
    out: dict[str, float] = {}
    verdicts = [run["feasible"] for m in (nested(disc, "models") or {}).values()
                for run in (nested(m, "per_seed") or {}).values()
                if isinstance(run, Mapping) and isinstance(run.get("feasible"), bool)]
    if verdicts:
        out["certified"] = sum(verdicts) / len(verdicts)
    for key, name in (("ot_x", "OT_x"), ("ot_y", "OT_y")):
        value = _number(nested(disc, "mean_over_models", name))
        if value is not None:
            out[key] = value
    return out


def _methods(evaluated: Any) -> list[dict[str, Any]]:
    rows = []
    for row in nested(evaluated, "methods") or []:
        if not isinstance(row, Mapping) or "method" not in row:
            continue
        rows.append({"method": str(row["method"]), "setting": str(row.get("setting", "")),
                     "validity": _number(row.get("validity_mean")), "unanimous": _number(row.get("validity_unanimous")),
                     "cost_l2": _number(row.get("cost_l2")), "queries": _number(row.get("queries"))})
    return rows


def headline_summary(metrics_dir: str | Path, evaluate_dir: str | Path | None = None) -> dict[str, Any]:
    """The content of ``summary.json`` for one dataset (see the module docstring).

    Parameters
    ----------
    metrics_dir : ``data/metrics/<dataset>`` (``tune_ensemble.json``, ``densityflow.json``, ``discover.json``;
        each may be missing).
    evaluate_dir : ``data/evaluate/<dataset>``; its ``methods.json`` is read when it exists.

    Raises
    ------
    ArtifactError
        One of those files exists but is not valid JSON.
    """
    metrics_dir = Path(metrics_dir)
    found = {**_ensemble(_optional_json(metrics_dir / "tune_ensemble.json")),
             **_densityflow(_optional_json(metrics_dir / "densityflow.json")),
             **_discover(_optional_json(metrics_dir / "discover.json"))}
    out: dict[str, Any] = {k: round(found[k], 6) for k in HEADLINE_KEYS if k in found}
    if evaluate_dir is not None:
        methods = _methods(_optional_json(Path(evaluate_dir) / "methods.json"))
        if methods:
            out["methods"] = methods
    return out


def validity_cost_table(metrics_dir: str | Path, evaluate_dir: str | Path | None = None) -> pd.DataFrame:
    """Validity against L2 cost: one row per method and setting of ``methods.json`` when it exists,
    else one row per DensityFlow seed. Columns :data:`PLOTS` ``["validity_cost.csv"]``."""
    columns = list(PLOTS["validity_cost.csv"])
    methods = _methods(_optional_json(Path(evaluate_dir) / "methods.json")) if evaluate_dir is not None else []
    if methods:
        rows = [{k: m[k] for k in columns} for m in methods]
    else:
        per_seed = nested(_optional_json(Path(metrics_dir) / "densityflow.json"), "per_seed") or {}
        rows = [{"method": "densityflow", "setting": f"seed={seed}", "validity": _number(run.get("mean_per_model")),
                 "unanimous": _number(run.get("unanimous")), "cost_l2": _number(run.get("cost_l2"))}
                for seed, run in sorted(per_seed.items()) if isinstance(run, Mapping)]
    return pd.DataFrame(rows, columns=columns)


def model_validity_table(metrics_dir: str | Path) -> pd.DataFrame:
    """DensityFlow's validity on each ensemble member (mean over seeds), sorted by model name."""
    summary = nested(_optional_json(Path(metrics_dir) / "densityflow.json"), "summary") or {}
    prefix = "per_model."
    rows = [{"model": key[len(prefix):], "validity": _number(nested(value, "mean"))}
            for key, value in sorted(summary.items()) if key.startswith(prefix)]
    return pd.DataFrame(rows, columns=list(PLOTS["model_validity.csv"]))


def discover_cdf_table(discover_dir: str | Path, points: int = CDF_POINTS) -> pd.DataFrame:
    """Empirical CDFs of DISCOVER's factual scores b(x'), counterfactual scores b(x) and target draws y*,
    pooled over every ``<model>/seed=<s>/counterfactuals.parquet`` under ``discover_dir``.

    Returns
    -------
    DataFrame (3 * points, 3): ``series``, ``value`` (the quantile), ``cdf`` (its level); empty when
    there are no DISCOVER tables.

    Raises
    ------
    SchemaVersionError
        A table of another (or no) recourse schema version.
    """
    tables = sorted(Path(discover_dir).glob("*/seed=*/counterfactuals.parquet"))
    if not tables:
        return pd.DataFrame(columns=list(PLOTS["discover_cdf.csv"]))
    frame = pd.concat([read_recourse(t, columns=list(CDF_SERIES.values())) for t in tables], ignore_index=True)
    levels = np.linspace(0.0, 1.0, points)
    parts = []
    for series, column in CDF_SERIES.items():
        values = frame[column].to_numpy(dtype=float)
        values = values[np.isfinite(values)]
        if values.size:
            parts.append(pd.DataFrame({"series": series, "value": np.quantile(values, levels), "cdf": levels}))
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=list(PLOTS["discover_cdf.csv"]))


def plot_tables(metrics_dir: str | Path, discover_dir: str | Path | None = None,
                evaluate_dir: str | Path | None = None) -> dict[str, pd.DataFrame]:
    """Every table of :data:`PLOTS` for one dataset."""
    cdf = discover_cdf_table(discover_dir) if discover_dir is not None and Path(discover_dir).is_dir() else None
    return {"validity_cost.csv": validity_cost_table(metrics_dir, evaluate_dir),
            "model_validity.csv": model_validity_table(metrics_dir),
            "discover_cdf.csv": cdf if cdf is not None else pd.DataFrame(columns=list(PLOTS["discover_cdf.csv"]))}


def check_summary(summary: Mapping[str, Any], path: str | Path) -> None:
    """Reject a summary without any headline number (no upstream metrics were found)."""
    if not any(k in summary for k in HEADLINE_KEYS):
        raise ArtifactError(f"no headline numbers for {path}: none of tune_ensemble.json, densityflow.json, "
                            "discover.json was found beside it; run the stages that write them first")
