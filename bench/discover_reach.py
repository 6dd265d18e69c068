"""Output-side reachability of the ``discover`` stage's runs: the best ``UCL_y`` any iterate could reach.

For every model and seed of ``params.yaml`` (the stage's factual sample size, target and certificate
settings), each drawn target value is moved to the nearest score the model gives a training row, and
the DKW bound of those scores against the targets is reported next to the run's ``U_y``: if that
bound is not below ``U_y``, no iterate of rows the model scores like its training rows can certify
the output side. Reads ``data/prepared`` and ``data/ensemble``; writes
``bench/results/discover_reach.json``.

    python bench/discover_reach.py --datasets moons
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import numpy as np  # noqa: E402

from bench.discover_pipeline import pipeline_setup, stage_runs  # noqa: E402
from recourselab.discover.certify import Certificate  # noqa: E402
from recourselab.discover.setup import output_threshold  # noqa: E402
from recourselab.io import write_bytes  # noqa: E402

log = logging.getLogger("bench.discover_reach")
OUT = REPO / "bench" / "results" / "discover_reach.json"


def nearest(values: np.ndarray, pool_sorted: np.ndarray) -> np.ndarray:
    """Each of ``values`` (n,) replaced by its nearest element of the sorted ``pool_sorted`` (m,). Shape (n,)."""
    i = np.clip(np.searchsorted(pool_sorted, values), 1, len(pool_sorted) - 1)
    lo, hi = pool_sorted[i - 1], pool_sorted[i]
    return np.where(np.abs(hi - values) < np.abs(lo - values), hi, lo)


def run_dataset(dataset: str, params, root: Path) -> list[dict]:
    rows = []
    for run in stage_runs(dataset, params, root):
        schema, s = run.prepared.schema, run.settings
        X_train, _ = run.prepared.arrays("train")
        train_scores = np.sort(run.box.predict_proba(X_train, budget="selection")[:, schema.favourable_index])
        n = len(run.factual_scores)
        ystar = np.sort(run.target.values(n))
        cert = Certificate(s.certificate, n, s.delta, s.alpha, s.bootstrap_resamples, run.seed)
        best = cert.output_bound(np.sort(nearest(ystar, train_scores)), ystar)
        U_y = output_threshold(np.sort(run.factual_scores), ystar, s, cert)
        rows.append({"model": run.model, "seed": run.seed, "best_UCL_y": float(best), "U_y": float(U_y),
                     "reachable": bool(best < U_y), "max_train_score": float(train_scores[-1])})
        log.info("%s %s seed %d: best reachable UCL_y %.3f, U_y %.3f, max training score %.3f", dataset, run.model,
                 run.seed, best, U_y, train_scores[-1])
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--datasets", default=None, help="comma-separated (default: the datasets of params.yaml)")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    params, datasets = pipeline_setup(args.datasets)
    if datasets is None:
        return 1
    result = {d: run_dataset(d, params, REPO) for d in datasets}
    write_bytes(args.out, json.dumps(result, indent=1).encode())
    for d, rows in result.items():
        ratio = [r["best_UCL_y"] / r["U_y"] for r in rows]
        print(f"{d}: output side reachable in {sum(r['reachable'] for r in rows)}/{len(rows)} runs, "
              f"best UCL_y / U_y {min(ratio):.2f} to {max(ratio):.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
