"""DVC stage ``generate``: distilled flow -> data/recourse/<dataset>/seed=<s>/counterfactuals.parquet.

The query set is the test rows that every ensemble member classifies correctly (capped at
``generate.max_queries``); the target is the other class. Per seed metrics.json and the
headline data/metrics/<dataset>/densityflow.json (per seed and mean +- std): per-model,
mean per-model, unanimous and majority validity, L1/L2 cost, density, queries used.
"""

from __future__ import annotations

import sys
from pathlib import Path

from recourselab.pipeline.stage import cache_root, finish, guarded, parser, setup, staged_outputs


@guarded
def main(argv: list[str] | None = None) -> int:
    """Generate and evaluate counterfactuals for every seed of one dataset."""
    ap = parser("generate", __doc__)
    ap.add_argument("--prepared", type=Path, default=Path("data/prepared"))
    ap.add_argument("--ensemble", type=Path, default=Path("data/ensemble"))
    ap.add_argument("--flow", type=Path, default=Path("data/distill"), help="distilled flow (distill outputs)")
    ap.add_argument("--metrics", type=Path, default=Path("data/metrics"))
    args = ap.parse_args(argv)
    params = setup(args)
    from flows.densityflow import generate_flow, run

    with staged_outputs(args.out or Path("data/recourse"), args.dataset, args.metrics) as (out, metrics):
        results = run(generate_flow, params, dataset=args.dataset, prepared_root=args.prepared,
                      ensemble_root=args.ensemble, flow_root=args.flow, out_root=out, metrics_root=metrics,
                      cache_root=cache_root(params, args.params))
    return finish(results)


if __name__ == "__main__":
    sys.exit(main())
