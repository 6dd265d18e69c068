"""Joint reachability of the ``discover`` stage's certificate on a 2-D dataset: a free search over point sets.

For every model and seed of ``params.yaml`` (the stage's factual sample, target, directions and
thresholds), a greedy search places the n counterfactual points anywhere on a fine grid over the
training range (or back on their factuals), ignoring which factual each point came from. A step is
kept when it lowers the polish's merit (the summed threshold violation, then the larger ratio;
:func:`recourselab.discover.repair.polish_merit`), and the best ``max(UCL_x / U_x, UCL_y / U_y)`` is
reported. The model is scored once on the grid, so the search costs no further queries. A ratio
below 1 shows that a certified iterate exists; it is not a bound the solver could reach with its own
query budget. Reads ``data/prepared`` and ``data/ensemble``; writes ``bench/results/discover_free.json``.

    python bench/discover_free.py --datasets moons --models rf,xgboost,lightgbm
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
from recourselab.discover.ot import sorted_projections  # noqa: E402
from recourselab.discover.repair import polish_merit  # noqa: E402
from recourselab.discover.setup import directions_at, input_threshold, output_threshold  # noqa: E402
from recourselab.io import write_bytes  # noqa: E402

log = logging.getLogger("bench.discover_free")
OUT = REPO / "bench" / "results" / "discover_free.json"


def free_search(run, grid: int, steps: int, seed: int) -> dict:
    """The best ``max(UCL_x / U_x, UCL_y / U_y)`` a greedy free placement reaches on one stage run."""
    s, schema = run.settings, run.prepared.schema
    Xf, yf = run.factuals, run.factual_scores
    n, d = Xf.shape
    if d != 2:
        raise SystemExit(f"the free search grids the plane: {schema.dataset} has {d} encoded columns, not 2")
    ystar = np.sort(run.target.values(n, yf))
    theta = directions_at(d, s, 0)
    ref_x = sorted_projections(Xf, theta)
    cert = Certificate(s.certificate, n, s.delta, s.alpha, s.bootstrap_resamples, run.seed)
    U_x, U_y = input_threshold(ref_x, s, cert), output_threshold(np.sort(yf), ystar, s, cert)
    X_train, _ = run.prepared.arrays("train")
    axes = [np.linspace(lo, hi, grid) for lo, hi in zip(X_train.min(axis=0), X_train.max(axis=0), strict=True)]
    nodes = np.stack(np.meshgrid(*axes, indexing="ij"), axis=-1).reshape(-1, 2)
    points = np.concatenate([Xf, nodes])  # index i < n: factual i
    scores = np.concatenate([yf, run.box.predict_proba(nodes, budget="selection")[:, schema.favourable_index]])

    def ratio(idx: np.ndarray) -> tuple[float, float]:
        return (cert.input_bound(sorted_projections(points[idx], theta), ref_x) / U_x,
                cert.output_bound(np.sort(scores[idx]), ystar) / U_y)

    rng = np.random.default_rng(seed)
    idx = np.arange(n)
    rx, ry = ratio(idx)
    for _ in range(steps):
        i, new, u = rng.integers(n), idx.copy(), rng.random()
        if u < 0.15:
            new[i] = i  # back to its factual
        elif u < 0.45:
            new[i] = n + rng.integers(len(nodes))  # anywhere
        else:  # a grid node near the point
            cell = [np.clip(np.searchsorted(a, points[idx[i], j]) + rng.integers(-6, 7), 0, grid - 1)
                    for j, a in enumerate(axes)]
            new[i] = n + cell[0] * grid + cell[1]
        cx, cy = ratio(new)
        if polish_merit(cx, cy) < polish_merit(rx, ry):
            idx, rx, ry = new, cx, cy
    return {"model": run.model, "seed": run.seed, "ratio": max(rx, ry), "ratio_x": rx, "ratio_y": ry,
            "points_off_factuals": int((idx >= n).sum()), "U_x": U_x, "U_y": U_y, "grid_queries": len(nodes)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--datasets", default="moons", help="comma-separated 2-D datasets (default: moons)")
    ap.add_argument("--models", default=None, help="comma-separated (default: those of discover.models)")
    ap.add_argument("--grid", type=int, default=241, help="grid nodes per axis (default 241)")
    ap.add_argument("--steps", type=int, default=30000, help="greedy steps per run (default 30000)")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    params, datasets = pipeline_setup(args.datasets)
    if datasets is None:
        return 1
    models = set(args.models.split(",")) if args.models else None
    result = {}
    for d in datasets:
        result[d] = [free_search(run, args.grid, args.steps, run.seed) for run in stage_runs(d, params, REPO)
                     if models is None or run.model in models]
        for r in result[d]:
            log.info("%s %s seed %d: best max(UCL_x / U_x, UCL_y / U_y) %.3f (x %.3f, y %.3f)", d, r["model"],
                     r["seed"], r["ratio"], r["ratio_x"], r["ratio_y"])
    write_bytes(args.out, json.dumps(result, indent=1).encode())
    for d, rows in result.items():
        ratios = [r["ratio"] for r in rows]
        print(f"{d}: a certified point set exists in {sum(x < 1 for x in ratios)}/{len(rows)} runs, "
              f"best ratio {min(ratios):.2f} to {max(ratios):.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
