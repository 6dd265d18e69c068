"""DVC stage ``distill``: trained flow + ensemble -> data/distill/<dataset>/seed=<s>/.

Aligns the surrogate with the black-box ensemble using at most ``distill.budget`` queried
rows; writes the distilled model files and distill.json (queries used, budget).
"""

from __future__ import annotations

import sys
from pathlib import Path

from recourselab.pipeline.stage import cache_root, finish, guarded, parser, setup, staged_outputs


@guarded
def main(argv: list[str] | None = None) -> int:
    """Distill every seed of one dataset under the query budget."""
    ap = parser("distill", __doc__)
    ap.add_argument("--prepared", type=Path, default=Path("data/prepared"))
    ap.add_argument("--ensemble", type=Path, default=Path("data/ensemble"))
    ap.add_argument("--flow", type=Path, default=Path("data/densityflow"), help="train_flow outputs")
    args = ap.parse_args(argv)
    params = setup(args)
    from flows.densityflow import distill_flow, run

    with staged_outputs(args.out or Path("data/distill"), args.dataset) as (out, _):
        results = run(distill_flow, params, dataset=args.dataset, prepared_root=args.prepared,
                      ensemble_root=args.ensemble, flow_root=args.flow, out_root=out,
                      cache_root=cache_root(params, args.params))
    return finish(results)


if __name__ == "__main__":
    sys.exit(main())
