"""DVC stage ``discover``: tuned models -> data/discover/<dataset>/<model>/seed=<s>/.

Per model of ``discover.models`` and seed: ``discover.n_factuals`` rows of the test split that
the model predicts unfavourable, DISCOVER towards the target y* (default 1 - Beta(0.1, 0.9)).
Writes counterfactuals.parquet, log.parquet (per-iteration log with the row scores q_i),
metrics.json and the figures output_cdf.png, feature_cdfs.png, shift.png, row_scores.png,
trajectory.png;
over seeds and models: data/metrics/<dataset>/discover.json.
"""

from __future__ import annotations

import sys
from pathlib import Path

from recourselab.pipeline.stage import cache_root, finish, guarded, parser, setup, staged_outputs


@guarded
def main(argv: list[str] | None = None) -> int:
    """Run DISCOVER for every model and seed of one dataset."""
    ap = parser("discover", __doc__)
    ap.add_argument("--model", action="append", default=None,
                    help="restrict to this model of discover.models (repeatable; default: all)")
    ap.add_argument("--prepared", type=Path, default=Path("data/prepared"), help="prepare stage outputs")
    ap.add_argument("--ensemble", type=Path, default=Path("data/ensemble"), help="tune_ensemble outputs")
    ap.add_argument("--metrics", type=Path, default=Path("data/metrics"), help="metrics root")
    args = ap.parse_args(argv)
    params = setup(args)
    from flows.discover import run_discover

    # with --model only those models are rerun: the other models' outputs are kept
    with staged_outputs(args.out or Path("data/discover"), args.dataset, args.metrics,
                        keep=bool(args.model)) as (out, metrics):
        results = run_discover(args.dataset, params, args.prepared, args.ensemble, out, metrics,
                               cache_root(params, args.params), models=args.model)
    return finish(results)


if __name__ == "__main__":
    sys.exit(main())
