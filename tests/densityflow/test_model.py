"""DensityFlow end to end on small data: validity, immutables, budget, determinism, persistence."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
import torch

from recourselab.data import Schema, load_dataset, prepare_splits
from recourselab.densityflow import DensityFlow
from recourselab.errors import ArtifactError, ConfigError, DataError, MissingArtifactError, RecourselabError
from recourselab.models import BlackBox, FitContext, fit_model
from recourselab.models.oracle import QueryBudgetExceeded

FAST = dict(epochs=40, warmup_epochs=2, ema_decay=0.98, lr_phi=3e-3, lr_g=3e-3, batch_size=32, hidden=64, n_starts=8,
            lambda_cost=0.2, lambda_den=0.3,
            distill_epochs=4, distill_inner=2, distill_points=8,
            # the library defaults these tests were written against (before the defaults became the pipeline's)
            density_quantile=None, max_train_rows=None, distill_lr_g=5e-5, distill_replay=False, distill_gen_steps=1)


@pytest.fixture(scope="module")
def moons():
    return prepare_splits(load_dataset("moons", n_synthetic=1000), 0, (0.6, 0.2, 0.2))


@pytest.fixture(scope="module")
def trained(moons):
    X, y = moons.arrays("train")
    return DensityFlow(schema=moons.schema, seed=0, **FAST).fit(X, y)


@pytest.fixture(scope="module")
def ensemble(moons):
    X, y = moons.arrays("train")
    Xv, yv = moons.arrays("val")
    ctx = FitContext(X_val=Xv, y_val=yv, seed=0, n_classes=2)
    members = {name: fit_model(name, params, X, y, ctx) for name, params in
               [("knn", {"n_neighbors": 7}), ("rf", {"n_estimators": 30}), ("xgboost", {"n_estimators": 60}),
                ("svm", {"C": 10, "gamma": 1.0})]}
    return BlackBox(members, schema=moons.schema)


def test_short_training_on_moons_is_valid_for_the_ensemble(moons, trained, ensemble):
    X, y = moons.arrays("test")
    correct = (ensemble.query(X, budget="eval").member_labels == y).all(0)
    q = np.flatnonzero(correct)
    res = trained.generate(X[q], target=1 - y[q])
    out = ensemble.query(res.counterfactuals, budget="eval")
    per_model = (out.member_labels == res.target).mean(1)
    assert per_model.mean() >= 0.95, per_model
    assert res.cost_l2.shape == (len(q),) and (res.cost_l2 > 0).all()
    np.testing.assert_allclose(res.cost_l2, np.linalg.norm(res.counterfactuals - X[q], axis=1))
    assert list(res.counterfactuals_original.columns) == ["x0", "x1"]
    assert len(trained.log_.rows) == FAST["epochs"]


def test_training_reports_progress_about_ten_times_and_at_the_end(moons, caplog):
    import logging

    X, y = moons.arrays("train")
    with caplog.at_level(logging.INFO, logger="recourselab.densityflow"):
        flow = DensityFlow(schema=moons.schema, seed=1, **{**FAST, "epochs": 23}).fit(X, y)
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("DensityFlow training (seed 1)")]
    n = len(flow.log_.rows)
    assert n >= 23 and 7 <= len(lines) <= 11
    assert lines[-1].startswith(f"DensityFlow training (seed 1): epoch {n}/{n}, loss ")
    assert lines[-1].endswith("about 0 s left")
    assert f"loss {flow.log_.rows[-1]['loss']:.4f}" in lines[-1]


def test_distillation_never_exceeds_its_budget_and_counts_exactly(moons, ensemble):
    X, y = moons.arrays("train")
    flow = DensityFlow(schema=moons.schema, seed=1, **{**FAST, "epochs": 2})
    flow.fit(X, y)
    before = ensemble.used("distill")
    used = flow.distill(ensemble, X, y, budget=37)
    assert used == 37 == flow.queries_used_  # 4 x 2 x 8 = 64 wanted, capped at 37
    assert ensemble.used("distill") - before == 37
    ensemble.set_budget("tight", 5)
    assert flow.distill(ensemble, X, y, budget=100, budget_name="tight") == 5
    assert ensemble.used("tight") == 5
    assert flow.queries_used_ == 42  # the model's total over both calls (saved with it)
    before = ensemble.used("distill")
    assert flow.distill(ensemble, X, y, budget=1000) == 64  # a budget above the schedule: exactly 4 x 2 x 8
    assert ensemble.used("distill") - before == 64 and flow.queries_used_ == 106
    with pytest.raises(QueryBudgetExceeded):
        ensemble.query(X[:1], budget="tight")


def test_replayed_distillation_keeps_the_budget_and_gen_steps_zero_freezes_the_generator(moons, ensemble):
    X, y = moons.arrays("train")
    flow = DensityFlow(schema=moons.schema, seed=2, **{**FAST, "epochs": 2})
    flow.fit(X, y)
    field_before = {k: v.clone() for k, v in flow.field.state_dict().items()}
    surr_before = {k: v.clone() for k, v in flow.surrogate.state_dict().items()}
    flow.with_settings(distill_replay=True, distill_gen_steps=0, distill_epochs=3, distill_inner=2,
                       distill_points=5)
    assert flow.distill(ensemble, X, y, budget=23) == 23  # 3 x 2 x 5 = 30 wanted, capped at 23
    assert all(torch.equal(v, flow.field.state_dict()[k]) for k, v in field_before.items())
    assert not all(torch.equal(v, flow.surrogate.state_dict()[k]) for k, v in surr_before.items())
    flow.with_settings(distill_gen_steps=2)
    flow.distill(ensemble, X, y, budget=5)
    assert not all(torch.equal(v, flow.field.state_dict()[k]) for k, v in field_before.items())


def _mixed_schema_data():
    rng = np.random.default_rng(0)
    n = 400
    frame = pd.DataFrame({"age": rng.integers(20, 60, n), "income": rng.normal(50, 10, n),
                          "sex": rng.choice(["f", "m"], n), "job": rng.choice(["a", "b", "c"], n)})
    # The label depends on the immutable age and sex too, so an unmasked flow would move them.
    frame["label"] = ((frame["income"] + (frame["job"] == "c") * 8 + 0.4 * (frame["age"] - 40)
                       + 6 * (frame["sex"] == "m") + rng.normal(0, 3, n)) > 58).astype(int)
    schema = Schema.fit(frame, dataset="toy", target="label", favourable=1, categorical=["sex", "job"],
                        integer=["age"], immutable=["sex", "age"])
    return frame, schema


def test_immutables_never_change_and_categoricals_decode_to_levels():
    frame, schema = _mixed_schema_data()
    X = schema.transform(frame)
    y = schema.encode_target(frame["label"])
    flow = DensityFlow(schema=schema, seed=0, **FAST).fit(X, y)
    q = frame[y == 0].head(40)
    res = flow.generate(q)  # target None -> favourable class
    assert (res.target == 1).all()
    out = res.counterfactuals_original
    pd.testing.assert_index_equal(out.index, q.index)  # the input frame's row labels are kept
    pd.testing.assert_series_equal(out["sex"], q["sex"].astype(object), check_names=False)
    assert (out["age"].to_numpy() == q["age"].to_numpy()).all()
    fixed = schema.immutable_mask()
    np.testing.assert_array_equal(res.counterfactuals[:, fixed], schema.transform(q)[:, fixed])  # bit for bit
    assert (out["income"] - q["income"]).abs().mean() > 2.0  # the flow did move the mutable features
    assert res.surrogate_valid.mean() >= 0.6, res.surrogate_valid.mean()  # ... most far enough to reach the target
    assert set(out["job"]) <= {"a", "b", "c"}
    np.testing.assert_array_equal(schema.transform(out), res.counterfactuals)  # valid points exactly


def test_a_querys_counterfactual_does_not_depend_on_the_batch(moons, trained):
    Xq, yq = moons.arrays("test")
    trained.with_settings(n_starts=5)  # 3 x 5 x 2 and 10 x 5 x 2 draws: torch's sampler differs by size
    try:
        alone = trained.generate(Xq[:3], target=1 - yq[:3]).counterfactuals
        batch = trained.generate(Xq[:10], target=1 - yq[:10]).counterfactuals[:3]
    finally:
        trained.with_settings(n_starts=FAST["n_starts"])
    np.testing.assert_allclose(alone, batch, atol=1e-4)  # only the adaptive ODE steps differ (solver tolerance)


def test_networks_built_in_concurrent_threads_get_their_seeds_weights():
    import threading

    def weights(seed: int) -> torch.Tensor:
        flow = DensityFlow(seed=seed)
        flow.build(20, 2, 3.0)
        return torch.cat([p.detach().flatten() for m in (flow.surrogate, flow.field) for p in m.parameters()])

    def build(seed: int, barrier: threading.Barrier, out: dict) -> None:
        barrier.wait()  # both threads build at the same time
        out[seed] = weights(seed)

    alone = {s: weights(s) for s in (0, 1)}
    for _ in range(10):
        out, barrier = {}, threading.Barrier(2)
        threads = [threading.Thread(target=build, args=(s, barrier, out)) for s in (0, 1)]
        [t.start() for t in threads]
        [t.join() for t in threads]
        assert all(torch.equal(out[s], alone[s]) for s in (0, 1))


def test_checkpoint_key_covers_the_immutables(moons):
    frame, schema = _mixed_schema_data()
    X = schema.transform(frame)
    y = schema.encode_target(frame["label"])
    free = Schema.fit(frame, dataset="toy", target="label", favourable=1, categorical=["sex", "job"],
                      integer=["age"])
    keys = {DensityFlow(schema=s, seed=0)._fit_key(X, y) for s in (schema, free, schema)}
    assert len(keys) == 2


def test_same_seed_gives_identical_counterfactuals(moons):
    X, y = moons.arrays("train")
    Xq, yq = moons.arrays("test")
    runs = [DensityFlow(schema=moons.schema, seed=s, **{**FAST, "epochs": 4}).fit(X, y) for s in (3, 3, 4)]
    a, b, c = (r.generate(Xq[:30], target=1 - yq[:30]).counterfactuals for r in runs)
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)


def test_fitted_networks_have_unit_spectral_norms_and_the_spectral_field_round_trips(moons, tmp_path):
    X, y = moons.arrays("train")
    Xq, yq = moons.arrays("test")
    flow = DensityFlow(schema=moons.schema, seed=0, field_spectral_norm=True,
                       **{**FAST, "epochs": 6, "ema_decay": 0.999}).fit(X, y)
    sn = [m for net in (flow.surrogate, flow.field) for m in net.modules()
          if torch.nn.utils.parametrize.is_parametrized(m, "weight")]
    assert len(sn) == 6  # 3 layers of proxy C1 + 3 of the velocity field
    for m in sn:  # the EMA weights' own sigma, not the averaged power-iteration vectors'
        assert abs(float(torch.linalg.matrix_norm(m.weight.detach(), 2)) - 1.0) < 1e-2
    a = flow.generate(Xq[:20], target=1 - yq[:20]).counterfactuals
    np.testing.assert_array_equal(a, flow.generate(Xq[:20], target=1 - yq[:20]).counterfactuals)
    flow.save(tmp_path)
    loaded = DensityFlow.load(tmp_path, schema=moons.schema)
    np.testing.assert_array_equal(a, loaded.generate(Xq[:20], target=1 - yq[:20]).counterfactuals)


def test_a_save_that_cannot_serialise_leaves_the_earlier_save_whole(moons, trained, tmp_path, monkeypatch):
    trained.save(tmp_path)
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    X, y = moons.arrays("train")
    other = DensityFlow(schema=moons.schema, seed=5, **{**FAST, "epochs": 1}).fit(X, y)
    real = other.file_bytes

    def failing(name: str) -> bytes:
        if name == "densityflow.json":
            raise TypeError("not serialisable")
        return real(name)

    monkeypatch.setattr(other, "file_bytes", failing)
    with pytest.raises(TypeError, match="not serialisable"):
        other.save(tmp_path)
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before


def test_numpy_settings_are_plain_numbers_and_refit_forgets_distillation_queries(moons, ensemble, tmp_path):
    X, y = moons.arrays("train")
    flow = DensityFlow(schema=moons.schema, **{**FAST, "epochs": 1, "seed": np.int64(2), "n_starts": np.int64(3),
                                                "lambda_cost": np.float32(0.5), "adjoint": np.bool_(False)})
    assert [type(getattr(flow.config, k)) for k in ("seed", "n_starts", "lambda_cost", "adjoint")] == [
        int, int, float, bool]
    flow.fit(X, y)
    assert flow.distill(ensemble, X, y, budget=np.int64(8)) == 8 and flow.queries_used_ == 8
    assert type(flow.queries_used_) is int  # a numpy count would make the save fail (not JSON)
    flow.save(tmp_path / "distilled")
    assert DensityFlow.load(tmp_path / "distilled").queries_used_ == 8
    flow.fit(X, y)  # new networks: nothing distilled yet
    assert flow.queries_used_ == 0
    flow.save(tmp_path)
    assert DensityFlow.load(tmp_path).queries_used_ == 0 and DensityFlow.load(tmp_path).config.seed == 2
    with pytest.raises(DataError, match="distill: no rows"):
        flow.distill(ensemble, X[:0], y[:0], budget=8)


def test_save_load_round_trip(moons, trained, tmp_path):
    trained.save(tmp_path)
    assert {p.name for p in tmp_path.iterdir()} == {"surrogate.pt", "generator.pt", "densityflow.json"}
    loaded = DensityFlow.load(tmp_path, schema=moons.schema)
    Xq, yq = moons.arrays("test")
    a = trained.generate(Xq[:20], target=1 - yq[:20], return_trajectories=True, n_points=5)
    b = loaded.generate(Xq[:20], target=1 - yq[:20])
    np.testing.assert_array_equal(a.counterfactuals, b.counterfactuals)
    assert a.trajectories.shape == (5, 20, 2)
    # paths start at the chosen (possibly jittered, std 0.05) start and end at the counterfactual
    assert np.abs(a.trajectories[0] - Xq[:20]).max() < 0.3
    np.testing.assert_allclose(a.trajectories[-1], a.counterfactuals, atol=1e-5)


def test_bad_input(moons, trained):
    with pytest.raises(RecourselabError, match="unknown DensityFlow settings \\['lambda_kost'\\]"):
        DensityFlow(lambda_kost=0.1)
    with pytest.raises(RecourselabError, match="not fitted"):
        DensityFlow().generate(np.zeros((1, 2)))
    X, y = moons.arrays("train")
    with pytest.raises(DataError, match="two classes"):
        DensityFlow(epochs=1).fit(X, np.zeros_like(y))
    with pytest.raises(DataError, match="NaN"):
        trained.generate(np.full((2, 2), np.nan))
    with pytest.raises(DataError, match="width 3 does not match the schema's 2"):
        trained.generate(np.zeros((2, 3)))
    with pytest.raises(DataError, match="2-D"):
        trained.generate(np.zeros(2))
    with pytest.raises(DataError, match=r"generate target: class indices must lie in 0\.\.1"):
        trained.generate(X[:2], target=5)
    for bad in (0.7, "yes", [1.0, np.nan, 0.0], np.array([1, "a", 0], dtype=object)):
        with pytest.raises(DataError, match="generate target: class indices must be finite integers"):
            trained.generate(X[:3], target=bad)
    as_objects = np.array([1, 0, 1], dtype=object)  # integer labels held as objects (e.g. from a pandas column)
    np.testing.assert_array_equal(trained.generate(X[:3], target=as_objects).target, [1, 0, 1])
    with pytest.raises(DataError, match=r"generate target: expected 3 class indices \(one per row\), got shape \(2,\)"):
        trained.generate(X[:3], target=np.array([1, 0]))
    with pytest.raises(DataError, match="generate: no factual rows"):
        trained.generate(np.zeros((0, 2)))
    with pytest.raises(DataError, match=rf"fit labels: expected {len(X)} class indices"):
        DensityFlow(epochs=1).fit(X, y[:50])
    with pytest.raises(DataError, match=r"fit labels: class indices must lie in >= 0"):
        DensityFlow(epochs=1).fit(X, np.where(np.arange(len(y)) == 0, -1, y))
    with pytest.raises(TypeError, match="distill needs a query-counting oracle"):
        trained.distill(object(), X, y, budget=10)


@pytest.mark.parametrize(("setting", "pattern"), [
    ({"lambda_cost": -1}, r"lambda_cost=-1 \(a finite number >= 0\)"),
    ({"noise_ratio": 0.0}, r"noise_ratio=0\.0 \(a finite number > 0\)"),
    ({"lambda_den": float("inf")}, r"lambda_den=inf \(a finite number\)"),
    ({"epochs": 0}, r"epochs=0 \(an integer >= 1\)"),
    ({"n_starts": 2.5}, r"n_starts=2\.5 \(an integer\)"),
    ({"batch_size": True}, r"batch_size=True \(an integer\)"),
    ({"jitter": float("nan")}, r"jitter=nan \(a finite number\)"),
    ({"density_quantile": 1.0}, r"density_quantile=1\.0 \(None or in \(0, 1\)\)"),
    ({"score_mode": "mean"}, r"unknown score_mode 'mean'; valid: target, max"),
    ({"ema_decay": 1.0}, r"ema_decay=1\.0 \(in \[0, 1\)\)"),
    ({"adjoint": "yes"}, r"adjoint='yes' \(True or False\)"),
    ({"method": "dopri"}, r"method='dopri' \(a torchdiffeq method: .*dopri5"),
])
def test_settings_out_of_range_are_refused_with_the_rule(setting, pattern):
    with pytest.raises(ConfigError, match=pattern):
        DensityFlow(**setting)


def test_a_built_flow_keeps_its_architecture_but_takes_other_settings(trained):
    with pytest.raises(ConfigError, match=r"cannot change \['hidden'\] of a built DensityFlow"):
        trained.with_settings(hidden=trained.config.hidden * 2)
    with pytest.raises(ConfigError, match=r"n_starts=0"):
        trained.with_settings(n_starts=0)
    before = trained.config
    try:
        assert trained.with_settings(n_starts=3, hidden=before.hidden).config.n_starts == 3
    finally:
        trained.config = before


def test_load_names_a_missing_or_mismatched_model(moons, trained, tmp_path):
    with pytest.raises(FileNotFoundError, match="no saved DensityFlow in .*densityflow.json is missing"):
        DensityFlow.load(tmp_path / "nowhere", schema=moons.schema)
    trained.save(tmp_path)
    other = prepare_splits(load_dataset("circles", n_synthetic=200), 0,
                           (0.6, 0.2, 0.2)).schema
    with pytest.raises(DataError, match="trained for dataset 'moons' .* not for the given schema of 'circles'"):
        DensityFlow.load(tmp_path, schema=other)
    weights = (tmp_path / "generator.pt").read_bytes()
    (tmp_path / "generator.pt").write_bytes(weights[: len(weights) // 2])  # an interrupted copy
    with pytest.raises(ArtifactError, match=r"generator\.pt is not the weights file that densityflow\.json was "
                                            r"saved with \(sha256 differs.*dvc checkout"):
        DensityFlow.load(tmp_path, schema=moons.schema)
    meta = json.loads((tmp_path / "densityflow.json").read_text())
    del meta["weights_sha256"]  # a save without the hashes: torch names the damage
    (tmp_path / "densityflow.json").write_text(json.dumps(meta))
    with pytest.raises(ArtifactError, match=r"cannot load .*generator\.pt .*dvc checkout"):
        DensityFlow.load(tmp_path, schema=moons.schema)
    (tmp_path / "generator.pt").unlink()
    with pytest.raises(MissingArtifactError, match="lacks its weights file generator.pt"):
        DensityFlow.load(tmp_path, schema=moons.schema)
    (tmp_path / "densityflow.json").write_text("{")
    with pytest.raises(ArtifactError, match=r"densityflow\.json is damaged"):
        DensityFlow.load(tmp_path, schema=moons.schema)
    (tmp_path / "densityflow.json").write_text('{"config": {}, "d": 2}')
    with pytest.raises(ArtifactError, match=r"densityflow\.json lacks the keys \['n_classes', 'C', 'mutable'\]"):
        DensityFlow.load(tmp_path, schema=moons.schema)


@pytest.mark.parametrize(("field", "value", "message"), [
    ("C", None, r"C \(a finite number > 0, got None\)"),
    ("n_classes", "2", r"n_classes \(an integer >= 2, got '2'\)"),
    ("config", [1], r"config \(an object of settings"),
    ("mutable", [True], r"mutable \(a list of d booleans"),
    ("queries_used", "x", r"queries_used \(an integer >= 0"),
    ("config.hidden", "big", r"does not describe a valid DensityFlow \(invalid DensityFlow settings: hidden='big'"),
    ("config.hidden", 16, r"surrogate\.pt does not fit the networks that densityflow\.json describes \(Error\(s\) "
                          r"in loading state_dict for Surrogate: size mismatch for [^;]* and \d+ more\)"),
])
def test_load_names_a_damaged_field_of_densityflow_json(moons, trained, tmp_path, field, value, message):
    trained.save(tmp_path)
    meta = json.loads((tmp_path / "densityflow.json").read_text())
    if field.startswith("config."):
        meta["config"][field.split(".")[1]] = value
    else:
        meta[field] = value
    (tmp_path / "densityflow.json").write_text(json.dumps(meta))
    with pytest.raises(ArtifactError, match=message + r".*dvc checkout"):
        DensityFlow.load(tmp_path, schema=moons.schema)


def test_loading_a_dataset_model_without_its_schema_warns(moons, trained, tmp_path, caplog):
    trained.save(tmp_path)
    with caplog.at_level("WARNING", logger="recourselab.densityflow.model"):
        DensityFlow.load(tmp_path, schema=moons.schema)
    assert "without its schema" not in caplog.text
    with caplog.at_level("WARNING", logger="recourselab.densityflow.model"):
        DensityFlow.load(tmp_path)
    assert "trained for dataset 'moons' but is loaded without its schema" in caplog.text


def test_a_floor_above_a_learning_rate_is_refused():
    with pytest.raises(ConfigError, match=r"lr_min=0\.001 \(at most lr_g and lr_phi"):
        DensityFlow(lr_min=1e-3, lr_phi=1e-4)
    DensityFlow(lr_min=1e-4, lr_phi=1e-4)  # equal: a constant rate after warm-up


def test_distill_on_a_spent_oracle_budget_is_an_error_and_queries_nothing(moons, trained):
    X, y = moons.arrays("train")
    Xv, yv = moons.arrays("val")
    knn = fit_model("knn", {"n_neighbors": 7}, X, y, FitContext(X_val=Xv, y_val=yv, seed=0, n_classes=2))
    box = BlackBox({"knn": knn}, schema=moons.schema, budgets={"distill": 0})
    with pytest.raises(QueryBudgetExceeded, match="'distill' is already spent"):
        trained.distill(box, X, y, budget=100)
    assert box.queries == {}
    assert trained.distill(box, X, y, budget=0) == 0  # nothing asked, nothing spent


@pytest.mark.parametrize("budget", [-5, 2.5, True, None, "10"])
def test_distill_rejects_a_budget_that_is_not_a_count(moons, trained, budget):
    X, y = moons.arrays("train")

    class Oracle:  # never asked: the budget is checked first
        def query(self, *a, **k):
            raise AssertionError("queried")

        def remaining(self, *a, **k):
            raise AssertionError("queried")

        def used(self, *a, **k):
            raise AssertionError("queried")

    with pytest.raises(DataError, match=r"distill budget must be an integer >= 0 \(queried rows\), got"):
        trained.distill(Oracle(), X, y, budget=budget)


def test_min_steps_raises_the_number_of_epochs(moons):
    X, y = moons.arrays("train")  # 600 rows, batch 32 -> 19 batches per epoch
    flow = DensityFlow(schema=moons.schema, seed=0, **{**FAST, "epochs": 1, "min_steps": 40}).fit(X, y)
    assert len(flow.log_.rows) == 3  # ceil(40 / 19)
    flow = DensityFlow(schema=moons.schema, seed=0, **{**FAST, "epochs": 2, "min_steps": 0}).fit(X, y)
    assert len(flow.log_.rows) == 2


def test_density_quantile_margins_are_per_class_quantiles(moons, trained):
    import torch

    X, y = moons.arrays("train")
    xt, yt = torch.tensor(X[:200], dtype=torch.float32), torch.tensor(y[:200])
    assert trained.density_margin(xt, yt, 1 - yt) == trained.config.margin  # off by default
    trained.with_settings(density_quantile=0.25)
    try:
        margins = trained.density_margin(xt, yt, 1 - yt)
        s = trained.surrogate.score(xt, yt).detach()
        for c in (0, 1):
            expected = torch.quantile(s[yt == c], 0.25)
            assert torch.allclose(margins[(1 - yt) == c], expected.expand(int(((1 - yt) == c).sum())))
    finally:
        trained.with_settings(density_quantile=None)


def test_interrupted_training_resumes_from_its_checkpoint_to_the_uninterrupted_result(moons, tmp_path, monkeypatch):
    X, y = moons.arrays("train")
    settings = {**FAST, "epochs": 4}
    straight = DensityFlow(schema=moons.schema, seed=3, **settings).fit(X, y)

    calls = {"n": 0}
    original = DensityFlow.generator_loss

    def crash_in_epoch_three(self, *args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 2 * 19 + 5:  # 600 rows / batch 32 = 19 batches per epoch
            raise KeyboardInterrupt("simulated crash")
        return original(self, *args, **kwargs)

    monkeypatch.setattr(DensityFlow, "generator_loss", crash_in_epoch_three)
    with pytest.raises(KeyboardInterrupt):
        DensityFlow(schema=moons.schema, seed=3, **settings).fit(X, y, checkpoint_dir=tmp_path, checkpoint_seconds=0)
    monkeypatch.setattr(DensityFlow, "generator_loss", original)
    (ckpt,) = tmp_path.glob("densityflow-*.pt")
    assert torch.load(ckpt, weights_only=True)["epoch"] == 1  # epochs 0 and 1 done, crash in epoch 2

    other = DensityFlow(schema=moons.schema, seed=3, **{**settings, "lambda_cost": 0.5})
    other.fit(X, y, checkpoint_dir=tmp_path, checkpoint_seconds=0)  # other settings never pick it up
    assert ckpt.exists() and len(other.log_.rows) == 4

    resumed = DensityFlow(schema=moons.schema, seed=3, **settings).fit(X, y, checkpoint_dir=tmp_path)
    assert not ckpt.exists()  # removed once training completed
    assert resumed.log_.rows == straight.log_.rows
    for a, b in ((resumed.surrogate, straight.surrogate), (resumed.field, straight.field)):
        for (name, ta), tb in zip(a.state_dict().items(), b.state_dict().values(), strict=True):
            assert torch.equal(ta, tb), name


def test_an_unreadable_checkpoint_is_named_and_left_in_place(moons, tmp_path):
    X, y = moons.arrays("train")
    settings = {**FAST, "epochs": 2}
    flow = DensityFlow(schema=moons.schema, seed=3, **settings)
    path = tmp_path / f"densityflow-{flow._fit_key(X.astype(np.float64), y)}.pt"
    path.write_bytes(b"not a checkpoint")
    with pytest.raises(RecourselabError, match="cannot resume DensityFlow training from checkpoint .*delete the file"):
        flow.fit(X, y, checkpoint_dir=tmp_path)
    assert path.read_bytes() == b"not a checkpoint"


def test_three_classes_move_each_query_to_its_target_blob():
    """K = 3 (Gaussian blobs, no schema): counterfactuals land nearest the target class's centre."""
    rng = np.random.default_rng(0)
    centres = np.array([[-3.0, 0.0], [3.0, 0.0], [0.0, 4.0]])
    y = np.repeat(np.arange(3), 250)
    X = centres[y] + 0.6 * rng.standard_normal((len(y), 2))
    flow = DensityFlow(seed=0, **{**FAST, "epochs": 30}).fit(X, y)
    assert flow.n_classes == 3 and flow.surrogate.logits(torch.zeros(5, 2)).shape == (2, 5, 4)  # K + 1 logits
    q = rng.permutation(len(y))[:90]
    target = (y[q] + rng.integers(1, 3, len(q))) % 3  # each query to one of the two other classes
    res = flow.generate(X[q], target=target)
    # Equal isotropic blobs: the Bayes classifier labels a point by its nearest centre.
    nearest = np.linalg.norm(res.counterfactuals[:, None, :] - centres[None], axis=2).argmin(1)
    assert (nearest == target).mean() >= 0.9
    with torch.no_grad():
        before = flow.surrogate.score(torch.as_tensor(X[q], dtype=torch.float32), torch.as_tensor(target)).numpy()
    assert (res.density > before).mean() >= 0.9  # the flow raised S(x | y*) for (nearly) every query
    with pytest.raises(DataError, match="0..2"):
        flow.generate(X[:3], target=3)


def test_fit_checks_the_mask_and_the_classes_and_refits_to_a_new_width():
    rng = np.random.default_rng(0)
    X = rng.standard_normal((200, 2))
    y = (X[:, 0] > 0).astype(int)
    quick = {**FAST, "epochs": 1}
    with pytest.raises(DataError, match="mutable must be a boolean mask of the 2 encoded columns, got shape \\(3,\\)"):
        DensityFlow(mutable=np.ones(3, dtype=bool), **quick).fit(X, y)
    with pytest.raises(DataError, match=r"fit labels have no rows of class\(es\) \[1\] \(of 0\.\.2\)"):
        DensityFlow(**quick).fit(X, 2 * y)  # labels {0, 2}: class 1 would have no density to learn
    flow = DensityFlow(**quick).fit(X, y)
    X3 = rng.standard_normal((200, 3))
    flow.fit(X3, (X3[:, 1] > 0).astype(int))  # no schema: a refit may change the width
    assert flow.generate(X3[:4], target=1).counterfactuals.shape == (4, 3)


def test_schema_classes_fix_the_class_count(moons):
    X, y = moons.arrays("train")
    with pytest.raises(DataError, match=r"fit labels: class indices must lie in 0\.\.1"):
        DensityFlow(schema=moons.schema, epochs=1).fit(X, np.where(np.arange(len(y)) == 0, 2, y))


def test_default_target_is_the_favourable_class_and_says_which_rows_already_have_it(moons, trained, caplog):
    X, y = moons.arrays("test")
    favourable = X[y == moons.schema.favourable_index][:5]
    with caplog.at_level("WARNING", logger="recourselab.densityflow.model"):
        res = trained.generate(favourable)
    assert (res.target == moons.schema.favourable_index).all()
    assert "5 of 5 factual rows are already labelled their target class" in caplog.text
    assert "pass target=" in caplog.text
    caplog.clear()
    with caplog.at_level("WARNING", logger="recourselab.densityflow.model"):
        trained.generate(favourable, target=1 - moons.schema.favourable_index)
    assert "already labelled" not in caplog.text


def test_an_explicit_target_the_rows_already_have_is_logged_too(moons, trained, caplog):
    X, _ = moons.arrays("test")
    current = trained.surrogate.labels(torch.tensor(X[:6], dtype=torch.float32)).numpy()
    with caplog.at_level("WARNING", logger="recourselab.densityflow.model"):
        res = trained.generate(X[:6], target=current)
    assert "6 of 6 factual rows are already labelled their target class" in caplog.text
    assert "pass target=" not in caplog.text  # the caller chose the targets
    assert (res.cost_l2 > 0).all()  # why it is worth a warning: the flow still moves them


@pytest.mark.parametrize("n_points", [1, 2.5, True])
def test_trajectory_points_must_be_an_integer_of_at_least_two(trained, n_points):
    with pytest.raises(DataError, match="n_points must be an integer >= 2"):
        trained.generate(np.zeros((2, 2)), target=1, return_trajectories=True, n_points=n_points)


def test_trajectory_points_may_be_a_numpy_integer(trained):
    res = trained.generate(np.zeros((2, 2)), target=1, return_trajectories=True, n_points=np.int64(4))
    assert res.trajectories.shape == (4, 2, 2)


def test_a_width_error_without_a_schema_names_the_model_and_the_factuals():
    rng = np.random.default_rng(0)
    flow = DensityFlow(epochs=1, warmup_epochs=0, hidden=8, n_starts=2).fit(rng.normal(size=(60, 2)),
                                                                              np.repeat([0, 1], 30))
    with pytest.raises(DataError, match=r"^factuals width 3 does not match the model's 2 encoded columns"):
        flow.generate(np.zeros((1, 3)), target=1)


def _copy(model: DensityFlow, path) -> DensityFlow:
    model.save(path)
    return DensityFlow.load(path, schema=model.schema)


def test_a_failed_fit_leaves_the_model_as_it_was(moons, trained, tmp_path, monkeypatch):
    X, y = moons.arrays("train")
    Xq = moons.arrays("test")[0][:20]

    def crash(self, *args, **kwargs):
        raise RuntimeError("disk full")

    fresh = DensityFlow(schema=moons.schema, **{**FAST, "epochs": 2})
    monkeypatch.setattr(DensityFlow, "generator_loss", crash)
    with pytest.raises(RuntimeError, match="disk full"):
        fresh.fit(X, y)
    with pytest.raises(RecourselabError, match="not fitted"):
        fresh.generate(Xq, target=1)
    fresh.with_settings(hidden=16)  # no networks: the architecture may still change

    model = _copy(trained, tmp_path)
    model.queries_used_ = 7
    log_before = model.log_
    before = model.generate(Xq, target=1)
    with pytest.raises(RuntimeError, match="disk full"):
        model.fit(X, y)
    monkeypatch.undo()
    after = model.generate(Xq, target=1)
    np.testing.assert_array_equal(after.counterfactuals, before.counterfactuals)
    assert model.queries_used_ == 7 and model.log_ is log_before


class _Flaky:
    """A BlackBox whose members fail from the ``fail_at``-th query on, or answer ``answer``."""

    def __init__(self, box: BlackBox, fail_at: int | None = None, answer=None, *, charged: bool = False,
                 answer_from: int = 1):
        self.box, self.fail_at, self.answer, self.calls = box, fail_at, answer, 0
        self.charged, self.answer_from = charged, answer_from  # charged: the failing query's rows are counted

    def remaining(self, name):
        return self.box.remaining(name)

    def used(self, name):
        return self.box.used(name)

    def query(self, X, budget):
        self.calls += 1
        if self.fail_at is not None and self.calls >= self.fail_at:
            if self.charged:  # as BlackBox.query does: rows are reserved before the members answer
                self.box.query(X, budget=budget)
            raise RuntimeError("member crashed")
        out = self.box.query(X, budget=budget)
        if self.answer is not None and self.calls >= self.answer_from:
            return type("Out", (), {"mean_proba": self.answer(out.mean_proba)})()
        return out


def test_a_failed_distillation_restores_the_weights_and_counts_its_queries(moons, trained, ensemble, tmp_path):
    X, y = moons.arrays("train")
    Xq = moons.arrays("test")[0][:20]
    model = _copy(trained, tmp_path)
    before = model.generate(Xq, target=1)
    oracle = _Flaky(ensemble, fail_at=3)
    spent = ensemble.used("distill")
    with pytest.raises(RuntimeError, match="member crashed"):
        model.distill(oracle, X, y, budget=100)
    assert model.queries_used_ == 16 == ensemble.used("distill") - spent  # two answered queries of 8 rows
    np.testing.assert_array_equal(model.generate(Xq, target=1).counterfactuals, before.counterfactuals)
    assert not model.surrogate.training and not model.field.training
    spent = ensemble.used("distill")
    with pytest.raises(RuntimeError, match="member crashed"):  # the third query is charged, then fails
        model.distill(_Flaky(ensemble, fail_at=3, charged=True), X, y, budget=100)
    assert model.queries_used_ - 16 == 24 == ensemble.used("distill") - spent


def test_distillation_failing_in_a_generator_step_can_be_run_again(moons, trained, ensemble, tmp_path, monkeypatch):
    X, y = moons.arrays("train")
    model = _copy(trained, tmp_path)
    real = DensityFlow.generator_loss

    def crash(self, *args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(DensityFlow, "generator_loss", crash)
    with pytest.raises(KeyboardInterrupt):
        model.distill(ensemble, X, y, budget=100)
    assert all(p.requires_grad for m in (model.surrogate, model.field) for p in m.parameters())
    monkeypatch.setattr(DensityFlow, "generator_loss", real)
    assert model.distill(ensemble, X, y, budget=16) == 16  # trains again: the surrogate is not left frozen


@pytest.mark.parametrize("answer, message", [
    (lambda p: np.full_like(p, np.nan), r"NaN, infinite or outside \[0, 1\]"),
    (lambda p: p * 2, r"outside \[0, 1\]"),
    (lambda p: p[:, :1], r"shape \(8, 1\) for 8 rows; the model has 2 classes"),
])
def test_distillation_refuses_bad_oracle_answers(moons, trained, ensemble, tmp_path, answer, message):
    X, y = moons.arrays("train")
    model = _copy(trained, tmp_path)
    weights = {k: v.clone() for k, v in model.surrogate.state_dict().items()}
    with pytest.raises(DataError, match=message):  # the first answer is fine and trains a step
        model.distill(_Flaky(ensemble, answer=answer, answer_from=2), X, y, budget=100)
    assert all(torch.equal(weights[k], v) for k, v in model.surrogate.state_dict().items())
    assert model.queries_used_ == 16


def test_a_budget_spent_by_another_caller_ends_distillation_gracefully(moons, trained, ensemble, tmp_path):
    X, y = moons.arrays("train")
    model = _copy(trained, tmp_path)

    class Racing(_Flaky):  # another caller spends the rest between remaining() and query()
        def query(self, X, budget):
            if self.calls == 1:
                raise QueryBudgetExceeded("spent by another caller")
            return super().query(X, budget)

    assert model.distill(Racing(ensemble), X, y, budget=100) == 8
    assert model.queries_used_ == 8


def test_generate_solves_in_chunks_of_queries(moons, trained):
    Xq = moons.arrays("test")[0][:5]
    whole = trained.generate(Xq, target=1, return_trajectories=True, n_points=4)
    trained.with_settings(solve_queries=2)
    try:
        chunked = trained.generate(Xq, target=1, return_trajectories=True, n_points=4)
    finally:
        trained.with_settings(solve_queries=1024)
    first_two = trained.generate(Xq[:2], target=1, return_trajectories=True, n_points=4)
    np.testing.assert_array_equal(chunked.counterfactuals[:2], first_two.counterfactuals)  # the same solve
    np.testing.assert_array_equal(chunked.trajectories[:, :2], first_two.trajectories)
    np.testing.assert_allclose(chunked.counterfactuals, whole.counterfactuals, atol=1e-4)  # solver tolerance
    assert chunked.trajectories.shape == (4, 5, 2) and chunked.trajectories.dtype == np.float64
    assert chunked.surrogate_valid.shape == (5,)


def test_a_diverging_solve_is_a_data_error(moons, trained, tmp_path):
    model = _copy(trained, tmp_path)
    with torch.no_grad():
        next(model.field.parameters()).fill_(float("nan"))
    Xq = moons.arrays("test")[0][:5]
    with pytest.raises(DataError, match=r"ODE solve diverged \(dopri5: step size underflow\) on a batch of 5"):
        model.generate(Xq, target=1)
    model.with_settings(method="rk4")  # fixed steps: NaN end states instead of an assertion
    with pytest.raises(DataError, match=r"ODE solve diverged \(NaN or infinite end states\) for 5 of 5 queries"):
        model.generate(Xq, target=1)


def test_values_beyond_float32_are_a_data_error(trained):
    with pytest.raises(DataError, match=r"beyond the float32 range .*: 1 row\(s\)"):
        trained.generate(np.array([[0.0, 0.0], [1e39, 0.0]]), target=1)


def test_load_refuses_weights_from_another_save(moons, trained, ensemble, tmp_path):
    X, y = moons.arrays("train")
    _copy(trained, tmp_path / "a")
    other = DensityFlow.load(tmp_path / "a", schema=moons.schema)
    other.distill(ensemble, X, y, budget=16)
    other.save(tmp_path / "b")
    (tmp_path / "a" / "generator.pt").write_bytes((tmp_path / "b" / "generator.pt").read_bytes())
    with pytest.raises(ArtifactError, match=r"generator\.pt is not the weights file that densityflow\.json"):
        DensityFlow.load(tmp_path / "a", schema=moons.schema)
    assert DensityFlow.load(tmp_path / "b", schema=moons.schema).queries_used_ == 16


def test_distillation_keeps_the_noise_class(moons, trained, ensemble, tmp_path):
    """The anchor is the full NCE loss: box points stay noise and S stays put on real rows."""
    X, y = moons.arrays("train")
    Xte, yte = (torch.as_tensor(a.copy()) for a in moons.arrays("test"))
    model = _copy(trained, tmp_path)
    box = (torch.rand(4000, X.shape[1], generator=torch.Generator().manual_seed(0)) * 2 - 1) * model.C

    def noise_share_and_median_score():
        with torch.no_grad():
            share = (model.surrogate.labels(box) == model.n_classes).float().mean().item()
            return share, model.surrogate.score(Xte.float(), yte).median().item()

    share0, score0 = noise_share_and_median_score()
    model.with_settings(distill_epochs=20, distill_inner=3, distill_points=8, distill_replay=True, distill_gen_steps=2)
    assert model.distill(ensemble, X, y, budget=480) == 480
    share1, score1 = noise_share_and_median_score()
    assert share0 > 0.5 and share1 > share0 - 0.1, (share0, share1)
    assert abs(score1 - score0) < 1.0, (score0, score1)


class _Constant:
    """A binary model that labels every row ``label``; counts its calls."""

    def __init__(self, label: int) -> None:
        self.label, self.calls = label, 0

    def predict_proba(self, X: np.ndarray) -> np.ndarray:
        self.calls += 1
        proba = np.zeros((len(X), 2))
        proba[:, self.label] = 1.0
        return proba


def test_generate_with_an_oracle_carries_the_ensemble_verdict_and_changes_nothing_else(moons, trained, ensemble):
    import dataclasses

    X, y = moons.arrays("test")
    rows, target = X[:12], 1 - y[:12]
    plain = trained.generate(rows, target=target)
    before = ensemble.used("verify")
    checked = trained.generate(rows, target=target, oracle=ensemble)
    assert plain.verdict is None and ensemble.used("verify") - before == 12  # one query of the n rows
    for f in dataclasses.fields(plain):
        if f.name not in ("verdict", "counterfactuals_original", "trajectories"):
            np.testing.assert_array_equal(getattr(plain, f.name), getattr(checked, f.name))
    pd.testing.assert_frame_equal(plain.counterfactuals_original, checked.counterfactuals_original)
    out = ensemble.query(checked.counterfactuals, budget="eval")
    v = checked.verdict
    assert v.member_names == ensemble.member_names and v.queries == 12 and v.budget_name == "verify"
    np.testing.assert_array_equal(v.member_valid, (out.member_labels == target).T)
    np.testing.assert_array_equal(v.agreement, out.agreement(target))
    later = plain.verify(ensemble, budget_name="later")  # the separate step gives the same verdict
    assert ensemble.used("later") == 12 and later.verdict.member_labels.tolist() == v.member_labels.tolist()
    assert later.counterfactuals is plain.counterfactuals and plain.verdict is None  # a new result


def test_counterfactuals_the_ensemble_rejects_are_logged_with_counts(moons, trained, caplog):
    X, _ = moons.arrays("test")
    target = np.ones(6, dtype=int)
    oracle = {"no": _Constant(0), "yes": _Constant(1), "also_yes": _Constant(1)}
    with caplog.at_level("WARNING", logger="recourselab.densityflow.model"):
        res = trained.generate(X[:6], target=target, oracle=oracle)
    assert ("6 of 6 counterfactuals are rejected by at least one of the 3 ensemble members; 0 by a majority, "
            "0 by all (mean agreement 0.67)") in caplog.text
    assert res.verdict.counts()["valid_per_model"] == {"no": 0, "yes": 6, "also_yes": 6}
    caplog.clear()
    with caplog.at_level("WARNING", logger="recourselab.densityflow.model"):
        res = trained.generate(X[:6], target=target, oracle={"no": _Constant(0), "other": _Constant(0)})
    assert "6 of 6 counterfactuals are rejected by at least one of the 2 ensemble members; 6 by a majority, " \
           "6 by all (mean agreement 0.00)" in caplog.text
    caplog.clear()
    with caplog.at_level("WARNING", logger="recourselab.densityflow.model"):
        res = trained.generate(X[:6], target=target, oracle=_Constant(1))  # one model alone
    assert "rejected" not in caplog.text and res.verdict.unanimous.all()


def test_a_verification_budget_too_small_refuses_before_any_solve_or_query(moons, trained, monkeypatch):
    X, y = moons.arrays("test")
    member = _Constant(1)
    box = BlackBox({"m": member}, schema=moons.schema, budgets={"verify": 4})
    monkeypatch.setattr(DensityFlow, "_solve", lambda *a, **k: pytest.fail("solved before the budget check"))
    with pytest.raises(QueryBudgetExceeded, match=r"verifying 5 counterfactuals needs 5 rows .* only 4 are left"):
        trained.generate(X[:5], target=1 - y[:5], oracle=box)
    assert box.used("verify") == 0 and member.calls == 0


def test_progress_bars_change_no_result_and_no_log_line(moons, ensemble, monkeypatch, caplog):
    import io
    import logging
    import sys

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    X, y = moons.arrays("train")
    settings = {**FAST, "epochs": 4, "max_train_rows": 160, "distill_epochs": 2}

    def run(progress):
        caplog.clear()
        with caplog.at_level(logging.DEBUG, logger="recourselab.densityflow"):
            flow = DensityFlow(schema=moons.schema, seed=3, **settings).fit(X, y, progress=progress)
            flow.distill(ensemble, X, y, budget=20, budget_name=f"bars-{progress}", progress=progress)
        lines = [r.getMessage().split("; ")[0] for r in caplog.records]  # the wall times differ
        return flow, lines

    stream = Terminal()
    monkeypatch.setattr(sys, "stderr", stream)
    monkeypatch.delenv("CI", raising=False)
    shown, shown_lines = run(None)  # auto on a terminal: the bars show
    assert "DensityFlow seed 3" in stream.getvalue() and "distill seed 3" in stream.getvalue()
    written = stream.getvalue()
    hidden, hidden_lines = run(False)
    assert stream.getvalue() == written  # hidden: nothing more written
    assert shown_lines == hidden_lines and any(line.startswith("DensityFlow training") for line in shown_lines)
    assert shown.log_.rows == hidden.log_.rows
    for name in DensityFlow.WEIGHT_FILES:
        assert shown.file_bytes(name) == hidden.file_bytes(name)


def test_a_monotone_coordinate_never_moves_the_forbidden_way_and_the_rule_is_saved(tmp_path):
    from recourselab.densityflow.ode import integrate

    rng = np.random.default_rng(0)
    X = rng.normal(size=(120, 3))
    y = (X[:, 0] + X[:, 1] > 0).astype(int)
    flow = DensityFlow(monotone=np.array([1, -1, 0]), epochs=2, hidden=16, embed_dim=4, max_train_rows=120,
                       n_starts=3, seed=0).fit(X, y)
    _, _, path = integrate(flow.field, torch.as_tensor(X[:20], dtype=torch.float32),
                           torch.as_tensor(1 - y[:20]), n_points=6)
    steps = path[1:] - path[:-1]
    assert (steps[..., 0] >= -1e-6).all() and (steps[..., 1] <= 1e-6).all()
    res = flow.generate(X[:20], target=1 - y[:20])
    cf = res.counterfactuals
    assert (cf[:, 0] >= X[:20, 0]).all() and (cf[:, 1] <= X[:20, 1]).all()
    flow.save(tmp_path / "m")
    again = DensityFlow.load(tmp_path / "m")
    assert again.field.monotone.tolist() == [1.0, -1.0, 0.0]
    np.testing.assert_array_equal(again.generate(X[:20], target=1 - y[:20]).counterfactuals, cf)
    frame = pd.DataFrame(X, columns=["a", "b", "c"]).assign(y=y)
    ruled = Schema.fit(frame, dataset="t", target="y", favourable=1, categorical=[], monotone={"a": "increasing"})
    free = DensityFlow(schema=ruled, monotone=np.zeros(3), epochs=1, hidden=8, embed_dim=2,
                       max_train_rows=60).fit(ruled.transform(frame), y)
    free.save(tmp_path / "free")  # trained without rules on a schema with one: it is loaded as trained
    assert DensityFlow.load(tmp_path / "free", schema=ruled).field.monotone.tolist() == [0.0, 0.0, 0.0]
    with pytest.raises(DataError, match="monotone must hold -1, 0 or 1"):
        DensityFlow(monotone=np.array([2, 0, 0]), epochs=1).fit(X, y)
