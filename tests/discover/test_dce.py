"""Gradient DCE baseline on a differentiable torch MLP (same objective, same eta rule)."""

from __future__ import annotations

import numpy as np
import pytest

from recourselab.discover import DCE, TorchClassifier, fit_torch_mlp, make_target

pytestmark = pytest.mark.filterwarnings("ignore::recourselab.discover.NotCertifiedWarning")
TARGET = make_target("beta", a=0.1, b=0.9, seed=0)


@pytest.fixture(autouse=True)
def _one_thread():
    from recourselab.runtime import limit_threads

    with limit_threads(1):  # tiny models: more threads only add contention
        yield


@pytest.fixture(scope="module")
def mlp(toy) -> TorchClassifier:
    from recourselab.runtime import limit_threads

    with limit_threads(1):
        return fit_torch_mlp(toy.X, toy.frame["y"].to_numpy(), hidden=(16,), epochs=150, seed=0)


def test_torch_classifier_probabilities(toy, mlp):
    p = mlp.predict_proba(toy.X[:10])
    assert p.shape == (10, 2) and np.allclose(p.sum(axis=1), 1.0)
    acc = (mlp.predict_proba(toy.X).argmax(1) == toy.frame["y"].to_numpy()).mean()
    assert acc > 0.6


def test_dce_decreases_q_under_a_fixed_eta(toy, mlp):
    res = DCE(mlp, schema=toy.schema, lr=0.05, max_iter=25, eta_l=0.7, eta_r=0.7, kappa=0.0,
              metric_projections=200).solve(toy.factuals, TARGET)
    q = res.log["Q"].to_numpy()
    assert (res.log["eta"] == 0.7).all()
    assert q[-1] < 0.9 * q[0]
    assert res.log["OT_y"].iloc[-1] < res.log["OT_y"].iloc[0]
    assert res.method == "dce"


def test_dce_returns_valid_actionable_counterfactuals(toy, mlp):
    res = DCE(mlp, schema=toy.schema, max_iter=10, metric_projections=200,
              actionability={"age": "increasing"}).solve(toy.factuals, TARGET)
    X, Xf = res.counterfactuals, res.factuals
    imm = toy.schema.immutable_mask()
    assert np.array_equal(X[:, imm], Xf[:, imm])
    assert np.allclose(X, toy.schema.snap(X), rtol=0, atol=1e-9)  # snapped to valid points
    age = toy.schema.slices()["age"].start
    assert (X[:, age] >= Xf[:, age] - 1e-9).all()
    assert np.allclose(res.scores, mlp.predict_proba(X)[:, 1])
    m = res.metrics
    assert res.feasible == (m["UCL_x"] < m["U_x"] and m["UCL_y"] < m["U_y"])


def test_dce_rejects_non_differentiable_models(toy):
    with pytest.raises(TypeError, match="differentiable"):
        DCE(toy.model, schema=toy.schema)


@pytest.mark.parametrize("lr", [float("inf"), float("nan"), 0.0, -0.1, True, "0.05"])
def test_dce_refuses_a_step_size_that_is_not_a_finite_positive_number(toy, mlp, lr):
    from recourselab.errors import DataError

    with pytest.raises(DataError, match=r"lr must be a finite number > 0, got"):
        DCE(mlp, schema=toy.schema, lr=lr)


def test_dce_takes_a_numpy_step_size_as_a_plain_float(toy, mlp):
    run = DCE(mlp, schema=toy.schema, lr=np.float32(0.05))
    assert type(run.lr) is float and run.lr == pytest.approx(0.05)


def test_dce_checks_the_models_outputs_like_discover(toy):
    import torch

    from recourselab.errors import DataError

    torch.manual_seed(0)
    one_logit = TorchClassifier(torch.nn.Linear(toy.X.shape[1], 1))
    with pytest.raises(DataError, match=r"probabilities of shape \(40, 1\), expected \(40, 2\)"):
        DCE(one_logit, schema=toy.schema, max_iter=2).solve(toy.factuals, TARGET)

    class NaNs(torch.nn.Module):
        def forward(self, x):
            return torch.full((len(x), 2), float("nan"), dtype=x.dtype)

    with pytest.raises(DataError, match="non-finite in 40 of 40 rows"):
        DCE(TorchClassifier(NaNs()), schema=toy.schema, max_iter=2).solve(toy.factuals, TARGET)


def test_dce_stop_certified_ends_at_the_first_certified_edited_iterate(toy, mlp):
    kw = dict(max_iter=10, metric_projections=200, U_x=100.0, U_y=10.0)
    res = DCE(mlp, schema=toy.schema, stop="certified", **kw).solve(toy.factuals, TARGET)
    log = res.log
    ok = (log["feasible"] & (log["edited_rows"] > 0)).to_numpy()
    assert ok[-1] and not ok[:-1].any() and res.feasible
    assert len(DCE(mlp, schema=toy.schema, **kw).solve(toy.factuals, TARGET).log) == 11


def test_dce_stop_ot_y_ends_at_the_level(toy, mlp):
    kw = dict(max_iter=10, metric_projections=200, U_x=100.0, U_y=10.0)
    full = DCE(mlp, schema=toy.schema, **kw).solve(toy.factuals, TARGET).log
    ok = (full["feasible"] & (full["edited_rows"] > 0)).to_numpy()
    level = float(np.median(full["OT_y_metric"][ok]))
    stop_at = int(np.flatnonzero(ok & (full["OT_y_metric"] <= level).to_numpy())[0])
    res = DCE(mlp, schema=toy.schema, stop="ot_y", stop_ot_y=level, **kw).solve(toy.factuals, TARGET)
    assert len(res.log) - 1 == stop_at == res.iteration
    assert res.metrics["stop_ot_y_reached"] == (res.feasible and res.metrics["OT_y"] <= level)


def test_dce_max_iter_comes_from_the_settings_unless_given(toy, mlp):
    from recourselab.discover import DiscoverSettings

    assert DCE(mlp, schema=toy.schema, settings=DiscoverSettings(max_iter=3)).settings.max_iter == 3
    assert DCE(mlp, schema=toy.schema, settings=DiscoverSettings(max_iter=3), max_iter=5).settings.max_iter == 5
    assert DCE(mlp, schema=toy.schema).settings.max_iter == 100


def test_dce_never_reports_unmoved_rows_as_edits_even_outside_the_training_range(toy, mlp):
    """Snapping clips to the training range: a factual beyond it must not count as an edit of its own."""
    Xf = toy.factuals.copy()
    age = toy.schema.slices()["age"].start
    Xf[:2, age] = toy.X[:, age].max() + 2.0  # two factuals older than every training row
    res = DCE(mlp, schema=toy.schema, max_iter=0, U_x_margin=5.0, U_y_margin=5.0,
              metric_projections=100).solve(Xf, TARGET)
    assert res.metrics["edited_rows"] == 0 and not res.feasible
    np.testing.assert_array_equal(res.counterfactuals, Xf)


def test_snapping_keeps_a_moved_factual_outside_the_training_range_near_its_iterate(toy):
    from recourselab.discover import DiscoverSettings
    from recourselab.discover.dce import snap_rows
    from recourselab.discover.proposals import ProposalSpace

    sl = toy.schema.slices()
    inc, age = sl["income"].start, sl["age"].start
    f_age = next(f for f in toy.schema.features if f.name == "age")
    Xf = toy.factuals[:3].copy()
    Xf[:, inc] = toy.X[:, inc].max() + 3.0  # beyond the training range
    Xf[:, age] = (90 - f_age.mean) / f_age.std  # training ages are 18-69
    space = ProposalSpace(toy.schema, Xf, DiscoverSettings())
    X = Xf.copy()
    X[:, inc] -= 1e-3  # the gradient moved them a little
    X[:, age] -= 0.6 / f_age.std  # 0.6 years: rounds to one year less
    Xs = snap_rows(X, Xf, toy.schema, space)
    np.testing.assert_allclose(Xs[:, inc], X[:, inc], rtol=0, atol=1e-12)  # not pulled to the training bound
    years = Xs[:, age] * f_age.std + f_age.mean
    np.testing.assert_allclose(years, 89.0, atol=1e-9)


def test_snapping_a_half_moved_categorical_pair_gives_a_level_phase(toy):
    from recourselab.discover import DiscoverSettings
    from recourselab.discover.dce import snap_rows
    from recourselab.discover.proposals import ProposalSpace

    cos, sin = toy.schema.slices()["job"].start, toy.schema.slices()["job"].start + 1
    Xf = toy.factuals[:5].copy()
    Xf[:, [cos, sin]] = (1.0, 0.0)  # job "a", phase 0 of 4
    space = ProposalSpace(toy.schema, Xf, DiscoverSettings())
    X = Xf.copy()
    X[:, sin] = 1.5  # only the sine column moved (the cosine sat at its clip bound 1)
    Xs = snap_rows(X, Xf, toy.schema, space)
    assert (toy.schema.inverse_transform(Xs)["job"] == "b").all()  # the nearest level, phase pi/2
    phases = next(c for c in space.cats if c.name == "job").phases
    dist = np.abs(Xs[:, None, [cos, sin]] - phases[None]).sum(axis=2).min(axis=1)
    assert (dist < 1e-12).all()  # every pair is exactly one level's phase
    np.testing.assert_array_equal(toy.schema.transform(toy.schema.inverse_transform(Xs)), Xs)


def test_dce_keeps_categorical_actionability(toy, mlp):
    rules = {"job": "increasing", "owner": "increasing"}
    res = DCE(mlp, schema=toy.schema, lr=2.0, max_iter=30, metric_projections=100,
              actionability=rules).solve(toy.factuals, TARGET)
    for name in rules:
        before = toy.schema.decode_categorical(res.factuals, name)  # level indices
        after = toy.schema.decode_categorical(res.counterfactuals, name)
        assert (after >= before).all(), name
    assert res.metrics["edited_rows"] > 0  # the test moved something


def test_dce_resampled_directions_recheck_the_result_on_its_own_directions(toy, mlp):
    from recourselab.discover import DiscoverSettings
    from recourselab.discover.certify import ucl_sw2
    from recourselab.discover.setup import directions_at, input_threshold

    kw = dict(lr=0.2, max_iter=12, metric_projections=200, resample_directions=True)
    res = DCE(mlp, schema=toy.schema, **kw).solve(toy.factuals, TARGET)
    again = DCE(mlp, schema=toy.schema, **kw).solve(toy.factuals, TARGET)
    assert np.array_equal(res.counterfactuals, again.counterfactuals) and res.metrics == again.metrics
    theta = directions_at(toy.factuals.shape[1], DiscoverSettings(resample_directions=True), res.iteration)
    ref = np.sort((res.factuals @ theta.T).T, axis=1)
    ucl = ucl_sw2(np.sort((res.counterfactuals @ theta.T).T, axis=1), ref, 0.01, 0.05)
    assert res.metrics["UCL_x"] == pytest.approx(ucl, rel=1e-12)
    s = DiscoverSettings(resample_directions=True)
    assert res.metrics["U_x"] == pytest.approx(input_threshold(ref, s), rel=1e-12)  # that set's own floor
    assert res.log["U_x"].nunique() > 1
    fixed = DCE(mlp, schema=toy.schema, **(kw | {"resample_directions": False})).solve(toy.factuals, TARGET)
    assert not np.allclose(fixed.log["OT_x"].to_numpy()[1:], res.log["OT_x"].to_numpy()[1:len(fixed.log)])


def test_dce_counts_every_model_pass(toy, mlp):
    res = DCE(mlp, schema=toy.schema, max_iter=5, stop="stalled", patience=100).solve(toy.factuals, TARGET)
    # every model pass counts: the factuals' scores, then one pass (scores and gradient) for the
    # factuals (t = 0) and for each of the 5 gradient iterates, and the returned rows
    assert res.metrics["iterations_run"] == 5
    assert res.queries == 40 + 6 * 40 + 40
    assert res.log["queries"].tolist() == [40 + (t + 1) * 40 for t in range(6)]
