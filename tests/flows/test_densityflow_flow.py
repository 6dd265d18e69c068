"""train_flow -> distill -> generate flows on a tiny moons run: outputs, budget, metrics, caching."""

from __future__ import annotations

import numpy as np
import pandas as pd

import flows.densityflow as df_module
import recourselab
from flows.prepare import run_prepare
from flows.tune_ensemble import run_tune_ensemble
from recourselab.io import RECOURSE_SCHEMA, read_json, read_provenance, schema_version
from recourselab.provenance import library_versions


def test_densityflow_stages_chain(tmp_path, params_factory, monkeypatch):
    params = params_factory(
        datasets=["moons"], seeds=[0], prepare={"n_synthetic": 400},
        tune_ensemble={"members": ["knn", "xgboost"], "cv_folds": 2},
        models={"lightgbm": {"grid": {}, "fixed": {"n_estimators": 30, "num_leaves": 7}}},
        discover={"models": ["lightgbm"]},  # in the manifest, not in DensityFlow's ensemble
        train_flow={"epochs": 4, "hidden": 32, "lambda_grid": {"lambda_cost": [0.2, 0.6]}},
        distill={"budget": 30, "epochs": 3, "inner": 2, "points": 8},
        generate={"n_starts": 4, "max_queries": 25},
        orchestration={"task_runner": "thread", "max_workers": 1},
    )
    cache = tmp_path / "cache"
    root = {k: tmp_path / k for k in ("prepared", "ensemble", "densityflow", "distill", "recourse", "metrics")}
    run_prepare("moons", params, root["prepared"], cache)
    run_tune_ensemble("moons", params, root["prepared"], root["ensemble"], root["metrics"], cache)

    common = dict(dataset="moons", prepared_root=root["prepared"], ensemble_root=root["ensemble"], cache_root=cache)
    df_module.run(df_module.training_flow, params, out_root=root["densityflow"], **common)
    trained = root["densityflow"] / "moons" / "seed=0"
    assert {"surrogate.pt", "generator.pt", "densityflow.json", "train_log.parquet", "selection.json",
            "train_flow.json"} <= {p.name for p in trained.iterdir()}
    timing = read_json(trained / "train_flow.json")
    assert timing["combinations"] == 2 and 0 < timing["fit_time_s"] < timing["train_flow_time_s"]
    # the val rows are queried once; then each combination's counterfactuals of the query set
    # (the same rows, nearly all of val here: querying val per combination would add n_val)
    n_val = len(pd.read_parquet(root["prepared"] / "moons" / "seed=0" / "val.parquet"))
    assert timing["selection_queries"] - n_val in range(2, 2 * n_val + 1, 2)
    selection = read_json(trained / "selection.json")
    assert [s["lambda_cost"] for s in selection] == [0.2, 0.6]
    assert read_json(trained / "densityflow.json")["config"]["lambda_cost"] == max(
        selection, key=lambda s: s["val_validity"])["lambda_cost"]
    assert len(pd.read_parquet(trained / "train_log.parquet")) == 4
    prov = read_provenance(trained / "train_log.parquet")
    assert (prov["step"], prov["seed"], len(prov["params_hash"]), len(prov["code_hash"])) == ("train_flow", 0, 64, 64)
    assert prov["libraries"] == library_versions() and prov["code_version"] == recourselab.__version__

    df_module.run(df_module.distill_flow, params, flow_root=root["densityflow"], out_root=root["distill"], **common)
    report = read_json(root["distill"] / "moons" / "seed=0" / "distill.json")
    times = {k: report.pop(k) for k in ("distill_time_s", "fit_time_s")}
    assert report == {"queries_used": 30, "budget": 30, "oracle_count": 30}  # 3 x 2 x 8 = 48 wanted
    assert times["fit_time_s"] == timing["fit_time_s"] and times["distill_time_s"] > 0  # carried downstream

    calls = []
    original = df_module.DensityFlow.generate
    monkeypatch.setattr(df_module.DensityFlow, "generate", lambda *a, **k: calls.append(1) or original(*a, **k))
    gen = dict(flow_root=root["distill"], out_root=root["recourse"], metrics_root=root["metrics"], **common)
    df_module.run(df_module.generate_flow, params, **gen)
    out = root["recourse"] / "moons" / "seed=0" / "counterfactuals.parquet"
    table = pd.read_parquet(out)
    assert len(table) == 25 and {"row_id", "target", "cost_l2", "label__knn", "cf_original__x0"} <= set(table)
    assert read_provenance(out)["method"] == "densityflow" and read_provenance(out)["libraries"] == library_versions()
    # like DISCOVER's, it records the content hashes of its upstream folders, and the recourse schema version
    upstream = read_provenance(out)["upstream"].split("+")
    assert df_module.dir_fingerprint(root["prepared"] / "moons" / "seed=0", exclude=df_module.REPORTS) in upstream
    assert schema_version(out) == RECOURSE_SCHEMA
    assert "label__lightgbm" not in table
    summary = read_json(root["metrics"] / "moons" / "densityflow.json")
    seed0 = summary["per_seed"]["0"]
    assert seed0["queries_used"] == 30 and seed0["n_queries"] == 25
    assert (seed0["fit_time_s"], seed0["distill_time_s"]) == (times["fit_time_s"], times["distill_time_s"])
    assert seed0["generate_time_s"] > 0
    valid = np.mean([(table[f"label__{m}"] == table["target"]).mean() for m in ("knn", "xgboost")])
    assert seed0["mean_per_model"] == valid
    assert summary["summary"]["cost_l2"]["mean"] == table["cost_l2"].mean()
    # plausibility and the RQ2 check are reported with the headline metrics
    assert 0.0 <= seed0["lof_inlier_rate"] <= 1.0 and 0.0 <= seed0["iforest_inlier_rate"] <= 1.0
    assert seed0["disagreement"] >= 0.0 and seed0["mutual_information"] >= -1e-12
    rq2 = seed0["rq2"]
    assert rq2["n"] > 25 and rq2["ci_low"] <= rq2["ci_high"]
    assert "rq2.rho" in summary["summary"]
    for figure in ("validity.png", "trajectories.png"):  # moons is 2-D: both figures
        assert (out.parent / figure).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    first = len(calls)  # counterfactuals + the trajectory figure's solve (moons is 2-D)
    assert first == 2
    df_module.run(df_module.generate_flow, params, **gen)
    assert len(calls) == first, "second generate run was not a cache hit"


def test_missing_upstream_outputs_name_the_stage_to_run(tmp_path, params_factory):
    import pytest

    from recourselab.errors import MissingArtifactError

    params = params_factory(datasets=["moons"], seeds=[0])
    roots = {"prepared": tmp_path / "prepared", "ensemble": tmp_path / "ensemble"}
    with pytest.raises(MissingArtifactError, match=r"no prepared outputs in .*seed=0; run the prepare stage first"):
        df_module.seed_calls(params, "moons", roots, {}, tmp_path / "cache", ["prepared", "ensemble"])
    (tmp_path / "prepared" / "moons" / "seed=0").mkdir(parents=True)
    (tmp_path / "prepared" / "moons" / "seed=0" / "schema.json").write_text("{}")
    with pytest.raises(MissingArtifactError, match=r"no ensemble outputs in .*; run the tune_ensemble stage first"):
        df_module.seed_calls(params, "moons", roots, {}, tmp_path / "cache", ["prepared", "ensemble"])


def test_train_flow_keys_on_the_ensemble_only_with_a_lambda_grid(params_factory, monkeypatch, tmp_path):
    seen = []
    monkeypatch.setattr(df_module, "seed_calls", lambda *a, **k: seen.append(a[5]) or ([], []))
    for grid in ({}, {"lambda_cost": [0.2, 0.4]}):
        params = params_factory(datasets=["moons"], train_flow={"lambda_grid": grid})
        df_module.train_flow_calls(params, "moons", {"prepared": tmp_path, "ensemble": tmp_path}, tmp_path)
    assert seen == [["prepared"], ["prepared", "ensemble"]]  # re-tuning a member does not retrain without a grid


def test_timing_reports_are_not_part_of_upstream_keys(tmp_path):
    from recourselab.provenance import dir_fingerprint

    (tmp_path / "generator.pt").write_bytes(b"weights")
    (tmp_path / "train_flow.json").write_text('{"fit_time_s": 1.0}')
    before = dir_fingerprint(tmp_path, exclude=df_module.REPORTS)
    (tmp_path / "train_flow.json").write_text('{"fit_time_s": 2.0}')
    assert dir_fingerprint(tmp_path, exclude=df_module.REPORTS) == before
    assert dir_fingerprint(tmp_path) != before
    (tmp_path / "generator.pt").write_bytes(b"other weights")
    assert dir_fingerprint(tmp_path, exclude=df_module.REPORTS) != before


def test_timings_inside_downstream_inputs_are_not_part_of_their_keys(tmp_path):
    from recourselab.provenance import dir_fingerprint

    # distill.json (read by generate) and generate's metrics.json (read by ablate) hold timings next to inputs
    (tmp_path / "distill.json").write_text('{"queries_used": 480, "distill_time_s": 6.2, "fit_time_s": 100.0}')
    before = dir_fingerprint(tmp_path)
    (tmp_path / "distill.json").write_text('{"fit_time_s": 99.0, "queries_used": 480, "distill_time_s": 6.7}')
    assert dir_fingerprint(tmp_path) == before
    (tmp_path / "distill.json").write_text('{"queries_used": 470, "distill_time_s": 6.2, "fit_time_s": 100.0}')
    assert dir_fingerprint(tmp_path) != before
    (tmp_path / "distill.json").write_text('[1, 2]')  # not an object, or not JSON: its bytes count
    listed = dir_fingerprint(tmp_path)
    (tmp_path / "distill.json").write_text('[1,2]')
    assert dir_fingerprint(tmp_path) != listed
