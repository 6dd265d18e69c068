"""DVC stage ``ablate``: the paper's ablation (no density term, no distillation) -> data/ablate/<dataset>/.

For the first ``ablate.n_seeds`` seeds of a dataset in ``ablate.datasets`` (the pipeline's
other datasets get a note, not_ablated.json): the ``train_flow`` model without distillation, and the same
flow retrained with lambda_den 0, before and after the same distillation, scored on
``generate``'s query set next to the full method. Per seed ablate.json and ablate.png; the
summary data/metrics/<dataset>/ablate.json (per seed and mean +- std).
"""

from __future__ import annotations

import sys
from pathlib import Path

from recourselab.pipeline.stage import cache_root, finish, guarded, log, parser, setup, staged_outputs


@guarded
def main(argv: list[str] | None = None) -> int:
    """Ablate DensityFlow on one dataset."""
    ap = parser("ablate", __doc__)
    ap.add_argument("--prepared", type=Path, default=Path("data/prepared"))
    ap.add_argument("--ensemble", type=Path, default=Path("data/ensemble"))
    ap.add_argument("--flow", type=Path, default=Path("data/densityflow"), help="trained flow (train_flow outputs)")
    ap.add_argument("--recourse", type=Path, default=Path("data/recourse"), help="the full method (generate outputs)")
    ap.add_argument("--metrics", type=Path, default=Path("data/metrics"))
    args = ap.parse_args(argv)
    params = setup(args)
    if args.dataset not in params.datasets:
        from recourselab.errors import ConfigError

        raise ConfigError(f"{args.dataset!r} is not in datasets {params.datasets}")
    outside = [d for d in params.ablate.datasets if d not in params.datasets]
    if outside:  # e.g. the default ablate.datasets after `datasets` was narrowed
        log.warning("ablate.datasets lists %s, which are not in datasets %s: they are not ablated",
                    outside, params.datasets)
    from flows.ablate import ablate_flow, run, write_not_ablated

    with staged_outputs(args.out or Path("data/ablate"), args.dataset, args.metrics) as (out, metrics):
        if args.dataset not in params.ablate.datasets:
            write_not_ablated(args.dataset, params, out, metrics)
            log.info("ablate %s: not in ablate.datasets %s, nothing to do", args.dataset, params.ablate.datasets)
            return 0
        results = run(ablate_flow, params, dataset=args.dataset, prepared_root=args.prepared,
                      ensemble_root=args.ensemble, flow_root=args.flow, recourse_root=args.recourse,
                      out_root=out, metrics_root=metrics, cache_root=cache_root(params, args.params))
    return finish(results)


if __name__ == "__main__":
    sys.exit(main())
