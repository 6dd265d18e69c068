"""``recourselab audit diff REV_A REV_B``: what changed in the recourse outputs between two git revisions.

Each revision's outputs are read through :class:`dvc.api.DVCFileSystem` (Git for tracked files, the DVC
cache or remote for DVC outputs) into a temporary folder and audited like the working tree. The diff
reports the headline numbers, the counterfactual rows that moved beyond ``audit.row_tolerance`` or
flipped validity (rows that moved less are counted apart, as numerical noise), the subgroup gaps, and
the data, code and params fingerprints that differ. Gates (``--fail-if-validity-drops``,
``--fail-if-subgroup-gap-exceeds``) exit with :data:`GATE_EXIT` when they trip.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from recourselab.config import Params, load_params, parse_params, read_yaml
from recourselab.config.audit import AuditParams
from recourselab.errors import ArtifactError, ConfigError, RecourselabError
from recourselab.io import read_json, write_bytes
from recourselab.pipeline.audit import load_run, lock_entries, read_lock
from recourselab.report import audit as tables
from recourselab.report.audit_html import Section, render_html

log = logging.getLogger(__name__)

#: Exit status of ``audit diff`` when a gate trips (1 is an error, 2 a usage error).
GATE_EXIT = 3
#: Folders of a dataset read at each revision (``{}``: the dataset), and the project files.
DATASET_PATHS = ("data/prepared/{}", "data/recourse/{}", "data/discover/{}", "data/metrics/{}", "data/evaluate/{}")
PROJECT_FILES = ("params.yaml", "dvc.lock")
#: The files of those folders the audit reads (figures, logs and training splits are not fetched).
READ_FILES = frozenset({"schema.json", "test.parquet", "counterfactuals.parquet", "metrics.json", "methods.json",
                        "rows.parquet", "manifest.json"})
#: Counterfactual rows listed in the table output at most (JSON lists all).
MAX_TABLE_ROWS = 40


class RevisionError(RecourselabError):
    """A revision cannot be read (unknown revision, or its DVC outputs are in neither cache nor remote)."""


class NoOutputsError(ArtifactError):
    """A dataset has recourse outputs at neither revision (skipped when not asked for by name)."""


def materialize(repo: str | Path, rev: str, dataset: str, dest: str | Path) -> Path:
    """Copy what the audit of ``dataset`` reads at git revision ``rev`` of ``repo`` into ``dest``.

    Raises
    ------
    RevisionError
        ``rev`` is not a revision of ``repo``, or a DVC output of it is in neither the cache nor a remote.
    """
    from dvc.api import DVCFileSystem

    dest = Path(dest)
    try:
        known = subprocess.run(["git", "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}"], cwd=repo,
                               capture_output=True, text=True, timeout=60).returncode == 0
    except (OSError, subprocess.SubprocessError) as err:
        raise RevisionError(f"cannot run git in {repo} to resolve {rev!r} ({err})") from err
    if not known:
        raise RevisionError(f"cannot read revision {rev!r} of {repo}: git knows no such commit (see `git log`; "
                            "a tag or branch made elsewhere needs `git fetch`)")
    try:
        fs = DVCFileSystem(str(repo), rev=rev)
        paths = [p.format(dataset) for p in DATASET_PATHS] + list(PROJECT_FILES)
        for path in paths:
            if not fs.exists(path):
                continue
            target = dest / path
            target.parent.mkdir(parents=True, exist_ok=True)
            if fs.isdir(path):
                for src in fs.find(path):
                    if Path(src).name not in READ_FILES and not path.startswith("data/metrics/"):
                        continue
                    out = dest / src.lstrip("/")
                    out.parent.mkdir(parents=True, exist_ok=True)
                    out.write_bytes(fs.read_bytes(src))
            else:
                target.write_bytes(fs.read_bytes(path))
    except RecourselabError:
        raise
    except Exception as err:  # noqa: BLE001 - DVC and scmrepo raise many types; each is named in the message
        raise RevisionError(f"cannot read revision {rev!r} of {repo} ({type(err).__name__}: {err}); check the "
                            "revision with `git rev-parse`, and `dvc pull` (or `dvc fetch`) its outputs into the "
                            "cache or push them to the remote") from err
    return dest


def _params_at(root: Path) -> Params:
    path = root / "params.yaml"
    if not path.is_file():
        return Params()
    try:
        return load_params(path)
    except ConfigError as err:
        log.warning("params.yaml of a revision does not validate with this version (%s); its defaults are used",
                    str(err).splitlines()[0])
        return Params()


def _flatten(obj: Any, prefix: str = "") -> dict[str, Any]:
    """Dotted keys of every leaf; a list of mappings is split per item, keyed by its ``method`` / ``setting``
    (else its index); any other list is one value."""
    if isinstance(obj, dict):
        out: dict[str, Any] = {}
        for k, v in obj.items():
            out.update(_flatten(v, f"{prefix}{k}."))
        return out
    if isinstance(obj, list) and obj and all(isinstance(v, dict) for v in obj):
        out = {}
        for i, v in enumerate(obj):
            name = "/".join(str(v[k]) for k in ("method", "setting") if k in v)
            out.update(_flatten({k: x for k, x in v.items() if k not in ("method", "setting")} if name else v,
                                f"{prefix}{name or i}."))
        return out
    return {prefix[:-1]: obj}


# ---------------------------------------------------------------------------------------------- the diff

@dataclass
class AuditDiff:
    """The differences between two revisions' outputs of one dataset (tables of the changes only)."""

    dataset: str
    rev_a: str
    rev_b: str
    metrics: pd.DataFrame
    rows: pd.DataFrame
    row_counts: dict[str, int]
    gaps: pd.DataFrame
    fingerprints: pd.DataFrame
    tolerance: float = 0.0
    failures: list[str] = field(default_factory=list)
    #: Encoded counterfactual columns on one side only (a schema change: every common row then moved, by inf).
    columns_changed: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        def records(frame: pd.DataFrame) -> list[dict[str, Any]]:
            return json.loads(frame.to_json(orient="records"))

        return {"dataset": self.dataset, "rev_a": self.rev_a, "rev_b": self.rev_b, "row_tolerance": self.tolerance,
                "metrics": records(self.metrics),
                "row_counts": self.row_counts, "rows": records(self.rows), "subgroup_gaps": records(self.gaps),
                "fingerprints": records(self.fingerprints), "gate_failures": self.failures,
                "columns_changed": self.columns_changed}


def _status(a: float | None, b: float | None, tol: float) -> str:
    if a is None or (isinstance(a, float) and math.isnan(a)):
        return "same" if b is None or (isinstance(b, float) and math.isnan(b)) else "added"
    if b is None or (isinstance(b, float) and math.isnan(b)):
        return "removed"
    d = abs(b - a)
    return "changed" if d > tol else "noise" if d > 0 else "same"


def _metrics(root: Path, rows: pd.DataFrame, dataset: str) -> dict[str, float]:
    out = tables.headline(rows)
    summary = root / "data" / "metrics" / dataset / "summary.json"
    if summary.is_file():
        for k, v in _flatten(read_json(summary)).items():
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                out[f"summary.{k}"] = float(v)
    return out


def metric_diff(a: dict[str, float], b: dict[str, float], tol: float) -> pd.DataFrame:
    """Every headline number of either side: value at A and B, B - A and its status (same / noise /
    changed / added / removed; noise: a change of at most ``tol``)."""
    out = []
    for key in sorted(set(a) | set(b)):
        va, vb = a.get(key), b.get(key)
        out.append({"metric": key, "a": va, "b": vb, "delta": None if va is None or vb is None else vb - va,
                    "status": _status(va, vb, tol)})
    return pd.DataFrame(out, columns=["metric", "a", "b", "delta", "status"])


def row_diff(a: pd.DataFrame, b: pd.DataFrame, tol: float) -> pd.DataFrame:
    """Per counterfactual (method, seed, row_id, occurrence) of either side: how far it moved (max absolute
    change over the encoded columns), whether its validity flipped, and its status: ``moved`` (beyond
    ``tol``), ``flipped`` (validity changed, moved or not), ``noise`` (moved at most ``tol``), ``added``,
    ``removed`` or ``same``."""
    cols = sorted({c for c in a.columns if c.startswith(tables.CF)} & {c for c in b.columns if c.startswith(tables.CF)})
    keep = [*tables.KEY, "valid", *cols]
    merged = a[keep].merge(b[keep], on=tables.KEY, how="outer", suffixes=("_a", "_b"), indicator=True)
    both = merged["_merge"] == "both"
    move = np.full(len(merged), np.nan)
    if cols:
        va = merged[[f"{c}_a" for c in cols]].to_numpy(float)
        vb = merged[[f"{c}_b" for c in cols]].to_numpy(float)
        move = np.nanmax(np.abs(vb - va), axis=1, initial=0.0)
        move[(np.isnan(va) != np.isnan(vb)).any(axis=1)] = np.inf  # a value that became missing, or appeared
    schema_changed = {c for c in a.columns if c.startswith(tables.CF)} != {c for c in b.columns
                                                                          if c.startswith(tables.CF)}
    if schema_changed:
        move = np.where(both, np.inf, move)
    valid_a, valid_b = merged["valid_a"].astype(object), merged["valid_b"].astype(object)
    fa, fb = valid_a.astype(float), valid_b.astype(float)
    flipped = both & (fa != fb) & ~(fa.isna() & fb.isna())  # NaN on both sides (no labels) is no flip
    status = np.select(
        [merged["_merge"] == "left_only", merged["_merge"] == "right_only", flipped, both & (move > tol),
         both & (move > 0)], ["removed", "added", "flipped", "moved", "noise"], default="same")
    return pd.DataFrame({**{k: merged[k] for k in tables.KEY}, "move": np.where(both, move, np.nan),
                         "valid_a": valid_a, "valid_b": valid_b, "status": status})


def gap_diff(a: pd.DataFrame, b: pd.DataFrame, tol: float) -> pd.DataFrame:
    """Subgroup gaps of both sides per (method, attribute, measure), B - A and status; ``flagged_b``: above
    the threshold at B."""
    on = ["method", "attribute", "measure"]
    merged = a[[*on, "gap"]].merge(b[[*on, "gap", "flagged"]], on=on, how="outer", suffixes=("_a", "_b"))
    merged = merged.rename(columns={"flagged": "flagged_b"})
    merged["delta"] = merged["gap_b"] - merged["gap_a"]
    merged["status"] = [_status(x, y, tol) for x, y in zip(merged["gap_a"], merged["gap_b"], strict=True)]
    return merged[[*on, "gap_a", "gap_b", "delta", "flagged_b", "status"]]


def fingerprint_diff(root_a: Path, root_b: Path, dataset: str) -> pd.DataFrame:
    """The params keys, input data, code and output hashes that differ between the two revisions.

    Params: every key of params.yaml. Inputs and code: the ``dvc.lock`` dependencies of the dataset's
    stages (``data/...`` paths are inputs, the others code). Outputs: their ``dvc.lock`` outputs.
    """
    out = []
    pa, pb = (_flatten(read_yaml(r / "params.yaml") or {}) if (r / "params.yaml").is_file()
              else {} for r in (root_a, root_b))
    for key in sorted(set(pa) | set(pb)):
        if pa.get(key) != pb.get(key):
            out.append({"kind": "params", "stage": "params.yaml", "item": key, "a": pa.get(key), "b": pb.get(key)})
    la, lb = (lock_entries(read_lock(r), dataset) for r in (root_a, root_b))
    la, lb = la[la["kind"] != "params"], lb[lb["kind"] != "params"]
    merged = la.merge(lb, on=["stage", "kind", "path"], how="outer", suffixes=("_a", "_b"))
    for r in merged.itertuples(index=False):
        if r.hash_a == r.hash_b:
            continue
        kind = "output" if r.kind == "out" else "input" if str(r.path).startswith("data/") else "code"
        out.append({"kind": kind, "stage": r.stage, "item": r.path, "a": _na(r.hash_a), "b": _na(r.hash_b)})
    return pd.DataFrame(out, columns=["kind", "stage", "item", "a", "b"])


def _na(v: Any) -> Any:
    return None if isinstance(v, float) and math.isnan(v) else v


def diff_roots(root_a: Path, root_b: Path, dataset: str, audit: AuditParams, *, rev_a: str = "A",
               rev_b: str = "B") -> AuditDiff:
    """The diff of the outputs of ``dataset`` materialised under ``root_a`` and ``root_b``.

    Raises
    ------
    NoOutputsError
        Neither side has recourse outputs of ``dataset``.
    ArtifactError, ConfigError
        A file of one side cannot be read; the message names its revision.
    """
    sides = []
    for root, rev in ((root_a, rev_a), (root_b, rev_b)):
        try:
            run = load_run(root, dataset, _params_at(root))
            rows = tables.row_table(run, audit)
            subgroups = tables.subgroup_table(rows, tables.protected_features(run, audit), audit)
            sides.append((rows, tables.gap_table(subgroups, rows, audit), _metrics(root, rows, dataset)))
        except (ArtifactError, ConfigError) as err:
            raise type(err)(f"{dataset} at revision {rev} (read into {root}): {err}") from err
    (rows_a, gaps_a, m_a), (rows_b, gaps_b, m_b) = sides
    if rows_a.empty and rows_b.empty:
        raise NoOutputsError(f"no recourse outputs of {dataset!r} at {rev_a} nor at {rev_b}: check --dataset "
                            f"(and that data/recourse/{dataset} or data/discover/{dataset} is tracked there)")
    rows = row_diff(rows_a, rows_b, audit.row_tolerance)
    cf_a, cf_b = ({c for c in r.columns if c.startswith(tables.CF)} for r in (rows_a, rows_b))
    counts = {s: int((rows["status"] == s).sum()) for s in ("same", "noise", "moved", "flipped", "added", "removed")}
    return AuditDiff(dataset=dataset, rev_a=rev_a, rev_b=rev_b, metrics=metric_diff(m_a, m_b, audit.metric_tolerance),
                     rows=rows[rows["status"] != "same"].reset_index(drop=True), row_counts=counts,
                     gaps=gap_diff(gaps_a, gaps_b, audit.metric_tolerance),
                     fingerprints=fingerprint_diff(root_a, root_b, dataset), tolerance=audit.row_tolerance,
                     columns_changed=sorted(cf_a ^ cf_b) if cf_a and cf_b else [])


def diff_revisions(repo: str | Path, rev_a: str, rev_b: str, dataset: str, audit: AuditParams) -> AuditDiff:
    """Read ``dataset``'s outputs at both revisions of ``repo`` (through DVC) and diff them."""
    with tempfile.TemporaryDirectory(prefix="recourselab-audit-diff-") as tmp:
        root_a = materialize(repo, rev_a, dataset, Path(tmp) / "a")
        root_b = materialize(repo, rev_b, dataset, Path(tmp) / "b")
        return diff_roots(root_a, root_b, dataset, audit, rev_a=rev_a, rev_b=rev_b)


def gate(diff: AuditDiff, *, validity_drop: float | None, gap_limit: float | None) -> list[str]:
    """Why the diff fails the gates: a validity headline (``*.validity``, ``*.validity_mean``) that fell by
    more than ``validity_drop``, or a subgroup validity gap at B above ``gap_limit`` (None: gate off)."""
    out = []
    if validity_drop is not None:
        for r in diff.metrics.itertuples(index=False):
            if r.metric.rsplit(".", 1)[-1] not in ("validity", "validity_mean"):
                continue
            if r.status == "removed":  # a method that no longer produces outputs cannot pass a validity gate
                out.append(f"{diff.dataset}: {r.metric} was {r.a:.4g} at {diff.rev_a} and is absent at {diff.rev_b}")
            elif r.delta is not None and not math.isnan(r.delta) and -r.delta > validity_drop:
                out.append(f"{diff.dataset}: {r.metric} dropped by {-r.delta:.4g} ({r.a:.4g} -> {r.b:.4g}), "
                           f"more than {validity_drop:g}")
    if gap_limit is not None:
        for r in diff.gaps.itertuples(index=False):
            if r.measure == "validity" and not math.isnan(r.gap_b) and r.gap_b > gap_limit:
                out.append(f"{diff.dataset}: {r.method} validity gap by {r.attribute} is {r.gap_b:.4g} at "
                           f"{diff.rev_b}, above {gap_limit:g}")
    return out


# ---------------------------------------------------------------------------------------------- output

def diff_section(diff: AuditDiff) -> Section:
    """The diff as one report section (for ``audit.html`` or the ``--html`` page)."""
    c = diff.row_counts
    s = Section(f"Changes from {diff.rev_a} to {diff.rev_b}", "diff")
    s.notes.append(f"Counterfactuals: {c['moved']} moved, {c['flipped']} flipped validity, {c['added']} added, "
                   f"{c['removed']} removed, {c['noise']} numerical noise only, {c['same']} unchanged.")
    for r in diff.failures:
        s.notes.append(f"GATE FAILED: {r}")
    s.tables.append(("Headline numbers that differ", diff.metrics[diff.metrics["status"] != "same"]))
    s.tables.append(("Counterfactual rows that changed (noise listed apart, last)",
                     diff.rows.sort_values("status", key=lambda v: v == "noise", kind="stable").head(200)))
    s.tables.append(("Subgroup gaps", diff.gaps))
    s.tables.append(("Fingerprints that differ (why it changed)", diff.fingerprints))
    return s


def _table(frame: pd.DataFrame, limit: int | None = None) -> str:
    if frame.empty:
        return "  (none)\n"
    shown = frame if limit is None else frame.head(limit)
    text = shown.to_string(index=False, max_colwidth=48, float_format=lambda v: f"{v:.6g}")
    more = f"\n  ... {len(frame) - len(shown)} more (--format json lists all)" if len(shown) < len(frame) else ""
    return "\n".join("  " + line for line in text.splitlines()) + more + "\n"


def render_text(diff: AuditDiff) -> str:
    c = diff.row_counts
    real = diff.rows[diff.rows["status"] != "noise"]
    parts = [f"audit diff {diff.dataset}: {diff.rev_a} -> {diff.rev_b}\n",
             "headline numbers that differ:\n", _table(diff.metrics[diff.metrics["status"] != "same"]),
             f"counterfactual rows: {c['moved']} moved, {c['flipped']} validity flipped, {c['added']} added, "
             f"{c['removed']} removed; {c['noise']} numerical noise only; {c['same']} unchanged\n",
             (f"encoded columns on one side only (a schema change; common rows count as moved): "
              f"{', '.join(diff.columns_changed)}\n" if diff.columns_changed else ""),
             _table(real, MAX_TABLE_ROWS),
             f"rows that moved by at most the tolerance {diff.tolerance:g} (numerical noise, not change):\n",
             _table(diff.rows[diff.rows["status"] == "noise"], MAX_TABLE_ROWS),
             "subgroup gaps that differ:\n", _table(diff.gaps[diff.gaps["status"] != "same"]),
             "fingerprints that differ:\n", _table(diff.fingerprints)]
    parts += [f"GATE FAILED: {f}\n" for f in diff.failures]
    return "".join(parts)


def _limit(text: str) -> float:
    """A gate's threshold: a finite number >= 0 (``nan`` would make the gate never trip)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"{text!r}: give a finite number >= 0")
    return value


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="recourselab audit diff", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("rev_a", help="git revision of the baseline (e.g. a tag of the last approved run, HEAD~1)")
    ap.add_argument("rev_b", help="git revision to compare (e.g. HEAD)")
    ap.add_argument("--dataset", action="append", default=None,
                    help="dataset to compare (repeatable; default: every dataset of params.yaml)")
    ap.add_argument("--format", choices=("table", "json"), default="table")
    ap.add_argument("--out", type=Path, default=None, help="write the table or JSON here (default: stdout)")
    ap.add_argument("--html", type=Path, default=None, help="also write the diff as a self-contained HTML page")
    ap.add_argument("--fail-if-validity-drops", type=_limit, default=None, metavar="X",
                    help=f"exit {GATE_EXIT} if a method's validity falls by more than X (e.g. 0.02)")
    ap.add_argument("--fail-if-subgroup-gap-exceeds", type=_limit, default=None, metavar="Y",
                    help=f"exit {GATE_EXIT} if a validity gap between subgroups at REV_B exceeds Y (e.g. 0.1)")
    ap.add_argument("--tolerance", type=_limit, default=None,
                    help="row movement below which a change is noise (default: audit.row_tolerance)")
    ap.add_argument("--repo", type=Path, default=None, help="project root (default: the current project)")
    return ap


def run_command(argv: Sequence[str]) -> int:
    """``recourselab audit diff``: print or write the diff, exit :data:`GATE_EXIT` when a gate trips."""
    from recourselab.pipeline.project import project_root

    args = build_parser().parse_args(list(argv))
    repo = args.repo.resolve() if args.repo else project_root()
    params = load_params(repo / "params.yaml") if (repo / "params.yaml").is_file() else Params()
    audit = params.audit
    if args.tolerance is not None:
        audit = parse_params({**params.model_dump(mode="json"), "audit": {
            **audit.model_dump(mode="json"), "row_tolerance": args.tolerance}}).audit
    diffs = []
    for dataset in args.dataset or params.datasets:
        try:
            diff = diff_revisions(repo, args.rev_a, args.rev_b, dataset, audit)
        except NoOutputsError as err:  # any other unreadable output fails the command: a gate must not skip it
            if args.dataset:  # asked for by name: an error
                raise
            log.warning("%s; skipped", err)
            continue
        diff.failures = gate(diff, validity_drop=args.fail_if_validity_drops,
                             gap_limit=args.fail_if_subgroup_gap_exceeds)
        diffs.append(diff)
    if not diffs:
        raise ArtifactError(f"no dataset of params.yaml ({', '.join(params.datasets)}) has recourse outputs at "
                            f"{args.rev_a} or {args.rev_b}: run the pipeline and commit (and `dvc push`) its outputs")
    if args.format == "json":
        body = json.dumps({"rev_a": args.rev_a, "rev_b": args.rev_b,
                           "datasets": {d.dataset: d.to_json() for d in diffs},
                           "gate_failures": [f for d in diffs for f in d.failures]}, indent=2, default=str) + "\n"
    else:
        body = "\n".join(render_text(d) for d in diffs)
    if args.out:
        write_bytes(args.out, body.encode())
    else:
        sys.stdout.write(body)
    if args.html:
        page = render_html(f"Recourse audit diff: {args.rev_a} -> {args.rev_b}", [], [diff_section(d) for d in diffs],
                           alerts=[f for d in diffs for f in d.failures], no_flags="No gate failed.")
        write_bytes(args.html, page.encode())
    failures = [f for d in diffs for f in d.failures]
    for f in failures:
        log.error("gate failed: %s", f)
    return GATE_EXIT if failures else 0
