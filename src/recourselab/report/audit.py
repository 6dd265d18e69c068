"""Audit tables of one dataset's recourse outputs: validity, cost, plausibility, immutable-feature
violations, query use, DISCOVER certification and the subgroup breakdown.

Everything here works on tables already read (:class:`RunOutputs`); reading the pipeline's folders
is :mod:`recourselab.pipeline.audit`. One row of :func:`row_table` is one counterfactual of one
method (``densityflow`` or ``discover:<model>``) and seed.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from recourselab.config.audit import AuditParams
from recourselab.data.schema import Schema

#: Prefixes of the counterfactual tables' columns (see docs/reference/artifacts.md).
CF, CF_ORIGINAL, FACTUAL_ORIGINAL, LABEL = "cf__", "cf_original__", "factual_original__", "label__"
#: Prefix of the protected-attribute columns of :func:`row_table` (factual values, original units).
ATTR = "attr__"
#: Column of :func:`row_table` that tells repeated (method, seed, row_id) keys apart.
OCCURRENCE = "occurrence"
KEY = ["method", "seed", "row_id", OCCURRENCE]


@dataclass
class RunOutputs:
    """One dataset's recourse outputs, read from the pipeline's folders.

    Attributes
    ----------
    dataset : the dataset name.
    densityflow : seed -> ``counterfactuals.parquet`` of ``generate``.
    discover : (model, seed) -> DISCOVER's ``counterfactuals.parquet``.
    discover_metrics : (model, seed) -> DISCOVER's ``metrics.json``.
    factuals : seed -> the prepared test rows in original units, indexed by ``row_id`` (absent seeds:
        the prepared data was not there; DISCOVER rows carry their own factuals).
    schemas : seed -> the prepared data's schema.
    metrics : name -> ``data/metrics/<dataset>/<name>.json`` (``densityflow``, ``discover``, ...).
    manifests : seed -> the ensemble's ``manifest.json``.
    evaluate_methods, evaluate_rows : the ``evaluate`` stage's ``methods.json`` / ``rows.parquet``, or None.
    budgets : named query budgets of the params (``distill``: DensityFlow's distillation budget).
    """

    dataset: str
    densityflow: dict[int, pd.DataFrame] = field(default_factory=dict)
    discover: dict[tuple[str, int], pd.DataFrame] = field(default_factory=dict)
    discover_metrics: dict[tuple[str, int], dict[str, Any]] = field(default_factory=dict)
    factuals: dict[int, pd.DataFrame] = field(default_factory=dict)
    schemas: dict[int, Schema] = field(default_factory=dict)
    metrics: dict[str, Any] = field(default_factory=dict)
    manifests: dict[int, dict[str, Any]] = field(default_factory=dict)
    evaluate_methods: dict[str, Any] | None = None
    evaluate_rows: pd.DataFrame | None = None
    budgets: dict[str, int] = field(default_factory=dict)

    @property
    def empty(self) -> bool:
        return not self.densityflow and not self.discover


def _schema(run: RunOutputs, seed: int) -> Schema | None:
    return run.schemas.get(seed) or next(iter(run.schemas.values()), None)


def protected_features(run: RunOutputs, params: AuditParams) -> list[str]:
    """The protected features of ``params.protected`` that the dataset has, in the params' order."""
    names: set[str] = set()
    for schema in run.schemas.values():
        names.update(schema.feature_names)
    for frame in [*run.densityflow.values(), *run.discover.values()]:
        names.update(c[len(CF_ORIGINAL):] for c in frame.columns if c.startswith(CF_ORIGINAL))
    return [p for p in params.protected if p in names]


def _factual_values(run: RunOutputs, seed: int, frame: pd.DataFrame, name: str) -> pd.Series | None:
    """Original-unit values of feature ``name`` of the factuals of ``frame`` (None: unknown)."""
    if FACTUAL_ORIGINAL + name in frame:
        return frame[FACTUAL_ORIGINAL + name].reset_index(drop=True)
    factuals = run.factuals.get(seed)
    if factuals is not None and name in factuals and frame["row_id"].isin(factuals.index).all():
        return factuals.loc[frame["row_id"].to_numpy(), name].reset_index(drop=True)
    schema = _schema(run, seed)
    immutable = schema is not None and any(f.name == name and f.immutable for f in schema.features)
    if immutable and CF_ORIGINAL + name in frame:  # never changed: the factual's value
        return frame[CF_ORIGINAL + name].reset_index(drop=True)
    return None


def _occurrence(frame: pd.DataFrame) -> np.ndarray:
    return frame.groupby("row_id", sort=False).cumcount().to_numpy()


def _discover_cost(run: RunOutputs, seed: int, frame: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """L1 / L2 distances factual -> counterfactual in encoded (standardised) units; NaN without a schema."""
    schema = _schema(run, seed)
    cols = [c for c in frame.columns if c.startswith(CF)]
    originals = [FACTUAL_ORIGINAL + f for f in (schema.feature_names if schema else [])]
    if schema is None or not all(c in frame for c in originals):
        nan = np.full(len(frame), np.nan)
        return nan, nan
    factual = schema.transform(frame[originals].set_axis(schema.feature_names, axis=1))
    delta = frame[cols].to_numpy(dtype=float) - factual
    return np.abs(delta).sum(axis=1), np.sqrt((delta ** 2).sum(axis=1))


def row_table(run: RunOutputs, params: AuditParams) -> pd.DataFrame:
    """One row per counterfactual of every method and seed.

    Columns: ``method``, ``model`` (DISCOVER's model; None for DensityFlow), ``seed``, ``row_id``,
    ``occurrence`` (0 unless a row id repeats), ``valid`` (DensityFlow: every ensemble member labels the
    target; DISCOVER: the model scores the counterfactual favourable, at least 0.5), ``valid_mean``
    (share of members that label the target; DISCOVER: ``valid``), ``cost_l1``, ``cost_l2`` (encoded
    units), ``density`` (DensityFlow), ``certified`` (DISCOVER: the run's certificate; NaN for
    DensityFlow), ``attr__<feature>`` for each protected feature and the encoded ``cf__`` columns.
    """
    features = protected_features(run, params)
    parts = []
    for seed, frame in sorted(run.densityflow.items()):
        labels = [c for c in frame.columns if c.startswith(LABEL)]
        hit = frame[labels].to_numpy() == frame["target"].to_numpy()[:, None] if labels else np.zeros((len(frame), 0))
        part = pd.DataFrame({
            "method": "densityflow", "model": None, "seed": seed, "row_id": frame["row_id"].to_numpy(),
            OCCURRENCE: _occurrence(frame), "valid": hit.all(axis=1) if labels else np.nan,
            "valid_mean": hit.mean(axis=1) if labels else np.nan,
            "cost_l1": frame["cost_l1"].to_numpy(float), "cost_l2": frame["cost_l2"].to_numpy(float),
            "density": frame["density"].to_numpy(float) if "density" in frame else np.nan, "certified": np.nan})
        parts.append(_with_rows(part, run, seed, frame, features))
    for (model, seed), frame in sorted(run.discover.items()):
        valid = (frame["score"].to_numpy(float) >= 0.5)
        l1, l2 = _discover_cost(run, seed, frame)
        feasible = run.discover_metrics.get((model, seed), {}).get("feasible")
        part = pd.DataFrame({
            "method": f"discover:{model}", "model": model, "seed": seed, "row_id": frame["row_id"].to_numpy(),
            OCCURRENCE: _occurrence(frame), "valid": valid, "valid_mean": valid.astype(float), "cost_l1": l1,
            "cost_l2": l2, "density": np.nan, "certified": np.nan if feasible is None else float(bool(feasible))})
        parts.append(_with_rows(part, run, seed, frame, features))
    if not parts:
        return pd.DataFrame(columns=[*KEY, "model", "valid", "valid_mean", "cost_l1", "cost_l2", "density",
                                     "certified"])
    return pd.concat(parts, ignore_index=True)


def _with_rows(part: pd.DataFrame, run: RunOutputs, seed: int, frame: pd.DataFrame,
               features: Sequence[str]) -> pd.DataFrame:
    extra = {}
    for name in features:
        values = _factual_values(run, seed, frame, name)
        extra[ATTR + name] = values.to_numpy(dtype=object) if values is not None else np.full(len(frame), None)
    cf = frame[[c for c in frame.columns if c.startswith(CF)]].reset_index(drop=True)
    return pd.concat([part, pd.DataFrame(extra), cf], axis=1)


# ---------------------------------------------------------------------------------------------- tables

def validity_table(run: RunOutputs, rows: pd.DataFrame) -> pd.DataFrame:
    """Per method: rows, validity per ensemble member (DensityFlow), mean per-model and unanimous validity."""
    out = []
    for method, group in rows.groupby("method", sort=True):
        entry: dict[str, Any] = {"method": method, "rows": len(group), "seeds": group["seed"].nunique()}
        if method == "densityflow":
            for _, frame in sorted(run.densityflow.items()):
                for col in (c for c in frame.columns if c.startswith(LABEL)):
                    entry.setdefault(col[len(LABEL):], []).append(frame[col].to_numpy() == frame["target"].to_numpy())
            for key, hits in list(entry.items()):
                if isinstance(hits, list):
                    entry[key] = float(np.concatenate(hits).mean())
        entry["validity_mean"] = float(group["valid_mean"].mean())
        entry["validity_unanimous"] = float(group["valid"].astype(float).mean())
        out.append(entry)
    return pd.DataFrame(out)


def cost_table(rows: pd.DataFrame) -> pd.DataFrame:
    """Per method: mean, median, 90th percentile and maximum of the L1 cost and mean L2 cost (encoded units)."""
    out = []
    for method, group in rows.groupby("method", sort=True):
        c = group["cost_l1"].astype(float)
        out.append({"method": method, "rows": len(group), "cost_l1_mean": c.mean(), "cost_l1_median": c.median(),
                    "cost_l1_p90": c.quantile(0.9), "cost_l1_max": c.max(),
                    "cost_l2_mean": group["cost_l2"].astype(float).mean()})
    return pd.DataFrame(out)


def _summary_mean(metrics: dict[str, Any] | None, key: str) -> float | None:
    entry = ((metrics or {}).get("summary") or {}).get(key)
    return entry.get("mean") if isinstance(entry, dict) else None


def plausibility_table(run: RunOutputs, rows: pd.DataFrame) -> pd.DataFrame:
    """LOF / IsolationForest inlier rates of the counterfactuals and of real rows (DensityFlow's metrics,
    mean over seeds), mean density, and the ``evaluate`` stage's plausibility per method when present."""
    out = []
    df = run.metrics.get("densityflow")
    if df is not None or run.densityflow:
        density = rows.loc[rows["method"] == "densityflow", "density"].astype(float)
        out.append({"method": "densityflow", "source": "generate",
                    **{k: _summary_mean(df, k) for k in ("lof_inlier_rate", "lof_inlier_rate_real",
                                                          "iforest_inlier_rate", "iforest_inlier_rate_real")},
                    "density_mean": float(density.mean()) if len(density) else None})
    for entry in (run.evaluate_methods or {}).get("methods", []):
        out.append({"method": f"{entry.get('method')} ({entry.get('setting')})", "source": "evaluate",
                    "lof_inlier_rate": entry.get("plausibility_lof"),
                    "iforest_inlier_rate": entry.get("plausibility_iforest")})
    return pd.DataFrame(out)


def immutable_violations(run: RunOutputs) -> pd.DataFrame:
    """Per method, seed and ruled feature (immutable or monotone): rows checked and rows whose
    counterfactual broke the rule (``rule``: ``immutable``, ``increasing`` or ``decreasing``).

    The factual comes from DISCOVER's ``factual_original__`` columns or, for DensityFlow, from the
    prepared test rows (by ``row_id``); rows without a known factual are not counted as checked.
    An immutable numerical value counts as changed beyond a relative 1e-9, a categorical level when
    it differs; a monotone value breaks its rule when it moved the forbidden way by more than that.
    """
    columns = ["method", "seed", "feature", "rule", "checked", "violations"]
    out = []
    tables = [("densityflow", s, f) for s, f in sorted(run.densityflow.items())]
    tables += [(f"discover:{m}", s, f) for (m, s), f in sorted(run.discover.items())]
    for method, seed, frame in tables:
        schema = _schema(run, seed)
        if schema is None:
            continue
        for feat in (f for f in schema.features if f.immutable or f.monotone):
            if CF_ORIGINAL + feat.name not in frame:
                continue
            rule = "immutable" if feat.immutable else feat.monotone
            cf = frame[CF_ORIGINAL + feat.name].reset_index(drop=True)
            if FACTUAL_ORIGINAL + feat.name in frame:
                fact = frame[FACTUAL_ORIGINAL + feat.name].reset_index(drop=True)
            elif seed in run.factuals and frame["row_id"].isin(run.factuals[seed].index).all():
                fact = run.factuals[seed].loc[frame["row_id"].to_numpy(), feat.name].reset_index(drop=True)
            else:
                out.append(dict(zip(columns, (method, seed, feat.name, rule, 0, 0), strict=True)))
                continue
            if feat.kind == "numerical":
                a, b = cf.to_numpy(float), fact.to_numpy(float)
                sign = {"immutable": 0, "increasing": 1, "decreasing": -1}[rule]
                tol = 1e-9 * np.maximum(1.0, np.abs(b))
                changed = np.abs(a - b) > tol if sign == 0 else (b - a) * sign > tol
            else:
                changed = cf.astype(str).to_numpy() != fact.astype(str).to_numpy()
            out.append(dict(zip(columns, (method, seed, feat.name, rule, len(frame), int(changed.sum())),
                                strict=True)))
    return pd.DataFrame(out, columns=columns)


def query_table(run: RunOutputs) -> pd.DataFrame:
    """Query-budget use per method and seed: oracle rows the search queried, the budget, and evaluation rows."""
    out = []
    df = (run.metrics.get("densityflow") or {}).get("per_seed", {})
    budget = run.budgets.get("distill")
    for seed in sorted(run.densityflow):
        m = df.get(str(seed), {})
        used = m.get("queries_used")
        out.append({"method": "densityflow", "seed": seed, "search_queries": used, "budget": budget,
                    "budget_used": (used / budget) if used is not None and budget else None,
                    "evaluation_queries": m.get("evaluation_queries"), "counterfactuals": m.get("n_queries")})
    for (model, seed), m in sorted(run.discover_metrics.items()):
        out.append({"method": f"discover:{model}", "seed": seed, "search_queries": m.get("queries"),
                    "budget": None, "budget_used": None, "evaluation_queries": m.get("selection_queries"),
                    "counterfactuals": m.get("n_factuals")})
    return pd.DataFrame(out)


def _not_certified_reason(m: dict[str, Any]) -> str:
    """Why a DISCOVER run is not certified: the recorded reason, else the certificates that failed."""
    for key in ("certification_reason", "reason"):
        if m.get(key):
            return str(m[key])
    failed = []
    for side in ("x", "y"):
        ucl, bound = m.get(f"UCL_{side}"), m.get(f"U_{side}")
        if isinstance(ucl, (int, float)) and isinstance(bound, (int, float)) and ucl > bound:
            failed.append(f"UCL_{side} {ucl:.4g} > U_{side} {bound:.4g}")
    return "; ".join(failed) if failed else "not recorded"


def certification_table(run: RunOutputs) -> pd.DataFrame:
    """Per DISCOVER model and seed: certified, OT(x), OT(y), the upper confidence limits against their
    thresholds, the share of held-out direction sets still certified, what certified the run (the search,
    the repair's reverts or the polish; empty in outputs that predate it), the rows the repair reverted or
    the polish changed (0 in outputs that predate it), and why a run is not certified."""
    out = []
    for (model, seed), m in sorted(run.discover_metrics.items()):
        certified = bool(m.get("feasible"))
        out.append({"model": model, "seed": seed, "certified": certified, "OT_x": m.get("OT_x"),
                    "OT_y": m.get("OT_y"), "UCL_x": m.get("UCL_x"), "U_x": m.get("U_x"), "UCL_y": m.get("UCL_y"),
                    "U_y": m.get("U_y"), "certified_x_holdout": m.get("certified_x_holdout"),
                    "certified_by": m.get("certified_by") or "", "repaired_rows": int(m.get("repaired_rows") or 0),
                    "reason": "" if certified else _not_certified_reason(m)})
    return pd.DataFrame(out)


# ---------------------------------------------------------------------------------------------- subgroups

def _band_labels(values: pd.Series, edges: Sequence[float]) -> pd.Series:
    bounds = [-math.inf, *edges, math.inf]
    labels = []
    for lo, hi in zip(bounds[:-1], bounds[1:], strict=True):
        labels.append(f"< {hi:g}" if lo == -math.inf else f">= {lo:g}" if hi == math.inf else f"{lo:g}-{hi:g}")
    return pd.cut(values.astype(float), bounds, right=False, labels=labels).astype(str)


def subgroup_labels(rows: pd.DataFrame, feature: str, params: AuditParams) -> pd.Series:
    """Subgroup of each row for ``feature``: its level, or its band (``audit.bands``; else quartiles)."""
    values = rows[ATTR + feature]
    numeric = pd.to_numeric(values, errors="coerce")
    if values.notna().any() and numeric[values.notna()].notna().all() and (
            feature in params.bands or numeric.nunique() > 12):
        edges = params.bands.get(feature) or sorted(set(np.nanquantile(numeric, [0.25, 0.5, 0.75]).tolist()))
        return _band_labels(numeric, edges)
    return values.astype(str)


def subgroup_table(rows: pd.DataFrame, features: Sequence[str], params: AuditParams) -> pd.DataFrame:
    """Per method, protected feature and subgroup: rows, validity, mean L1 cost and certified share.

    The certified share is the share of the subgroup's DISCOVER rows that come from a certified run
    (NaN for DensityFlow, which has no certificate).
    """
    out = []
    for name in features:
        if ATTR + name not in rows.columns or rows[ATTR + name].isna().all():  # e.g. no rows at all
            continue
        groups = subgroup_labels(rows, name, params)
        for (method, group), part in rows.groupby([rows["method"], groups], sort=True):
            out.append({"method": method, "attribute": name, "group": group, "rows": len(part),
                        "validity": float(part["valid"].astype(float).mean()),
                        "cost_l1": float(part["cost_l1"].astype(float).mean()),
                        "certified": float(part["certified"].mean()) if part["certified"].notna().any() else np.nan})
    return pd.DataFrame(out, columns=["method", "attribute", "group", "rows", "validity", "cost_l1", "certified"])


def gap_table(subgroups: pd.DataFrame, rows: pd.DataFrame, params: AuditParams) -> pd.DataFrame:
    """Per method, attribute and measure: the largest gap between subgroups of at least
    ``min_group_rows`` rows, its threshold, and whether it is flagged (gap above threshold).

    Validity and certified share gaps are absolute; the cost gap is relative to the method's mean cost.
    """
    out = []
    for (method, name), part in subgroups.groupby(["method", "attribute"], sort=True):
        big = part[part["rows"] >= params.min_group_rows]
        mean_cost = float(rows.loc[rows["method"] == method, "cost_l1"].astype(float).mean())
        for measure, threshold in (("validity", params.gap_threshold), ("cost_l1", params.cost_gap_threshold),
                                   ("certified", params.gap_threshold)):
            values = big[measure].dropna()
            if len(values) < 2:
                continue
            gap = float(values.max() - values.min())
            if measure == "cost_l1":
                gap = gap / mean_cost if mean_cost > 0 else 0.0
            lo, hi = big.loc[values.idxmin(), "group"], big.loc[values.idxmax(), "group"]
            out.append({"method": method, "attribute": name, "measure": measure, "gap": gap,
                        "threshold": threshold, "flagged": gap > threshold, "lowest": lo, "highest": hi})
    return pd.DataFrame(out, columns=["method", "attribute", "measure", "gap", "threshold", "flagged", "lowest",
                                      "highest"])


def headline(rows: pd.DataFrame) -> dict[str, float]:
    """Per method: ``<method>.validity`` (unanimous / favourable share), ``.validity_mean``, ``.cost_l1``
    and, for DISCOVER, ``.certified`` (share of certified runs); the numbers ``audit diff`` compares."""
    out: dict[str, float] = {}
    for method, part in rows.groupby("method", sort=True):
        out[f"{method}.validity"] = float(part["valid"].astype(float).mean())
        out[f"{method}.validity_mean"] = float(part["valid_mean"].mean())
        out[f"{method}.cost_l1"] = float(part["cost_l1"].astype(float).mean())
        if part["certified"].notna().any():
            runs = part.drop_duplicates("seed")
            out[f"{method}.certified"] = float(runs["certified"].mean())
    return out
