"""The ``audit`` stage: read one dataset's recourse outputs and write ``audit.html``, ``audit.md`` and figures.

Inputs (under a project root; each one absent is named in the report, not an error):
``data/prepared/<ds>/seed=<s>/`` (schema and test rows: the factuals' protected attributes),
``data/ensemble/<ds>/seed=<s>/manifest.json``, ``data/recourse/<ds>/seed=<s>/counterfactuals.parquet``,
``data/discover/<ds>/<model>/seed=<s>/{counterfactuals.parquet,metrics.json}``,
``data/metrics/<ds>/*.json``, ``data/evaluate/<ds>/{methods.json,rows.parquet}``, and ``dvc.lock``
for the provenance block.
"""

from __future__ import annotations

import logging
import re
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import yaml

from recourselab._version import __version__
from recourselab.config import Params, section_hash
from recourselab.data.schema import Schema
from recourselab.errors import ArtifactError
from recourselab.io import read_json, read_parquet, read_provenance, read_recourse, write_bytes
from recourselab.provenance import library_versions
from recourselab.report import audit as tables
from recourselab.report.audit_html import Section, bar_figure, cdf_figure, hist_figure, render_html, render_markdown
from recourselab.report.common import guarded

log = logging.getLogger(__name__)

SEED_DIR = re.compile(r"^seed=(\d+)$")
#: Counterfactual rows listed per table at most (the full table is in the Parquet files).
MAX_LISTED = 50


def _seed_dirs(folder: Path) -> dict[int, Path]:
    if not folder.is_dir():
        return {}
    return {int(m.group(1)): p for p in sorted(folder.iterdir()) if p.is_dir() and (m := SEED_DIR.match(p.name))}


def load_run(root: str | Path, dataset: str, params: Params) -> tables.RunOutputs:
    """Read the outputs of ``dataset`` under the project root ``root`` (see the module docstring).

    Raises
    ------
    ArtifactError
        A file that is there cannot be read (truncated Parquet, invalid JSON), or a recourse table records
        no schema version or another one than this code reads (``SchemaVersionError``).
    """
    data = Path(root) / "data"
    run = tables.RunOutputs(dataset=dataset, budgets={"distill": params.distill.budget})
    for seed, folder in _seed_dirs(data / "prepared" / dataset).items():
        if (folder / "schema.json").is_file():
            schema = Schema.load(folder / "schema.json")
            run.schemas[seed] = schema
            if (folder / "test.parquet").is_file():
                test = read_parquet(folder / "test.parquet", ["row_id", *schema.encoded_columns])
                decoded = schema.inverse_transform(test[schema.encoded_columns].to_numpy(dtype=float))
                run.factuals[seed] = decoded.set_axis(test["row_id"].to_numpy())
    for seed, folder in _seed_dirs(data / "ensemble" / dataset).items():
        if (folder / "manifest.json").is_file():
            run.manifests[seed] = read_json(folder / "manifest.json")
    for seed, folder in _seed_dirs(data / "recourse" / dataset).items():
        if (folder / "counterfactuals.parquet").is_file():
            run.densityflow[seed] = read_recourse(folder / "counterfactuals.parquet")
    discover = data / "discover" / dataset
    for model_dir in sorted(p for p in discover.iterdir() if p.is_dir()) if discover.is_dir() else []:
        for seed, folder in _seed_dirs(model_dir).items():
            if (folder / "counterfactuals.parquet").is_file():
                run.discover[(model_dir.name, seed)] = read_recourse(folder / "counterfactuals.parquet")
            if (folder / "metrics.json").is_file():
                run.discover_metrics[(model_dir.name, seed)] = read_json(folder / "metrics.json")
    for f in sorted((data / "metrics" / dataset).glob("*.json")):
        run.metrics[f.stem] = read_json(f)
    evaluate = data / "evaluate" / dataset
    if (evaluate / "methods.json").is_file():
        run.evaluate_methods = read_json(evaluate / "methods.json")
    if (evaluate / "rows.parquet").is_file():
        run.evaluate_rows = read_parquet(evaluate / "rows.parquet")
    return run


# ---------------------------------------------------------------------------------------------- provenance

def git_revision(root: str | Path) -> str:
    """``git rev-parse HEAD`` of ``root`` with ``+dirty`` when tracked files changed; ``unknown`` outside git."""
    try:
        rev = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, check=True,
                             timeout=30).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
                               capture_output=True, text=True, check=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return rev + ("+dirty" if dirty else "")


def lock_entries(lock: dict[str, Any] | None, dataset: str) -> pd.DataFrame:
    """The ``dvc.lock`` hashes of the stages of ``dataset``: stage, kind (dep / out / params), path, hash."""
    out = []
    for stage, entry in sorted(((lock or {}).get("stages") or {}).items()):
        if "@" in stage and stage.split("@", 1)[1] != dataset:
            continue
        for kind in ("deps", "outs"):
            for item in entry.get(kind) or []:
                out.append({"stage": stage, "kind": kind[:-1], "path": item.get("path"),
                            "hash": item.get("md5") or item.get("hash")})
        for file, values in (entry.get("params") or {}).items():
            out.append({"stage": stage, "kind": "params", "path": f"{file}: {', '.join(sorted(values))}",
                        "hash": section_hash(values)[:32]})
    return pd.DataFrame(out, columns=["stage", "kind", "path", "hash"])


def read_lock(root: str | Path) -> dict[str, Any] | None:
    path = Path(root) / "dvc.lock"
    if not path.is_file():
        return None
    try:
        return yaml.safe_load(path.read_text())
    except yaml.YAMLError as err:
        raise ArtifactError(f"cannot read {path} ({err}); restore it with `git checkout dvc.lock`") from err


def provenance_section(root: Path, run: tables.RunOutputs, params: Params) -> Section:
    revision = git_revision(root)
    s = Section("Provenance", "provenance")
    s.tables.append(("Run", pd.DataFrame([
        {"item": "git revision", "value": revision},
        {"item": "recourselab version", "value": __version__},
        {"item": "params hash (whole params.yaml)", "value": section_hash(params)},
        *({"item": f"params hash: {name}", "value": section_hash(getattr(params, name))}
          for name in ("prepare", "models", "train_flow", "distill", "generate", "discover", "audit")),
    ])))
    files = []
    for seed in sorted(run.densityflow):
        files.append(("densityflow", seed, root / "data" / "recourse" / run.dataset / f"seed={seed}"))
    for model, seed in sorted(run.discover):
        files.append((f"discover:{model}", seed, root / "data" / "discover" / run.dataset / model / f"seed={seed}"))
    recorded = []
    for method, seed, folder in files:
        prov = read_provenance(folder / "counterfactuals.parquet")
        recorded.append({"method": method, "seed": seed, "params_hash": str(prov.get("params_hash", ""))[:16],
                         "code_hash": str(prov.get("code_hash", ""))[:16], "code_version": prov.get("code_version"),
                         "upstream": str(prov.get("upstream", ""))[:16]})
    if recorded:
        s.tables.append(("Provenance recorded in each counterfactuals.parquet (hashes shortened to 16 characters)",
                         pd.DataFrame(recorded)))
    for seed, manifest in sorted(run.manifests.items()):
        members = manifest.get("ensemble") or sorted(manifest.get("models", {}))
        s.notes.append(f"Ensemble seed={seed}: {', '.join(map(str, members))}.")
    lock = lock_entries(read_lock(root), run.dataset)
    if lock.empty:
        s.notes.append("dvc.lock has no entry for this dataset (the stages never ran under DVC here).")
    else:
        s.tables.append(("Content hashes of the stages' data, code and params (dvc.lock)", lock))
    s.tables.append(("Library versions", pd.DataFrame(sorted(library_versions().items()),
                                                      columns=["library", "version"])))
    return s


# ---------------------------------------------------------------------------------------------- the report

@dataclass
class AuditResult:
    """What :func:`build_audit` found: its sections, flags, the row table and the tables flags come from."""

    sections: list[Section]
    alerts: list[str]
    rows: pd.DataFrame
    gaps: pd.DataFrame
    violations: pd.DataFrame


def _figure(path: Path, draw: Any) -> Path:
    return guarded(path.stem, draw)(path)


def build_audit(root: str | Path, dataset: str, params: Params, figure_dir: str | Path) -> AuditResult:
    """Compute every section of the audit of ``dataset`` and draw its figures into ``figure_dir``."""
    root, figure_dir = Path(root), Path(figure_dir)
    figure_dir.mkdir(parents=True, exist_ok=True)
    ap = params.audit
    run = load_run(root, dataset, params)
    rows = tables.row_table(run, ap)
    features = tables.protected_features(run, ap)
    sections: list[Section] = []
    absent = None if not run.empty else (
        f"No recourse outputs for {dataset}: data/recourse/{dataset} and data/discover/{dataset} are empty or "
        "absent; run `recourselab repro` (or `dvc pull`) first.")

    s = Section("Validity", "validity", absent=absent)
    validity = tables.validity_table(run, rows)
    if not validity.empty:
        s.notes.append("DensityFlow: share of counterfactuals each ensemble member labels with the target, their "
                       "mean (validity_mean) and the share all members agree on (validity_unanimous). DISCOVER: "
                       "share of counterfactuals its model scores favourable (score >= 0.5).")
        s.tables.append(("Validity per method and model", validity))
        cols = [c for c in validity.columns if c not in ("method", "rows", "seeds")]
        long = validity.melt(id_vars="method", value_vars=cols).dropna().sort_values("method", kind="stable")
        long["bar"] = long["method"] + " / " + long["variable"]
        s.figures.append(_figure(figure_dir / "validity.png", lambda p: bar_figure(
            p, long, x="bar", y=["value"], title=f"{dataset}: validity", ylabel="share valid")))
    sections.append(s)

    s = Section("Cost", "cost", absent=absent)
    if not rows.empty:
        s.notes.append("L1 / L2 distance factual -> counterfactual in the encoded (standardised) feature space.")
        s.tables.append(("Cost distribution per method", tables.cost_table(rows)))
        samples = {m: g["cost_l1"].to_numpy(float) for m, g in rows.groupby("method")}
        s.figures.append(_figure(figure_dir / "cost.png", lambda p: hist_figure(
            p, samples, title=f"{dataset}: L1 cost", xlabel="L1 cost (standardised units)")))
    sections.append(s)

    s = Section("Plausibility and density", "plausibility")
    plaus = tables.plausibility_table(run, rows)
    if plaus.empty:
        s.absent = (f"No plausibility metrics (data/metrics/{dataset}/densityflow.json and the evaluate stage's "
                    "outputs are absent).")
    else:
        s.notes.append("Share of counterfactuals that LocalOutlierFactor / IsolationForest fitted on the target "
                       "class's training rows call inliers; *_real: the same detectors on real test rows.")
        s.tables.append(("Plausibility", plaus))
        density = rows.loc[rows["method"] == "densityflow", "density"].to_numpy(float)
        if density.size:
            s.figures.append(_figure(figure_dir / "density.png", lambda p: hist_figure(
                p, {"densityflow": density}, title=f"{dataset}: DensityFlow density score", xlabel="density S")))
    sections.append(s)

    violations = tables.immutable_violations(run)
    s = Section("Immutable and monotone features", "immutable")
    if violations.empty:
        s.absent = ("No immutable or monotone feature to check (the schema declares none, or the prepared data is "
                    "absent).")
    else:
        total, checked = int(violations["violations"].sum()), int(violations["checked"].sum())
        s.notes.append(f"{total} violations in {checked} checked (row, feature) pairs; this must be 0. An immutable "
                       "feature may not change; a monotone one may move only in its rule's direction.")
        s.tables.append(("Counterfactuals that broke a feature rule", violations))
    sections.append(s)

    s = Section("Query-budget use", "queries", absent=absent)
    queries = tables.query_table(run)
    if not queries.empty:
        s.notes.append("search_queries: oracle rows the method queried to find its counterfactuals (DensityFlow: "
                       "distillation; DISCOVER: the solver); evaluation_queries: rows scored outside the search.")
        s.tables.append(("Queries per method and seed", queries))
    sections.append(s)

    s = Section("DISCOVER certification", "certification")
    cert = tables.certification_table(run)
    if cert.empty:
        s.absent = f"No DISCOVER outputs (data/discover/{dataset} is absent)."
    else:
        n_ok = int(cert["certified"].sum())
        polished = cert["certified_by"] == "polish"
        n_pol = int((cert["certified"] & polished).sum())
        n_rep = int((cert["certified"] & ~polished & (cert["repaired_rows"] > 0)).sum())
        after = [f"{n_rep} after the repair reverted some edited rows to their factuals"] if n_rep else []
        after += [f"{n_pol} after the polish moved rows towards the thresholds"] if n_pol else []
        s.notes.append(f"{n_ok} of {len(cert)} runs certified (UCL_x < U_x and UCL_y < U_y)"
                       + (f", {' and '.join(after)} (columns certified_by, repaired_rows)." if after else "."))
        s.tables.append(("Certificate, OT(x) and OT(y) per model and seed", cert))
        for model in sorted({m for m, _ in run.discover}):
            frames = [f for (m, _), f in sorted(run.discover.items()) if m == model]
            out = pd.concat(frames)
            samples = {"factual scores": out["factual_score"].to_numpy(float), "counterfactual scores":
                       out["score"].to_numpy(float), "y* target": out["target"].to_numpy(float)}
            s.figures.append(_figure(figure_dir / f"discover_{model}_output_cdf.png", lambda p, v=samples, m=model:
                                     cdf_figure(p, v, title=f"{dataset} / {m}: output CDFs", xlabel="score")))
            feature = _most_changed(out, run.schemas)
            if feature is not None:
                inputs = {"factual": out[tables.FACTUAL_ORIGINAL + feature].to_numpy(float),
                          "counterfactual": out[tables.CF_ORIGINAL + feature].to_numpy(float)}
                s.figures.append(_figure(figure_dir / f"discover_{model}_input_cdf.png", lambda p, v=inputs, m=model,
                                         f=feature: cdf_figure(p, v, title=f"{dataset} / {m}: input CDF of {f}",
                                                               xlabel=f)))
    sections.append(s)

    subgroups = tables.subgroup_table(rows, features, ap) if not rows.empty else pd.DataFrame()
    gaps = tables.gap_table(subgroups, rows, ap) if not subgroups.empty else pd.DataFrame(
        columns=["method", "attribute", "measure", "gap", "threshold", "flagged", "lowest", "highest"])
    s = Section("Subgroups", "subgroups")
    if subgroups.empty:
        s.absent = (f"No protected attribute of audit.protected ({', '.join(ap.protected)}) in {dataset}."
                    if not features else "No rows to break down.")
    else:
        s.notes.append(f"Protected attributes: {', '.join(features)}. Gaps between subgroups of at least "
                       f"{ap.min_group_rows} rows: validity and certified share absolute (threshold "
                       f"{ap.gap_threshold:g}), cost relative to the method's mean (threshold "
                       f"{ap.cost_gap_threshold:g}).")
        s.tables.append(("Gaps between subgroups", gaps))
        s.tables.append(("Validity, cost and certified share per subgroup", subgroups))
        for name in features:
            part = subgroups[subgroups["attribute"] == name].copy()
            if part.empty:
                continue
            part["bar"] = part["method"] + " / " + part["group"].astype(str)
            s.figures.append(_figure(figure_dir / f"subgroups_{name}.png", lambda p, v=part, n=name: bar_figure(
                p, v, x="bar", y=["validity"], title=f"{dataset}: validity by {n}", ylabel="share valid")))
    sections.append(s)

    s = Section("Methods compared (evaluate stage)", "evaluate")
    if run.evaluate_methods is None:
        s.absent = f"The evaluate stage's outputs (data/evaluate/{dataset}/methods.json) are absent."
    else:
        frame = pd.DataFrame(run.evaluate_methods.get("methods", []))
        shown = [c for c in frame.columns if not c.endswith("_std")]
        s.tables.append((f"Methods over seeds {run.evaluate_methods.get('seeds')}", frame[shown]))
        if run.evaluate_rows is not None and not run.evaluate_rows.empty:
            ev = run.evaluate_rows
            samples = {f"{m} ({st})": g["cost_l1"].to_numpy(float) for (m, st), g in ev.groupby(["method", "setting"])}
            s.figures.append(_figure(figure_dir / "evaluate_cost.png", lambda p: hist_figure(
                p, samples, title=f"{dataset}: L1 cost per method (evaluate)", xlabel="L1 cost")))
    sections.append(s)

    sections.append(provenance_section(root, run, params))
    alerts = _alerts(violations, gaps, tables.certification_table(run))
    return AuditResult(sections=sections, alerts=alerts, rows=rows, gaps=gaps, violations=violations)


def _most_changed(frame: pd.DataFrame, schemas: dict[int, Schema]) -> str | None:
    """The numerical feature whose mean absolute move (in its training range) is largest."""
    schema = next(iter(schemas.values()), None)
    best, best_move = None, -1.0
    for feat in (schema.features if schema else ()):
        a, b = tables.FACTUAL_ORIGINAL + feat.name, tables.CF_ORIGINAL + feat.name
        if feat.kind != "numerical" or a not in frame or b not in frame:
            continue
        span = max(feat.upper - feat.lower, 1e-12)
        move = float(np.abs(frame[b].to_numpy(float) - frame[a].to_numpy(float)).mean() / span)
        if move > best_move:
            best, best_move = feat.name, move
    return best


def _alerts(violations: pd.DataFrame, gaps: pd.DataFrame, cert: pd.DataFrame) -> list[str]:
    out = []
    if not violations.empty and violations["violations"].sum() > 0:
        bad = violations[violations["violations"] > 0]
        out.append(f"{int(bad['violations'].sum())} feature-rule violations ("
                   + ", ".join(f"{r.method} seed={r.seed} {r.feature} ({r.rule}): {r.violations}"
                               for r in bad.itertuples())
                   + ")")
    for r in gaps[gaps["flagged"].astype(bool)].itertuples() if not gaps.empty else ():
        out.append(f"{r.method}: {r.measure} gap by {r.attribute} is {r.gap:.3g} (threshold {r.threshold:g}; "
                   f"lowest {r.lowest}, highest {r.highest})")
    if not cert.empty and not cert["certified"].all():
        bad = cert[~cert["certified"].astype(bool)]
        out.append("DISCOVER runs not certified: " + ", ".join(
            f"{r.model} seed={r.seed} ({r.reason})" for r in bad.itertuples()))
    return out


def write_audit(root: str | Path, dataset: str, params: Params, out_dir: str | Path, *,
                extra: Sequence[Section] = ()) -> AuditResult:
    """Write ``audit.html`` (self-contained), ``audit.md`` and ``figures/*.png`` for ``dataset`` into ``out_dir``.

    ``extra`` sections (e.g. an ``audit diff`` against a baseline) are added before the provenance block.
    """
    out_dir = Path(out_dir)
    result = build_audit(root, dataset, params, out_dir / "figures")
    sections = [*result.sections[:-1], *extra, result.sections[-1]]
    title = f"Recourse audit: {dataset}"
    summary = [f"Dataset {dataset}; {len(result.rows)} counterfactuals from "
               f"{result.rows['method'].nunique() if not result.rows.empty else 0} methods."]
    write_bytes(out_dir / "audit.html", render_html(title, summary, sections, alerts=result.alerts).encode())
    write_bytes(out_dir / "audit.md", render_markdown(title, summary, sections, alerts=result.alerts).encode())
    log.debug("audit of %s written to %s", dataset, out_dir)
    return result


__all__ = ["AuditResult", "build_audit", "git_revision", "load_run", "lock_entries",
           "read_lock", "write_audit"]
