"""DVC stage ``prepare``: raw dataset -> data/prepared/<dataset>/seed=<s>/.

Writes {train,val,test}.parquet (row_id, encoded features, y) and schema.json per seed.
"""

from __future__ import annotations

import sys
from pathlib import Path

from recourselab.pipeline.stage import cache_root, finish, guarded, parser, setup, staged_outputs


@guarded
def main(argv: list[str] | None = None) -> int:
    """Prepare every seed of one dataset (validated before anything is written)."""
    args = parser("prepare", __doc__).parse_args(argv)
    params = setup(args)
    from flows.prepare import run_prepare  # after logging is set up: importing prefect is slow

    with staged_outputs(args.out or Path("data/prepared"), args.dataset) as (out, _):
        results = run_prepare(args.dataset, params, out, cache_root(params, args.params))
    return finish(results)


if __name__ == "__main__":
    sys.exit(main())
