"""How many committed counterfactuals move a monotone feature the forbidden way (e.g. a younger age)?

Usage::

    python bench/tools/monotone_breaks.py CHECKOUT [CHECKOUT ...] [--out F.json]

For each checkout and each default dataset with built-in monotone rules
(:data:`recourselab.config.BUILTIN_MONOTONE`, applied whatever the checkout's own schema says, so an
older run is judged by today's rules), it reads DensityFlow's ``data/recourse/<dataset>/seed=*/
counterfactuals.parquet`` (factuals: the prepared test rows, by ``row_id``) and DISCOVER's
``data/discover/<dataset>/<model>/seed=*/counterfactuals.parquet`` (factuals: its
``factual_original__`` columns). A row breaks a rule when the feature moved the forbidden way by
more than 1e-6 in original units. Prints one Markdown table; the JSON file holds the counts and the
median move of the breaking rows.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from recourselab.config import BUILTIN_MONOTONE
from recourselab.data.schema import Schema

TOLERANCE = 1e-6


def _moves(cf: np.ndarray, fact: np.ndarray, rule: str) -> np.ndarray:
    """Size of each forbidden move (n,), 0 where the rule holds (original units)."""
    sign = 1.0 if rule == "increasing" else -1.0
    return np.maximum((fact - cf) * sign, 0.0)


def densityflow_moves(checkout: Path, dataset: str, feature: str, rule: str) -> np.ndarray:
    """Forbidden moves of DensityFlow's counterfactuals over every seed (original units)."""
    out = []
    for seed_dir in sorted((checkout / "data" / "recourse" / dataset).glob("seed=*")):
        cf = pd.read_parquet(seed_dir / "counterfactuals.parquet")
        prepared = checkout / "data" / "prepared" / dataset / seed_dir.name
        test = pd.read_parquet(prepared / "test.parquet").set_index("row_id")
        f = Schema.load(prepared / "schema.json").features
        std = next(x.std for x in f if x.name == feature)  # encoded = z-score: moves scale by the std
        out.append(_moves(cf[f"cf__{feature}"].to_numpy(float), test.loc[cf["row_id"], feature].to_numpy(float),
                          rule) * std)
    return np.concatenate(out) if out else np.zeros(0)


def discover_moves(checkout: Path, dataset: str, feature: str, rule: str) -> np.ndarray:
    """Forbidden moves of DISCOVER's counterfactuals over every model and seed (original units)."""
    out = []
    for path in sorted((checkout / "data" / "discover" / dataset).glob("*/seed=*/counterfactuals.parquet")):
        frame = pd.read_parquet(path)
        out.append(_moves(frame[f"cf_original__{feature}"].to_numpy(float),
                          frame[f"factual_original__{feature}"].to_numpy(float), rule))
    return np.concatenate(out) if out else np.zeros(0)


def breaks(checkout: Path) -> list[dict[str, Any]]:
    """One entry per (dataset, rule, method) of ``checkout``: rows, rows breaking it, their median move."""
    rows = []
    for dataset, rules in BUILTIN_MONOTONE.items():
        for feature, rule in rules.items():
            for method, moves in (("densityflow", densityflow_moves(checkout, dataset, feature, rule)),
                                  ("discover", discover_moves(checkout, dataset, feature, rule))):
                bad = moves[moves > TOLERANCE]
                rows.append({"checkout": str(checkout), "dataset": dataset, "feature": feature, "rule": rule,
                             "method": method, "rows": int(moves.size), "breaks": int(bad.size),
                             "median_move": float(np.median(bad)) if bad.size else 0.0})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkouts", nargs="+", type=Path)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    rows = [r for c in args.checkouts for r in breaks(c)]
    print("| checkout | dataset | rule | method | rows breaking it | median forbidden move |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['checkout']} | {r['dataset']} | {r['feature']} {r['rule']} | {r['method']} | "
              f"{r['breaks']} / {r['rows']} | {r['median_move']:.1f} |")
    if args.out:
        args.out.write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
