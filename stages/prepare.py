"""DVC stage ``prepare``: raw dataset -> data/prepared/<dataset>/seed=<s>/.

Writes {train,val,test}.parquet (row_id, encoded features, y) and schema.json per seed.
"""

from __future__ import annotations

import sys
from pathlib import Path

from stages._common import cache_root, guarded, log, parser, setup


@guarded
def main(argv: list[str] | None = None) -> int:
    """Prepare every seed of one dataset (validated before anything is written)."""
    args = parser("prepare", __doc__).parse_args(argv)
    params = setup(args)
    from flows.prepare import run_prepare  # after logging is set up: importing prefect is slow

    out = args.out or Path("data/prepared")
    results = run_prepare(args.dataset, params, out, cache_root(params, args.params))
    for r in results:
        log.info("prepare %s: %s (%d files)", r.key, "cache hit" if r.cached else "computed", len(r.files))
    return 0


if __name__ == "__main__":
    sys.exit(main())
