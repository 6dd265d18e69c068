"""Certification repair: query-free reverts of edited rows, then the merit polish."""

from __future__ import annotations

import numpy as np
import pytest

from recourselab.discover import Discover, make_target
from recourselab.discover.certify import Certificate, is_feasible
from recourselab.discover.ot import random_directions
from recourselab.discover.repair import revert_rows
from recourselab.discover.settings import DiscoverSettings
from recourselab.discover.setup import directions_at

pytestmark = pytest.mark.filterwarnings("ignore::recourselab.discover.NotCertifiedWarning")


def _problem(seed: int = 0, n: int = 60, N: int = 8):
    rng = np.random.default_rng(seed)
    Xf = rng.normal(size=(n, 3))
    theta = random_directions(3, N, rng)
    Pf = Xf @ theta.T
    ref_x = np.sort(Pf.T, axis=1)
    yf = rng.uniform(0.0, 0.2, n)
    ystar = np.sort(rng.uniform(0.6, 1.0, n))
    cert = Certificate("dkw", n, 0.01, 0.05, 10, seed)
    floor = cert.input_bound(ref_x, ref_x)
    return Xf, theta, Pf, ref_x, yf, ystar, cert, floor


def _bounds(cert, P, y, ref_x, ystar):
    return cert.input_bound(np.sort(P.T, axis=1), ref_x), cert.output_bound(np.sort(y), ystar)


def test_reverting_far_moved_rows_whose_scores_did_not_change_certifies():
    Xf, theta, Pf, ref_x, yf, ystar, cert, floor = _problem()
    y = ystar.copy()  # every row scores its target ...
    X = Xf + 0.01
    far = np.array([3, 17, 40])
    X[far] += 6.0  # ... and three rows moved far, with scores equal to their factual ones
    yf = yf.copy()
    yf[far] = y[far]
    P = X @ theta.T
    U_x, U_y = 1.3 * floor, 0.05
    ucl_x, ucl_y = _bounds(cert, P, y, ref_x, ystar)
    assert ucl_y < U_y and ucl_x > U_x  # the input side alone fails
    P0, y0 = P.copy(), y.copy()
    edited = np.ones(len(X), dtype=bool)
    rep = revert_rows(P, y, Pf, yf, edited, ref_x, ystar, cert, U_x, U_y)
    assert rep.certified
    assert set(far) <= set(rep.reverted.tolist())  # the moved rows go back first
    np.testing.assert_array_equal(P, P0)  # inputs untouched
    np.testing.assert_array_equal(y, y0)
    P[rep.reverted], y[rep.reverted] = Pf[rep.reverted], yf[rep.reverted]
    bx, by = _bounds(cert, P, y, ref_x, ystar)
    assert (bx, by) == pytest.approx((rep.ucl_x, rep.ucl_y), rel=1e-12)
    assert is_feasible(bx, by, U_x, U_y)


def test_only_edited_rows_are_reverted_and_a_hopeless_case_is_reported():
    Xf, theta, Pf, ref_x, yf, ystar, cert, floor = _problem(seed=1)
    y = ystar.copy()
    X = Xf + 0.5
    P = X @ theta.T
    edited = np.zeros(len(X), dtype=bool)
    edited[::2] = True
    # U_x below the factuals' own floor: no set of reverts can certify
    rep = revert_rows(P, y, Pf, yf, edited, ref_x, ystar, cert, 0.5 * floor, 10.0)
    assert not rep.certified
    assert set(rep.reverted.tolist()) <= set(np.flatnonzero(edited).tolist())
    assert len(rep.reverted) < edited.sum()  # at least one edited row is always kept


def test_a_certified_iterate_is_left_as_it_is():
    Xf, theta, Pf, ref_x, yf, ystar, cert, floor = _problem(seed=2)
    y = ystar.copy()
    P = (Xf + 0.001) @ theta.T
    rep = revert_rows(P, y, Pf, yf, np.ones(len(Xf), dtype=bool), ref_x, ystar, cert, 2 * floor, 1.0)
    assert rep.certified and len(rep.reverted) == 0


def test_the_solver_returns_a_repaired_iterate_with_its_record(toy):
    # a short run whose input threshold sits just above the factuals' own floor ends uncertified;
    # the repair reverts some of its edited rows to certify it, without a model query
    kw = dict(max_iter=3, step=1.0, top_k=8, metric_projections=200, U_y=10.0, restart_prob=0.0)
    target = make_target("beta", a=0.1, b=0.9, seed=0)
    floor = Discover(toy.blackbox(), schema=toy.schema, **kw).solve(toy.factuals, target).metrics["U_x"] / 1.25
    kw["U_x"] = 1.005 * floor
    plain = Discover(toy.blackbox(), schema=toy.schema, repair=False, polish_iter=0, **kw).solve(toy.factuals, target)
    fixed = Discover(toy.blackbox(), schema=toy.schema, **kw).solve(toy.factuals, target)
    assert not plain.feasible and plain.metrics["repaired_rows"] == 0 and plain.metrics["certified_by"] is None
    assert fixed.metrics["certified_by"] == "repair"  # reverts come first: the polish is not needed
    assert fixed.feasible and fixed.metrics["repaired_rows"] > 0
    assert fixed.queries == plain.queries  # reverts cost no query
    last = fixed.log.iloc[-1]
    assert last["branch"] == "repair" and bool(last["feasible"]) and last["UCL_x"] < kw["U_x"]
    reverted = np.asarray(last["rows"])
    assert len(reverted) == fixed.metrics["repaired_rows"]
    np.testing.assert_array_equal(fixed.counterfactuals[reverted], toy.factuals[reverted])
    np.testing.assert_array_equal(fixed.scores[reverted], plain.factual_scores[reverted])
    start = int(last["repaired_from"])  # the iterate it repaired, as a run stopped there returns it
    stopped = Discover(toy.blackbox(), schema=toy.schema, repair=False, polish_iter=0,
                       **(kw | {"max_iter": start})).solve(
        toy.factuals, target)
    keep = np.setdiff1d(np.arange(len(toy.factuals)), reverted)
    np.testing.assert_array_equal(fixed.counterfactuals[keep], stopped.counterfactuals[keep])
    assert fixed.metrics["edited_rows"] == stopped.metrics["edited_rows"] - len(reverted) > 0
    assert fixed.metrics["first_certified_iteration"] == len(fixed.log) - 1 == fixed.iteration
    assert fixed.metrics["iterations_run"] == plain.metrics["iterations_run"]


# a short run that ends uncertified with both bounds above their thresholds: no set of reverts certifies it
POLISH_KW = dict(max_iter=3, top_k=4, metric_projections=200, trials=50)


def _independent_bounds(result, toy):
    """UCL_x and UCL_y of a result, recomputed from its rows with the run's directions and rule."""
    s = result.settings
    theta = directions_at(toy.factuals.shape[1], DiscoverSettings.from_kwargs(**s), 0)
    cert = Certificate(s["certificate"], len(toy.factuals), s["delta"], s["alpha"], s["bootstrap_resamples"], s["seed"])
    ref_x = np.sort((toy.factuals @ theta.T).T, axis=1)
    return (cert.input_bound(np.sort((result.counterfactuals @ theta.T).T, axis=1), ref_x),
            cert.output_bound(np.sort(result.scores), np.sort(result.target_values)))


@pytest.mark.parametrize("rule", [
    {},  # dkw: every candidate's bounds exactly
    {"certificate": "bootstrap", "U_x_margin": 0.6, "U_y": 0.6},  # screened; the best candidate exactly
])
def test_the_polish_certifies_what_reverts_cannot(toy, rule):
    target = make_target("beta", a=0.1, b=0.9, seed=0)
    kw = POLISH_KW | rule
    plain = Discover(toy.blackbox(), schema=toy.schema, polish_iter=0, **kw).solve(toy.factuals, target)
    fixed = Discover(toy.blackbox(), schema=toy.schema, **kw).solve(toy.factuals, target)
    assert not plain.feasible and plain.metrics["certified_by"] is None  # the repair alone fails here
    assert fixed.feasible and fixed.metrics["certified_by"] == "polish"
    last = fixed.log.iloc[-1]
    assert last["branch"] == "polish" and fixed.iteration == len(fixed.log) - 1
    # the certificate holds when recomputed from the returned rows alone
    ucl_x, ucl_y = _independent_bounds(fixed, toy)
    assert ucl_x < fixed.metrics["U_x"] and ucl_y < fixed.metrics["U_y"]
    assert ucl_x == pytest.approx(last["UCL_x"]) and ucl_y == pytest.approx(last["UCL_y"])
    # the search itself is unchanged; the polish adds at most `trials` one-row queries per step
    assert fixed.metrics["iterations_run"] == plain.metrics["iterations_run"]
    extra = fixed.queries - plain.queries
    assert 0 < extra <= 200 * POLISH_KW["trials"]
    # polished rows stay valid: the immutable feature kept, categories on their level phases, scores true
    sex = toy.schema.slices()["sex"]
    np.testing.assert_array_equal(fixed.counterfactuals[:, sex], toy.factuals[:, sex])
    np.testing.assert_allclose(toy.schema.snap(fixed.counterfactuals), fixed.counterfactuals, rtol=0, atol=1e-9)
    np.testing.assert_allclose(fixed.scores, toy.model.predict_proba(fixed.counterfactuals)[:, 1])
    again = Discover(toy.blackbox(), schema=toy.schema, **kw).solve(toy.factuals, target)
    np.testing.assert_array_equal(again.counterfactuals, fixed.counterfactuals)


def test_the_polish_stays_within_the_query_budget(toy):
    target = make_target("beta", a=0.1, b=0.9, seed=0)
    plain = Discover(toy.blackbox(), schema=toy.schema, polish_iter=0, **POLISH_KW).solve(toy.factuals, target)
    budget = plain.queries + 3 * POLISH_KW["trials"] + 7  # room for 3 polish steps, not 4
    out = Discover(toy.blackbox(), schema=toy.schema, **POLISH_KW).explain(toy.factuals, target, budget=budget)
    assert plain.queries < out.result.queries <= budget
    assert not out.result.feasible  # 3 steps are not enough here, and the run ends without an error
