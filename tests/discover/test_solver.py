"""The DISCOVER solver: monotone steps, determinism, constraints, results, errors."""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest

from recourselab.discover import (
    STRATEGIES,
    Discover,
    DiscoverResult,
    DiscoverSettings,
    NotCertifiedWarning,
    UnknownStrategyError,
    make_target,
)
from recourselab.discover.certify import eta_rule, first_certified, ucl_sw2, ucl_w2
from recourselab.discover.ot import match, random_directions, trim_weights
from recourselab.discover.setup import directions_at, holdout_certified_x, input_threshold
from recourselab.errors import ConfigError, DataError, RecourselabError
from recourselab.models.oracle import BlackBox

pytestmark = pytest.mark.filterwarnings("ignore::recourselab.discover.NotCertifiedWarning")

TARGET = make_target("beta", a=0.1, b=0.9, seed=0)
FAST = {"max_iter": 8, "metric_projections": 200}
#: Log branches of the records appended after the search (their rows are reverted / polished rows).
AFTER_SEARCH = ("repair", "polish")


def _run(toy, **kw) -> DiscoverResult:
    with pytest.warns(NotCertifiedWarning) if kw.pop("expect_warning", False) else _nullcontext():
        return Discover(toy.blackbox(), schema=toy.schema, **(FAST | kw)).solve(toy.factuals, TARGET)


class _nullcontext:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def _objective(toy, X, eta, settings: DiscoverSettings, theta=None):
    """Q(X; eta) recomputed from scratch (sorted matchings), independent of the solver; ``theta``:
    the directions (default: the run's fixed set)."""
    n, d = X.shape
    if theta is None:
        theta = random_directions(d, settings.n_projections, np.random.default_rng([settings.seed, 4]))
    ystar = TARGET.values(n)
    ref_x = np.sort((toy.factuals @ theta.T).T, axis=1)
    y = toy.model.predict_proba(X)[:, 1]
    return match(X @ theta.T, ref_x, y, np.sort(ystar), trim_weights(n, settings.delta)).objective(eta)[0]


@pytest.mark.parametrize("strategy", list(STRATEGIES))
def test_no_op_guarantee_q_never_increases_under_fixed_eta(toy, strategy):
    # Unreachable budgets: never certified, so the result is the last iterate and can be rechecked.
    # Monte Carlo with few, unguided, large proposals: some iterations offer only worse candidates.
    weak = ({"trials": 2, "guidance": False, "recombine": False, "step": 1.0, "restart_prob": 0.0}
            if strategy == "monte_carlo" else {})
    res = _run(toy, **({"strategy": strategy, "eta_l": 0.6, "eta_r": 0.6, "kappa": 0.0, "max_iter": 10,
                        "patience": 100, "trials": 4, "generations": 2, "U_x": 1e-6, "U_y": 1e-6,
                        "expect_warning": True} | weak))
    log = res.log
    assert (log["eta"] == 0.6).all()
    assert (np.diff(log["Q"].to_numpy()) <= 1e-12).all()  # across iterations (same eta)
    assert log["accepted"].sum() >= 5
    if strategy == "monte_carlo":  # and some iterations whose every proposal was worse kept the iterate
        assert (~log["accepted"].iloc[:-1]).any()
    # the selected candidate's score is the next iterate's Q, recomputed from fresh matchings
    np.testing.assert_allclose(log["Q_selected"].to_numpy()[:-1], log["Q"].to_numpy()[1:], rtol=0, atol=1e-12)
    # the logged Q is the objective of the iterate, recomputed independently
    last = int(log["iteration"].iloc[-1])
    assert res.iteration == last and not res.feasible
    assert abs(_objective(toy, res.counterfactuals, 0.6, DiscoverSettings()) - log["Q"].iloc[-1]) < 1e-12


def test_single_step_never_increases_q_for_both_strategies(toy):
    for strategy in STRATEGIES:
        res = _run(toy, strategy=strategy, max_iter=1, trials=6, U_x=1e-6, U_y=1e-6, expect_warning=True)
        row = res.log.iloc[0]
        assert row["accepted"] and res.iteration == 1  # one step taken, its result returned
        eta = row["eta"]
        s = DiscoverSettings()
        before, after = _objective(toy, toy.factuals, eta, s), _objective(toy, res.counterfactuals, eta, s)
        assert after < before
        assert after == pytest.approx(row["Q_selected"], abs=1e-12) and before == pytest.approx(row["Q"], abs=1e-12)


def test_same_seed_same_result_and_seed_matters(toy):
    a, b = _run(toy, seed=3), _run(toy, seed=3)
    assert np.array_equal(a.counterfactuals, b.counterfactuals)
    pd.testing.assert_frame_equal(a.log, b.log)
    assert a.metrics == b.metrics
    c = _run(toy, seed=4)
    assert not np.array_equal(a.counterfactuals, c.counterfactuals)


def test_result_contents_and_constraints(toy):
    bb = toy.blackbox()
    solver = Discover(bb, schema=toy.schema, max_iter=15, metric_projections=200)
    res = solver.solve(toy.factuals, TARGET)
    n, d = toy.factuals.shape
    assert res.counterfactuals.shape == (n, d) and res.scores.shape == (n,)
    assert list(res.counterfactuals_frame.columns) == toy.schema.feature_names
    for col in ("iteration", "Q", "OT_x", "OT_y", "eta", "UCL_x", "UCL_y", "feasible", "rows"):
        assert col in res.log.columns
    search = res.log[~res.log["branch"].isin(AFTER_SEARCH)]  # a repair / polish record lists the rows it changed
    assert all(len(r) in (0, solver.settings.top_k) for r in search["rows"])
    assert res.queries == bb.queries["discover"] > 0
    assert res.target == TARGET.to_dict()
    imm = toy.schema.immutable_mask()
    assert np.array_equal(res.counterfactuals[:, imm], toy.factuals[:, imm])
    raw = res.counterfactuals_frame
    assert np.array_equal(raw["age"], np.rint(raw["age"]))
    assert np.allclose(res.counterfactuals, toy.schema.snap(res.counterfactuals), rtol=0, atol=1e-9)  # valid
    assert np.allclose(res.scores, toy.model.predict_proba(res.counterfactuals)[:, 1])
    m = res.metrics
    assert m["edited_rows"] > 0 and m["OT_x"] > 0 and m["MMD2"] >= 0
    assert res.feasible == (m["UCL_x"] < m["U_x"] and m["UCL_y"] < m["U_y"])
    assert res.metadata()["settings"] == solver.settings.to_dict() and res.settings["max_iter"] == 15


def test_feasible_runs_return_a_certified_edited_iterate(toy):
    res = _run(toy, U_x=100.0, U_y=10.0, max_iter=4)
    assert res.feasible and res.metrics["edited_rows"] > 0
    assert res.log["feasible"].iloc[res.iteration]


def test_stop_certified_returns_the_first_certified_edited_iterate(toy):
    loose = dict(U_x=100.0, U_y=10.0, max_iter=12)
    first = _run(toy, stop="certified", **loose)
    full = _run(toy, stop="stalled", patience=100, **loose)
    log = first.log
    assert first.feasible and first.metrics["edited_rows"] > 0
    assert first.iteration == len(log) - 1  # the run ended at the first certified edited iterate
    assert first.metrics["first_certified_iteration"] == first.iteration
    assert full.metrics["first_certified_iteration"] == first.iteration == first_certified(full.log)
    assert not (log["feasible"] & (log["edited_rows"] > 0)).iloc[:-1].any()
    assert len(full.log) == 13 and len(log) < len(full.log)  # the stalled rule runs on to T
    # both runs share the iterations up to the stop (same seed, same proposals)
    common = ["Q", "OT_x", "OT_y", "eta", "edited_rows"]
    assert np.allclose(log[common].to_numpy(float), full.log[common].iloc[:len(log)].to_numpy(float))
    with pytest.raises(ConfigError, match="stalled, certified, ot_y"):
        DiscoverSettings(stop="first")


def test_stop_ot_y_ends_at_the_first_certified_edit_at_the_level(toy):
    loose = dict(U_x=100.0, U_y=10.0, max_iter=12)
    full = _run(toy, stop="stalled", patience=100, **loose)
    log = full.log
    cert = (log["feasible"] & (log["edited_rows"] > 0)).to_numpy()
    # the logged OT(y) of an iterate is the reported metric (trimmed at metric_delta)
    assert log["OT_y_metric"].iloc[full.iteration] == pytest.approx(full.metrics["OT_y"], abs=1e-12)
    levels = np.sort(log["OT_y_metric"][cert].to_numpy())
    level = float(levels[len(levels) // 2])  # reached, but not at the first certified iterate
    stop_at = int(np.flatnonzero(cert & (log["OT_y_metric"] <= level).to_numpy())[0])
    assert stop_at > full.metrics["first_certified_iteration"]
    res = _run(toy, stop="ot_y", stop_ot_y=level, **loose)
    assert res.iteration == len(res.log) - 1 == stop_at
    assert res.feasible and res.metrics["OT_y"] <= level and res.metrics["stop_ot_y_reached"] is True
    assert res.metrics["first_certified_iteration"] == full.metrics["first_certified_iteration"]
    # an unreachable level runs to T, returns the stalled rule's choice and says so
    never = _run(toy, stop="ot_y", stop_ot_y=0.0, **loose)
    assert len(never.log) == len(full.log) and never.iteration == full.iteration
    assert never.metrics["stop_ot_y_reached"] is False and "stop_ot_y_reached" not in full.metrics
    with pytest.raises(ConfigError, match="stop_ot_y"):
        DiscoverSettings(stop="ot_y")
    with pytest.raises(ConfigError, match="stop_ot_y"):
        DiscoverSettings(stop_ot_y=0.1)
    with pytest.raises(ConfigError, match="stop_ot_y"):
        DiscoverSettings(stop="ot_y", stop_ot_y=-1.0)


def test_uncertifiable_runs_say_so_plainly(toy):
    res = _run(toy, U_x=1e-6, U_y=1e-6, max_iter=3, expect_warning=True)
    assert res.feasible is False and res.metrics["feasible"] is False
    assert res.iteration == len(res.log) - 1


class _ConstantModel:
    def predict_proba(self, X):
        return np.tile([0.3, 0.7], (len(X), 1))


def test_a_model_no_edit_can_move_is_never_reported_certified(toy):
    # every edit raises OT(x) and leaves the outputs alone, so the unedited sample is the best one;
    # proposals identical to the current rows (rounded or clipped back) must not count as edits
    with pytest.warns(NotCertifiedWarning, match="output side violated.*no candidate improved Q in the last 12 "):
        res = Discover(_ConstantModel(), schema=toy.schema, **(FAST | {"max_iter": 12})).solve(toy.factuals, TARGET)
    assert res.feasible is False and res.metrics["edited_rows"] == 0
    assert np.array_equal(res.counterfactuals, res.factuals)
    assert (res.log["edited_rows"] == 0).all() and not res.log["accepted"].any()
    assert res.metrics["last_accepted_iteration"] is None


def test_the_last_accepted_iteration_is_reported_and_a_busy_run_is_not_called_stalled(toy):
    with pytest.warns(NotCertifiedWarning) as caught:  # thresholds no run can meet: the search runs to T
        res = _run(toy, U_x=1e-6, U_y=1e-6, max_iter=12)
    accepted = res.log.loc[res.log["accepted"], "iteration"]
    assert len(accepted) > 0 and res.metrics["last_accepted_iteration"] == accepted.iloc[-1]
    # the up-front UnreachableCertificateWarning comes first; the run's own warning is the NotCertifiedWarning
    message = str(next(w.message for w in caught if w.category is NotCertifiedWarning))
    assert "input and output side violated" in message
    assert ("stalled" in message) == (12 - 1 - accepted.iloc[-1] >= 10)


class _BadModel:
    def __init__(self, value):
        self.value = value

    def predict_proba(self, X):
        return np.tile([1.0 - self.value, self.value], (len(X), 1))


@pytest.mark.parametrize("value", [1.5, -0.2, np.nan])
def test_model_outputs_outside_probabilities_are_refused(toy, value):
    with pytest.raises(DataError, match=r"outside \[0, 1\] or non-finite in 40 of 40 rows"):
        Discover(_BadModel(value), schema=toy.schema, **FAST).solve(toy.factuals, TARGET)


def test_dataframe_factuals_are_encoded_through_the_schema(toy):
    frame = toy.schema.inverse_transform(toy.factuals)
    a = _run(toy)
    b = Discover(toy.blackbox(), schema=toy.schema, **FAST).solve(frame, TARGET)
    assert np.allclose(a.factuals, b.factuals) and np.array_equal(a.counterfactuals, b.counterfactuals)


@pytest.mark.parametrize(("setting", "pattern"), [
    ({"trials": 2.5}, r"trials=2\.5 \(an integer\)"),
    ({"top_k": True}, r"top_k=True \(an integer\)"),
    ({"alpha": "0.05"}, r"alpha='0\.05' \(a finite number\)"),
    ({"step": float("nan")}, r"step=nan \(a finite number\)"),
    ({"recombine": "yes"}, r"recombine='yes' \(True or False\)"),
    ({"embedding_dim": 2.0}, r"embedding_dim=2\.0 \(an integer or None\)"),
    ({"seed": -1}, r"seed=-1 \(an integer >= 0\)"),
    ({"delta": 0.0}, r"delta=0\.0 \(in \(0, 0\.5\)\)"),
    ({"delta": 0.5}, r"delta=0\.5 \(in \(0, 0\.5\)\)"),
])
def test_settings_of_the_wrong_type_are_refused_with_the_rule(setting, pattern):
    with pytest.raises(ConfigError, match=pattern):
        DiscoverSettings(**setting)


def test_settings_take_ints_for_floats_and_none_where_optional():
    s = DiscoverSettings(U_x=2, U_x_margin=1, embedding_dim=None, stop="ot_y", stop_ot_y=0)
    assert (s.U_x, s.U_x_margin, s.embedding_dim, s.stop_ot_y) == (2, 1, None, 0)


def test_settings_hold_plain_python_values_and_a_snapshot_of_the_rules(toy):
    import json

    s = DiscoverSettings(trials=np.int64(12), step=np.float32(0.25), guidance=np.bool_(False))
    assert type(s.trials) is int and type(s.step) is float and s.guidance is False
    json.dumps(s.to_dict())  # JSON-safe
    rules = {"income": "fixed"}
    solver = Discover(toy.blackbox(), schema=toy.schema, **FAST, actionability=rules)
    rules["income"], rules["age"] = "sideways", "fixed"  # later edits of the caller's dict
    assert solver.settings.actionability == {"income": "fixed"}
    res = solver.solve(toy.factuals, TARGET)
    inc = toy.schema.slices()["income"].start
    assert np.array_equal(res.counterfactuals[:, inc], toy.factuals[:, inc]) and res.metrics["edited_rows"] > 0
    json.dumps(res.metadata())


def test_bad_inputs_give_clear_errors(toy):
    solver = Discover(toy.blackbox(), schema=toy.schema, **FAST)
    with pytest.raises(DataError, match="columns"):
        solver.solve(toy.factuals[:, :-1], TARGET)
    bad = toy.factuals.copy()
    bad[3, 1] = np.nan
    with pytest.raises(DataError, match="NaN"):
        solver.solve(bad, TARGET)
    with pytest.raises(DataError, match="same size"):
        solver.solve(toy.factuals, make_target("values", values=[1.0] * 7))
    with pytest.raises(DataError, match="at least 2"):
        solver.solve(toy.factuals[:1], TARGET)
    with pytest.raises(DataError, match="2-D"):
        solver.solve(toy.factuals[0], TARGET)


def test_inputs_that_are_not_what_they_claim_are_refused(toy):
    frame = toy.frame.drop(columns="y").iloc[:40]
    off_circle = toy.schema.transform(frame) * 0.5  # phase pairs of no level
    with pytest.raises(DataError, match=r"categorical feature\(s\) \['job', 'sex', 'owner'\] are not the phase pair"):
        Discover(toy.blackbox(), schema=toy.schema, **FAST).solve(off_circle, TARGET)
    with pytest.raises(TypeError, match="schema must be a recourselab Schema"):
        Discover(toy.blackbox(), schema=None)
    with pytest.raises(ConfigError, match="actionability must map feature names to rules"):
        DiscoverSettings(actionability=["age"])

    class ThreeColumns:  # a binary problem answered with three class columns
        def predict_proba(self, X):
            return np.full((len(X), 3), 1 / 3)

    with pytest.raises(DataError, match=r"probabilities of shape \(40, 3\), expected \(40, 2\)"):
        Discover(ThreeColumns(), schema=toy.schema, **FAST).solve(toy.factuals, TARGET)


def test_dataframe_factuals_keep_their_index_and_missing_values_are_logged(toy, caplog):
    frame = toy.frame.drop(columns="y").iloc[100:140].copy()
    frame.iloc[0, frame.columns.get_loc("sex")] = None
    with caplog.at_level("WARNING", logger="recourselab.data.schema"):
        res = Discover(toy.blackbox(), schema=toy.schema, **FAST).solve(frame, TARGET)
    assert "missing values {'sex': 1} imputed" in caplog.text and "immutable features ['sex']" in caplog.text
    pd.testing.assert_index_equal(res.counterfactuals_frame.index, frame.index)


def test_reported_eta_is_the_returned_iterates_and_final_eta_the_selecting_one(toy):
    res = _run(toy, max_iter=15)
    log = res.log.set_index("iteration")
    assert res.metrics["eta"] == log.loc[res.iteration, "eta"]
    assert res.metrics["final_eta"] == log["eta"].iloc[-1]


def test_unknown_strategy_and_settings_list_the_valid_ones(toy):
    with pytest.raises(UnknownStrategyError) as err:
        Discover(toy.blackbox(), schema=toy.schema, strategy="annealing")
    assert "monte_carlo" in str(err.value) and "genetic" in str(err.value)
    with pytest.raises(ConfigError, match="did you mean 'top_k'"):
        Discover(toy.blackbox(), schema=toy.schema, topk=3)
    with pytest.raises(ConfigError, match="trials"):
        Discover(toy.blackbox(), schema=toy.schema, trials=0)
    with pytest.raises(TypeError, match="predict_proba"):
        Discover(object(), schema=toy.schema)


def test_settings_object_and_overrides(toy):
    s = DiscoverSettings(trials=3, seed=9, max_iter=2, top_k=3, polish_iter=0)  # the search's queries alone
    solver = Discover.from_settings(toy.model, schema=toy.schema, settings=s)
    assert solver.settings == s
    res = solver.solve(toy.factuals, TARGET)  # a plain predict_proba model works too
    # factual scores + at most M * k rows per iteration (unedited and repeated rows are not asked again)
    assert 40 < res.queries <= 40 + 2 * 3 * 3


class _Recording:
    """A model that records every batch of rows it is asked to score."""

    def __init__(self, model):
        self.model, self.calls = model, []

    def predict_proba(self, X):
        self.calls.append(np.array(X, copy=True))
        return self.model.predict_proba(X)


@pytest.mark.parametrize("strategy", list(STRATEGIES))
def test_the_model_never_scores_a_known_or_repeated_row_twice_in_a_call(toy, strategy):
    model = _Recording(toy.model)
    res = Discover(model, schema=toy.schema, strategy=strategy, h=1, trials=30, max_iter=6, top_k=3,
                   metric_projections=200).solve(toy.factuals, TARGET)
    first, *later = model.calls
    assert np.array_equal(first, res.factuals) and len(later) >= 6
    for batch in later:  # one call per iteration (genetic: per generation)
        assert len(np.unique(batch, axis=0)) == len(batch)
    # in the first iteration every current row is its factual, whose score is known
    assert not (later[0][:, None, :] == res.factuals[None]).all(axis=2).any()
    assert res.queries == sum(len(b) for b in model.calls)
    if strategy == "monte_carlo":  # one batch of M * k rows per iteration; about two thirds repeat a row
        search = res.log.loc[~res.log["branch"].isin(AFTER_SEARCH), "queries"].max()
        assert search < 40 + 6 * 30 * 3 * 0.6


def test_a_model_edits_cannot_move_accepts_no_edit_at_any_batch_size(toy):
    # candidates scored in a batch of M can land a rounding error below the no-op's Q: no edit
    with pytest.warns(NotCertifiedWarning):
        res = Discover(_BadModel(0.3), schema=toy.schema, max_iter=10, trials=20,
                       metric_projections=200).solve(toy.factuals, TARGET)
    assert not res.log["accepted"].any() and res.metrics["edited_rows"] == 0


def test_a_sample_with_no_editable_feature_is_refused_before_the_model_is_queried(toy):
    from recourselab.data.schema import Schema

    frame = toy.frame.drop(columns=["y"]).assign(y=toy.frame["y"])
    features = [c for c in frame.columns if c != "y"]
    schema = Schema.fit(frame, dataset="toy", target="y", favourable=1, categorical=["job", "sex", "owner"],
                        integer=["age", "debts"], immutable=features)
    bb = BlackBox({"lr": toy.model}, schema=schema)
    with pytest.raises(DataError, match="no feature can be edited"):
        Discover(bb, schema=schema, max_iter=2).solve(schema.transform(frame)[:20], TARGET)
    assert bb.queries == {}


def test_a_target_kind_that_is_not_a_name_is_an_unknown_target():
    from recourselab.discover import UnknownTargetError

    with pytest.raises(UnknownTargetError, match=r"unknown target \['beta'\]; valid targets: constant, beta"):
        make_target(["beta"])


def test_large_batches_are_screened_then_scored_exactly(toy):
    # a tiny sort buffer forces the fixed-plan screen; Q must still never increase (eta fixed)
    res = _run(toy, trials=12, max_elements=1, eta_l=0.5, eta_r=0.5, kappa=0.0, max_iter=6)
    log = res.log[~res.log["branch"].isin(AFTER_SEARCH)]
    assert log["accepted"].any()
    assert (np.diff(log["Q"].to_numpy()) <= 1e-12).all()
    # the screened winner is scored exactly: its Q is the next iterate's recomputed Q
    np.testing.assert_allclose(log["Q_selected"].to_numpy()[:-1], log["Q"].to_numpy()[1:], rtol=0, atol=1e-12)


@pytest.mark.parametrize("kw", [{"recombine": False}, {"strategy": "genetic", "generations": 3, "trials": 5},
                                {"guidance": False}, {"edit_categorical": False}])
def test_variants_run_deterministically_and_respect_immutables(toy, kw):
    a, b = _run(toy, **kw), _run(toy, **kw)
    assert np.array_equal(a.counterfactuals, b.counterfactuals)
    imm = toy.schema.immutable_mask()
    assert np.array_equal(a.counterfactuals[:, imm], toy.factuals[:, imm])
    if kw.get("edit_categorical") is False:
        cat = toy.schema.categorical_mask()
        assert np.array_equal(a.counterfactuals[:, cat], toy.factuals[:, cat])


def test_log_and_counterfactuals_round_trip_through_parquet(toy, tmp_path):
    res = _run(toy)
    res.log.to_parquet(tmp_path / "log.parquet", index=False)
    back = pd.read_parquet(tmp_path / "log.parquet")
    assert back["rows"].map(list).tolist() == res.log["rows"].tolist()
    res.counterfactuals_frame.to_parquet(tmp_path / "cf.parquet", index=False)
    assert np.allclose(toy.schema.transform(pd.read_parquet(tmp_path / "cf.parquet")), res.counterfactuals)


@pytest.mark.parametrize("eta_rule_on", [False, True])
def test_row_scores_decompose_q_and_drive_the_editable_set(toy, eta_rule_on):
    res = _run(toy, max_iter=30, top_k=3) if eta_rule_on else _run(toy, eta_l=0.6, eta_r=0.6, kappa=0.0, top_k=3)
    assert (res.log["eta"].nunique() > 1) == eta_rule_on  # with the rule on, scores under each iteration's eta
    q = res.row_scores
    assert q.shape == (len(res.log), len(toy.factuals)) and (q >= 0).all()
    assert np.allclose(q.sum(axis=1), res.log["Q"].to_numpy(), rtol=1e-10, atol=1e-15)  # Prop. 3.1
    for t, rows in enumerate(res.log["rows"]):
        if len(rows) and res.log["branch"].iloc[t] not in AFTER_SEARCH:  # the top-k rows by q_i of that iteration
            assert sorted(rows) == sorted(np.argsort(-q[t], kind="stable")[:3].tolist())


def test_eta_rule_and_confidence_limits_are_wired_through_the_iterations(toy):
    solver = Discover(toy.blackbox(), schema=toy.schema, **(FAST | {"max_iter": 30}))
    res = solver.solve(toy.factuals, TARGET)
    log, s, m = res.log, solver.settings, res.metrics
    assert {"y_violated", "both_violated"} <= set(log["branch"])  # more than one branch replayed
    left, right = s.eta_l, s.eta_r
    for _, row in log[~log["branch"].isin(AFTER_SEARCH)].iterrows():
        step = eta_rule(row["UCL_x"], row["UCL_y"], m["U_x"], m["U_y"], left, right, s.kappa)
        assert (row["eta"], row["eta_l"], row["eta_r"], row["branch"]) == (step.eta, step.left, step.right, step.branch)
        left, right = step.left, step.right  # the narrowed interval is carried to the next iteration
    # the certificates bound the solver's own (N-direction, trimmed) distances
    assert (log["UCL_x"] >= log["OT_x"]).all() and (log["UCL_y"] >= log["OT_y"]).all()


def test_resampled_directions_are_fresh_per_iteration_seeded_and_off_by_default():
    fixed, fresh = DiscoverSettings(), DiscoverSettings(resample_directions=True)
    first = random_directions(5, 10, np.random.default_rng([0, 4]))
    assert all(np.array_equal(directions_at(5, fixed, t), first) for t in (0, 1, 7))
    assert np.array_equal(directions_at(5, fresh, 0), first)  # the first iteration keeps the run's set
    sets = [directions_at(5, fresh, t) for t in (1, 2, 3)]
    assert not any(np.allclose(a, b) for i, a in enumerate([first, *sets]) for b in sets[i:] if a is not b)
    assert np.array_equal(directions_at(5, fresh, 2), sets[1])  # seeded: the same set again
    assert np.allclose(np.linalg.norm(sets[0], axis=1), 1.0)


@pytest.mark.parametrize("seed", [0, 1, 7])
def test_the_run_directions_are_not_the_stream_of_the_target_or_the_sample(seed):
    # default_rng([seed, 0]) is default_rng(seed) (SeedSequence drops trailing zeros): the stream a
    # target of the same seed draws from; the directions must come from a stream of their own
    s = DiscoverSettings(seed=seed)
    shared = random_directions(5, s.n_projections, np.random.default_rng(seed))
    assert np.array_equal(random_directions(5, s.n_projections, np.random.default_rng([seed, 0])), shared)
    assert not np.allclose(directions_at(5, s, 0), shared)


def test_resampled_runs_score_each_iterate_on_its_own_directions(toy):
    # unreachable budgets and a fixed eta: the last iterate is returned and can be rechecked
    kw = dict(eta_l=0.6, eta_r=0.6, kappa=0.0, max_iter=10, patience=100, trials=4, U_x=1e-6, U_y=1e-6,
              expect_warning=True)
    res = _run(toy, resample_directions=True, **kw)
    log, s = res.log, DiscoverSettings(resample_directions=True)
    last = int(log["iteration"].iloc[-1])
    assert res.iteration == last and log["accepted"].sum() >= 3
    theta = directions_at(toy.factuals.shape[1], s, last)
    assert abs(_objective(toy, res.counterfactuals, 0.6, s, theta) - log["Q"].iloc[-1]) < 1e-12
    assert abs(_objective(toy, res.counterfactuals, 0.6, s) - log["Q"].iloc[-1]) > 1e-9  # not the fixed set
    # within an iteration the no-op candidate still bounds the selection
    assert (log["Q_selected"] <= log["Q"] + 1e-12).all()
    again = _run(toy, resample_directions=True, **kw)
    pd.testing.assert_frame_equal(log, again.log)
    assert np.array_equal(res.counterfactuals, again.counterfactuals)
    assert not np.array_equal(res.counterfactuals, _run(toy, **kw).counterfactuals)


def test_resampled_runs_calibrate_the_input_threshold_on_each_iterations_directions(toy):
    res = _run(toy, resample_directions=True, max_iter=10)
    log, s, d = res.log, DiscoverSettings(resample_directions=True), toy.factuals.shape[1]
    search = log[~log["branch"].isin(AFTER_SEARCH)]  # those are measured on the last iteration's directions
    floors = [input_threshold(np.sort((toy.factuals @ directions_at(d, s, t).T).T, axis=1), s)
              for t in search["iteration"]]
    np.testing.assert_allclose(search["U_x"], floors, rtol=1e-12)
    np.testing.assert_allclose(log["U_x"].iloc[len(search):], search["U_x"].iloc[-1], rtol=0)
    assert log["U_x"].nunique() > 1 and res.metrics["U_x"] == log["U_x"].iloc[res.iteration]
    assert (log["feasible"] == ((log["UCL_x"] < log["U_x"]) & (log["UCL_y"] < res.metrics["U_y"]))).all()
    assert _run(toy, max_iter=10).log["U_x"].nunique() == 1  # one set, one threshold


def test_holdout_certificate_rechecks_the_input_side_on_fresh_directions(toy):
    Xf, s = toy.factuals, DiscoverSettings()
    # the unedited sample sits at every set's floor, inside the calibrated budget (and not with no margin)
    assert holdout_certified_x(Xf, Xf, s) == 1.0
    assert holdout_certified_x(Xf, Xf, DiscoverSettings(U_x_margin=0.0)) == 0.0
    assert holdout_certified_x(Xf + 3.0, Xf, s) == 0.0  # a shift of 3 in every column fails on every set
    assert holdout_certified_x(Xf, Xf, DiscoverSettings(holdout_sets=0)) is None
    # the sets are drawn from a stream the search never uses, per set index
    run_set = directions_at(Xf.shape[1], s, 0)
    assert not np.allclose(random_directions(Xf.shape[1], 10, np.random.default_rng([0, 3, 0])), run_set)
    res = _run(toy, max_iter=20)
    X = res.counterfactuals
    rate = res.metrics["certified_x_holdout"]
    assert rate == holdout_certified_x(X, Xf, s)
    by_hand = []
    for k in range(s.holdout_sets):
        theta = random_directions(Xf.shape[1], s.n_projections, np.random.default_rng([s.seed, 3, k]))
        ref = np.sort((Xf @ theta.T).T, axis=1)
        by_hand.append(ucl_sw2(np.sort((X @ theta.T).T, axis=1), ref, s.delta, s.alpha) < input_threshold(ref, s))
    assert rate == np.mean(by_hand) and 0.0 < rate < 1.0  # the run's own certificate does not carry over fully
    assert _run(toy, max_iter=20, holdout_sets=0).metrics["certified_x_holdout"] is None


def test_thresholds_that_can_never_certify_are_rejected_up_front(toy):
    same = np.repeat(toy.factuals[:1], 10, axis=0)  # identical rows: a band of no width
    with pytest.raises(DataError, match="U_x is 0: the 10 factual rows are identical"):
        Discover(toy.blackbox(), schema=toy.schema, **FAST).solve(same, TARGET)
    res = Discover(toy.blackbox(), schema=toy.schema, **(FAST | {"U_x": 1.0})).solve(same, TARGET)
    assert res.metrics["U_x"] == 1.0  # an explicit threshold runs
    with pytest.raises(DataError, match="U_y is 0"):
        Discover(toy.blackbox(), schema=toy.schema, **(FAST | {"U_y_margin": 0.0})).solve(
            toy.factuals, make_target("constant"))
    with pytest.raises(DataError, match="every factual score already equals the constant target"):
        Discover(_ConstantModel(), schema=toy.schema, **FAST).solve(toy.factuals, make_target("constant", value=0.7))


def test_the_output_threshold_never_lets_the_unedited_factuals_pass(toy, caplog):
    near = make_target("shift", delta=0.02)  # the factual scores barely moved: the floor + margin covers them

    def run(**kw):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", NotCertifiedWarning)
            return Discover(toy.blackbox(), schema=toy.schema, **(FAST | {"max_iter": 3} | kw)).solve(
                toy.factuals, near)

    with caplog.at_level("INFO", logger="recourselab.discover"):
        res = run()
    start = res.log["UCL_y"].iloc[0]  # iteration 0 is the unedited factual sample
    floor = ucl_w2(np.sort(res.target_values), np.sort(res.target_values), DiscoverSettings().delta,
                   DiscoverSettings().alpha)
    assert start < floor + DiscoverSettings().U_y_margin  # the uncapped threshold would certify no change
    assert res.metrics["U_y"] == start and not res.log["feasible"].iloc[0]
    assert "U_y capped at the unedited factuals' UCL_y" in caplog.text
    far = _run(toy)  # the beta target is far from the factual scores: the floor + margin rule stands
    assert far.metrics["U_y"] == pytest.approx(
        ucl_w2(np.sort(far.target_values), np.sort(far.target_values), DiscoverSettings().delta,
               DiscoverSettings().alpha) + DiscoverSettings().U_y_margin, abs=1e-12)
    caplog.clear()
    with caplog.at_level("WARNING", logger="recourselab.discover"):
        given = run(U_y=5.0)
    assert given.metrics["U_y"] == 5.0 and "already pass the output threshold" in caplog.text


@pytest.mark.parametrize("solver", ["discover", "dce"])
@pytest.mark.parametrize(("settings", "target", "pattern"), [
    ({"actionability": {"agee": "increasing"}}, "beta", r"actionability names unknown features \['agee'\]"),
    ({}, "betta", r"unknown target 'betta'"),
    ({}, make_target("values", values=[0.9] * 3), r"has 3 values but there are 40 factual rows"),
])
def test_a_bad_target_or_rule_is_refused_before_the_model_is_queried(toy, solver, settings, target, pattern):
    bb = toy.blackbox()
    if solver == "dce":
        from recourselab.discover import DCE, fit_torch_mlp

        mlp = fit_torch_mlp(toy.X, toy.frame["y"].to_numpy(), hidden=(8,), epochs=2, seed=0)
        run = DCE(mlp, schema=toy.schema, max_iter=2, **settings)
        calls = []
        run._scores = lambda X: calls.append(len(X))  # any call would be recorded
    else:
        run = Discover(bb, schema=toy.schema, max_iter=2, **settings)
    with pytest.raises(RecourselabError, match=pattern):
        run.solve(toy.factuals, target)
    assert (bb.queries == {}) if solver == "discover" else (calls == [])


def test_a_rule_on_an_immutable_feature_is_logged_once_and_changes_nothing(toy, caplog):
    with caplog.at_level("WARNING", logger="recourselab.discover.proposals"):
        res = Discover(toy.blackbox(), schema=toy.schema, max_iter=3,
                       actionability={"sex": "increasing"}).solve(toy.factuals, TARGET)
    assert caplog.text.count("actionability rules on immutable features ['sex'] have no effect") == 1
    imm = toy.schema.immutable_mask()
    assert np.array_equal(res.counterfactuals[:, imm], toy.factuals[:, imm])


class _Fixed:
    """A binary model that scores every row ``p`` for the favourable class."""

    def __init__(self, p: float) -> None:
        self.p = p

    def predict_proba(self, X):
        return np.tile([1.0 - self.p, self.p], (len(X), 1))


def test_each_row_is_checked_against_the_target_value_it_is_matched_to(toy):
    import dataclasses

    res = _run(toy)
    assert np.array_equal(res.favourable, res.scores > 0.5)
    matched = res.matched_target
    assert np.array_equal(np.sort(matched), np.sort(res.target_values))  # a permutation of the targets
    order = np.argsort(res.scores, kind="stable")
    assert np.all(np.diff(matched[order]) >= 0)  # the output transport's monotone matching
    assert np.array_equal(res.valid, res.favourable | (matched <= 0.5))
    by_hand = dataclasses.replace(res, scores=np.array([0.9, 0.2, 0.4, 0.45]),
                                  target_values=np.array([0.8, 0.7, 0.6, 0.1]))
    assert by_hand.matched_target.tolist() == [0.8, 0.1, 0.6, 0.7]
    assert by_hand.valid.tolist() == [True, True, False, False]


def test_rows_short_of_their_matched_target_are_logged_with_counts(toy, caplog):
    with caplog.at_level("WARNING", logger="recourselab.discover"), pytest.warns(NotCertifiedWarning):
        res = Discover(_Fixed(0.3), schema=toy.schema, **(FAST | {"max_iter": 2})).solve(toy.factuals, TARGET)
    wanted = int((res.target_values > 0.5).sum())
    assert 0 < wanted < 40 and not res.favourable.any() and int((~res.valid).sum()) == wanted
    assert (f"DISCOVER: {wanted} of 40 counterfactual rows are not favourable (b(x) <= 0.5) although their matched "
            f"target value is; 0 of 40 rows are favourable, the target asks for {wanted}") in caplog.text
    caplog.clear()
    with caplog.at_level("WARNING", logger="recourselab.discover"), pytest.warns(NotCertifiedWarning):
        res = Discover(_Fixed(0.7), schema=toy.schema, **(FAST | {"max_iter": 2})).solve(toy.factuals, TARGET)
    assert res.valid.all() and "not favourable" not in caplog.text


def test_the_progress_bar_changes_no_result_and_no_log_line(toy, monkeypatch, caplog):
    import io
    import re
    import sys

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    def run(progress):
        caplog.clear()
        with caplog.at_level("DEBUG", logger="recourselab.discover"):
            res = Discover(toy.blackbox(), schema=toy.schema, **FAST).solve(toy.factuals, TARGET, progress=progress)
        return res, [re.sub(r"\d+\.\d+s", "", r.getMessage()) for r in caplog.records]  # the wall time differs

    stream = Terminal()
    monkeypatch.setattr(sys, "stderr", stream)
    monkeypatch.delenv("CI", raising=False)
    shown, shown_lines = run(None)  # auto on a terminal: the bar shows
    assert "DISCOVER" in stream.getvalue() and "iter" in stream.getvalue()
    written = stream.getvalue()
    hidden, hidden_lines = run(False)
    assert stream.getvalue() == written
    assert np.array_equal(shown.counterfactuals, hidden.counterfactuals)
    pd.testing.assert_frame_equal(shown.log, hidden.log)
    assert shown.metrics == hidden.metrics and shown.queries == hidden.queries
    assert shown_lines == hidden_lines and len(shown_lines) > 2


# ---------------------------------------------------------------------------------------------- certificates, embed
def test_an_unreachable_threshold_is_warned_about_before_the_search(toy):
    from recourselab.discover.setup import UnreachableCertificateWarning

    with pytest.warns(UnreachableCertificateWarning, match="input side: the unedited factuals' own bound"):
        res = _run(toy, U_x=1e-6, max_iter=0)  # no search step at all: the warning comes from the setup
    assert res.metrics["certificate_reachable"] is False
    assert "input side" in res.metrics["certificate_unreachable_reason"]
    with warnings.catch_warnings():
        warnings.simplefilter("error", UnreachableCertificateWarning)
        ok = _run(toy, max_iter=0)  # calibrated thresholds are reachable
    assert ok.metrics["certificate_reachable"] is True and ok.metrics["certificate_unreachable_reason"] is None


def test_the_bootstrap_rule_reports_both_verdicts_in_their_own_scales(toy):
    from recourselab.discover.certify import Certificate

    res = _run(toy, certificate="bootstrap", U_x=0.8, U_y=0.5, delta=0.1, max_iter=6, bootstrap_resamples=50)
    m = res.metrics
    assert m["certificate"] == "bootstrap" and m["U_x_bootstrap"] == 0.8 and m["U_x_dkw"] == pytest.approx(0.64)
    assert m["U_y_dkw"] == pytest.approx(0.25)
    cert = Certificate("bootstrap", len(res.scores), 0.1, 0.05, 50, seed=0)
    assert m["UCL_y_bootstrap"] == pytest.approx(cert.output_bound(np.sort(res.scores), np.sort(res.target_values)))
    assert m["certified_bootstrap"] == res.feasible  # one direction set: the run's verdict
    assert (res.log["UCL_y"] <= 1.0 + 1e-12).all()  # unsquared bounds of scores in [0, 1]


def test_new_options_are_deterministic_per_seed(toy):
    kw = dict(certificate="bootstrap", U_y=0.4, U_x=0.9, bootstrap_resamples=30, restart_prob=0.5,
              row_choice="stall", accept="best", max_iter=6, h=2)
    a, b = _run(toy, **kw), _run(toy, **kw)
    assert np.array_equal(a.counterfactuals, b.counterfactuals) and a.log.equals(b.log)
    c = _run(toy, **(kw | {"seed": 1}))
    assert not np.array_equal(a.counterfactuals, c.counterfactuals)


def test_the_embed_space_carries_the_objective_and_the_reported_ot_x(toy):
    from recourselab.discover.metrics import ot_x

    sl = toy.schema.slices()

    def onehot(X):
        blocks = [X[:, [sl[f.name].start]] if f.kind == "numerical"
                  else 3.0 * np.eye(len(f.levels))[toy.schema.decode_categorical(X, f.name)]
                  for f in toy.schema.features]
        return np.hstack(blocks)

    res = Discover(toy.blackbox(), schema=toy.schema, embed=onehot, **(FAST | {"h": 3, "restart_prob": 0.5})).solve(
        toy.factuals, TARGET)
    X = res.counterfactuals
    assert np.allclose(toy.schema.snap(X), X)  # valid categories
    imm = toy.schema.immutable_mask()
    assert np.array_equal(X[:, imm], toy.factuals[:, imm])
    assert res.metrics["OT_x"] == pytest.approx(ot_x(onehot(X), onehot(toy.factuals), n_projections=200, delta=0.1))
    assert (res.log["Q_selected"] <= res.log["Q"] + 1e-12).all()  # accept="improve": Q never goes up
    with pytest.raises(TypeError, match="embed must be a callable"):
        Discover(toy.blackbox(), schema=toy.schema, embed=3)
