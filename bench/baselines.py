"""The recourse baselines on one dataset: validity (unanimous, majority), L2 cost, search queries, wall time.

A dataset (default moons with ``n_synthetic`` rows; seed 0, 60/20/20 split) with a fast
three-member ensemble (knn 15, random forest 30 trees depth 6, MLP (32, 32)), the first
``n_factuals`` test rows that all members label class 0, target class 1. Every method goes
through ``recourselab.methods.registry``; the ensemble's verdict on the returned rows is a
separate query (budget "verify").

Usage::

    python bench/baselines.py [--dataset moons] [--n-factuals 30] [--n-synthetic 600] [--skip dice_genetic]
                              [--out baselines_moons.json]
"""

from __future__ import annotations

import argparse
import json
import logging
import time

import numpy as np
from sklearn.ensemble import RandomForestClassifier
from sklearn.neighbors import KNeighborsClassifier
from sklearn.neural_network import MLPClassifier

from recourselab.config import parse_params
from recourselab.data import load_dataset, prepare_splits
from recourselab.methods.registry import make_method
from recourselab.models.oracle import BlackBox
from recourselab.runtime import limit_threads

RUNS = [
    ("nearest", {}, None), ("nearest", {}, 60), ("nearest", {"selection": "sample"}, 60),
    ("nearest_line", {}, None), ("wachter", {"threshold": 0.5}, None), ("wachter", {"threshold": 0.7}, None),
    ("wachter", {"threshold": 0.9}, None), ("growing_spheres", {}, None),
    ("betarce", {"base": "wachter", "delta": 0.5}, None), ("betarce", {"base": "growing_spheres", "delta": 0.5}, None),
    ("dice", {"method": "random"}, None), ("dice", {"method": "genetic"}, None),
]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n-factuals", type=int, default=30)
    ap.add_argument("--n-synthetic", type=int, default=600)
    ap.add_argument("--dataset", default="moons")
    ap.add_argument("--skip", nargs="*", default=[],
                    help="runs to leave out: a method name, or e.g. dice_genetic, betarce_wachter")
    ap.add_argument("--out", default="baselines_moons.json")
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)
    params = parse_params({"prepare": {"n_synthetic": args.n_synthetic}})
    splits = prepare_splits(load_dataset(args.dataset, params), 0, (0.6, 0.2, 0.2))
    X, y = splits.arrays("train")
    Xt, _ = splits.arrays("test")
    members = {"knn": KNeighborsClassifier(15).fit(X, y),
               "rf": RandomForestClassifier(30, max_depth=6, random_state=0).fit(X, y),
               "mlp": MLPClassifier((32, 32), max_iter=800, random_state=0).fit(X, y)}
    labels = np.stack([m.predict_proba(Xt).argmax(1) for m in members.values()])
    factuals = Xt[(labels == 0).all(axis=0)][:args.n_factuals]
    rows = []
    for name, options, budget in RUNS:
        if name in args.skip or f"{name}_{options.get('method', options.get('base'))}" in args.skip:
            continue
        box = BlackBox(members, schema=splits.schema)
        try:
            method = make_method(name, box, X_train=X, y_train=y, seed=0, **options)
        except ImportError as err:  # dice without its extra
            print(f"{name} {options}: skipped ({err})")
            continue
        t0 = time.perf_counter()
        with limit_threads(1):
            cf = method.explain(factuals, target=1, budget=budget)
        wall = time.perf_counter() - t0
        verdict = cf.verify(box).verdict
        row = {"method": name, "options": {k: v for k, v in options.items()}, "budget": budget,
               "unanimous": float(verdict.unanimous.mean()), "majority": float(verdict.majority.mean()),
               "mean_validity": float(verdict.agreement.mean()), "method_valid": float(np.mean(cf.valid)),
               "l2": float(cf.cost_l2.mean()), "queries": int(cf.queries), "oracle_search_rows": box.used("search"),
               "wall_s": round(wall, 2)}
        rows.append(row)
        print(f"{name:16s} {json.dumps(options):48s} budget={budget!s:5s} unanimous={row['unanimous']:.3f} "
              f"majority={row['majority']:.3f} own={row['method_valid']:.3f} L2={row['l2']:.3f} "
              f"queries={row['queries']} (oracle {row['oracle_search_rows']}) {wall:.1f}s")
    with open(args.out, "w") as fh:
        json.dump({"dataset": args.dataset, "n_factuals": len(factuals), "n_synthetic": args.n_synthetic,
                   "rows": rows}, fh, indent=1)


if __name__ == "__main__":
    main()
