"""The discover flow on a tiny moons run: outputs, provenance, aggregated metrics, caching, model subsets."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import flows.discover as discover_module
from flows.prepare import run_prepare
from flows.tune_ensemble import run_tune_ensemble
from recourselab.errors import ConfigError
from recourselab.io import read_json, read_provenance
from recourselab.provenance import library_versions
from recourselab.report.discover_plots import FIGURES

N = 15


@pytest.fixture()
def tiny(params_factory):
    return params_factory(
        datasets=["moons"], seeds=[0, 1], prepare={"n_synthetic": 300},
        models={"lightgbm": {"grid": {}, "fixed": {"n_estimators": 30, "num_leaves": 7}}},
        tune_ensemble={"members": ["knn"], "cv_folds": 2},
        discover={"models": ["lightgbm"], "n_factuals": N, "solver": {"max_iter": 6, "metric_projections": 300}},
        orchestration={"task_runner": "thread", "max_workers": 1},
    )


@pytest.mark.filterwarnings("ignore::recourselab.discover.NotCertifiedWarning")
def test_discover_flow_writes_outputs_and_is_cached(tmp_path, tiny, monkeypatch):
    cache = tmp_path / "cache"
    root = {k: tmp_path / k for k in ("prepared", "ensemble", "discover", "metrics")}
    run_prepare("moons", tiny, root["prepared"], cache)
    run_tune_ensemble("moons", tiny, root["prepared"], root["ensemble"], root["metrics"], cache)
    manifest = read_json(root["ensemble"] / "moons" / "seed=0" / "manifest.json")
    assert list(manifest["members"]) == ["knn", "lightgbm"] and manifest["ensemble"] == ["knn"]

    calls = []
    original = discover_module.Discover.solve
    monkeypatch.setattr(discover_module.Discover, "solve", lambda *a, **k: calls.append(1) or original(*a, **k))
    args = ("moons", tiny, root["prepared"], root["ensemble"], root["discover"], root["metrics"], cache)
    first = discover_module.run_discover(*args)
    assert len(calls) == 2 and not any(r.cached for r in first)

    test_ids = set(pd.read_parquet(root["prepared"] / "moons" / "seed=1" / "test.parquet")["row_id"])
    out = root["discover"] / "moons" / "lightgbm" / "seed=1"
    assert {"counterfactuals.parquet", "log.parquet", "metrics.json", *FIGURES} <= {p.name for p in out.iterdir()}
    for fig in FIGURES:
        assert (out / fig).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    table = pd.read_parquet(out / "counterfactuals.parquet")
    assert len(table) == N and set(table["row_id"]) <= test_ids and table["row_id"].is_unique
    assert {"factual_score", "score", "target", "edited", "cf__x0", "cf_original__x1",
            "factual_original__x0"} <= set(table)
    assert (table["factual_score"] < 0.5).all()  # the paper's protocol: predicted unfavourable
    assert table["edited"].any()
    prov = read_provenance(out / "counterfactuals.parquet")
    assert (prov["dataset"], prov["model"], prov["seed"], prov["method"]) == ("moons", "lightgbm", 1, "discover")
    assert prov["target"]["kind"] == "beta" and prov["target"]["seed"] == 1 and len(prov["params_hash"]) == 64
    assert prov["libraries"] == library_versions()  # an auditor sees which versions made the file
    seed_dirs = [root[k] / "moons" / "seed=1" for k in ("prepared", "ensemble")]
    assert prov["upstream"] == discover_module._current_upstream(  # what decides a later summary's subset
        discover_module.dir_fingerprint(seed_dirs[0]), seed_dirs[1], "lightgbm") and prov["n_threads"] == 1
    assert discover_module._current_upstream("x", seed_dirs[1], "catboost") is None  # not in that ensemble

    log = pd.read_parquet(out / "log.parquet")
    # max_iter 6: at most 7 search records, and one more when the repair or the polish certifies the run
    search = log[~log["branch"].isin(["repair", "polish"])]
    assert log["iteration"].tolist() == list(range(len(log))) and len(search) <= 7 and len(log) - len(search) <= 1
    q = np.stack(log["row_scores"].to_numpy())
    assert q.shape == (len(log), N)
    assert np.allclose(q.sum(axis=1), log["Q"].to_numpy(), rtol=1e-9, atol=1e-15)

    metrics = read_json(out / "metrics.json")
    assert metrics["n_factuals"] == N and metrics["queries"] > N and metrics["feasible_rate"] == float(
        metrics["feasible"])
    summary = read_json(root["metrics"] / "moons" / "discover.json")
    lgbm = summary["models"]["lightgbm"]
    assert lgbm["seeds"] == [0, 1] and lgbm["per_seed"]["1"]["OT_y"] == metrics["OT_y"]
    ot_x = [lgbm["per_seed"][s]["OT_x"] for s in ("0", "1")]
    assert lgbm["summary"]["OT_x"]["mean"] == pytest.approx(np.mean(ot_x))
    assert lgbm["summary"]["OT_x"]["std"] == pytest.approx(np.std(ot_x, ddof=1))  # sample std over seeds
    assert summary["mean_over_models"]["OT_x"] == lgbm["summary"]["OT_x"]["mean"]

    second = discover_module.run_discover(*args)
    assert len(calls) == 2, "second discover run was not a cache hit"
    assert all(r.cached for r in second)
    assert (out / "log.parquet").is_file()

    # per-dataset solver settings: another dataset's entry keeps this dataset's cache ...
    section = tiny.discover.model_dump(mode="json")
    other = tiny.model_copy(update={"discover": type(tiny.discover).model_validate(
        {**section, "per_dataset": {"adult": {"step": 0.5}}})})
    assert all(r.cached for r in discover_module.run_discover("moons", other, *args[2:])) and len(calls) == 2
    # ... its own entry re-runs it, and an actionability rule holds in the outputs
    own = tiny.model_copy(update={"discover": type(tiny.discover).model_validate(
        {**section, "per_dataset": {"moons": {"actionability": {"x0": "increasing"}, "step": 0.5}}})})
    assert not any(r.cached for r in discover_module.run_discover("moons", own, *args[2:])) and len(calls) == 4
    table = pd.read_parquet(out / "counterfactuals.parquet")
    moved = table["cf_original__x0"] != table["factual_original__x0"]
    assert moved.any() and (table["cf_original__x0"] >= table["factual_original__x0"] - 1e-12).all()
    assert read_provenance(out / "counterfactuals.parquet")["params_hash"] != prov["params_hash"]
    # an actionability rule naming a feature the dataset lacks stops the flow before any task runs
    wrong = tiny.model_copy(update={"discover": type(tiny.discover).model_validate(
        {**section, "per_dataset": {"moons": {"actionability": {"age": "increasing"}}}})})
    with pytest.raises(ConfigError, match=r"dataset 'moons' names unknown features \['age'\].*features: x0, x1"):
        discover_module.run_discover("moons", wrong, *args[2:])
    assert len(calls) == 4


def test_model_subset_is_checked_before_any_flow_runs(tiny):
    assert discover_module.resolve_models(tiny, None) == ["lightgbm"]
    assert discover_module.resolve_models(tiny, ["lightgbm"]) == ["lightgbm"]
    with pytest.raises(ConfigError, match=r"models \['svm'\] are not in discover.models; valid: lightgbm"):
        discover_module.run_discover("moons", tiny, *(["unused"] * 5), models=["svm"])


def test_a_common_actionability_rule_replaced_by_a_dataset_entry_is_named(tiny, tmp_path, caplog):
    section = tiny.discover.model_dump(mode="json")
    params = tiny.model_copy(update={"discover": type(tiny.discover).model_validate(
        {**section, "solver": {**section["solver"], "actionability": {"x0": "increasing", "x1": "fixed"}},
         "per_dataset": {"moons": {"actionability": {"x1": "decreasing"}}}})})
    with pytest.raises(FileNotFoundError):  # no prepared data here: the warning comes before any input is read
        discover_module.run_discover("moons", params, *[tmp_path / k for k in ("p", "e", "d", "m", "c")])
    assert "discover.per_dataset.moons.actionability replaces discover.solver.actionability" in caplog.text
    assert "common rules for ['x0'] do not apply" in caplog.text


def test_missing_discover_model_in_the_manifest_is_a_clear_error(tmp_path):
    from recourselab.models.ensemble import member_entry, write_manifest

    write_manifest(tmp_path, {"knn": member_entry("knn", {}, 2, "a" * 64)})
    with pytest.raises(ConfigError, match=r"has no model 'svm' \(it holds \['knn'\]\); rerun tune_ensemble"):
        discover_module._member_fingerprint(tmp_path, "svm")


def test_densityflow_ensemble_key_ignores_models_tuned_only_for_discover(tmp_path):
    from flows.densityflow import _members_fingerprint
    from recourselab.io import sha256_bytes
    from recourselab.models.ensemble import member_entry, model_filename, write_manifest

    def entry(kind: str, content: bytes) -> dict:  # the key checks each member's file against its sha256
        (tmp_path / model_filename(kind)).write_bytes(content)
        return member_entry(kind, {}, 2, sha256_bytes(content))

    entries = {"knn": entry("knn", b"a"), "xgboost": entry("xgboost", b"b")}
    write_manifest(tmp_path, entries)
    before = _members_fingerprint(str(tmp_path), ["knn", "xgboost"])
    write_manifest(tmp_path, {**entries, "lightgbm": member_entry("lightgbm", {}, 2, "c")})
    assert _members_fingerprint(str(tmp_path), ["knn", "xgboost"]) == before
    write_manifest(tmp_path, {**entries, "knn": entry("knn", b"z")})
    assert _members_fingerprint(str(tmp_path), ["knn", "xgboost"]) != before


def test_only_outputs_of_the_current_params_and_code_join_the_summary(tmp_path):
    from recourselab.io import write_parquet

    made = {"params_hash": "p1", "code_hash": "c1", "upstream": "data+svm", "n_threads": 1}
    path = tmp_path / "counterfactuals.parquet"
    write_parquet(path, pd.DataFrame({"a": [1]}), {"dataset": "moons", **made})
    assert discover_module._made_with(path, made)
    assert not discover_module._made_with(path, {**made, "params_hash": "p2"})  # other params
    assert not discover_module._made_with(path, {**made, "code_hash": "c2"})  # other code
    assert not discover_module._made_with(path, {**made, "upstream": "data+svm2"})  # a retuned model
    assert not discover_module._made_with(path, {**made, "upstream": None})  # the ensemble lost the model
    assert not discover_module._made_with(path, {**made, "n_threads": 2})
    assert not discover_module._made_with(tmp_path / "missing.parquet", made)
