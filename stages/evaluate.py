"""DVC stage ``evaluate``: every recourse method on generate's query set -> data/evaluate/<dataset>/.

Per seed, every registered method (the baselines, DensityFlow and its robust extension
``densityflow_r``) runs at the settings of the ``evaluate`` params section on the same query
rows against the same ensemble, and is scored by the same code. Outputs: ``methods.json`` (DVC
metrics) and ``methods.md`` (mean +- std over seeds), ``rows.parquet``, ``frontier.json`` (is the
robust default dominated by a baseline?), ``frontier.png`` and per seed ``rq2.png`` (DVC plots).
"""

from __future__ import annotations

import sys
from pathlib import Path

from recourselab.pipeline.stage import cache_root, finish, guarded, parser, setup, staged_outputs


@guarded
def main(argv: list[str] | None = None) -> int:
    """Evaluate every method for every seed of one dataset."""
    ap = parser("evaluate", __doc__)
    ap.add_argument("--prepared", type=Path, default=Path("data/prepared"))
    ap.add_argument("--ensemble", type=Path, default=Path("data/ensemble"))
    ap.add_argument("--flow", type=Path, default=Path("data/distill"), help="distilled flow (distill outputs)")
    args = ap.parse_args(argv)
    params = setup(args)
    from flows.evaluate import evaluate_flow, run

    with staged_outputs(args.out or Path("data/evaluate"), args.dataset) as (out, _):
        results = run(evaluate_flow, params, dataset=args.dataset, prepared_root=args.prepared,
                      ensemble_root=args.ensemble, flow_root=args.flow, out_root=out,
                      cache_root=cache_root(params, args.params))
    return finish(results)


if __name__ == "__main__":
    sys.exit(main())
