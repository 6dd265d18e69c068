"""DVC stage ``summary``: the headline numbers and plot tables of one dataset.

Writes data/metrics/<dataset>/summary.json (the default `dvc metrics show`) and
data/plots/<dataset>/{validity_cost,model_validity,discover_cdf}.csv (the `dvc plots show` data).
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path

from recourselab.pipeline.stage import guarded, parser, setup, staged_outputs

log = logging.getLogger("recourselab.stages")


@guarded
def main(argv: list[str] | None = None) -> int:
    """Summarise one dataset's metrics files into its headline file and plot tables."""
    ap = parser("summary", __doc__)
    ap.add_argument("--metrics", type=Path, default=Path("data/metrics"), help="metrics root")
    ap.add_argument("--discover", type=Path, default=Path("data/discover"), help="DISCOVER outputs root")
    ap.add_argument("--evaluate", type=Path, default=Path("data/evaluate"),
                    help="evaluate outputs root (its <dataset>/methods.json is read when it exists)")
    args = ap.parse_args(argv)
    setup(args, prefect=False)
    from recourselab.io import write_bytes, write_json
    from recourselab.pipeline.headline import SUMMARY_FILE, check_summary, headline_summary, plot_tables

    dataset = args.dataset
    summary = headline_summary(args.metrics / dataset, args.evaluate / dataset)
    check_summary(summary, args.metrics / dataset / SUMMARY_FILE)
    tables = plot_tables(args.metrics / dataset, args.discover / dataset, args.evaluate / dataset)
    with staged_outputs(args.out or Path("data/plots"), dataset, args.metrics) as (out, metrics):
        write_json(metrics / dataset / SUMMARY_FILE, summary)
        for name, table in tables.items():
            write_bytes(out / dataset / name, table.to_csv(index=False, float_format="%.6g").encode())
    log.info("summary %s: %s", dataset, ", ".join(f"{k} {v:.4g}" for k, v in summary.items()
                                                   if isinstance(v, float)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
