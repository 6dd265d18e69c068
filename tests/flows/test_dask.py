"""The ``dask`` task runner: the same per-seed tasks on a 2-worker LocalCluster on loopback give
outputs identical to the thread runner's."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

pytest.importorskip("prefect_dask")

#: Timing reports: the only files whose bytes differ from run to run.
TIMINGS = {"train_flow.json"}


def _digests(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file() and p.name not in TIMINGS}


def _pipeline(tmp: Path, params) -> dict[str, str]:  # noqa: ANN001
    import flows.densityflow as df_module
    from flows.prepare import run_prepare

    cache = tmp / "cache"  # one result store per runner: no cache hit across the two runs
    run_prepare("moons", params, tmp / "prepared", cache)
    results = df_module.run(df_module.training_flow, params, dataset="moons", prepared_root=tmp / "prepared",
                            ensemble_root=tmp / "ensemble", out_root=tmp / "densityflow", cache_root=cache)
    assert [r.cached for r in results] == [False, False]
    return {**_digests(tmp / "prepared"), **_digests(tmp / "densityflow")}


@pytest.mark.slow  # starts a Prefect server and a 2-process Dask cluster
def test_a_two_seed_run_on_a_local_dask_cluster_equals_the_thread_runner(tmp_path, params_factory, monkeypatch):
    from distributed import LocalCluster
    from prefect.settings import PREFECT_API_URL, temporary_settings

    from recourselab.orchestration import DASK_ADDRESS_ENV
    from recourselab.prefect_server import local_server

    monkeypatch.delenv(DASK_ADDRESS_ENV, raising=False)
    settings = dict(datasets=["moons"], seeds=[0, 1], prepare={"n_synthetic": 300},
                    train_flow={"epochs": 2, "hidden": 16, "max_train_rows": 100})
    threads = params_factory(**settings, orchestration={"task_runner": "thread", "max_workers": 2})
    # one Prefect server for the test process and the Dask workers (as under `recourselab repro`)
    with local_server(env={"PREFECT_HOME": str(tmp_path / "prefect-home")}) as url, \
            temporary_settings(updates={PREFECT_API_URL: url}):
        monkeypatch.setenv("PREFECT_API_URL", url)  # the workers' environment
        with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
                          dashboard_address=":0") as cluster:
            dask = params_factory(**settings, orchestration={"task_runner": "dask", "max_workers": 2,
                                                             "dask_address": cluster.scheduler_address})
            expected = _pipeline(tmp_path / "thread", threads)
            got = _pipeline(tmp_path / "dask", dask)
    assert {p.split("/")[-1] for p in got} >= {"train.parquet", "generator.pt", "surrogate.pt", "train_log.parquet"}
    assert got == expected
    from recourselab.io import read_provenance

    prov = read_provenance(tmp_path / "dask/densityflow/moons/seed=1/train_log.parquet")
    assert (prov["seed"], prov["device"]) == (1, "cpu")  # the device is recorded with the outputs


def test_without_an_address_a_loopback_local_cluster_of_max_workers(params_factory, monkeypatch):
    from prefect_dask import DaskTaskRunner

    from recourselab.orchestration import DASK_ADDRESS_ENV, task_runner

    monkeypatch.delenv(DASK_ADDRESS_ENV, raising=False)
    runner = task_runner(params_factory(orchestration={"task_runner": "dask", "max_workers": 3}).orchestration)
    assert isinstance(runner, DaskTaskRunner) and runner.address is None
    assert runner.cluster_class == "distributed.LocalCluster"
    assert (runner.cluster_kwargs["n_workers"], runner.cluster_kwargs["host"]) == (3, "127.0.0.1")


def test_an_address_selects_an_existing_cluster(params_factory, monkeypatch):
    from recourselab.orchestration import DASK_ADDRESS_ENV, task_runner

    monkeypatch.delenv(DASK_ADDRESS_ENV, raising=False)
    orch = params_factory(orchestration={"task_runner": "dask", "dask_address": "tcp://127.0.0.1:8786"}).orchestration
    assert task_runner(orch).address == "tcp://127.0.0.1:8786"
    monkeypatch.setenv(DASK_ADDRESS_ENV, "tcp://10.0.0.5:8786")  # --dask-address: the dask runner, this cluster
    assert task_runner(params_factory().orchestration).address == "tcp://10.0.0.5:8786"
