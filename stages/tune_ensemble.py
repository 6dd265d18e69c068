"""DVC stage ``tune_ensemble``: prepared splits -> data/ensemble/<dataset>/seed=<s>/.

Per seed: one native model file and one JSON report per member, manifest.json and
metrics.json (val/test accuracy, ROC AUC, fit time); over seeds:
data/metrics/<dataset>/tune_ensemble.json.
"""

from __future__ import annotations

import sys
from pathlib import Path

from recourselab.pipeline.stage import cache_root, finish, guarded, parser, setup, staged_outputs


@guarded
def main(argv: list[str] | None = None) -> int:
    """Tune the ensemble members of one dataset for every seed."""
    ap = parser("tune_ensemble", __doc__)
    ap.add_argument("--prepared", type=Path, default=Path("data/prepared"), help="prepare stage outputs")
    ap.add_argument("--metrics", type=Path, default=Path("data/metrics"), help="metrics root")
    args = ap.parse_args(argv)
    params = setup(args)
    from flows.tune_ensemble import run_tune_ensemble

    with staged_outputs(args.out or Path("data/ensemble"), args.dataset, args.metrics) as (out, metrics):
        results = run_tune_ensemble(args.dataset, params, args.prepared, out, metrics, cache_root(params, args.params))
    return finish(results)


if __name__ == "__main__":
    sys.exit(main())
