"""Prefect flow of the ``ablate`` stage: what the density term and the distillation buy.

One cached task per dataset of ``ablate.datasets`` and each of the first ``ablate.n_seeds``
seeds: the ``train_flow`` model evaluated without
its distillation, the same flow retrained with lambda_den 0 (before and after the same
distillation), each scored like ``generate`` scores the full method (same query set, same
ensemble). Outputs: ``data/ablate/<dataset>/seed=<s>/{ablate.json,ablate.png}`` and the
summary ``data/metrics/<dataset>/ablate.json`` (per seed and mean +- std). A pipeline dataset
outside ``ablate.datasets`` gets only a note (:func:`write_not_ablated`).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from prefect import flow, task
from prefect.cache_policies import INPUTS, TASK_SOURCE

from flows.densityflow import GENERATE_CODE, counterfactual_metrics, run, seed_calls, seed_dirs, seed_ensemble
from recourselab.config import ABLATION_VARIANTS, Params
from recourselab.data import load_prepared
from recourselab.densityflow import DensityFlow
from recourselab.densityflow.config import settings_of
from recourselab.errors import DataError
from recourselab.io import read_json, read_recourse, write_json
from recourselab.metrics import summarize_seeds
from recourselab.orchestration import SeedResult, run_tasks, stage_artifacts
from recourselab.report.ablation_plots import plot_ablation
from recourselab.report.common import guarded
from recourselab.runtime import device_slot, limit_threads

ABLATE_CODE = (*GENERATE_CODE, "flows.ablate", "recourselab.report.ablation_plots")
__all__ = ["ablate", "ablate_flow", "run"]


#: The metrics of ``generate`` that every variant also reports.
HEADLINE = ("per_model", "mean_per_model", "unanimous", "majority", "cost_l1", "cost_l2", "density",
            "surrogate_validity", "queries_used")


@task(name="ablate", task_run_name="ablate-{dataset}-seed={seed}",
      cache_policy=TASK_SOURCE + INPUTS - "prepared_dir" - "ensemble_dir" - "flow_dir" - "recourse_dir")
def ablate(*, dataset: str, seed: int, section: dict[str, Any], upstream: str, code: str, staging_root: str,
           prepared_dir: str, ensemble_dir: str, flow_dir: str, recourse_dir: str, device: str, n_threads: int,
           members: list[str]) -> dict[str, Any]:
    """Ablated variants of one seed's DensityFlow next to the full method's ``generate`` metrics."""
    prepared = load_prepared(prepared_dir)
    schema = prepared.schema
    X, y = prepared.arrays("train")
    Xte, yte = prepared.arrays("test")
    gen, dist, variants = section["generate"], section["distill"], section["ablate"]["variants"]
    checkpoints = Path(staging_root).parent / "checkpoints" / "ablate" / dataset / f"seed={seed}"
    full_metrics = read_json(Path(recourse_dir) / "metrics.json", keys=HEADLINE)
    rows: dict[str, dict[str, Any]] = {"full": {k: full_metrics[k] for k in HEADLINE}}
    with limit_threads(n_threads), device_slot(device, Path(staging_root).parent / "gpu-slots") as slot:
        device = slot.torch_device  # one task per GPU; a process worker sees only its GPU
        box = seed_ensemble(ensemble_dir, schema, members, budgets={"distill": dist["budget"]}, seed=seed)
        # generate's query rows and targets, read back instead of re-querying the whole test split
        full = read_recourse(Path(recourse_dir) / "counterfactuals.parquet", columns=["row_id", "target"])
        position = pd.Series(np.arange(len(yte)), index=prepared.tables["test"]["row_id"].to_numpy())
        stale = ~full["row_id"].isin(position.index)
        if stale.any():
            raise DataError(f"{Path(recourse_dir) / 'counterfactuals.parquet'} holds {int(stale.sum())} rows that are "
                            f"not in the prepared test split {prepared_dir} (generate ran on another split); "
                            "re-run generate")
        q, target = position.loc[full["row_id"]].to_numpy(), full["target"].to_numpy()

        def evaluate(model: DensityFlow, queries_used: int) -> dict[str, Any]:
            model.with_settings(**settings_of("generate", gen))
            res = model.generate(Xte[q], target=target)
            return counterfactual_metrics(res, box.query(res.counterfactuals, budget="evaluation"), queries_used)

        trained = DensityFlow.load(flow_dir, schema=schema, device=device)
        if "no_distill" in variants:
            rows["no_distill"] = evaluate(trained, 0)
        if {"no_density", "no_density_no_distill"} & set(variants):
            # the same flow (settings, selected lambdas, seed) without the density term
            settings = {**dataclasses.asdict(trained.config), "lambda_den": 0.0}
            plain = DensityFlow(schema=schema, device=device, **settings).fit(X, y, checkpoint_dir=checkpoints)
            if "no_density_no_distill" in variants:
                rows["no_density_no_distill"] = evaluate(plain, 0)
            if "no_density" in variants:
                plain.with_settings(**settings_of("distill", dist))
                rows["no_density"] = evaluate(plain, plain.distill(box, X, y, budget=dist["budget"]))
    rows = {name: rows[name] for name in ("full", *ABLATION_VARIANTS) if name in rows}
    title = f"{dataset} seed={seed}: ablation"
    return stage_artifacts(Path(staging_root) / "ablate" / dataset / f"seed={seed}", {
        "ablate.json": lambda p: write_json(p, rows),
        "ablate.png": guarded("ablate.png", lambda p: plot_ablation(p, rows, title=title))})


def ablate_calls(params: Params, dataset: str, roots: dict[str, Path],
                 cache_root: Path) -> tuple[list[dict[str, Any]], list[str]]:
    """The ``ablate`` task's calls and keys for the first ``ablate.n_seeds`` seeds of ``dataset`` (none for a
    dataset outside ``ablate.datasets``); roots: prepared, ensemble, flow, recourse."""
    if dataset not in params.ablate.datasets:
        return [], []
    # only what the task uses: which datasets and how many seeds are ablated do not change a seed's result
    section = {"ablate": {"variants": list(params.ablate.variants)}, "distill": params.distill.model_dump(mode="json"),
               "generate": params.generate.model_dump(mode="json")}
    return seed_calls(ablated_seeds(params), dataset, roots, section, cache_root,
                      ["prepared", "ensemble", "flow", "recourse"], ABLATE_CODE)


def ablated_seeds(params: Params) -> Params:
    """``params`` with only the first ``ablate.n_seeds`` seeds."""
    return params.model_copy(update={"seeds": list(params.seeds[:params.ablate.n_seeds])})


@flow(name="ablate", validate_parameters=False)
def ablate_flow(dataset: str, params: Params, prepared_root: Path, ensemble_root: Path, flow_root: Path,
                recourse_root: Path, out_root: Path, metrics_root: Path, cache_root: Path) -> list[SeedResult]:
    """Run the ablation of ``dataset`` for the first ``ablate.n_seeds`` seeds."""
    sub = ablated_seeds(params)
    roots = {"prepared": prepared_root, "ensemble": ensemble_root, "flow": flow_root, "recourse": recourse_root}
    calls, keys = ablate_calls(params, dataset, roots, cache_root)
    results = run_tasks(ablate, calls, seed_dirs(sub, dataset, out_root), Path(cache_root) / "results", keys)
    per_seed = {s: read_json(Path(out_root) / dataset / f"seed={s}" / "ablate.json") for s in sub.seeds}
    write_json(Path(metrics_root) / dataset / "ablate.json", summarize_seeds(per_seed))
    return results


def write_not_ablated(dataset: str, params: Params, out_root: Path, metrics_root: Path) -> Path:
    """The outputs of a dataset outside ``ablate.datasets``: a note saying so, no computation."""
    note = {"dataset": dataset, "ablated": False,
            "reason": f"not in ablate.datasets {list(params.ablate.datasets)}"}
    write_json(Path(out_root) / dataset / "not_ablated.json", note)
    return write_json(Path(metrics_root) / dataset / "ablate.json", note)
