"""Benchmark of DensityFlow (default profile, seed 0): training throughput, validity, cost, queries.

Needs the prepare and tune_ensemble outputs (`make repro` or `dvc repro tune_ensemble`).
Writes bench/results/densityflow.json. Usage: python bench/densityflow.py [datasets], default moons,adult.

``python bench/densityflow.py --frontier [dataset]`` (default adult) instead traces the
validity / cost trade-off: one training + distillation + generation per setting of
:data:`FRONTIER` (the default profile with one or two settings changed), then the mean
per-model validity at the paper's cost (L2 1.6 on Adult), read off the upper envelope of the
measured points by linear interpolation. Writes bench/results/densityflow_frontier.json and
bench/results/densityflow_frontier.png.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure

from recourselab.config import load_params
from recourselab.data import load_prepared
from recourselab.densityflow import DensityFlow
from recourselab.densityflow.config import settings_of
from recourselab.metrics import query_set, validity_metrics
from recourselab.models import load_ensemble
from recourselab.runtime import limit_threads

log = logging.getLogger("bench.densityflow")
OUT = Path(__file__).parent / "results" / "densityflow.json"
FRONTIER_OUT = Path(__file__).parent / "results" / "densityflow_frontier.json"
#: Settings traced by ``--frontier``: label -> train_flow overrides of the default profile.
FRONTIER = {
    "default": {},
    "lambda_cost 0.1": {"lambda_cost": 0.1},
    "lambda_cost 0.05": {"lambda_cost": 0.05},
    "lambda_den 3, quantile 0.9": {"lambda_den": 3.0, "density_quantile": 0.9},
    "lambda_den 0": {"lambda_den": 0.0},
    "noise_ratio 1.0": {"noise_ratio": 1.0},
}
#: The paper's Adult result (validity 0.901 at mean L2 1.597), the point #4 measures against.
PAPER_POINT = {"adult": (1.597, 0.901)}


def bench_dataset(name: str, params, overrides: dict | None = None) -> dict:  # noqa: ANN001
    prepared = load_prepared(f"data/prepared/{name}/seed=0")
    X, y = prepared.arrays("train")
    Xte, yte = prepared.arrays("test")
    box = load_ensemble(f"data/ensemble/{name}/seed=0", params.tune_ensemble.members, schema=prepared.schema,
                        budgets={"distill": params.distill.budget})
    section = params.train_flow.for_dataset(name).model_dump(mode="json") | (overrides or {})
    flow = DensityFlow(schema=prepared.schema, **settings_of("train_flow", section), seed=0)
    t0 = time.perf_counter()
    flow.fit(X, y)
    fit_s = time.perf_counter() - t0
    n_rows = min(len(y), section["max_train_rows"] or len(y))
    epochs = len(flow.log_.rows)  # min_steps can raise the epoch count above the section's epochs
    flow.with_settings(n_starts=params.generate.n_starts, jitter=params.generate.jitter)  # as the generate stage
    t0 = time.perf_counter()
    flow.with_settings(**params.distill.densityflow_settings())
    used = flow.distill(box, X, y, budget=params.distill.budget)
    distill_s = time.perf_counter() - t0
    q = query_set(box.query(Xte, budget="evaluation"), yte, params.generate.max_queries)
    t0 = time.perf_counter()
    res = flow.generate(Xte[q], target=(yte[q] + 1) % prepared.schema.n_classes)
    gen_s = time.perf_counter() - t0
    metrics = validity_metrics(box.query(res.counterfactuals, budget="evaluation"), res.target)
    return {"fit_s": fit_s, "epochs": epochs, "rows_per_s": n_rows * epochs / fit_s, "distill_s": distill_s,
            "generate_s": gen_s, "queries_per_s": len(q) / gen_s, "queries_used": used, "n_queries": int(len(q)),
            "cost_l2": float(res.cost_l2.mean()), "cost_l1": float(res.cost_l1.mean()), **metrics}


def envelope_at(points: list[tuple[float, float]], cost: float) -> float | None:
    """Validity at ``cost`` on the upper envelope of (cost, validity) ``points``.

    The envelope keeps the points no cheaper point beats; between two of them validity is
    interpolated linearly. None when ``cost`` lies outside the measured costs.
    """
    pts = sorted(points)
    hull = [p for i, p in enumerate(pts) if all(q[1] < p[1] for q in pts[:i])]
    if not hull or not hull[0][0] <= cost <= hull[-1][0]:
        return None
    xs, ys = zip(*hull, strict=True)
    return float(np.interp(cost, xs, ys))


def plot_frontier(path: Path, rows: dict[str, dict], name: str) -> None:
    fig = Figure(figsize=(5.5, 4.0))
    ax = fig.subplots()
    for label, r in rows.items():
        ax.scatter(r["cost_l2"], r["mean_per_model"], s=25)
        ax.annotate(label, (r["cost_l2"], r["mean_per_model"]), fontsize=7, xytext=(4, 3),
                    textcoords="offset points")
    if name in PAPER_POINT:
        ax.scatter(*PAPER_POINT[name], marker="*", s=120, color="black", label="paper")
        ax.legend(loc="lower right", fontsize=8, frameon=False)
    ax.set_xlabel("mean L2 cost (standardized space)")
    ax.set_ylabel("mean per-model validity")
    ax.set_title(f"DensityFlow validity / cost, {name} seed 0", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def frontier(name: str, params) -> None:  # noqa: ANN001
    rows = {}
    for label, overrides in FRONTIER.items():
        r = rows[label] = bench_dataset(name, params, overrides) | {"overrides": overrides}
        log.info("%-28s validity mean %.3f unanimous %.3f | L2 %.3f | knn %.2f tabnet %.2f | fit %.0fs", label,
                 r["mean_per_model"], r["unanimous"], r["cost_l2"], r["per_model"]["knn"],
                 r["per_model"]["tabnet"], r["fit_s"])
    cost = PAPER_POINT.get(name, (None,))[0]
    at = None if cost is None else envelope_at([(r["cost_l2"], r["mean_per_model"]) for r in rows.values()], cost)
    log.info("%s: validity at L2 %s on the measured envelope: %s", name, cost, "n/a" if at is None else f"{at:.3f}")
    FRONTIER_OUT.parent.mkdir(parents=True, exist_ok=True)
    FRONTIER_OUT.write_text(json.dumps({"profile": params.profile, "seed": 0, "dataset": name, "settings": rows,
                                        "paper_point": PAPER_POINT.get(name), "validity_at_paper_cost": at},
                                       indent=2))
    plot_frontier(FRONTIER_OUT.with_suffix(".png"), rows, name)
    log.info("wrote %s and %s", FRONTIER_OUT, FRONTIER_OUT.with_suffix(".png"))


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(message)s", force=True)  # Prefect configured logging on import
    logging.getLogger("recourselab").setLevel(logging.WARNING)
    params = load_params("params.yaml")
    if len(sys.argv) > 1 and sys.argv[1] == "--frontier":
        with limit_threads(2):
            frontier(sys.argv[2] if len(sys.argv) > 2 else "adult", params)
        return
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
