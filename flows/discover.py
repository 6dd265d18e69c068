"""Prefect flow of the ``discover`` stage: one cached task per (dataset, model, seed).

Each task loads the prepared split and the tuned model (``data/ensemble/<dataset>/seed=<s>/``,
through a query-counting BlackBox over that model alone), samples the factual group, runs
DISCOVER and stages ``counterfactuals.parquet``, ``log.parquet``, ``metrics.json`` and the
figures; the flow publishes them to ``<out_root>/<dataset>/<model>/seed=<s>/`` and aggregates
``<metrics_root>/<dataset>/discover.json`` (per model: per seed and mean/std over seeds, plus
the mean over models of the headline metrics).
"""

from __future__ import annotations

import json
import logging
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd
from prefect import flow, task
from prefect.cache_policies import INPUTS, TASK_SOURCE

from recourselab.config import DiscoverTargetParams, Params, section_hash
from recourselab.data import ROW_ID, load_prepared
from recourselab.discover import Discover, DiscoverSettings, make_target, sample_factuals
from recourselab.errors import ArtifactError, ConfigError
from recourselab.io import RECOURSE_SCHEMA, read_json, read_provenance, write_json, write_parquet
from recourselab.metrics import summarize_seeds
from recourselab.models import load_ensemble
from recourselab.models.ensemble import MANIFEST, checked_members, read_manifest
from recourselab.orchestration import SeedResult, run_tasks, stage_artifacts, task_runner
from recourselab.provenance import code_fingerprint, code_provenance, dir_fingerprint
from recourselab.report.discover_plots import discover_figures
from recourselab.runtime import limit_threads, threads_per_task

STEP = "discover"
#: Modules whose code shapes the outputs (task cache keys): this flow module's helpers, config and the library.
CODE = ("flows.discover", "recourselab.config", "recourselab.orchestration", "recourselab.runtime",
        "recourselab.provenance", "recourselab.io", "recourselab.rng",
        "recourselab.discover", "recourselab.data", "recourselab.models", "recourselab.report.discover_plots",
        "recourselab.report.common")
#: Metrics averaged over the models in ``discover.json`` (the paper reports means over models).
HEADLINE = ("OT_x", "OT_x_minmax", "OT_y", "MMD2", "ares_cost", "feasible_rate", "edited_rows", "queries",
            "wall_time_s")

log = logging.getLogger(__name__)


def counterfactual_table(result: Any, schema: Any, row_id: Any) -> pd.DataFrame:
    """One row per factual: row id, scores, target draw, edit flag, encoded and original-unit columns."""
    table = pd.DataFrame({"row_id": row_id, "factual_score": result.factual_scores, "score": result.scores,
                          "target": result.target_values})
    table["edited"] = ~(result.counterfactuals == result.factuals).all(axis=1)
    table[[f"cf__{c}" for c in schema.encoded_columns]] = result.counterfactuals
    factual_original = schema.inverse_transform(result.factuals)
    return pd.concat([table, result.counterfactuals_frame.add_prefix("cf_original__"),
                      factual_original.add_prefix("factual_original__")], axis=1)


@task(name=STEP, task_run_name="discover-{dataset}-{model}-seed={seed}",
      cache_policy=TASK_SOURCE + INPUTS - "prepared_dir" - "ensemble_dir")
def discover(*, dataset: str, model: str, seed: int, section: dict[str, Any], upstream: str, code: str,
             staging_root: str, prepared_dir: str, ensemble_dir: str, n_threads: int) -> dict[str, Any]:
    """Run DISCOVER on one model and seed; stage its tables, metrics and figures."""
    prepared = load_prepared(prepared_dir)
    schema = prepared.schema
    X, _ = prepared.arrays(section["split"])
    row_ids = prepared.tables[section["split"]][ROW_ID].to_numpy()
    target_params = DiscoverTargetParams(**section["target"])
    target = make_target(target_params.kind, seed=seed, **target_params.target_params())
    settings = DiscoverSettings.from_kwargs(**section["solver"], seed=seed)
    with limit_threads(n_threads):
        box = load_ensemble(ensemble_dir, [model], schema=schema, seed=seed)
        scores = box.predict_proba(X, budget="selection")[:, schema.favourable_index]
        idx = sample_factuals(scores, section["n_factuals"], seed=seed, pool=section["factuals"])
        result = Discover.from_settings(box, schema=schema, settings=settings).solve(X[idx], target)
    if not result.feasible:
        log.warning("%s/%s/seed=%d: no certified feasible iterate (feasible=False in the outputs)", dataset, model,
                    seed)
    pool = int((scores < 0.5).sum()) if section["factuals"] == "unfavourable" else len(scores)
    metrics = {**{k: v for k, v in result.metrics.items() if k != "units"}, "feasible": result.feasible,
               "feasible_rate": float(result.feasible), "queries": int(box.used(settings.budget)),
               "selection_queries": int(box.used("selection")), "wall_time_s": result.wall_time,
               "n_factuals": len(idx), "n_pool": pool,
               "n_favourable_factuals": int((result.factual_scores >= 0.5).sum()),
               "mean_factual_score": float(result.factual_scores.mean()),
               "units": result.metrics.get("units", "")}
    provenance = {"dataset": dataset, "seed": seed, "model": model, "method": result.method, "split": section["split"],
                  "target": result.target, "feasible": result.feasible, "params_hash": section_hash(section),
                  **code_provenance(code), "upstream": upstream, "n_threads": n_threads}
    table = counterfactual_table(result, schema, row_ids[idx])
    frame = result.log.copy()
    frame["row_scores"] = list(result.row_scores)
    title = f"{dataset} / {model} / seed={seed}"
    writers = {"counterfactuals.parquet": lambda p: write_parquet(p, table, provenance, schema=RECOURSE_SCHEMA),
               "log.parquet": lambda p: write_parquet(p, frame, provenance),
               "metrics.json": lambda p: write_json(p, metrics),
               **discover_figures(result, schema, title=title)}
    return stage_artifacts(Path(staging_root) / STEP / dataset / model / f"seed={seed}", writers)


def _member_fingerprint(ensemble_dir: Path, model: str) -> str:
    """The manifest entry (kind, file sha256, hyperparameters) of ``model``: its task's upstream key.

    The model's file is checked against that sha256 here: the task may be a cache hit that never loads it.
    """
    path = ensemble_dir / MANIFEST
    manifest = read_manifest(ensemble_dir)
    if model not in manifest["members"]:
        raise ConfigError(f"{path} has no model {model!r} (it holds {list(manifest['members'])}); rerun "
                          "tune_ensemble, which tunes every model of discover.models")
    return json.dumps(checked_members(ensemble_dir, [model], manifest)[model], sort_keys=True)


def resolve_models(params: Params, models: Sequence[str] | None) -> list[str]:
    """``models`` (a subset of ``discover.models``, in that order) or all of them."""
    valid = list(params.discover.models)
    if not models:
        return valid
    unknown = [m for m in models if m not in valid]
    if unknown:
        raise ConfigError(f"models {unknown} are not in discover.models; valid: {', '.join(valid)}")
    return [m for m in valid if m in models]


def summarize_models(per_model: dict[str, dict[int, dict[str, Any]]]) -> dict[str, Any]:
    """``discover.json``: per model :func:`summarize_seeds`, and the mean over models of :data:`HEADLINE`."""
    models = {m: summarize_seeds(per_seed) for m, per_seed in per_model.items()}
    mean = {}
    for key in HEADLINE:
        values = [s["summary"][key]["mean"] for s in models.values() if key in s["summary"]]
        if values:
            mean[key] = statistics.fmean(values)
    return {"models": models, "mean_over_models": mean,
            "units": "OT_x, OT_y, UCL_*, U_*: squared Wasserstein-2 in the encoded space; OT_x_minmax: the same "
                     "with min-max scaled numericals and one-hot categoricals; wall_time_s: seconds"}


def discover_section(params: Params, dataset: str) -> dict[str, Any]:
    """The task's settings for ``dataset``: ``discover`` without its model list and other datasets' overrides."""
    section = params.discover.model_dump(mode="json")
    section.pop("models")  # a task's key must not change when another model is added
    section.pop("per_dataset")  # nor when another dataset's overrides change
    section["solver"] = params.discover.solver_for(dataset).model_dump(mode="json")
    return section


def discover_calls(params: Params, dataset: str, roots: dict[str, Path], cache_root: Path,
                   models: Sequence[str] | None = None) -> tuple[list[dict[str, Any]], list[str]]:
    """The task's calls and keys for every (seed, model of ``models``, default ``discover.models``) of
    ``dataset`` (roots: prepared, ensemble).

    Raises a clear error, before any task runs, when prepare's outputs are missing or the dataset's
    actionability names features it does not have.
    """
    models = resolve_models(params, models)
    section = discover_section(params, dataset)
    code = code_fingerprint(*CODE)
    n_threads = threads_per_task(params.orchestration)
    calls, keys = [], []
    for seed in params.seeds:
        prepared_dir = Path(roots["prepared"]) / dataset / f"seed={seed}"
        ensemble_dir = Path(roots["ensemble"]) / dataset / f"seed={seed}"
        schema = load_prepared(prepared_dir).schema  # fail early, before any task runs
        unknown = sorted(set(section["solver"]["actionability"]) - set(schema.feature_names))
        if unknown:
            raise ConfigError(f"discover actionability of dataset {dataset!r} names unknown features {unknown} "
                              f"(set per dataset under discover.per_dataset.{dataset}.actionability); "
                              f"its features: {', '.join(schema.feature_names)}")
        prepared_key = dir_fingerprint(prepared_dir)
        for model in models:
            calls.append(dict(dataset=dataset, model=model, seed=seed, section=section,
                              upstream=prepared_key + "+" + _member_fingerprint(ensemble_dir, model), code=code,
                              staging_root=str(Path(cache_root) / "artifacts"), prepared_dir=str(prepared_dir),
                              ensemble_dir=str(ensemble_dir), n_threads=n_threads))
            keys.append(f"{dataset}/{model}/seed={seed}")
    return calls, keys


@flow(name=STEP, validate_parameters=False)
def discover_flow(dataset: str, params: Params, prepared_root: Path, ensemble_root: Path, out_root: Path,
                  metrics_root: Path, cache_root: Path, models: Sequence[str] | None = None) -> list[SeedResult]:
    """Run DISCOVER for every (model, seed) of one dataset; write outputs, figures and metrics.

    ``models`` restricts the run to a subset of ``discover.models``; ``discover.json`` then
    aggregates every configured model whose outputs exist for all seeds and were made with the
    current params and code (others are named in a warning and left out).
    """
    models = resolve_models(params, models)
    section = discover_section(params, dataset)
    dropped = sorted(set(params.discover.solver.actionability) - set(section["solver"]["actionability"]))
    if dropped:  # a dataset's own actionability mapping replaces the common one, it does not extend it
        log.warning("discover.per_dataset.%s.actionability replaces discover.solver.actionability for %s: the "
                    "common rules for %s do not apply there (repeat them in the dataset's entry)",
                    dataset, dataset, dropped)
    calls, keys = discover_calls(params, dataset, {"prepared": Path(prepared_root), "ensemble": Path(ensemble_root)},
                                 cache_root, models)
    out_dirs = [Path(out_root) / dataset / call["model"] / f"seed={call['seed']}" for call in calls]
    results = run_tasks(discover, calls, out_dirs, Path(cache_root) / "results", keys=keys)

    per_model: dict[str, dict[int, dict[str, Any]]] = {}
    current = {"params_hash": section_hash(section), "code_hash": code_fingerprint(*CODE),
               "n_threads": threads_per_task(params.orchestration)}
    prepared_keys = {s: dir_fingerprint(Path(prepared_root) / dataset / f"seed={s}") for s in params.seeds}
    for model in params.discover.models:
        folders = {s: Path(out_root) / dataset / model / f"seed={s}" for s in params.seeds}
        if not all((f / "metrics.json").is_file() for f in folders.values()):
            continue
        if model not in models and not all(
                _made_with(f / "counterfactuals.parquet",
                           {**current, "upstream": _current_upstream(prepared_keys[s], Path(ensemble_root) / dataset /
                                                                     f"seed={s}", model)})
                for s, f in folders.items()):
            log.warning("discover.json of %s leaves out %s: its outputs come from other params, code, prepared data "
                        "or %s model (run `recourselab discover --dataset %s --model %s` to refresh them)", dataset,
                        model, model, dataset, model)
            continue
        per_model[model] = {s: read_json(f / "metrics.json") for s, f in folders.items()}
    write_json(Path(metrics_root) / dataset / f"{STEP}.json", summarize_models(per_model))
    return results


def _current_upstream(prepared_key: str, ensemble_dir: Path, model: str) -> str | None:
    """The upstream key a task for ``model`` would have now (``None``: the ensemble lacks the model)."""
    try:
        return prepared_key + "+" + _member_fingerprint(ensemble_dir, model)
    except (ConfigError, ArtifactError, OSError):  # not tuned, or its file missing or damaged
        return None


def _made_with(path: Path, current: dict[str, Any]) -> bool:
    """Whether the output file ``path`` records every value of ``current`` (params, code, upstream, threads)."""
    try:
        provenance = read_provenance(path)
    except Exception:  # noqa: BLE001 - a missing or unreadable file: not made with the current setup
        return False
    return all(provenance.get(k) == v for k, v in current.items())


def run_discover(dataset: str, params: Params, prepared_root: Path, ensemble_root: Path, out_root: Path,
                 metrics_root: Path, cache_root: Path, models: Sequence[str] | None = None) -> list[SeedResult]:
    """Run :func:`discover_flow` with the task runner of ``params.orchestration``.

    ``models`` is checked against ``discover.models`` before any flow starts.
    """
    models = resolve_models(params, models)
    return discover_flow.with_options(task_runner=task_runner(params.orchestration))(
        dataset=dataset, params=params, prepared_root=Path(prepared_root), ensemble_root=Path(ensemble_root),
        out_root=Path(out_root), metrics_root=Path(metrics_root), cache_root=Path(cache_root), models=models)
