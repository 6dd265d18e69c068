"""Is each DensityFlow headline of one run within the seed-to-seed spread of another's?

Usage::

    python bench/tools/headline_spread.py BEFORE_CHECKOUT AFTER_CHECKOUT [--out F.json]

Reads ``data/metrics/<dataset>/densityflow.json`` (per-seed summary: mean, std) and the DensityFlow
rows of ``data/evaluate/<dataset>/methods.json`` (``densityflow`` / ``densityflow_r``, every
setting) of both checkouts. A value is *within* when ``|after - before| <= std(before)``, the
standard deviation over ``before``'s seeds (a value with no spread must be equal). Prints a
Markdown table per dataset and a count; the JSON file holds every compared value.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

#: densityflow.json summary keys compared (the validity and cost headlines).
SUMMARY_KEYS = ("mean_per_model", "unanimous", "majority", "cost_l2", "lof_inlier_rate")
#: methods.json keys compared (each with its ``<key>_std``).
METHOD_KEYS = ("validity_mean", "validity_unanimous", "cost_l2", "queries")
TOLERANCE = 1e-12


def _read(path: Path) -> Any:
    return json.loads(path.read_text()) if path.is_file() else None


def headlines(checkout: Path, dataset: str) -> dict[str, tuple[float, float]]:
    """name -> (mean over seeds, std over seeds) of ``dataset``'s DensityFlow headlines in ``checkout``."""
    out: dict[str, tuple[float, float]] = {}
    flow = _read(checkout / "data" / "metrics" / dataset / "densityflow.json")
    for key in SUMMARY_KEYS if flow else ():
        if isinstance(entry := flow["summary"].get(key), dict):
            out[f"densityflow.{key}"] = (entry["mean"], entry["std"])
    methods = _read(checkout / "data" / "evaluate" / dataset / "methods.json")
    for row in methods["methods"] if methods else ():
        if row["method"].startswith("densityflow"):
            for key in METHOD_KEYS:
                out[f"{row['method']}/{row['setting']}.{key}"] = (row[key], row[f"{key}_std"])
    return out


def compare(before: Path, after: Path) -> list[dict[str, Any]]:
    """One entry per headline found in both checkouts, every dataset of ``before``."""
    rows = []
    for folder in sorted((before / "data" / "metrics").iterdir()):
        old, new = headlines(before, folder.name), headlines(after, folder.name)
        for name in old.keys() & new.keys():
            (m0, s0), (m1, s1) = old[name], new[name]
            rows.append({"dataset": folder.name, "headline": name, "before": m0, "before_std": s0, "after": m1,
                         "after_std": s1, "within": abs(m1 - m0) <= s0 + TOLERANCE})
    return sorted(rows, key=lambda r: (r["dataset"], r["headline"]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("before", type=Path)
    parser.add_argument("after", type=Path)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    rows = compare(args.before, args.after)
    print("| dataset | headline | before (std) | after (std) | within |")  # noqa: T201
    print("|---|---|---|---|---|")  # noqa: T201
    for r in rows:
        print(f"| {r['dataset']} | {r['headline']} | {r['before']:.3f} ({r['before_std']:.3f}) | "  # noqa: T201
              f"{r['after']:.3f} ({r['after_std']:.3f}) | {'yes' if r['within'] else '**no**'} |")
    print(f"\n{sum(r['within'] for r in rows)} of {len(rows)} within the before run's seed-to-seed std")  # noqa: T201
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
