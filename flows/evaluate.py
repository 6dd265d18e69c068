"""Prefect flow of the ``evaluate`` stage: every recourse method on ``generate``'s query set, side by side.

One cached task per (dataset, seed) runs the plan of the ``evaluate`` params section
(:mod:`recourselab.pipeline.evaluate`) and stages ``scores.json``, ``rows.parquet`` and the RQ2
figure; the flow then writes the dataset's methods table (``methods.json``, ``methods.md``, mean
+- std over seeds), ``rows.parquet``, the frontier check and ``frontier.png`` into
``data/evaluate/<dataset>/``, with the seeds' files under ``seeds/seed=<s>/``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
from prefect import flow, task
from prefect.cache_policies import INPUTS, TASK_SOURCE

from flows.densityflow import CODE, flip_labels, rq2_points, seed_calls, seed_ensemble
from recourselab.config import Params, section_hash
from recourselab.data import load_prepared
from recourselab.densityflow import DensityFlow
from recourselab.io import write_json, write_parquet
from recourselab.metrics.plausibility import density_variance_spearman
from recourselab.orchestration import SeedResult, run_tasks, stage_artifacts
from recourselab.pipeline.evaluate import (
    SeedInputs,
    evaluate_seed,
    plan,
    query_rows,
    read_seed,
    registered_methods,
    score_to_json,
    write_dataset_outputs,
)
from recourselab.progress import bar
from recourselab.provenance import code_provenance
from recourselab.report.rq_figures import rq2_figure
from recourselab.runtime import limit_threads

#: Modules whose code shapes the outputs (task cache keys).
EVALUATE_CODE = (*CODE, "flows.evaluate", "recourselab.methods", "recourselab.metrics", "recourselab.report",
                 "recourselab.pipeline.evaluate", "recourselab.config.evaluate")
#: The seeds' folders inside ``data/evaluate/<dataset>``.
SEEDS = "seeds"


@task(name="evaluate", task_run_name="evaluate-{dataset}-seed={seed}",
      cache_policy=TASK_SOURCE + INPUTS - "flow_dir" - "prepared_dir" - "ensemble_dir")
def evaluate(*, dataset: str, seed: int, section: dict[str, Any], upstream: str, code: str, staging_root: str,
             flow_dir: str, prepared_dir: str, ensemble_dir: str, device: str, n_threads: int,
             members: list[str]) -> dict[str, Any]:
    """Every planned method on one seed's query set, scored; the seed's RQ2 check."""
    prepared = load_prepared(prepared_dir)
    schema = prepared.schema
    X, y = prepared.arrays("train")
    Xte, yte = prepared.arrays("test")
    with limit_threads(n_threads):
        box = seed_ensemble(ensemble_dir, schema, members, seed=seed)
        test_out = box.query(Xte, budget="rq2")
        q = query_rows(box, Xte, yte, section["max_queries"], seed, section["max_rows"])
        flow_model = DensityFlow.load(flow_dir, schema=schema, device=device)
        flow_model.with_settings(n_starts=section["n_starts"], jitter=section["jitter"])
        inputs = SeedInputs(dataset=dataset, seed=seed, schema=schema, oracle=box, X_train=X, y_train=y,
                            factuals=Xte[q], target=flip_labels(yte[q], schema.n_classes), rows=q, flow=flow_model)
        methods = registered_methods()
        runs = plan(section, list(methods))
        result = evaluate_seed(inputs, runs, methods, plausibility=section["plausibility"],
                               progress=lambda it: bar(it, desc=f"evaluate {dataset} seed {seed}", unit="method"))
        density, variance = rq2_points(flow_model, test_out, Xte, yte, seed)
        rq2 = density_variance_spearman(density, variance, seed=seed)
    provenance = {"dataset": dataset, "seed": seed, "stage": "evaluate", "params_hash": section_hash(section),
                  **code_provenance(code)}
    return stage_artifacts(Path(staging_root) / "evaluate" / dataset / f"seed={seed}", {
        "scores.json": lambda p: write_json(p, [score_to_json(s) for s in result.scores]),
        "rows.parquet": lambda p: write_parquet(p, result.rows, provenance),
        "rq2.json": lambda p: write_json(p, rq2),
        "rq2.png": lambda p: rq2_figure(density, variance, rq2, p, title=f"{dataset} seed={seed}")})


def evaluate_section(params: Params) -> dict[str, Any]:
    """The task's settings: the ``evaluate`` section with ``generate``'s query cap and inference settings."""
    g = params.generate
    return {**params.evaluate.model_dump(mode="json"), "max_queries": g.max_queries, "n_starts": g.n_starts,
            "jitter": g.jitter}


def evaluate_calls(params: Params, dataset: str, roots: dict[str, Path],
                   cache_root: Path) -> tuple[list[dict[str, Any]], list[str]]:
    """The ``evaluate`` task's calls and keys for every seed of ``dataset`` (roots: prepared, ensemble, flow)."""
    return seed_calls(params, dataset, roots, evaluate_section(params), cache_root, ["prepared", "ensemble", "flow"],
                      EVALUATE_CODE)


@flow(name="evaluate", validate_parameters=False)
def evaluate_flow(dataset: str, params: Params, prepared_root: Path, ensemble_root: Path, flow_root: Path,
                  out_root: Path, cache_root: Path) -> list[SeedResult]:
    roots = {"prepared": prepared_root, "ensemble": ensemble_root, "flow": flow_root}
    calls, keys = evaluate_calls(params, dataset, roots, cache_root)
    dataset_dir = Path(out_root) / dataset
    seed_dirs = [dataset_dir / SEEDS / f"seed={s}" for s in params.seeds]
    results = run_tasks(evaluate, calls, seed_dirs, Path(cache_root) / "results", keys=keys)
    per_seed = [read_seed(d) for d in seed_dirs]
    scores = [s for ev in per_seed for s in ev.scores]
    rows = pd.concat([ev.rows for ev in per_seed], ignore_index=True)
    write_dataset_outputs(dataset_dir, dataset, params.seeds, scores, rows, own=params.evaluate.own,
                          own_setting=params.evaluate.own_setting)
    rq2 = {s: json.loads((d / "rq2.json").read_text()) for s, d in zip(params.seeds, seed_dirs, strict=True)}
    write_json(dataset_dir / "rq2.json", rq2)
    return results


def run(flow_fn: Any, params: Params, **kwargs: Any) -> list[SeedResult]:
    from flows.densityflow import run as run_flow

    return run_flow(flow_fn, params, **kwargs)
