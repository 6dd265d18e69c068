"""ablate flow on a tiny moons run: variants, budget, retraining without the density term, caching."""

from __future__ import annotations

import pytest

import flows.ablate as ablate_module
import flows.densityflow as df_module
from flows.prepare import run_prepare
from flows.tune_ensemble import run_tune_ensemble
from recourselab.errors import DataError
from recourselab.io import RECOURSE_SCHEMA, read_json, read_parquet, write_parquet


def test_ablation_variants_are_scored_beside_the_full_method(tmp_path, params_factory, monkeypatch):
    params = params_factory(
        datasets=["moons"], seeds=[0, 1], prepare={"n_synthetic": 400},
        tune_ensemble={"members": ["knn", "xgboost"], "cv_folds": 2},
        train_flow={"epochs": 3, "hidden": 32, "lambda_den": 0.5},
        distill={"budget": 20, "epochs": 2, "inner": 2, "points": 8},
        generate={"n_starts": 4, "max_queries": 25},
        orchestration={"task_runner": "thread", "max_workers": 1},
    )
    assert "moons" in params.ablate.datasets and params.ablate.n_seeds == 1
    cache = tmp_path / "cache"
    root = {k: tmp_path / k for k in ("prepared", "ensemble", "densityflow", "distill", "recourse", "metrics",
                                      "ablate")}
    run_prepare("moons", params, root["prepared"], cache)
    run_tune_ensemble("moons", params, root["prepared"], root["ensemble"], root["metrics"], cache)
    common = dict(dataset="moons", prepared_root=root["prepared"], ensemble_root=root["ensemble"], cache_root=cache)
    df_module.run(df_module.training_flow, params, out_root=root["densityflow"], **common)
    df_module.run(df_module.distill_flow, params, flow_root=root["densityflow"], out_root=root["distill"], **common)
    df_module.run(df_module.generate_flow, params, flow_root=root["distill"], out_root=root["recourse"],
                  metrics_root=root["metrics"], **common)

    fits = []
    original = ablate_module.DensityFlow.fit
    monkeypatch.setattr(ablate_module.DensityFlow, "fit",
                        lambda self, *a, **k: fits.append(self.config) or original(self, *a, **k))
    kw = dict(flow_root=root["densityflow"], recourse_root=root["recourse"], out_root=root["ablate"],
              metrics_root=root["metrics"], **common)
    ablate_module.run(ablate_module.ablate_flow, params, **kw)
    seed_dir = root["ablate"] / "moons" / "seed=0"
    rows = read_json(seed_dir / "ablate.json")
    assert set(rows) == {"full", "no_distill", "no_density", "no_density_no_distill"}
    full = read_json(root["recourse"] / "moons" / "seed=0" / "metrics.json")
    assert rows["full"]["mean_per_model"] == full["mean_per_model"] and rows["full"]["queries_used"] == 20
    assert rows["no_distill"]["queries_used"] == 0 and rows["no_density_no_distill"]["queries_used"] == 0
    assert rows["no_density"]["queries_used"] == 20  # the distill budget, as in the pipeline
    # one retraining: the trained flow's settings with the density term switched off
    trained = read_json(root["densityflow"] / "moons" / "seed=0" / "densityflow.json")["config"]
    assert len(fits) == 1 and fits[0].lambda_den == 0.0 and trained["lambda_den"] == 0.5
    assert fits[0].lambda_cost == trained["lambda_cost"] and fits[0].seed == trained["seed"]
    for row in rows.values():
        assert 0.0 <= row["unanimous"] <= row["mean_per_model"] <= 1.0 and row["cost_l2"] > 0
        assert set(row["per_model"]) == {"knn", "xgboost"}
    summary = read_json(root["metrics"] / "moons" / "ablate.json")
    assert summary["seeds"] == [0] and not (root["ablate"] / "moons" / "seed=1").exists()  # n_seeds 1
    assert summary["summary"]["no_density.mean_per_model"]["mean"] == rows["no_density"]["mean_per_model"]
    assert (seed_dir / "ablate.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    ablate_module.run(ablate_module.ablate_flow, params, **kw)
    assert len(fits) == 1, "second ablate run was not a cache hit"
    more = params.model_copy(update={"ablate": params.ablate.model_copy(
        update={"datasets": [*params.ablate.datasets, "circles"], "n_seeds": 2})})
    ablate_module.run(ablate_module.ablate_flow, more, **kw)  # another dataset, one more seed
    assert len(fits) == 2, "seed 0 was retrained although only ablate.datasets / n_seeds changed"

    # generate's outputs from another split (a stale copy): named, and nothing of seed 0 is replaced
    before = (seed_dir / "ablate.json").read_bytes()
    cf_path = root["recourse"] / "moons" / "seed=0" / "counterfactuals.parquet"
    stale = read_parquet(cf_path)
    write_parquet(cf_path, stale.assign(row_id=stale["row_id"] + 10**6), schema=RECOURSE_SCHEMA)
    with pytest.raises(DataError, match=r"counterfactuals\.parquet holds \d+ rows that are not in the prepared test"):
        ablate_module.run(ablate_module.ablate_flow, params, **kw)
    assert (seed_dir / "ablate.json").read_bytes() == before
