"""DVC stage ``inputs``: the raw files of one dataset -> data/inputs/<dataset>/ (tracked copies).

Copies every raw file the dataset reads (registry files after their sha256 check, files of the
data directory, a data.custom file) with a manifest, inputs.json, once the copies pass the
dataset's contract (a bad file fails the stage and the last good copies stay). DVC runs it on every
`dvc repro` (always_changed): unchanged inputs leave the folder byte-identical and nothing
downstream reruns; a changed byte reruns prepare and everything after it.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path

from recourselab.pipeline.stage import guarded, parser, setup, staged_outputs

log = logging.getLogger("recourselab.stages")


@guarded
def main(argv: list[str] | None = None) -> int:
    """Copy and verify the raw inputs of one dataset."""
    args = parser("inputs", __doc__).parse_args(argv)
    params = setup(args, prefect=False)
    from recourselab.data import dataset_from_params
    from recourselab.data.inputs import sync_inputs
    from recourselab.data.sources import tracked_inputs

    with staged_outputs(args.out or Path("data/inputs"), args.dataset, keep=True) as (out, _):
        manifest = sync_inputs(args.dataset, params, out / args.dataset)
        with tracked_inputs(out / args.dataset):  # the data contract holds before the copies replace the last good ones
            dataset_from_params(args.dataset, params)
    for name, entry in manifest["files"].items():
        log.info("inputs %s: %s (%d bytes, sha256 %s...) from %s", args.dataset, name, entry["bytes"],
                 entry["sha256"][:12], entry["origin"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
