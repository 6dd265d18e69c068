"""DKW upper confidence limits and DCE's eta rule with interval narrowing."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from recourselab.discover.certify import (
    Certificate,
    dkw_epsilon,
    eta_rule,
    first_certified,
    is_feasible,
    ucl_sw2,
    ucl_w2,
)
from recourselab.discover.ot import random_directions, sliced_wasserstein_sq, wasserstein_1d_sq


def test_dkw_epsilon():
    assert abs(dkw_epsilon(50, 0.05) - math.sqrt(math.log(40) / 100)) < 1e-15
    assert dkw_epsilon(5000, 0.05) < dkw_epsilon(50, 0.05)


@pytest.mark.parametrize("delta", [0.0, 0.01, 0.1, 0.3])
@pytest.mark.parametrize("n", [2, 13, 50, 400])
def test_ucl_is_at_least_the_empirical_trimmed_distance(n, delta):
    rng = np.random.default_rng(n)
    for _ in range(5):
        a = np.sort(rng.normal(size=n))
        b = np.sort(rng.exponential(size=n) + rng.normal())
        ucl = ucl_w2(a, b, delta, 0.05)
        assert ucl >= wasserstein_1d_sq(a, b, delta, presorted=True) - 1e-12
        assert ucl >= 0
    # the tight case: between two point masses every band gap is |c1 - c2|, so UCL = W^2 exactly
    assert ucl_w2(np.full(n, 1.5), np.full(n, -0.25), delta, 0.05) == pytest.approx(1.75 ** 2, abs=1e-12)


def test_ucl_of_identical_samples_is_the_band_floor_and_shrinks_with_n():
    rng = np.random.default_rng(0)
    big = np.sort(rng.normal(size=4000))
    small = np.sort(rng.normal(size=40))
    assert ucl_w2(small, small, 0.05, 0.05) > ucl_w2(big, big, 0.05, 0.05) > 0


def test_ucl_exact_integral_matches_fine_quadrature():
    rng = np.random.default_rng(1)
    n, delta, alpha = 23, 0.1, 0.1
    a, b = np.sort(rng.normal(size=n)), np.sort(rng.normal(0.3, 1.2, size=n))
    eps = dkw_epsilon(n, alpha)
    u = delta + (np.arange(1_000_000) + 0.5) / 1_000_000 * (1 - 2 * delta)

    def q(s, p):
        return s[np.clip(np.ceil(p * n).astype(int) - 1, 0, n - 1)]

    hi, lo = np.minimum(u + eps, 1), np.maximum(u - eps, 0)
    D = np.maximum(q(a, hi) - q(b, lo), q(b, hi) - q(a, lo))
    assert abs(ucl_w2(a, b, delta, alpha) - np.mean(D ** 2)) < 1e-4


def test_sliced_ucl_averages_bonferroni_directions_and_bounds_sw2():
    rng = np.random.default_rng(2)
    X, Y = rng.normal(size=(40, 3)), rng.normal(0.2, 1.0, size=(40, 3))
    theta = random_directions(3, 7, rng)
    PX, PY = np.sort((X @ theta.T).T, axis=1), np.sort((Y @ theta.T).T, axis=1)
    per_dir = [ucl_w2(PX[k], PY[k], 0.05, 0.05 / 7) for k in range(7)]
    assert abs(ucl_sw2(PX, PY, 0.05, 0.05) - np.mean(per_dir)) < 1e-12
    assert ucl_sw2(PX, PY, 0.05, 0.05) >= sliced_wasserstein_sq(X, Y, theta, 0.05)


def test_eta_rule_x_violated_takes_l_and_narrows_right():
    s = eta_rule(ucl_x=2.0, ucl_y=0.1, U_x=1.0, U_y=0.5, left=0.2, right=1.0, kappa=0.05)
    assert s.branch == "x_violated" and s.eta == 0.2
    assert s.left == 0.2 and abs(s.right - (1.0 - 0.05 * 0.8)) < 1e-15  # eta <= mid: r shrinks


def test_eta_rule_y_violated_takes_r_and_narrows_left():
    s = eta_rule(ucl_x=0.5, ucl_y=0.9, U_x=1.0, U_y=0.5, left=0.2, right=1.0, kappa=0.05)
    assert s.branch == "y_violated" and s.eta == 1.0
    assert abs(s.left - (0.2 + 0.05 * 0.8)) < 1e-15 and s.right == 1.0


def test_eta_rule_both_violated_weighs_the_worse_side():
    # a = -1, b = -3: p = b / (a + b) = 0.75
    s = eta_rule(ucl_x=2.0, ucl_y=3.5, U_x=1.0, U_y=0.5, left=0.2, right=1.0, kappa=0.1)
    assert s.branch == "both_violated"
    assert abs(s.eta - (0.2 + 0.75 * 0.8)) < 1e-12
    assert abs(s.left - 0.28) < 1e-12 and s.right == 1.0


def test_eta_rule_both_hold_uses_a_share():
    # a = 0.5, b = 1.5: p = a / (a + b) = 0.25 -> eta = 0.4 < mid 0.6: r narrows
    s = eta_rule(ucl_x=0.5, ucl_y=0.5, U_x=1.0, U_y=2.0, left=0.2, right=1.0, kappa=0.1)
    assert s.branch == "both_hold"
    assert abs(s.eta - 0.4) < 1e-12
    assert s.left == 0.2 and abs(s.right - 0.92) < 1e-12


def test_eta_rule_guards_zero_gap_sum_and_infinite_ucl():
    s = eta_rule(ucl_x=1.0, ucl_y=0.5, U_x=1.0, U_y=0.5, left=0.2, right=1.0, kappa=0.05)
    assert s.branch == "both_hold" and abs(s.eta - 0.6) < 1e-12
    s = eta_rule(ucl_x=math.inf, ucl_y=0.1, U_x=1.0, U_y=0.5, left=0.2, right=1.0, kappa=0.05)
    assert s.branch == "x_violated" and s.eta == 0.2
    # both violated, one of them infinitely: the limit of the finite rule, not 1/2
    cases = (((math.inf, 0.9), (1e300, 0.9), 0.2), ((math.nan, 0.9), (1e300, 0.9), 0.2),
             ((1.5, math.inf), (1.5, 1e300), 1.0))
    for (ucl_x, ucl_y), (big_x, big_y), eta in cases:
        s = eta_rule(ucl_x=ucl_x, ucl_y=ucl_y, U_x=1.0, U_y=0.5, left=0.2, right=1.0, kappa=0.05)
        assert s.branch == "both_violated" and s.eta == eta
        big = eta_rule(ucl_x=big_x, ucl_y=big_y, U_x=1.0, U_y=0.5, left=0.2, right=1.0, kappa=0.05)
        assert abs(big.eta - eta) < 1e-9  # continuous with a huge finite violation
    s = eta_rule(ucl_x=math.inf, ucl_y=math.inf, U_x=1.0, U_y=0.5, left=0.2, right=1.0, kappa=0.05)
    assert s.branch == "both_violated" and abs(s.eta - 0.6) < 1e-12


def test_interval_narrowing_keeps_eta_in_a_shrinking_interval():
    lo, hi = 0.2, 1.0
    rng = np.random.default_rng(0)
    for _ in range(50):
        s = eta_rule(rng.random() * 2, rng.random(), 1.0, 0.5, lo, hi, 0.05)
        assert lo - 1e-15 <= s.eta <= hi + 1e-15
        assert lo <= s.left <= s.right <= hi and (s.right - s.left) < (hi - lo)
        lo, hi = s.left, s.right


def test_is_feasible_is_strict():
    assert is_feasible(0.9, 0.4, 1.0, 0.5)
    assert not is_feasible(1.0, 0.4, 1.0, 0.5)
    assert not is_feasible(0.9, 0.5, 1.0, 0.5)


def test_first_certified_skips_unedited_and_uncertified_iterates():
    log = pd.DataFrame({"feasible": [True, False, True, True], "edited_rows": [0, 3, 4, 5]})
    assert first_certified(log) == 2  # iterate 0 is certified but unedited: not a success
    assert first_certified(log.assign(feasible=False)) is None


def test_eta_rule_boundaries_a_side_exactly_at_its_budget_holds():
    # UCL_y == U_y (b = 0) holds, the input side is violated: eta = l, not the mixed branch's r.
    step = eta_rule(ucl_x=0.5, ucl_y=0.2, U_x=0.3, U_y=0.2, left=0.2, right=0.8, kappa=0.1)
    assert (step.branch, step.eta) == ("x_violated", 0.2)
    assert (step.left, step.right) == (0.2, pytest.approx(0.8 - 0.1 * 0.6))  # eta at l: r narrows
    # UCL_x == U_x (a = 0) holds, the output side is violated: eta = r.
    step = eta_rule(ucl_x=0.3, ucl_y=0.5, U_x=0.3, U_y=0.2, left=0.2, right=0.8, kappa=0.1)
    assert (step.branch, step.eta) == ("y_violated", 0.8)
    assert (step.left, step.right) == (pytest.approx(0.2 + 0.1 * 0.6), 0.8)  # eta above the midpoint: l narrows


def test_eta_rule_zero_gap_takes_the_midpoint_and_narrows_from_the_right():
    # a = b = 0: both hold with no slack, p = 1/2; eta = (l + r) / 2 is not above the midpoint.
    step = eta_rule(ucl_x=0.3, ucl_y=0.2, U_x=0.3, U_y=0.2, left=0.2, right=0.8, kappa=0.25)
    assert (step.branch, step.eta) == ("both_hold", pytest.approx(0.5))
    assert (step.left, step.right) == (0.2, pytest.approx(0.8 - 0.25 * 0.6))


# ---------------------------------------------------------------------------------------------- bootstrap rule
def test_sample_trimmed_cost_by_hand():
    from recourselab.discover.certify import trimmed_ot_sq

    # kept sizes 2 and 3: steps of F_A^{-1} at 1/2, of F_B^{-1} at 1/3 and 2/3; gaps of 1 on [1/3, 2/3]
    assert trimmed_ot_sq(np.array([0.0, 2.0]), np.array([0.0, 1.0, 2.0]), 0.0) == pytest.approx(1 / 3, abs=1e-15)
    # each sample trimmed at its own quantiles, ties at the cut kept: A = {1, 1, 1}, B = {1, 2, 3}
    a, b = np.array([0.0, 1.0, 1.0, 1.0, 2.0]), np.array([4.0, 0.0, 2.0, 1.0, 3.0])
    assert trimmed_ot_sq(a, b, 0.25) == pytest.approx((0 + 1 + 4) / 3 / 0.5, abs=1e-14)


def test_sample_trimmed_cost_matches_exact_ot_of_the_kept_points():
    ot = pytest.importorskip("ot")
    from recourselab.discover.certify import trimmed_ot_sq

    rng = np.random.default_rng(3)
    for _ in range(50):
        a = np.round(rng.normal(size=rng.integers(4, 40)), 1)  # rounded: ties at the cuts
        b = np.round(rng.normal(0.5, 2.0, size=rng.integers(4, 40)), 1)
        kept = [v[(v >= np.quantile(v, 0.1)) & (v <= np.quantile(v, 0.9))] for v in (a, b)]
        assert trimmed_ot_sq(a, b, 0.1) == pytest.approx(ot.emd2_1d(*kept, metric="sqeuclidean") / 0.8, abs=1e-12)


def test_bootstrap_bound_by_hand():
    from recourselab.discover.certify import bootstrap_bound

    a, b = np.array([0.0, 1.0, 2.0, 3.0]), np.array([1.0, 2.0, 3.0, 4.0])  # W = 1
    idx_a = np.array([[0, 0, 1, 1], [2, 3, 3, 3]])  # resample costs 4.5 and 0.75: D = 3.5, -0.25
    idx_b = np.array([[0, 1, 2, 3], [0, 1, 2, 3]])
    # quantile at level / 2 = 0.25 of {-0.25, 3.5} (linear): 0.6875; upper = 1 - 0.6875
    assert bootstrap_bound(a, b, 0.0, 0.5, idx_a, idx_b) == pytest.approx(math.sqrt(0.3125), abs=1e-15)
    # an upper limit below zero is reported as 0
    assert bootstrap_bound(a, a, 0.0, 0.5, idx_a, idx_b) == 0.0


def test_certificate_rules_scales_and_conversion():
    from recourselab.discover.certify import Certificate, bootstrap_sw

    rng = np.random.default_rng(4)
    P, R = np.sort(rng.normal(size=(5, 30)), axis=1), np.sort(rng.normal(0.3, 1.0, size=(5, 30)), axis=1)
    boot, dkw = Certificate("bootstrap", 30, 0.1, 0.05, 50, seed=1), Certificate("dkw", 30, 0.1, 0.05)
    assert boot.scale == "unsquared" and dkw.scale == "squared"
    assert boot.convert(0.8, "dkw") == pytest.approx(0.64) and dkw.convert(0.64, "bootstrap") == pytest.approx(0.8)
    assert boot.input_bound(P, R) == bootstrap_sw(P, R, 0.1, 0.05, *boot.idx)  # the cached reference side is exact
    assert boot.input_bound(P, R) == boot.input_bound(P, R)  # same indices at every call
    assert boot.input_bound(R, R) == 0.0 and dkw.input_bound(R, R) > 0  # the DKW band has a floor, the bootstrap not
    assert dkw.input_bound(P, R) == ucl_sw2(P, R, 0.1, 0.05)
    with pytest.raises(Exception, match="unknown certificate rule"):
        Certificate("exact", 30, 0.1, 0.05)


def test_batched_bounds_and_the_bootstrap_screen_agree_with_the_single_bounds():
    rng = np.random.default_rng(5)
    n, N, C = 40, 6, 5
    ref_x, ref_y = np.sort(rng.normal(size=(N, n)), axis=1), np.sort(rng.uniform(0.5, 1.0, n))
    P = np.sort(rng.normal(0.3, 1.2, size=(C, N, n)), axis=2)
    y = np.sort(rng.uniform(0.0, 1.0, size=(C, n)), axis=1)
    for rule in ("dkw", "bootstrap"):
        cert = Certificate(rule, n, 0.05, 0.1, 50, seed=3)
        np.testing.assert_allclose(cert.input_bounds(P, ref_x), [cert.input_bound(p, ref_x) for p in P], rtol=1e-12)
        np.testing.assert_allclose(cert.output_bounds(y, ref_y), [cert.output_bound(v, ref_y) for v in y], rtol=1e-12)
    cert = Certificate("bootstrap", n, 0.05, 0.1, 50, seed=3)
    ux, uy, offsets = cert.bootstrap_eval(P[0], y[0], ref_x, ref_y)
    assert (ux, uy) == (cert.input_bound(P[0], ref_x), cert.output_bound(y[0], ref_y))  # the same arithmetic
    sx, sy = cert.screen_bounds(P, y, ref_x, ref_y, offsets)
    assert sx[0] == pytest.approx(ux, rel=1e-9) and sy[0] == pytest.approx(uy, rel=1e-9)  # exact at its own iterate
    # one changed row moves the screen close to the exact bound
    P1, y1 = P[0].copy(), y[0].copy()
    P1[:, -1] += 0.5
    y1[0] = 0.9
    P1, y1 = np.sort(P1, axis=1), np.sort(y1)
    sx1, sy1 = cert.screen_bounds(P1[None], y1[None], ref_x, ref_y, offsets)
    assert sx1[0] == pytest.approx(cert.input_bound(P1, ref_x), rel=0.05)
    assert sy1[0] == pytest.approx(cert.output_bound(y1, ref_y), rel=0.05)
