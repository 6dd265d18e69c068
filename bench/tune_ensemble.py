"""Benchmark of tune_ensemble: CV search + refit time per model and dataset (default profile, seed 0).

Writes bench/results/tune_ensemble.json and prints, per dataset, each model's time and its
ratio to the fastest model. Run with `make bench` or `python bench/tune_ensemble.py [datasets]`.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from pathlib import Path

from recourselab.config import Params
from recourselab.data import SPLITS, dataset_from_params, prepare_splits
from recourselab.models.tuning import Split, tune_model
from recourselab.runtime import limit_threads

log = logging.getLogger("bench.tune_ensemble")
OUT = Path(__file__).parent / "results" / "tune_ensemble.json"


def bench_dataset(name: str, params: Params) -> dict[str, dict[str, float]]:
    prepared = prepare_splits(dataset_from_params(name, params), 0, params.prepare.split)
    train, val, test = (Split(*prepared.arrays(s)) for s in SPLITS)
    out = {}
    for model in params.tune_ensemble.members:
        spec = getattr(params.models, model)
        t0 = time.perf_counter()
        with limit_threads(1):
            r = tune_model(model, spec.grid, spec.fixed, train=train, val=val, test=test, seed=0,
                           n_classes=prepared.schema.n_classes, folds=params.tune_ensemble.cv_folds,
                           max_tune_rows=spec.max_tune_rows, max_fit_rows=spec.max_fit_rows)
        out[model] = {"total_s": time.perf_counter() - t0, "fit_s": r.metrics["fit_time_s"],
                      "tune_s": r.metrics["tune_time_s"], "n_train": len(train.y),
                      "test_accuracy": r.metrics["test_accuracy"]}
    return out


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(message)s", force=True)  # Prefect configured logging on import
    logging.getLogger("recourselab").setLevel(logging.WARNING)
    params = Params()
    names = sys.argv[1].split(",") if len(sys.argv) > 1 else params.datasets
    results = {}
    for name in names:
        results[name] = bench_dataset(name, params)
        fastest = min(r["total_s"] for r in results[name].values())
        log.info("%-11s %s", name, "  ".join(f"{m} {r['total_s']:.1f}s (x{r['total_s'] / fastest:.0f})"
                                            for m, r in results[name].items()))
    total = sum(r["total_s"] for d in results.values() for r in d.values())
    log.info("one seed, one thread, all datasets: %.0f s; the stage runs %d seeds on %d workers",
             total, len(params.seeds), params.orchestration.max_workers)
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps({"profile": params.profile, "seed": 0, "threads": 1, "total_s": total,
                               "datasets": results}, indent=2))
    log.info("wrote %s", OUT)


if __name__ == "__main__":
    main()
