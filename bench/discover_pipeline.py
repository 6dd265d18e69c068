"""DISCOVER's certified runs per dataset, as the ``discover`` stage runs them, under solver overrides.

Reads the pipeline's ``data/prepared`` and ``data/ensemble`` outputs (run ``make repro`` or the
``prepare`` and ``tune_ensemble`` stages first) and repeats the stage's protocol for every model
and seed of ``params.yaml``: the same factual sample, target and settings, with the ``--set``
overrides on top of ``discover.solver`` (and its ``per_dataset`` entry). Nothing is written under
``data/``: the counts go to ``bench/results/discover_pipeline.json``.

    python bench/discover_pipeline.py                                   # every dataset, the defaults
    python bench/discover_pipeline.py --datasets adult --set eta_r=0.5 --set kappa=0
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

import numpy as np  # noqa: E402

from recourselab.config import load_params  # noqa: E402
from recourselab.data import load_prepared  # noqa: E402
from recourselab.discover import Discover, DiscoverSettings, make_target  # noqa: E402
from recourselab.discover.sampling import sample_factuals  # noqa: E402
from recourselab.io import write_bytes  # noqa: E402
from recourselab.models import load_ensemble  # noqa: E402
from recourselab.runtime import limit_threads  # noqa: E402

log = logging.getLogger("bench.discover_pipeline")
OUT = REPO / "bench" / "results" / "discover_pipeline.json"


def parse_override(text: str) -> tuple[str, Any]:
    """``key=value`` with the value read as JSON (``eta_r=0.5``, ``stop="certified"``) or else as text."""
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise SystemExit(f"--set takes key=value, got {text!r}")
    try:
        return key, json.loads(value)
    except json.JSONDecodeError:
        return key, value


@dataclass(frozen=True)
class StageRun:
    """One (model, seed) run of the ``discover`` stage: its data, model, factual rows (n, d), their scores (n,),
    target and solver settings."""

    model: str
    seed: int
    prepared: Any
    box: Any
    factuals: np.ndarray
    factual_scores: np.ndarray
    target: Any
    settings: DiscoverSettings


def stage_runs(dataset: str, params: Any, root: Path, overrides: dict[str, Any] | None = None) -> Iterator[StageRun]:
    """The stage's runs on ``dataset`` (every model of ``discover.models`` and seed), ``overrides`` on top of its
    solver settings: the same factual sample, target and settings as the stage."""
    section = params.discover
    solver = {**section.solver_for(dataset).model_dump(mode="json"), **(overrides or {})}
    for model in section.models:
        for seed in params.seeds:
            prepared = load_prepared(root / "data" / "prepared" / dataset / f"seed={seed}")
            schema = prepared.schema
            X, _ = prepared.arrays(section.split)
            box = load_ensemble(root / "data" / "ensemble" / dataset / f"seed={seed}", [model], schema=schema,
                                seed=seed)
            scores = box.predict_proba(X, budget="selection")[:, schema.favourable_index]
            idx = sample_factuals(scores, section.n_factuals, seed=seed, pool=section.factuals)
            yield StageRun(model, seed, prepared, box, X[idx], scores[idx],
                           make_target(section.target.kind, seed=seed, **section.target.target_params()),
                           DiscoverSettings.from_kwargs(**solver, seed=seed))


def pipeline_datasets(names: str | None, params: Any, root: Path) -> list[str] | None:
    """The datasets named (comma-separated; None: those of ``params``), or None (logged) when one has no
    tuned ensemble under ``root``."""
    datasets = names.split(",") if names else params.datasets
    missing = [d for d in datasets if not (root / "data" / "ensemble" / d).is_dir()]
    if missing:
        log.error("no tuned ensemble for %s: run `make repro` (or the tune_ensemble stage) first", missing)
        return None
    return datasets


def pipeline_setup(names: str | None) -> tuple[Any, list[str] | None]:
    """Log set-up for a bench script (the library quiet), this repository's ``params.yaml`` and the datasets
    named (None, logged, when one has no tuned ensemble; see :func:`pipeline_datasets`)."""
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    logging.getLogger("recourselab").setLevel(logging.ERROR)
    params = load_params(REPO / "params.yaml")
    return params, pipeline_datasets(names, params, REPO)


def run_dataset(dataset: str, overrides: dict[str, Any], params: Any, root: Path) -> dict[str, Any]:
    """Every (model, seed) run of the stage on ``dataset``; returns the per-run rows and the count."""
    rows = []
    for run in stage_runs(dataset, params, root, overrides):
        solver = Discover.from_settings(run.box, schema=run.prepared.schema, settings=run.settings)
        m = solver.solve(run.factuals, run.target).metrics
        rows.append({"model": run.model, "seed": run.seed, "certified": m["first_certified_iteration"] is not None,
                     **{k: float(m[k]) for k in ("UCL_x", "U_x", "UCL_y", "U_y", "OT_x", "OT_y")}})
        log.info("%s %s seed %d: certified %s, UCL_x %.3f / U_x %.3f, UCL_y %.3f / U_y %.3f", dataset, run.model,
                 run.seed, rows[-1]["certified"], m["UCL_x"], m["U_x"], m["UCL_y"], m["U_y"])
    certified = sum(r["certified"] for r in rows)
    return {"certified": certified, "runs": len(rows), "OT_x": float(np.mean([r["OT_x"] for r in rows])),
            "OT_y": float(np.mean([r["OT_y"] for r in rows])), "rows": rows}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--datasets", default=None, help="comma-separated (default: the datasets of params.yaml)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="a discover.solver setting to override (repeatable)")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    warnings.filterwarnings("ignore", module="recourselab")
    overrides = dict(parse_override(s) for s in args.set)
    params, datasets = pipeline_setup(args.datasets)
    if datasets is None:
        return 1
    result = {"overrides": overrides, "datasets": {}}
    with limit_threads(1):
        for d in datasets:
            result["datasets"][d] = run_dataset(d, overrides, params, REPO)
            log.info("%s: %d / %d certified", d, result["datasets"][d]["certified"], result["datasets"][d]["runs"])
    write_bytes(args.out, json.dumps(result, indent=1).encode())
    for d, r in result["datasets"].items():
        print(f"{d}: {r['certified']}/{r['runs']} certified, OT_x {r['OT_x']:.3f}, OT_y {r['OT_y']:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
