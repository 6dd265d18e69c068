"""DVC stage ``audit``: recourse outputs of one dataset -> data/reports/<dataset>/audit.html, audit.md, figures/.

The report covers validity (per model, mean, unanimous), cost, plausibility and density, immutable-feature
violations, query-budget use, DISCOVER certification with its input / output CDFs, a subgroup breakdown
per protected attribute (``audit.protected``) with gaps above ``audit.gap_threshold`` flagged, and the
provenance (git revision, params hashes, dvc.lock content hashes, library versions). ``--baseline REV``
(manual runs) adds the changes since git revision REV (``recourselab audit diff REV HEAD``).
"""

from __future__ import annotations

import sys
from pathlib import Path

from recourselab.pipeline.stage import guarded, log, parser, setup, staged_outputs


@guarded
def main(argv: list[str] | None = None) -> int:
    """Write the audit report of one dataset."""
    ap = parser("audit", __doc__)
    ap.add_argument("--root", type=Path, default=Path("."), help="project root whose data/ is audited")
    ap.add_argument("--baseline", default=None, metavar="REV",
                    help="also report the changes since this git revision (read through DVC)")
    args = ap.parse_args(argv)
    params = setup(args, prefect=False)
    from recourselab.pipeline.audit import write_audit

    extra = []
    if args.baseline is not None:  # the working tree is the other side: its outputs need not be committed yet
        import tempfile

        from recourselab.pipeline.audit_diff import diff_roots, diff_section, materialize

        with tempfile.TemporaryDirectory(prefix="recourselab-audit-") as tmp:
            base = materialize(args.root, args.baseline, args.dataset, Path(tmp) / "a")
            extra.append(diff_section(diff_roots(base, args.root, args.dataset, params.audit,
                                                 rev_a=args.baseline, rev_b="working tree")))
    out_root = args.out or Path("data/reports")
    with staged_outputs(out_root, args.dataset) as (out, _):
        result = write_audit(args.root, args.dataset, params, out / args.dataset, extra=extra)
    log.info("audit of %s: %d counterfactuals, %d flags -> %s", args.dataset, len(result.rows), len(result.alerts),
             out_root / args.dataset / "audit.html")
    for alert in result.alerts:
        log.warning("audit flag: %s", alert)
    return 0


if __name__ == "__main__":
    sys.exit(main())
