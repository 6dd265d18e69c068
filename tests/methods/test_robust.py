"""RobustFlow (densityflow_r): verified and repaired DensityFlow counterfactuals, exact query counts."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from recourselab.errors import DataError
from recourselab.methods.common import valid_points
from recourselab.methods.robust import SETTINGS, RobustFlow, RobustSettings
from recourselab.models.oracle import QueryBudgetExceeded

from .conftest import immutables_kept, unanimous


class StubFlow:
    """Stands in for a distilled DensityFlow (its ``generate`` and ``queries_used_``): each row moves ``share``
    of the way to the nearest training row of its target class, snapped, immutables kept; often not unanimous."""

    queries_used_ = 17

    def __init__(self, problem, share: float) -> None:
        self.problem, self.share = problem, share

    def generate(self, X, target):
        p = self.problem
        tgt = np.broadcast_to(np.asarray(target), (len(X),))
        near = np.array([p.X_train[p.y_train == t][np.linalg.norm(p.X_train[p.y_train == t] - x, axis=1).argmin()]
                         for x, t in zip(X, tgt, strict=True)])
        return SimpleNamespace(counterfactuals=valid_points(X + self.share * (near - X), X, p.schema))


@pytest.fixture(scope="module")
def moons_flow(moons):
    return StubFlow(moons, 0.8)


@pytest.fixture(scope="module")
def mixed_flow(mixed):
    return StubFlow(mixed, 0.6)


def test_rows_unanimous_at_once_are_kept_without_shrink(moons, moons_flow):
    cf = RobustFlow(moons_flow, moons.blackbox(), moons.X_train, moons.y_train, settings="no_shrink").explain(
        moons.factuals, 1)
    base = moons_flow.generate(moons.factuals, 1).counterfactuals
    kept = np.isclose(cf.counterfactuals, base).all(axis=1)
    assert kept.sum() == round(cf.log["unanimous_before_repair"] * len(cf))


def test_paper_setting_is_densityflow_without_queries(moons, moons_flow):
    box = moons.blackbox()
    cf = RobustFlow(moons_flow, box, moons.X_train, moons.y_train, settings="paper").explain(moons.factuals, 1)
    np.testing.assert_array_equal(cf.counterfactuals, moons_flow.generate(moons.factuals, 1).counterfactuals)
    assert cf.queries == 0 and box.queries == {} and cf.valid is None and cf.method == "densityflow_r"


def test_default_repairs_every_row_to_unanimous_with_exact_query_count(moons, moons_flow):
    box = moons.blackbox()
    cf = RobustFlow(moons_flow, box, moons.X_train, moons.y_train).explain(moons.factuals, 1)
    truth = unanimous(moons, cf)
    assert truth.mean() >= 0.9
    np.testing.assert_array_equal(cf.valid, truth)
    n = len(moons.factuals)
    steps = cf.log["queries_by_step"]
    assert cf.queries == sum(steps.values()) == box.used("search") and steps["verify"] == n
    assert steps["pool"] == cf.log["pool_labelled"]
    assert cf.log["repaired"] > 0 and cf.log["unanimous_before_repair"] < 1  # the stub leaves rows to repair
    assert cf.log["distill_queries"] == 17
    base = moons_flow.generate(moons.factuals, 1).counterfactuals
    first = round(cf.log["unanimous_before_repair"] * n)
    # rows unanimous at once only move back towards their factual: never costlier than DensityFlow's
    shrunk = np.linalg.norm(cf.counterfactuals - moons.factuals, axis=1) <= np.linalg.norm(base - moons.factuals,
                                                                                           axis=1) + 1e-9
    assert shrunk.sum() >= first


class DetourFlow(StubFlow):
    """Moves each row all the way to its 15th nearest training row of the target class: valid, but a detour."""

    def generate(self, X, target):
        p = self.problem
        tgt = np.broadcast_to(np.asarray(target), (len(X),))
        far = np.array([p.X_train[p.y_train == t][np.argsort(np.linalg.norm(p.X_train[p.y_train == t] - x,
                                                                                axis=1))[15]]
                        for x, t in zip(X, tgt, strict=True)])
        return SimpleNamespace(counterfactuals=valid_points(far, X, p.schema))


def test_the_shortcut_only_shortens_unanimous_rows_and_counts_its_queries(moons):
    flow = DetourFlow(moons, 1.0)
    runs = {}
    for name in ("no_shortcut", "default"):
        box = moons.blackbox()
        method = RobustFlow(flow, box, moons.X_train, moons.y_train, settings=name)
        runs[name] = (method.explain(moons.factuals, 1), box)
    (plain, _), (short, box) = runs["no_shortcut"], runs["default"]
    np.testing.assert_array_equal(short.valid, unanimous(moons, short))
    assert short.valid.sum() >= plain.valid.sum()
    cost = {k: np.linalg.norm(r.counterfactuals - moons.factuals, axis=1) for k, (r, _) in runs.items()}
    assert (cost["default"] <= cost["no_shortcut"] + 1e-12).all()
    assert short.log["shortcuts"] > 0 and (cost["default"] < cost["no_shortcut"] - 1e-9).sum() == short.log["shortcuts"]
    assert cost["default"].mean() < 0.95 * cost["no_shortcut"].mean()  # the detour is cut short on average
    steps = short.log["queries_by_step"]
    assert short.queries == sum(steps.values()) == box.used("search") and steps["shortcut"] > 0
    assert plain.log["shortcuts"] == 0 and plain.log["queries_by_step"]["shortcut"] == 0


def test_immutables_never_change_and_the_pool_only_uses_equal_immutables(mixed, mixed_flow):
    box = mixed.blackbox()
    cf = RobustFlow(mixed_flow, box, mixed.X_train, mixed.y_train, settings=RobustSettings(pool=20, steps=3)).explain(
        mixed.factuals, 1)
    assert immutables_kept(mixed, cf)
    np.testing.assert_array_equal(cf.valid, unanimous(mixed, cf))
    assert cf.log["unanimous_before_repair"] < 0.1 and cf.valid.mean() >= 0.75
    assert cf.queries == sum(cf.log["queries_by_step"].values()) == box.used("search")


def test_budget_is_never_exceeded(moons, moons_flow):
    n = len(moons.factuals)
    with pytest.raises(QueryBudgetExceeded, match="verifying"):
        RobustFlow(moons_flow, moons.blackbox(), moons.X_train, moons.y_train).explain(moons.factuals, 1,
                                                                                       budget=n - 1)
    box = moons.blackbox()
    cf = RobustFlow(moons_flow, box, moons.X_train, moons.y_train).explain(moons.factuals, 1, budget=n + 10)
    assert cf.queries == box.used("search") <= n + 10


def test_bad_settings_are_named(moons, moons_flow):
    with pytest.raises(DataError, match="valid settings: paper, default"):
        RobustFlow(moons_flow, moons.blackbox(), moons.X_train, moons.y_train, settings="robust")
    with pytest.raises(DataError, match="steps must be an integer"):
        RobustSettings(steps=-1)
    assert not SETTINGS["paper"].repair and SETTINGS["default"].repair  # the paper's defaults stay a named setting
    with pytest.raises(DataError, match="extend must be increasing factors > 1"):
        RobustSettings(extend=(2.0, 1.5))


def test_more_rounds_only_reach_rows_that_fewer_rounds_left_without_an_anchor(moons, moons_flow, mixed, mixed_flow):
    def run(problem, flow, **kw):
        box = problem.blackbox()
        cf = RobustFlow(flow, box, problem.X_train, problem.y_train, settings=RobustSettings(**kw)).explain(
            problem.factuals, 1)
        assert cf.queries == box.used("search")
        return cf

    few, many = run(moons, moons_flow, rounds=4), run(moons, moons_flow, rounds=40)
    assert few.log["no_anchor"] == 0  # every row anchored early: the extra rounds are never run
    np.testing.assert_array_equal(few.counterfactuals, many.counterfactuals)
    assert few.queries == many.queries
    few, many = run(mixed, mixed_flow, pool=1, rounds=1), run(mixed, mixed_flow, pool=1, rounds=12)
    assert few.log["no_anchor"] > many.log["no_anchor"] and many.valid.sum() > few.valid.sum()
    assert many.log["pool_labelled"] > few.log["pool_labelled"]
    np.testing.assert_array_equal(many.valid, unanimous(mixed, many))
