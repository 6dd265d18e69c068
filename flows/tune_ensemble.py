"""Prefect flow of the ``tune_ensemble`` stage: one cached task per (dataset, seed, model).

The models tuned are ``tune_ensemble.members`` (DensityFlow's ensemble) followed by every model
of ``discover.models`` that is not a member; the manifest lists all of them and records the
ensemble under its ``ensemble`` key.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prefect import flow, task
from prefect.cache_policies import INPUTS, TASK_SOURCE

from recourselab.config import Params
from recourselab.data import load_prepared
from recourselab.io import read_json, write_json
from recourselab.metrics.robustness import mean_std
from recourselab.models.ensemble import member_entry, model_filename, write_manifest
from recourselab.models.tuning import Split, tune_model
from recourselab.orchestration import SeedResult, run_tasks, stage_artifacts, task_runner
from recourselab.provenance import code_fingerprint, dir_fingerprint
from recourselab.runtime import device_slot, limit_threads, pick_device, threads_per_task

STEP = "tune_ensemble"


@task(name=STEP, task_run_name="tune_ensemble-{dataset}-seed={seed}-{model}",
      cache_policy=TASK_SOURCE + INPUTS - "prepared_dir")
def tune_ensemble(*, dataset: str, seed: int, model: str, spec: dict[str, Any], cv_folds: int,
                  upstream: str, code: str, staging_root: str, prepared_dir: str, n_threads: int,
                  device: str) -> dict[str, Any]:
    """Tune, refit and evaluate one model; stage its native file and ``<model>.json`` report."""
    prepared = load_prepared(prepared_dir)
    train, val, test = (Split(*prepared.arrays(s)) for s in ("train", "val", "test"))
    with limit_threads(n_threads), device_slot(device, Path(staging_root).parent / "gpu-slots") as slot:
        device = slot.torch_device  # one task per GPU; a process worker sees only its GPU
        result = tune_model(model, spec["grid"], spec["fixed"], train=train, val=val, test=test, seed=seed,
                            n_classes=prepared.schema.n_classes, folds=cv_folds,
                            max_tune_rows=spec["max_tune_rows"], max_fit_rows=spec["max_fit_rows"],
                            n_threads=n_threads, device=device)
    report = {"model": model, "best_params": result.best_params, "cv_accuracy": result.cv_score,
              "cv_results": result.cv_results, "metrics": result.metrics, "device": slot.name,
              "n_classes": prepared.schema.n_classes}
    writers = {model_filename(model): result.model.save,
               f"{model}.json": lambda p: write_json(p, report)}
    return stage_artifacts(Path(staging_root) / STEP / dataset / f"seed={seed}" / model, writers)


def tuned_models(params: Params) -> list[str]:
    """``tune_ensemble.members`` then the models of ``discover.models`` that are not members."""
    members = list(params.tune_ensemble.members)
    return members + [m for m in params.discover.models if m not in members]


def summarize(per_seed: dict[int, dict[str, dict[str, float]]]) -> dict[str, Any]:
    """Mean and sample standard deviation (ddof 1; None for one seed) over seeds of every member's metrics."""
    members = next(iter(per_seed.values()))
    out: dict[str, Any] = {}
    for name in members:
        out[name] = {}
        for metric in members[name]:
            values = [per_seed[s][name][metric] for s in per_seed]
            out[name][metric] = mean_std(values)
    return {"seeds": sorted(per_seed), "members": out}


def tune_ensemble_calls(params: Params, dataset: str, roots: dict[str, Path],
                        cache_root: Path) -> tuple[list[dict[str, Any]], list[str]]:
    """The task's calls and keys for every (seed, model of :func:`tuned_models`) of ``dataset`` (roots: prepared).

    Raises a clear error, before any task runs, when prepare's outputs are missing.
    """
    n_threads = threads_per_task(params.orchestration)
    code = code_fingerprint("flows.tune_ensemble", "recourselab.config", "recourselab.orchestration",
                            "recourselab.runtime", "recourselab.provenance", "recourselab.io",
                            "recourselab.models", "recourselab.data")
    calls, keys = [], []
    for slot, seed in enumerate(params.seeds):
        prepared_dir = Path(roots["prepared"]) / dataset / f"seed={seed}"
        load_prepared(prepared_dir)  # fail early, before any task runs, if prepare is missing
        upstream = dir_fingerprint(prepared_dir)
        for model in tuned_models(params):
            spec = getattr(params.models, model).model_dump(mode="json")
            calls.append(dict(dataset=dataset, seed=seed, model=model, spec=spec,
                              cv_folds=params.tune_ensemble.cv_folds, upstream=upstream, code=code,
                              staging_root=str(Path(cache_root) / "artifacts"),
                              prepared_dir=str(prepared_dir), n_threads=n_threads,
                              device=pick_device(slot) if model == "tabnet" else "cpu"))
            keys.append(f"{dataset}/seed={seed}/{model}")
    return calls, keys


@flow(name=STEP, validate_parameters=False)
def tune_ensemble_flow(dataset: str, params: Params, prepared_root: Path, out_root: Path,
                       metrics_root: Path, cache_root: Path) -> list[SeedResult]:
    """Tune every model of :func:`tuned_models` for every seed; write models, manifests and metrics.

    Writes ``out_root/<dataset>/seed=<s>/{<model>.<ext>, <model>.json, manifest.json,
    metrics.json}`` and the over-seeds summary ``metrics_root/<dataset>/tune_ensemble.json``.
    """
    calls, keys = tune_ensemble_calls(params, dataset, {"prepared": Path(prepared_root)}, cache_root)
    out_dirs = [Path(out_root) / dataset / f"seed={call['seed']}" for call in calls]
    results = run_tasks(tune_ensemble, calls, out_dirs, Path(cache_root) / "results", keys=keys)

    per_seed: dict[int, dict[str, dict[str, float]]] = {}
    for seed in params.seeds:
        seed_dir = Path(out_root) / dataset / f"seed={seed}"
        members, metrics = {}, {}
        for r, call in zip(results, calls, strict=True):
            if call["seed"] != seed:
                continue
            model = call["model"]
            report = read_json(seed_dir / f"{model}.json")
            members[model] = member_entry(model, report["best_params"], report["n_classes"],
                                          r.files[model_filename(model)])
            metrics[model] = report["metrics"]
        write_manifest(seed_dir, members, dataset=dataset, seed=seed, ensemble=list(params.tune_ensemble.members))
        write_json(seed_dir / "metrics.json", metrics)
        per_seed[seed] = metrics
    write_json(Path(metrics_root) / dataset / f"{STEP}.json", summarize(per_seed))
    return results


def run_tune_ensemble(dataset: str, params: Params, prepared_root: Path, out_root: Path,
                      metrics_root: Path, cache_root: Path) -> list[SeedResult]:
    """Run :func:`tune_ensemble_flow` with ``orchestration.max_workers`` concurrent tasks."""
    return tune_ensemble_flow.with_options(task_runner=task_runner(params.orchestration))(
        dataset=dataset, params=params, prepared_root=Path(prepared_root), out_root=Path(out_root),
        metrics_root=Path(metrics_root), cache_root=Path(cache_root))
