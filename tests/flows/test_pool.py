"""flows.pool: a stage's tasks of several datasets in one pool, then the stage itself on cache hits."""

from __future__ import annotations

import importlib
import inspect
from pathlib import Path

import pytest
from prefect import task

import flows.densityflow as df_module
from flows.pool import POOLED, Pooled, pool_flow, pooled
from flows.prepare import run_prepare
from flows.tune_ensemble import run_tune_ensemble
from recourselab import cli
from recourselab.errors import ConfigError, MissingArtifactError
from recourselab.orchestration import stage_artifacts
from tests.conftest import REPO_ROOT


def test_unknown_stage_lists_the_pooled_ones():
    with pytest.raises(ConfigError, match="stage 'summary' has no pool; pooled stages: tune_ensemble, train_flow"):
        pooled("summary")


def test_the_pooled_stages_are_the_ones_repro_pools_in_dvcs_order():
    assert tuple(POOLED) == cli.POOLED_STAGES
    order = list(cli.STAGES)
    assert [order.index(s) for s in POOLED] == sorted(order.index(s) for s in POOLED)


#: The flow function each stage script hands its roots to (the script imports it when it runs).
RUNNERS = {"tune_ensemble": ("flows.tune_ensemble", "run_tune_ensemble"), "train_flow": ("flows.densityflow", "run"),
           "distill": ("flows.densityflow", "run"), "generate": ("flows.densityflow", "run"),
           "ablate": ("flows.ablate", "run"), "discover": ("flows.discover", "run_discover"),
           "evaluate": ("flows.evaluate", "run")}


@pytest.mark.parametrize("stage", list(POOLED))
def test_a_pool_reads_the_folders_its_stage_reads_by_default(stage, monkeypatch, tmp_path):
    seen = {}
    module, name = RUNNERS[stage]
    original = getattr(importlib.import_module(module), name)

    def record(*args, **kwargs):
        if args and callable(args[0]):  # flows' `run(flow_fn, params, **kwargs)`
            seen.update(kwargs)
        else:
            seen.update(inspect.signature(original).bind(*args, **kwargs).arguments)
        return []

    monkeypatch.setattr(importlib.import_module(module), name, record)
    monkeypatch.chdir(REPO_ROOT)
    script = importlib.import_module(f"stages.{stage}")
    script.main(["--dataset", "moons", "--out", str(tmp_path / "out")])  # fails after the flow: nothing written
    roots = {key.removesuffix("_root"): Path(value) for key, value in seen.items()
             if key.endswith("_root") and key not in ("out_root", "metrics_root", "cache_root")}
    assert roots == {k: Path(v) for k, v in POOLED[stage].roots.items()}


def test_a_pool_over_datasets_leaves_its_stages_only_cache_hits(tmp_path, params_factory, monkeypatch):
    params = params_factory(
        datasets=["moons", "circles"], seeds=[0, 1], prepare={"n_synthetic": 300},
        tune_ensemble={"members": ["knn", "rf"], "cv_folds": 2}, discover={"models": ["rf"]},
        models={"rf": {"grid": {}, "fixed": {"n_estimators": 10, "max_depth": 4}}},
        train_flow={"epochs": 2, "hidden": 16, "max_train_rows": 120,
                    "per_dataset": {"circles": {"min_steps": 10}}},
        orchestration={"task_runner": "thread", "max_workers": 2})
    monkeypatch.chdir(tmp_path)  # the pool reads the project's folders relative to its root
    cache = tmp_path / "cache"
    prepared, ensemble = Path("data/prepared"), Path("data/ensemble")
    for dataset in params.datasets:
        run_prepare(dataset, params, prepared, cache)

    done = pool_flow(stage="tune_ensemble", datasets=["moons", "circles"], params=params, cache_root=cache)
    assert {d: len(v) for d, v in done.items()} == {"moons": 4, "circles": 4}  # 2 seeds x 2 members
    assert all(state == "Completed" and error is None for v in done.values() for state, error in v)
    for dataset in params.datasets:
        results = run_tune_ensemble(dataset, params, prepared, ensemble, tmp_path / "metrics", cache)
        assert [r.cached for r in results] == [True] * 4

    done = pool_flow(stage="train_flow", datasets=["moons", "circles"], params=params, cache_root=cache)
    assert list(done) == ["circles", "moons"]  # the dataset with more training steps first
    for dataset in params.datasets:
        results = df_module.run(df_module.training_flow, params, dataset=dataset, prepared_root=prepared,
                                ensemble_root=ensemble, out_root=tmp_path / "densityflow", cache_root=cache)
        assert [r.cached for r in results] == [True, True]
        assert (tmp_path / "densityflow" / dataset / "seed=1" / "generator.pt").is_file()
    again = pool_flow(stage="train_flow", datasets=["moons"], params=params, cache_root=cache)
    assert [state for state, _ in again["moons"]] == ["Cached", "Cached"]


@task(name="flaky")
def flaky(*, dataset: str, seed: int, staging_root: str) -> dict:
    if dataset == "circles":
        raise ValueError("circles is broken")
    return stage_artifacts(Path(staging_root) / dataset / f"seed={seed}", {"x.txt": lambda p: p.write_text(dataset)})


def flaky_calls(params, dataset, roots, cache_root):
    return ([dict(dataset=dataset, seed=s, staging_root=str(Path(cache_root) / "artifacts")) for s in params.seeds],
            [f"{dataset}/seed={s}" for s in params.seeds])


def test_a_failed_task_is_reported_per_dataset_and_the_others_are_kept(tmp_path, params_factory, monkeypatch):
    from recourselab.config import dump_params
    from recourselab.pipeline.summary import RUN_LOG_ENV, read_run_log

    params = params_factory(datasets=["moons", "circles"], seeds=[0, 1], orchestration={"task_runner": "thread"})
    (tmp_path / "params.yaml").write_text(dump_params(params))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setitem(POOLED, "train_flow", Pooled("tests.flows.test_pool", "flaky", "flaky_calls", {}))
    monkeypatch.setenv(RUN_LOG_ENV, str(tmp_path / "run.jsonl"))
    import flows.pool

    monkeypatch.setattr(flows.pool, "worker_logging", lambda level: None)  # a process's set-up, not pytest's
    main = flows.pool.main

    assert main(["train_flow", "moons", "circles"]) == 0  # the stage reports the failure when it reruns the task
    records = {r["dataset"]: r for r in read_run_log(tmp_path / "run.jsonl")}
    assert records["moons"] == {**records["moons"], "stage": "train_flow", "pool": True, "status": "ok", "tasks": 2,
                                "cache_hits": 0}
    assert records["circles"]["status"] == "failed"
    assert sorted(p.name for p in (tmp_path / ".recourselab/cache/artifacts/moons").iterdir()) == ["seed=0", "seed=1"]
    assert main(["train_flow", "moons", "german"]) == 1  # not a pipeline dataset: a clear error, nothing run


def test_a_pool_without_upstream_outputs_names_the_stage_to_run(tmp_path, params_factory, monkeypatch):
    params = params_factory(datasets=["moons"], seeds=[0], orchestration={"task_runner": "thread"})
    monkeypatch.chdir(tmp_path)
    with pytest.raises(MissingArtifactError, match="run the prepare stage first"):
        pool_flow(stage="train_flow", datasets=["moons"], params=params, cache_root=tmp_path / "cache")
