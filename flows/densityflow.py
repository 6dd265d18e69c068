"""Prefect flows of the DensityFlow stages ``train_flow``, ``distill`` and ``generate``.

Each stage runs one cached task per (dataset, seed) on the best available device (CUDA
round-robin when present, else CPU) and publishes into its own output folder:
``data/densityflow`` (train_flow), ``data/distill`` (distill), ``data/recourse`` (generate,
with the headline metrics in ``data/metrics/<dataset>/densityflow.json``).
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import json
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from prefect import flow, task
from prefect.cache_policies import INPUTS, TASK_SOURCE

from recourselab.config import Params, section_hash
from recourselab.data import load_prepared
from recourselab.densityflow import DensityFlow
from recourselab.densityflow.config import settings_of
from recourselab.errors import DataError, MissingArtifactError
from recourselab.io import RECOURSE_SCHEMA, read_json, write_json, write_parquet
from recourselab.metrics import query_set, summarize_seeds, validity_by_direction, validity_metrics
from recourselab.metrics.plausibility import density_variance_spearman, ensemble_uncertainty, inlier_rates
from recourselab.models import load_ensemble
from recourselab.models.ensemble import MANIFEST, checked_members, read_manifest
from recourselab.orchestration import SeedResult, run_tasks, stage_artifacts, task_runner
from recourselab.provenance import code_fingerprint, code_provenance, dir_fingerprint
from recourselab.report.densityflow_plots import densityflow_figures
from recourselab.runtime import device_slot, limit_threads, pick_device, threads_per_task

#: Modules whose code shapes the outputs (task cache keys): this flow module's helpers, config and the library.
CODE = ("flows.densityflow", "recourselab.config", "recourselab.orchestration", "recourselab.runtime",
        "recourselab.provenance", "recourselab.io", "recourselab.rng",
        "recourselab.densityflow", "recourselab.data", "recourselab.models", "recourselab.metrics.robustness")
#: ``generate`` also reports plausibility (its cache key covers that module too).
GENERATE_CODE = (*CODE, "recourselab.metrics.plausibility", "recourselab.report.densityflow_plots",
                 "recourselab.report.common")
#: Test rows of the RQ2 check (Spearman of -S and the ensemble variance).
RQ2_ROWS = 2000
#: Queries whose ODE paths are drawn in ``trajectories.png`` (2-D datasets).
TRAJECTORY_ROWS = 60
#: Reports in upstream folders that are not inputs of the next step (timings): left out of its key.
REPORTS = ("train_flow.json",)


def flip_labels(y: np.ndarray, n_classes: int) -> np.ndarray:
    """The next class of each label (the other class of binary labels), the counterfactual target. Shape (n,)."""
    return (y + 1) % n_classes


def seed_ensemble(ensemble_dir: str, schema: Any, members: list[str], **kw: Any) -> Any:
    """The BlackBox over ``tune_ensemble.members`` (the manifest may also list DISCOVER-only models)."""
    return load_ensemble(ensemble_dir, members, schema=schema, **kw)


@task(name="train_flow", task_run_name="train_flow-{dataset}-seed={seed}",
      cache_policy=TASK_SOURCE + INPUTS - "prepared_dir" - "ensemble_dir")
def train_flow(*, dataset: str, seed: int, section: dict[str, Any], upstream: str, code: str, staging_root: str,
               prepared_dir: str, ensemble_dir: str, device: str, n_threads: int, members: list[str]) -> dict[str, Any]:
    """Train DensityFlow (grid over ``lambda_grid`` selected by ensemble validity on val).

    Every fit checkpoints itself once a minute, so a crashed or pre-empted run resumes.
    """
    prepared = load_prepared(prepared_dir)
    X, y = prepared.arrays("train")
    grid = section["lambda_grid"]
    combos = [dict(zip(grid, v, strict=True)) for v in itertools.product(*grid.values())] if grid else [{}]
    selection: list[dict[str, Any]] = []
    best, best_score = None, -1.0
    # Resumable training states live beside the staged artifacts (outside DVC's outs, which
    # DVC deletes before a stage runs); an interrupted run picks them up on the next call.
    checkpoints = Path(staging_root).parent / "checkpoints" / "train_flow" / dataset / f"seed={seed}"
    start = time.perf_counter()
    with limit_threads(n_threads), device_slot(device, Path(staging_root).parent / "gpu-slots") as slot:
        device = slot.torch_device  # one task per GPU; a process worker sees only its GPU
        box = seed_ensemble(ensemble_dir, prepared.schema, members, seed=seed) if len(combos) > 1 else None
        Xv, yv = prepared.arrays("val")
        # One val query set scores every combination (queried once, not once per combination).
        q = query_set(box.query(Xv, budget="selection"), yv, 400, seed=seed) if box is not None else None
        for combo in combos:
            settings = settings_of("train_flow", section) | {"seed": seed, **combo}
            model = DensityFlow(schema=prepared.schema, device=device, **settings)
            fit_start = time.perf_counter()
            model.fit(X, y, checkpoint_dir=checkpoints)
            model_fit_time = time.perf_counter() - fit_start
            score = None
            if box is not None:
                res = model.generate(Xv[q], target=flip_labels(yv[q], prepared.schema.n_classes))
                score = validity_metrics(box.query(res.counterfactuals, budget="selection"), res.target)[
                    "mean_per_model"]
                selection.append({**combo, "val_validity": score})
            if best is None or (score is not None and score > best_score):
                best, best_score = model, score if score is not None else -1.0
                fit_time = model_fit_time
    timing = {"fit_time_s": fit_time, "train_flow_time_s": time.perf_counter() - start, "combinations": len(combos),
              "selection_queries": box.used("selection") if box is not None else 0}
    provenance = {"dataset": dataset, "seed": seed, "method": "densityflow", "step": "train_flow",
                  "device": slot.name, "params_hash": section_hash(section), **code_provenance(code),
                  "upstream": upstream}
    writers = {"train_log.parquet": lambda p: write_parquet(p, best.log_.frame(), provenance)}
    return stage_artifacts(Path(staging_root) / "train_flow" / dataset / f"seed={seed}",
                           {**writers, **_model_writers(best), "selection.json": lambda p: write_json(p, selection),
                            "train_flow.json": lambda p: write_json(p, timing)})


def _model_writers(model: DensityFlow) -> dict[str, Any]:
    return {name: functools.partial(model.write_file, name) for name in DensityFlow.FILES}


@task(name="distill", task_run_name="distill-{dataset}-seed={seed}",
      cache_policy=TASK_SOURCE + INPUTS - "flow_dir" - "prepared_dir" - "ensemble_dir")
def distill(*, dataset: str, seed: int, section: dict[str, Any], upstream: str, code: str, staging_root: str,
            flow_dir: str, prepared_dir: str, ensemble_dir: str, device: str, n_threads: int,
            members: list[str]) -> dict[str, Any]:
    """Distill the trained surrogate towards the ensemble under the query budget."""
    prepared = load_prepared(prepared_dir)
    X, y = prepared.arrays("train")
    with limit_threads(n_threads), device_slot(device, Path(staging_root).parent / "gpu-slots") as slot:
        device = slot.torch_device  # one task per GPU; a process worker sees only its GPU
        model = DensityFlow.load(flow_dir, schema=prepared.schema, device=device)
        model.with_settings(**settings_of("distill", section))
        box = seed_ensemble(ensemble_dir, prepared.schema, members, budgets={"distill": section["budget"]}, seed=seed)
        start = time.perf_counter()
        used = model.distill(box, X, y, budget=section["budget"])
        seconds = time.perf_counter() - start
    trained = Path(flow_dir) / "train_flow.json"
    report = {"queries_used": used, "budget": section["budget"], "oracle_count": box.used("distill"),
              "distill_time_s": seconds,
              "fit_time_s": read_json(trained, keys=["fit_time_s"])["fit_time_s"] if trained.is_file() else None}
    return stage_artifacts(Path(staging_root) / "distill" / dataset / f"seed={seed}",
                           {**_model_writers(model), "distill.json": lambda p: write_json(p, report)})


@task(name="generate", task_run_name="generate-{dataset}-seed={seed}",
      cache_policy=TASK_SOURCE + INPUTS - "flow_dir" - "prepared_dir" - "ensemble_dir")
def generate(*, dataset: str, seed: int, section: dict[str, Any], upstream: str, code: str, staging_root: str,
             flow_dir: str, prepared_dir: str, ensemble_dir: str, device: str, n_threads: int,
             members: list[str]) -> dict[str, Any]:
    """Counterfactuals for the evaluation query set and their robustness metrics."""
    prepared = load_prepared(prepared_dir)
    schema = prepared.schema
    Xte, yte = prepared.arrays("test")
    row_id = prepared.tables["test"]["row_id"].to_numpy()
    # paths are drawn for data of two numerical features (not a categorical's (cos, sin) plane)
    plane = tuple(schema.feature_names) if [f.kind for f in schema.features] == ["numerical"] * 2 else None
    with limit_threads(n_threads), device_slot(device, Path(staging_root).parent / "gpu-slots") as slot:
        device = slot.torch_device  # one task per GPU; a process worker sees only its GPU
        model = DensityFlow.load(flow_dir, schema=schema, device=device)
        model.with_settings(**settings_of("generate", section))
        box = seed_ensemble(ensemble_dir, schema, members, seed=seed)
        test_out = box.query(Xte, budget="evaluation")
        q = query_set(test_out, yte, section["max_queries"], seed=seed)
        start = time.perf_counter()
        res = model.generate(Xte[q], target=flip_labels(yte[q], schema.n_classes))
        generate_time = time.perf_counter() - start
        out = box.query(res.counterfactuals, budget="evaluation")
        X, y = prepared.arrays("train")
        plausible = {**inlier_rates(res.counterfactuals, res.target, X, y, reference=(Xte, yte), seed=seed),
                     **ensemble_uncertainty(out, res.target), "rq2": rq2_stats(model, test_out, Xte, yte, seed)}
        paths = path_ends = None
        if plane is not None:  # a separate solve for the figure: the counterfactuals above stay as they are
            sub = q[:TRAJECTORY_ROWS]
            shown = model.generate(Xte[sub], target=flip_labels(yte[sub], schema.n_classes), return_trajectories=True)
            paths, path_ends = shown.trajectories, shown.counterfactuals
    distilled = read_json(Path(flow_dir) / "distill.json") if (Path(flow_dir) / "distill.json").is_file() else {}
    metrics = {**counterfactual_metrics(res, out, int(distilled.get("queries_used", 0))), "n_queries": int(len(q)),
               "evaluation_queries": int(box.used("evaluation")), **plausible,
               "fit_time_s": distilled.get("fit_time_s"), "distill_time_s": distilled.get("distill_time_s"),
               "generate_time_s": generate_time,
               "validity_by_direction": validity_by_direction(out, res.target, yte[q], schema.favourable_index)}
    table = pd.DataFrame({"row_id": row_id[q], "target": res.target})
    table[[f"cf__{c}" for c in schema.encoded_columns]] = res.counterfactuals
    table = pd.concat([table, res.counterfactuals_original.add_prefix("cf_original__")], axis=1)
    table["cost_l1"], table["cost_l2"], table["density"] = res.cost_l1, res.cost_l2, res.density
    table["surrogate_valid"] = res.surrogate_valid
    for name, labels in zip(out.member_names, out.member_labels, strict=True):
        table[f"label__{name}"] = labels
    provenance = {"dataset": dataset, "seed": seed, "method": "densityflow", "params_hash": section_hash(section),
                  "device": slot.name, **code_provenance(code), "upstream": upstream}
    shown_rows = q[:TRAJECTORY_ROWS]
    figures = densityflow_figures(metrics, X=X, y=y, trajectories=paths,
                                  factuals=None if paths is None else Xte[shown_rows], counterfactuals=path_ends,
                                  target=None if paths is None else flip_labels(yte[shown_rows], schema.n_classes),
                                  feature_names=plane or ("x0", "x1"), class_names=list(schema.classes),
                                  title=f"{dataset} seed={seed}")
    return stage_artifacts(Path(staging_root) / "generate" / dataset / f"seed={seed}", {
        "counterfactuals.parquet": lambda p: write_parquet(p, table, provenance, schema=RECOURSE_SCHEMA),
        "metrics.json": lambda p: write_json(p, metrics), **figures})


def counterfactual_metrics(res: Any, out: Any, queries_used: int) -> dict[str, Any]:
    """Validity (per model, mean per model, unanimous, majority), mean L1 / L2 cost, mean density
    score and surrogate validity of one ``generate`` result ``res`` whose counterfactuals the
    ensemble labelled ``out``; shared by ``generate`` and ``ablate``."""
    return {**validity_metrics(out, res.target), "cost_l1": float(res.cost_l1.mean()),
            "cost_l2": float(res.cost_l2.mean()), "density": float(res.density.mean()),
            "surrogate_validity": float(res.surrogate_valid.mean()), "queries_used": int(queries_used)}


def rq2_points(model: DensityFlow, out: Any, X: np.ndarray, y: np.ndarray, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Density score S(x | y) and ensemble variance Var_m p_m(y | x) on up to :data:`RQ2_ROWS` test rows.

    ``out`` is the ensemble's output on all rows of ``X`` (already queried for the query set).
    Returns two (m,) arrays over the same rows (drawn with ``seed``).
    """
    import torch

    rows = np.sort(np.random.default_rng(seed).permutation(len(y))[:RQ2_ROWS])
    with torch.no_grad():
        density = model.surrogate.score(torch.as_tensor(X[rows], dtype=torch.float32, device=model.device),
                                        torch.as_tensor(y[rows], device=model.device)).cpu().numpy()
    return density, out.member_proba[:, rows, y[rows]].var(axis=0)


def rq2_stats(model: DensityFlow, out: Any, X: np.ndarray, y: np.ndarray, seed: int) -> dict[str, Any]:
    """Spearman(-S(x | y), Var_m p_m(y | x)) on the :func:`rq2_points` rows, bootstrap 95% CI."""
    return density_variance_spearman(*rq2_points(model, out, X, y, seed), seed=seed)


#: The stage that writes each upstream folder (named in the error when one is missing).
PRODUCERS = {"prepared": "prepare", "ensemble": "tune_ensemble", "flow": "train_flow / distill", "recourse": "generate"}


def _require_upstream(dirs: dict[str, str], names: list[str]) -> None:
    """A clear error when an upstream stage's outputs for this (dataset, seed) are missing."""
    for k in names:
        path = Path(dirs[k])
        present = (path / MANIFEST).is_file() if k == "ensemble" else path.is_dir() and any(path.iterdir())
        if not present:
            raise MissingArtifactError(f"no {k} outputs in {path}; run the {PRODUCERS.get(k, k)} stage first "
                                       "(`make repro` runs every stage in order)")


def _members_fingerprint(ensemble_dir: str, members: list[str]) -> str:
    """sha256 of the manifest entries of ``members`` (models tuned only for DISCOVER do not count).

    Each member's file is checked against its entry's sha256 here, before any task runs: a task
    whose key this is may be a cache hit that never loads the file.
    """
    manifest = read_manifest(ensemble_dir)
    missing = [m for m in members if m not in manifest["members"]]
    if missing:
        raise DataError(f"{Path(ensemble_dir) / MANIFEST} has no members {missing}; rerun tune_ensemble "
                        "(tune_ensemble.members)")
    entries = checked_members(ensemble_dir, members, manifest)
    return hashlib.sha256(json.dumps(entries, sort_keys=True).encode()).hexdigest()


def seed_calls(params: Params, dataset: str, roots: dict[str, Path], section: dict[str, Any], cache_root: Path,
           upstream_dirs: list[str], code_modules: tuple[str, ...] = CODE) -> tuple[list[dict[str, Any]], list[str]]:
    code = code_fingerprint(*code_modules)
    n_threads = threads_per_task(params.orchestration)
    members = list(params.tune_ensemble.members)
    calls, keys = [], []
    for slot, seed in enumerate(params.seeds):
        dirs = {k: str(Path(v) / dataset / f"seed={seed}") for k, v in roots.items()}
        _require_upstream(dirs, upstream_dirs)
        upstream = "+".join(_members_fingerprint(dirs[k], members) if k == "ensemble"
                            else dir_fingerprint(dirs[k], exclude=REPORTS) for k in upstream_dirs)
        calls.append(dict(dataset=dataset, seed=seed, section=section, upstream=upstream, code=code,
                          staging_root=str(Path(cache_root) / "artifacts"), device=pick_device(slot),
                          n_threads=n_threads, members=members, **{f"{k}_dir": dirs[k] for k in roots}))
        keys.append(f"{dataset}/seed={seed}")
    return calls, keys


def seed_dirs(params: Params, dataset: str, out_root: Path) -> list[Path]:
    """The out dir of each seed's task: ``<out_root>/<dataset>/seed=<s>``."""
    return [Path(out_root) / dataset / f"seed={s}" for s in params.seeds]


def train_flow_calls(params: Params, dataset: str, roots: dict[str, Path],
                     cache_root: Path) -> tuple[list[dict[str, Any]], list[str]]:
    """The ``train_flow`` task's calls and keys for every seed of ``dataset`` (roots: prepared, ensemble)."""
    section = params.train_flow.for_dataset(dataset).model_dump(mode="json")
    # the ensemble is used (and keyed) only to select among lambda_grid combinations
    upstream = ["prepared", "ensemble"] if section["lambda_grid"] else ["prepared"]
    return seed_calls(params, dataset, roots, section, cache_root, upstream)


def distill_calls(params: Params, dataset: str, roots: dict[str, Path],
                  cache_root: Path) -> tuple[list[dict[str, Any]], list[str]]:
    """The ``distill`` task's calls and keys for every seed of ``dataset`` (roots: prepared, ensemble, flow)."""
    return seed_calls(params, dataset, roots, params.distill.model_dump(mode="json"), cache_root,
                      ["prepared", "ensemble", "flow"])


def generate_calls(params: Params, dataset: str, roots: dict[str, Path],
                   cache_root: Path) -> tuple[list[dict[str, Any]], list[str]]:
    """The ``generate`` task's calls and keys for every seed of ``dataset`` (roots: prepared, ensemble, flow)."""
    return seed_calls(params, dataset, roots, params.generate.model_dump(mode="json"), cache_root,
                      ["prepared", "ensemble", "flow"], GENERATE_CODE)


@flow(name="train_flow", validate_parameters=False)
def training_flow(dataset: str, params: Params, prepared_root: Path, ensemble_root: Path, out_root: Path,
                    cache_root: Path) -> list[SeedResult]:
    calls, keys = train_flow_calls(params, dataset, {"prepared": prepared_root, "ensemble": ensemble_root},
                                   cache_root)
    return run_tasks(train_flow, calls, seed_dirs(params, dataset, out_root), Path(cache_root) / "results", keys)


@flow(name="distill", validate_parameters=False)
def distill_flow(dataset: str, params: Params, prepared_root: Path, ensemble_root: Path, flow_root: Path,
                 out_root: Path, cache_root: Path) -> list[SeedResult]:
    roots = {"prepared": prepared_root, "ensemble": ensemble_root, "flow": flow_root}
    calls, keys = distill_calls(params, dataset, roots, cache_root)
    return run_tasks(distill, calls, seed_dirs(params, dataset, out_root), Path(cache_root) / "results", keys)


@flow(name="generate", validate_parameters=False)
def generate_flow(dataset: str, params: Params, prepared_root: Path, ensemble_root: Path, flow_root: Path,
                  out_root: Path, metrics_root: Path, cache_root: Path) -> list[SeedResult]:
    roots = {"prepared": prepared_root, "ensemble": ensemble_root, "flow": flow_root}
    calls, keys = generate_calls(params, dataset, roots, cache_root)
    results = run_tasks(generate, calls, seed_dirs(params, dataset, out_root), Path(cache_root) / "results", keys)
    per_seed = {s: read_json(Path(out_root) / dataset / f"seed={s}" / "metrics.json") for s in params.seeds}
    write_json(Path(metrics_root) / dataset / "densityflow.json", summarize_seeds(per_seed))
    return results


def run(flow_fn: Any, params: Params, **kwargs: Any) -> list[SeedResult]:
    """Run one of the flows above with the task runner of ``params.orchestration``."""
    return flow_fn.with_options(task_runner=task_runner(params.orchestration))(params=params, **kwargs)
