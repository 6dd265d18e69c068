"""Benchmark of DensityFlow (default profile, seed 0): training throughput, validity, cost, queries.

Needs the prepare and tune_ensemble outputs (`make repro` or `dvc repro tune_ensemble`).
Writes bench/results/densityflow.json. Usage: python bench/densityflow.py [datasets], default moons,adult.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from pathlib import Path

from flows.densityflow import distill_settings, flow_settings
from recourselab.config import load_params
from recourselab.data import load_prepared
from recourselab.densityflow import DensityFlow
from recourselab.metrics import query_set, validity_metrics
from recourselab.models import load_ensemble
from recourselab.orchestration import limit_threads

log = logging.getLogger("bench.densityflow")
OUT = Path(__file__).parent / "results" / "densityflow.json"


def bench_dataset(name: str, params) -> dict:  # noqa: ANN001
    prepared = load_prepared(f"data/prepared/{name}/seed=0")
    X, y = prepared.arrays("train")
    Xte, yte = prepared.arrays("test")
    box = load_ensemble(f"data/ensemble/{name}/seed=0", params.tune_ensemble.members, schema=prepared.schema,
                        budgets={"distill": params.distill.budget})
    settings = flow_settings(params.train_flow.for_dataset(name).model_dump(mode="json"), 0)
    flow = DensityFlow(schema=prepared.schema, **settings)
    t0 = time.perf_counter()
    flow.fit(X, y)
    fit_s = time.perf_counter() - t0
    n_rows = min(len(y), params.train_flow.max_train_rows or len(y))
    t0 = time.perf_counter()
    flow.with_settings(**distill_settings(params.distill.model_dump(mode="json")))
    used = flow.distill(box, X, y, budget=params.distill.budget)
    distill_s = time.perf_counter() - t0
    q = query_set(box.query(Xte, budget="evaluation"), yte, params.generate.max_queries)
    t0 = time.perf_counter()
    res = flow.generate(Xte[q], target=(yte[q] + 1) % prepared.schema.n_classes)
    gen_s = time.perf_counter() - t0
    metrics = validity_metrics(box.query(res.counterfactuals, budget="evaluation"), res.target)
    return {"fit_s": fit_s, "rows_per_s": n_rows * params.train_flow.epochs / fit_s, "distill_s": distill_s,
            "generate_s": gen_s, "queries_per_s": len(q) / gen_s, "queries_used": used, "n_queries": int(len(q)),
            "cost_l2": float(res.cost_l2.mean()), "cost_l1": float(res.cost_l1.mean()), **metrics}


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(message)s", force=True)  # Prefect configured logging on import
    logging.getLogger("recourselab").setLevel(logging.WARNING)
    params = load_params("params.yaml")
    names = sys.argv[1].split(",") if len(sys.argv) > 1 else ["moons", "adult"]
    results = {}
    with limit_threads(2):
        for name in names:
            r = results[name] = bench_dataset(name, params)
            log.info("%-8s fit %.0fs (%.0f rows/s) distill %.1fs generate %.1fs (%.0f queries/s) | validity "
                     "mean %.3f unanimous %.3f | L2 %.3f | queries used %d", name, r["fit_s"], r["rows_per_s"],
                     r["distill_s"], r["generate_s"], r["queries_per_s"], r["mean_per_model"], r["unanimous"],
                     r["cost_l2"], r["queries_used"])
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps({"profile": params.profile, "seed": 0, "datasets": results}, indent=2))
    log.info("wrote %s", OUT)


if __name__ == "__main__":
    main()
