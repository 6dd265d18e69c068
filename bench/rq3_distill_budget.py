"""RQ3: DensityFlow validity against its distillation budget (0, 60, 120, 240, 480, 960 ensemble queries).

For one dataset and seed of a pipeline run (``train_flow``, ``tune_ensemble`` and ``prepare``
outputs), the trained flow is distilled afresh at every budget with the ``distill`` settings of
the params file and scored on ``generate``'s query set: mean per-model and unanimous validity,
L2 cost. Writes ``bench/results/rq3_<dataset>_seed<s>.json`` and ``rq3_<dataset>_seed<s>.png`` and
prints the validity gained per budget relative to budget 0.

Usage::

    python bench/rq3_distill_budget.py --dataset compas [--seed 0] [--params params.yaml] [--data data]
"""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path

from flows.densityflow import seed_ensemble
from recourselab.config import load_params
from recourselab.data import load_prepared
from recourselab.densityflow import DensityFlow
from recourselab.densityflow.config import settings_of
from recourselab.metrics.robustness import query_set, validity_metrics
from recourselab.report.rq_figures import RQ3_BUDGETS, rq3_figure


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dataset", default="compas", help="a dataset of the pipeline run in --data")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--params", type=Path, default=Path("params.yaml"))
    ap.add_argument("--data", type=Path, default=Path("data"), help="the pipeline's data folder")
    ap.add_argument("--budgets", type=int, nargs="+", default=list(RQ3_BUDGETS))
    ap.add_argument("--out", type=Path, default=Path("bench/results"))
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    params = load_params(args.params)
    sub = f"{args.dataset}/seed={args.seed}"
    prepared = load_prepared(args.data / "prepared" / sub)
    schema = prepared.schema
    X, y = prepared.arrays("train")
    Xte, yte = prepared.arrays("test")
    members = list(params.tune_ensemble.members)
    box = seed_ensemble(str(args.data / "ensemble" / sub), schema, members, seed=args.seed)
    q = query_set(box.query(Xte, budget="evaluation"), yte, params.generate.max_queries, seed=args.seed)
    target = (yte[q] + 1) % schema.n_classes
    rows = []
    for budget in args.budgets:
        flow = DensityFlow.load(args.data / "densityflow" / sub, schema=schema)
        flow.with_settings(**settings_of("distill", params.distill.model_dump(mode="json")),
                           **settings_of("generate", params.generate.model_dump(mode="json")))
        used = flow.distill(box, X, y, budget=budget) if budget else 0
        res = flow.generate(Xte[q], target=target)
        v = validity_metrics(box.query(res.counterfactuals, budget="evaluation"), res.target)
        rows.append({"budget": budget, "queries_used": int(used), "validity_mean": v["mean_per_model"],
                     "validity_unanimous": v["unanimous"], "cost_l2": float(res.cost_l2.mean())})
        logging.info("budget %d: mean %.3f, unanimous %.3f, L2 %.3f", budget, v["mean_per_model"], v["unanimous"],
                     rows[-1]["cost_l2"])
    args.out.mkdir(parents=True, exist_ok=True)
    stem = args.out / f"rq3_{args.dataset}_seed{args.seed}"
    stem.with_suffix(".json").write_text(json.dumps({"dataset": args.dataset, "seed": args.seed, "rows": rows},
                                                    indent=2))
    rq3_figure(rows, stem.with_suffix(".png"), title=f"{args.dataset} seed={args.seed}")
    base = rows[0]
    for r in rows:
        print(f"budget {r['budget']:4d}: mean validity x{r['validity_mean'] / max(base['validity_mean'], 1e-12):.3f}, "
              f"unanimous x{r['validity_unanimous'] / max(base['validity_unanimous'], 1e-12):.3f} vs budget "
              f"{base['budget']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
