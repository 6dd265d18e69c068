"""DVC stage ``prepare``: raw dataset -> data/prepared/<dataset>/seed=<s>/.

Writes {train,val,test}.parquet (row_id, encoded features, y) and schema.json per seed, reading the
raw files from the tracked copies of the ``inputs`` stage (data/inputs/<dataset>/) when they exist.
"""

from __future__ import annotations

import sys
from pathlib import Path

from recourselab.pipeline.stage import cache_root, finish, guarded, parser, setup, staged_outputs


@guarded
def main(argv: list[str] | None = None) -> int:
    """Prepare every seed of one dataset (validated before anything is written)."""
    ap = parser("prepare", __doc__)
    ap.add_argument("--inputs", type=Path, default=Path("data/inputs"),
                    help="root of the tracked raw inputs (the inputs stage's output); read when "
                         "<inputs>/<dataset> exists, else the original sources are read")
    args = ap.parse_args(argv)
    params = setup(args)
    from flows.prepare import run_prepare  # after logging is set up: importing prefect is slow

    inputs = args.inputs / args.dataset
    with staged_outputs(args.out or Path("data/prepared"), args.dataset) as (out, _):
        results = run_prepare(args.dataset, params, out, cache_root(params, args.params),
                              inputs_dir=inputs if inputs.is_dir() else None)
    return finish(results)


if __name__ == "__main__":
    sys.exit(main())
