"""DVC stage ``train_flow``: prepared splits (+ ensemble for lambda selection) -> data/densityflow/<dataset>/seed=<s>/.

Writes surrogate.pt, generator.pt (state dicts), densityflow.json (config), train_log.parquet
and selection.json (val validity per lambda combination when ``train_flow.lambda_grid`` is set).
"""

from __future__ import annotations

import sys
from pathlib import Path

from recourselab.pipeline.stage import cache_root, finish, guarded, parser, setup, staged_outputs


@guarded
def main(argv: list[str] | None = None) -> int:
    """Train DensityFlow for every seed of one dataset."""
    ap = parser("train_flow", __doc__)
    ap.add_argument("--prepared", type=Path, default=Path("data/prepared"))
    ap.add_argument("--ensemble", type=Path, default=Path("data/ensemble"))
    args = ap.parse_args(argv)
    params = setup(args)
    from flows.densityflow import run, training_flow

    with staged_outputs(args.out or Path("data/densityflow"), args.dataset) as (out, _):
        results = run(training_flow, params, dataset=args.dataset, prepared_root=args.prepared,
                      ensemble_root=args.ensemble, out_root=out, cache_root=cache_root(params, args.params))
    return finish(results)


if __name__ == "__main__":
    sys.exit(main())
