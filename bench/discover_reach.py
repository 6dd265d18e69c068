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
sys.path.insert(0, str(REPO / "src"))

import numpy as np  # noqa: E402

from recourselab.config import load_params  # noqa: E402
from recourselab.data import load_prepared  # noqa: E402
from recourselab.discover import make_target  # noqa: E402
from recourselab.discover.certify import Certificate  # noqa: E402
from recourselab.discover.sampling import sample_factuals  # noqa: E402
from recourselab.discover.settings import DiscoverSettings  # noqa: E402
from recourselab.discover.setup import output_threshold  # noqa: E402
from recourselab.io import write_bytes  # noqa: E402
from recourselab.models import load_ensemble  # noqa: E402

log = logging.getLogger("bench.discover_reach")
OUT = REPO / "bench" / "results" / "discover_reach.json"


def nearest(values: np.ndarray, pool_sorted: np.ndarray) -> np.ndarray:
    """Each of ``values`` (n,) replaced by its nearest element of the sorted ``pool_sorted`` (m,). Shape (n,)."""
    i = np.clip(np.searchsorted(pool_sorted, values), 1, len(pool_sorted) - 1)
    lo, hi = pool_sorted[i - 1], pool_sorted[i]
    return np.where(np.abs(hi - values) < np.abs(lo - values), hi, lo)


def run_dataset(dataset: str, params, root: Path) -> list[dict]:
    section = params.discover
    rows = []
    for model in section.models:
        for seed in params.seeds:
            prepared = load_prepared(root / "data" / "prepared" / dataset / f"seed={seed}")
            schema = prepared.schema
            X_train, _ = prepared.arrays("train")
            box = load_ensemble(root / "data" / "ensemble" / dataset / f"seed={seed}", [model], schema=schema,
                                seed=seed)
            train_scores = np.sort(box.predict_proba(X_train, budget="selection")[:, schema.favourable_index])
            X, _ = prepared.arrays(section.split)
            scores = box.predict_proba(X, budget="selection")[:, schema.favourable_index]
            yf = scores[sample_factuals(scores, section.n_factuals, seed=seed, pool=section.factuals)]
            n = len(yf)
            ystar = np.sort(make_target(section.target.kind, seed=seed, **section.target.target_params()).values(n))
            s = DiscoverSettings.from_kwargs(**section.solver_for(dataset).model_dump(mode="json"), seed=seed)
            cert = Certificate(s.certificate, n, s.delta, s.alpha, s.bootstrap_resamples, seed)
            best = cert.output_bound(np.sort(nearest(ystar, train_scores)), ystar)
            U_y = output_threshold(np.sort(yf), ystar, s, cert)
            rows.append({"model": model, "seed": seed, "best_UCL_y": float(best), "U_y": float(U_y),
                         "reachable": bool(best < U_y), "max_train_score": float(train_scores[-1])})
            log.info("%s %s seed %d: best reachable UCL_y %.3f, U_y %.3f, max training score %.3f", dataset, model,
                     seed, best, U_y, train_scores[-1])
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--datasets", default=None, help="comma-separated (default: the datasets of params.yaml)")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    logging.getLogger("recourselab").setLevel(logging.ERROR)
    params = load_params(REPO / "params.yaml")
    datasets = args.datasets.split(",") if args.datasets else params.datasets
    missing = [d for d in datasets if not (REPO / "data" / "ensemble" / d).is_dir()]
    if missing:
        log.error("no tuned ensemble for %s: run `make repro` (or the tune_ensemble stage) first", missing)
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
