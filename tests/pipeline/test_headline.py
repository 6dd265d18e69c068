"""The headline file (summary.json) and the plot tables of one dataset."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pandas as pd
import pytest

from recourselab.errors import ArtifactError
from recourselab.io import RECOURSE_SCHEMA, SchemaVersionError, json_bytes, write_parquet
from recourselab.pipeline.headline import (
    CDF_POINTS,
    HEADLINE_KEYS,
    PLOTS,
    check_summary,
    discover_cdf_table,
    headline_summary,
    model_validity_table,
    plot_tables,
    validity_cost_table,
)
from tests.conftest import REPO_ROOT

METRICS = REPO_ROOT / "data" / "metrics"
METHODS = {"dataset": "compas", "seeds": [0, 1], "methods": [
    {"method": "densityflow", "setting": "default", "validity_mean": 0.8, "validity_unanimous": 0.5, "cost_l2": 1.3,
     "queries": 480, "wall_time_s": 9.0},
    {"method": "nearest_neighbour", "setting": "budget=480", "validity_mean": 0.97, "validity_unanimous": 0.96,
     "cost_l2": 1.9, "queries": 480}]}


@pytest.fixture()
def compas(tmp_path):
    """A copy of the committed compas metrics (the detailed files the summary reads)."""
    if not (METRICS / "compas" / "densityflow.json").is_file():
        pytest.skip("the committed compas metrics are absent")
    return shutil.copytree(METRICS / "compas", tmp_path / "metrics" / "compas")


def test_the_headline_holds_a_few_flat_numbers_taken_from_the_detailed_files(compas):
    summary = headline_summary(compas)
    assert list(summary) == list(HEADLINE_KEYS)
    assert all(isinstance(v, float) for v in summary.values())
    tune = json.loads((compas / "tune_ensemble.json").read_text())
    accuracy = [m["test_accuracy"]["mean"] for m in tune["members"].values()]
    assert summary["accuracy_min"] == pytest.approx(min(accuracy), abs=1e-6)
    assert summary["accuracy_max"] == pytest.approx(max(accuracy), abs=1e-6)
    flow = json.loads((compas / "densityflow.json").read_text())["summary"]
    assert summary["validity"] == pytest.approx(flow["mean_per_model"]["mean"], abs=1e-6)
    assert summary["unanimous"] == pytest.approx(flow["unanimous"]["mean"], abs=1e-6)
    assert summary["cost_l2"] == pytest.approx(flow["cost_l2"]["mean"], abs=1e-6)
    disc = json.loads((compas / "discover.json").read_text())
    runs = [r["feasible"] for m in disc["models"].values() for r in m["per_seed"].values()]
    assert summary["certified"] == pytest.approx(sum(runs) / len(runs), abs=1e-6)
    assert summary["ot_x"] == pytest.approx(disc["mean_over_models"]["OT_x"], abs=1e-6)
    assert len(json_bytes(summary).splitlines()) <= 22  # one screen, ~20 numbers at most


def test_the_evaluate_table_adds_a_per_method_list_and_drives_the_frontier(compas, tmp_path):
    evaluate = tmp_path / "evaluate" / "compas"
    evaluate.mkdir(parents=True)
    (evaluate / "methods.json").write_text(json.dumps(METHODS))
    summary = headline_summary(compas, evaluate)
    assert [m["method"] for m in summary["methods"]] == ["densityflow", "nearest_neighbour"]
    assert summary["methods"][1] == {"method": "nearest_neighbour", "setting": "budget=480", "validity": 0.97,
                                     "unanimous": 0.96, "cost_l2": 1.9, "queries": 480.0}
    frontier = validity_cost_table(compas, evaluate)
    assert list(frontier.columns) == list(PLOTS["validity_cost.csv"])
    assert frontier["method"].tolist() == ["densityflow", "nearest_neighbour"]
    assert frontier["validity"].tolist() == [0.8, 0.97]
    assert "methods" not in headline_summary(compas, tmp_path / "evaluate" / "absent")


def test_without_an_evaluate_table_the_frontier_has_one_point_per_densityflow_seed(compas):
    frontier = validity_cost_table(compas)
    per_seed = json.loads((compas / "densityflow.json").read_text())["per_seed"]
    assert frontier["setting"].tolist() == [f"seed={s}" for s in sorted(per_seed)]
    assert frontier["cost_l2"].tolist() == [per_seed[s]["cost_l2"] for s in sorted(per_seed)]
    members = model_validity_table(compas)
    assert members["model"].tolist() == sorted(per_seed["0"]["per_model"])
    mean = np.mean([per_seed[s]["per_model"]["knn"] for s in per_seed])
    assert members.set_index("model").loc["knn", "validity"] == pytest.approx(mean)


def _discover_tables(root, rng, schema=RECOURSE_SCHEMA):
    for model in ("svm", "rf"):
        for seed in (0, 1):
            frame = pd.DataFrame({"row_id": np.arange(20), "factual_score": rng.uniform(0, 0.5, 20),
                                  "score": rng.uniform(0.4, 1, 20), "target": rng.beta(0.1, 0.9, 20)})
            write_parquet(root / model / f"seed={seed}" / "counterfactuals.parquet", frame, {"seed": seed},
                          schema=schema)


def test_the_discover_cdfs_pool_every_model_and_seed(tmp_path):
    rng = np.random.default_rng(0)
    _discover_tables(tmp_path / "discover", rng)
    cdf = discover_cdf_table(tmp_path / "discover")
    assert list(cdf.columns) == list(PLOTS["discover_cdf.csv"]) and len(cdf) == 3 * CDF_POINTS
    pooled = pd.concat([pd.read_parquet(p) for p in sorted((tmp_path / "discover").rglob("*.parquet"))])
    for series, column in (("factual b(x')", "factual_score"), ("counterfactual b(x)", "score")):
        part = cdf[cdf["series"] == series]
        assert np.all(np.diff(part["value"]) >= 0) and np.all(np.diff(part["cdf"]) > 0)
        assert part["value"].iloc[0] == pooled[column].min() and part["value"].iloc[-1] == pooled[column].max()
    assert discover_cdf_table(tmp_path / "none").empty


def test_a_discover_table_of_another_schema_version_is_refused(tmp_path):
    _discover_tables(tmp_path / "discover", np.random.default_rng(0), schema="recourse/0")
    with pytest.raises(SchemaVersionError, match="recourse/0"):
        discover_cdf_table(tmp_path / "discover")


def test_no_upstream_metrics_is_an_error_not_an_empty_headline(tmp_path):
    summary = headline_summary(tmp_path)
    assert summary == {}
    with pytest.raises(ArtifactError, match="tune_ensemble.json"):
        check_summary(summary, tmp_path / "summary.json")
    (tmp_path / "discover.json").write_text("{damaged")
    with pytest.raises(ArtifactError, match="not valid JSON"):
        headline_summary(tmp_path)


def test_plot_tables_have_their_declared_columns_even_when_empty(tmp_path):
    tables = plot_tables(tmp_path, tmp_path / "no-discover")
    assert {name: list(t.columns) for name, t in tables.items()} == {k: list(v) for k, v in PLOTS.items()}
    assert all(t.empty for t in tables.values())
