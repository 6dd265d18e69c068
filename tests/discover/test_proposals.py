"""OT-guided cone sampling: cones, categorical units and levels, immutables, integers, actionability."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from recourselab.discover.proposals import ProposalSpace, actionability_rules, embedding_dim, sample_cone
from recourselab.discover.settings import DiscoverSettings
from recourselab.errors import ConfigError, DataError


@pytest.mark.parametrize("m", [2, 3, 7])
def test_cone_samples_are_unit_vectors_inside_the_cone(m):
    rng = np.random.default_rng(m)
    axis = rng.normal(size=(500, m))
    phi = math.pi / 5
    u = sample_cone(axis, phi, rng)
    assert np.allclose(np.linalg.norm(u, axis=1), 1.0)
    cos = (u * axis).sum(axis=1) / np.linalg.norm(axis, axis=1)
    assert (cos >= math.cos(phi) - 1e-9).all()


def test_cone_is_filled_uniformly_not_snapped_to_the_boundary():
    rng = np.random.default_rng(0)
    phi = math.pi / 4
    u = sample_cone(np.tile([0.0, 0.0, 1.0], (20000, 1)), phi, rng)
    # uniform on the cap of S^2: cos(angle) is uniform on [cos(phi), 1]
    res = stats.kstest(u[:, 2], stats.uniform(loc=math.cos(phi), scale=1 - math.cos(phi)).cdf)
    assert res.pvalue > 1e-3


@pytest.mark.parametrize("phi", [math.pi / 4, math.pi / 2, 0.9 * math.pi])
def test_one_dimensional_cone_is_the_axis_direction_for_any_angle_below_pi(phi):
    rng = np.random.default_rng(2)
    axis = rng.normal(size=(400, 1))
    assert (sample_cone(axis, phi, rng) == np.sign(axis)).all()
    free = sample_cone(axis, math.pi, rng)  # the whole sphere S^0: both signs
    assert set(np.unique(free)) == {-1.0, 1.0}


def test_zero_axis_gives_isotropic_directions():
    rng = np.random.default_rng(1)
    u = sample_cone(np.zeros((20000, 3)), math.pi / 8, rng)
    assert np.abs(u.mean(axis=0)).max() < 0.03


def test_embedding_dim_rule():
    assert [embedding_dim(v) for v in (2, 3, 4, 6, 10, 100)] == [2, 3, 3, 4, 5, 8]


def _space(toy, **kw):
    """Local moves (restart_prob 0) unless a test asks for restarts."""
    return ProposalSpace(toy.schema, toy.factuals, DiscoverSettings(**({"restart_prob": 0.0} | kw)))


def _propose(toy, space, M=200, seed=0):
    rng = np.random.default_rng(seed)
    rows = np.arange(0, 40, 5)
    g = rng.normal(size=(len(rows), toy.schema.n_encoded))
    return rows, space.propose(toy.factuals[rows], rows, g, M, rng)


def test_categorical_pairs_decode_to_allowed_levels_and_move_as_a_unit(toy):
    space = _space(toy, h=3)
    rows, cands = _propose(toy, space)
    sl = toy.schema.slices()
    for f in toy.schema.features:
        if f.kind != "categorical":
            continue
        pair = cands[..., sl[f.name]].reshape(-1, 2)
        L = len(f.levels)
        phases = np.column_stack([np.cos(2 * np.pi * np.arange(L) / L), np.sin(2 * np.pi * np.arange(L) / L)])
        dist = np.abs(pair[:, None, :] - phases[None]).max(axis=2).min(axis=1)
        assert dist.max() < 1e-12  # exactly one level's (cos, sin)
        moved = (cands[..., sl[f.name]] != toy.factuals[rows][..., sl[f.name]]).any(axis=-1)
        if f.name == "job":
            assert moved.any()  # the 4-level feature does get proposed
        # one unit: a moved pair is another level's exact pair, never a half-moved point
        new_level = np.argmin(np.abs(pair[:, None, :] - phases[None]).max(axis=2), axis=1)
        old = np.broadcast_to(toy.factuals[rows][..., sl[f.name]], cands[..., sl[f.name]].shape)
        old = old.reshape(-1, 2)
        old_level = np.argmin(np.abs(old[:, None, :] - phases[None]).max(axis=2), axis=1)
        assert np.array_equal(moved.reshape(-1), new_level != old_level)


def test_immutables_never_change_and_h_bounds_the_edits(toy):
    space = _space(toy, h=2)
    rows, cands = _propose(toy, space)
    imm = toy.schema.immutable_mask()
    assert imm.any()
    assert np.array_equal(cands[..., imm], np.broadcast_to(toy.factuals[rows][:, imm], cands[..., imm].shape))
    edited = space.edited(cands, toy.factuals[rows])
    assert edited.sum(axis=-1).max() <= 2
    assert "sex" not in space.feature_names


def test_integer_features_stay_integral_and_inside_bounds(toy):
    space = _space(toy, step=1.0)
    rows, cands = _propose(toy, space)
    frame = toy.schema.inverse_transform(cands.reshape(-1, toy.schema.n_encoded))
    sl = toy.schema.slices()
    for f in toy.schema.features:
        if f.kind == "numerical":
            raw = cands[..., sl[f.name].start] * f.std + f.mean
            lowest = min(f.lower, (toy.factuals[:, sl[f.name].start] * f.std + f.mean).min())
            assert raw.min() >= lowest - 1e-9
            if f.integer:
                assert np.abs(raw - np.rint(raw)).max() < 1e-9
    assert frame["age"].dtype.kind == "i"


def test_an_out_of_range_factual_widens_only_its_own_rows_bounds(toy):
    sl = toy.schema.slices()["income"].start
    f = next(f for f in toy.schema.features if f.name == "income")
    factuals = toy.factuals.copy()
    factuals[0, sl] = (f.upper + 60.0 - f.mean) / f.std  # 60 above the training maximum
    space = ProposalSpace(toy.schema, factuals, DiscoverSettings(step=1.0, h=3))
    rng = np.random.default_rng(0)
    rows = np.arange(40)
    g = np.zeros((40, toy.schema.n_encoded))
    g[:, sl] = -1.0  # every row pushed up in income as far as a step goes
    raw = space.propose(factuals[rows], rows, g, 200, rng)[..., sl] * f.std + f.mean  # (M, k)
    assert raw[:, 1:].max() <= f.upper + 1e-9  # the other rows stay inside the training range
    assert raw[:, 0].max() <= f.upper + 60.0 + 1e-9 and raw[:, 0].min() >= f.lower - 1e-9
    assert raw[:, 1:].max() > f.upper - 1.0  # the push does reach the top of the range


@pytest.mark.parametrize("temperature", [0.5, 5e-324])  # a subnormal one used to make every logit -inf
def test_actionability_rules_hold_by_construction(toy, temperature):
    space = _space(toy, step=1.0, actionability={"age": "increasing", "debts": "decreasing", "owner": "fixed",
                                                  "job": "increasing"}, temperature=temperature)
    rows, cands = _propose(toy, space, M=300)
    sl = toy.schema.slices()
    fac = toy.factuals[rows]
    assert (cands[..., sl["age"].start] >= fac[:, sl["age"].start] - 1e-12).all()
    assert (cands[..., sl["debts"].start] <= fac[:, sl["debts"].start] + 1e-12).all()
    owner = cands[..., sl["owner"]]
    assert np.array_equal(owner, np.broadcast_to(fac[:, sl["owner"]], owner.shape))
    job = toy.schema.features[toy.schema.feature_names.index("job")]
    dec = np.mod(np.rint(np.arctan2(cands[..., sl["job"].start + 1], cands[..., sl["job"].start])
                         * len(job.levels) / (2 * np.pi)), len(job.levels))
    dec0 = np.mod(np.rint(np.arctan2(fac[:, sl["job"].start + 1], fac[:, sl["job"].start])
                          * len(job.levels) / (2 * np.pi)), len(job.levels))
    assert (dec >= dec0).all()


def test_factual_step_range_scales_numerical_moves_by_the_sample_spread(toy):
    training, factual = _space(toy), _space(toy, step_range="factuals")
    cols = training.num_cols
    spread = np.ptp(toy.factuals[:, cols], axis=0)
    assert (spread > 0).all() and (spread <= training.num_range).all()
    assert spread[0] < 0.7 * training.num_range[0]  # income: the 40 rows span less than the split
    assert np.allclose(factual.num_range, spread)
    for space in (training, factual):  # a move never exceeds step times the scaling range
        rows, cands = _propose(toy, space, M=300)
        moves = np.abs(cands[..., cols] - toy.factuals[rows][:, cols]).max(axis=(0, 1))
        half_unit = 0.5 / np.array([f.std for f in toy.schema.features if f.kind == "numerical"])  # integer rounding
        assert (moves <= space.settings.step * space.num_range + half_unit + 1e-9).all()
        assert (moves > 0).all()
    # a feature that is constant in the sample keeps the training range instead of freezing
    const = toy.factuals.copy()
    const[:, cols[0]] = const[0, cols[0]]
    kept = ProposalSpace(toy.schema, const, DiscoverSettings(step_range="factuals"))
    assert kept.num_range[0] > 0 and np.allclose(kept.num_range[1:], spread[1:])


def test_factual_step_range_still_moves_an_integer_count_spanning_one_unit(toy):
    sl = toy.schema.slices()["debts"].start
    debts = toy.schema.features[toy.schema.feature_names.index("debts")]
    narrow = toy.factuals.copy()
    narrow[:, sl] = (np.arange(len(narrow)) % 2 + 1 - debts.mean) / debts.std  # 1 or 2 debts: a one-unit spread
    space = ProposalSpace(toy.schema, narrow, DiscoverSettings(step_range="factuals", step=0.2,
                                                                     restart_prob=0.0))
    j = space.num_names.index("debts")
    assert space.num_range[j] == pytest.approx(1 / (0.2 * debts.std))  # a full step reaches one unit
    rng = np.random.default_rng(0)
    rows = np.arange(0, 40, 5)
    cands = space.propose(narrow[rows], rows, rng.normal(size=(len(rows), toy.schema.n_encoded)), 300, rng)
    change = (cands[..., sl] - narrow[rows][:, sl]) * debts.std  # in debts
    assert np.abs(change).max() == pytest.approx(1.0)  # one unit at most, and it does move
    assert np.allclose(change, np.rint(change))


def test_bad_settings_and_unknown_features_are_rejected(toy):
    with pytest.raises(ConfigError, match="unknown rule"):
        DiscoverSettings(actionability={"age": "upwards"})
    with pytest.raises(ConfigError, match="step_range 'global'.*valid: training, factuals"):
        DiscoverSettings(step_range="global")
    with pytest.raises(DataError, match="unknown features"):
        _space(toy, actionability={"height": "fixed"})
    with pytest.raises(DataError, match="no feature can be edited"):
        _space(toy, actionability={n: "fixed" for n in toy.schema.feature_names})


def test_a_constant_numerical_feature_is_not_editable():
    import pandas as pd

    from recourselab.data.schema import Schema

    rng = np.random.default_rng(0)
    frame = pd.DataFrame({"x": rng.normal(size=50), "c": np.full(50, 5.0), "y": rng.integers(0, 2, 50)})
    schema = Schema.fit(frame, dataset="t", target="y", favourable=1, categorical=[])
    X = schema.transform(frame)
    space = ProposalSpace(schema, X[:10], DiscoverSettings())
    assert space.num_names == ("x",) and space.n_features == 1  # "c" can never move: never proposed
    with pytest.raises(DataError, match="no feature can be edited: every feature is immutable, fixed, excluded or "
                                        "constant"):
        ProposalSpace(schema, X[:10], DiscoverSettings(actionability={"x": "fixed"}))
    moved = X[:10].copy()
    moved[0, 1] += 1.0  # a factual off the constant value widens the range: editable again
    assert ProposalSpace(schema, moved, DiscoverSettings()).num_names == ("x", "c")


def test_restart_moves_keep_immutables_categories_integers_and_actionability(toy):
    space = _space(toy, h=3, restart_prob=1.0, actionability={"age": "increasing"})
    rows, cands = _propose(toy, space, M=300)
    imm = toy.schema.immutable_mask()
    assert np.array_equal(cands[..., imm], np.broadcast_to(toy.factuals[rows][:, imm], cands[..., imm].shape))
    assert np.allclose(toy.schema.snap(cands.reshape(-1, cands.shape[-1])), cands.reshape(-1, cands.shape[-1]))
    frame = toy.schema.inverse_transform(cands.reshape(-1, cands.shape[-1]))
    assert (frame["debts"] == np.rint(frame["debts"])).all()
    age = toy.schema.slices()["age"].start
    assert (cands[..., age] >= toy.factuals[rows][:, age] - 1e-12).all()
    # restarted moves land near other factual rows' values: larger moves than the local steps
    local = _propose(toy, _space(toy, h=3), M=300)[1]
    num = space.num_cols
    assert np.abs(cands[..., num] - toy.factuals[rows][:, num]).mean() > np.abs(
        local[..., num] - toy.factuals[rows][:, num]).mean()


def test_pull_back_through_the_identity_embed_is_the_encoded_guidance(toy):
    space = _space(toy)
    rows = np.arange(5)
    g = np.random.default_rng(0).normal(size=(5, toy.schema.n_encoded))
    g_enc, scores = space.pull_back(lambda X: X, toy.factuals[rows], g)
    assert np.allclose(g_enc[:, space.num_cols], g[:, space.num_cols], atol=1e-9)
    for cat, s in zip(space.cats, scores, strict=True):
        cur = cat.levels_of(toy.factuals[rows])
        want = (cat.phases[None] - cat.phases[cur][:, None]) @ (-g[:, list(cat.cols)])[..., None]
        assert np.allclose(s - s[np.arange(5), cur][:, None], want[..., 0], atol=1e-12)


def test_schema_monotone_features_are_actionability_rules_that_settings_can_override(toy):
    import dataclasses

    feats = tuple(dataclasses.replace(f, monotone="increasing" if f.name == "age" else None)
                  for f in toy.schema.features)
    ruled = dataclasses.replace(toy, schema=dataclasses.replace(toy.schema, features=feats))
    assert actionability_rules(ruled.schema, DiscoverSettings()) == {"age": "increasing"}
    assert actionability_rules(ruled.schema, DiscoverSettings(actionability={"age": "fixed"})) == {"age": "fixed"}
    with pytest.raises(DataError, match=r"goes against the schema's monotone rules age: decreasing \(schema: incr"):
        _space(ruled, actionability={"age": "decreasing"})
    rows, cands = _propose(ruled, _space(ruled, step=1.0), M=300)
    col = ruled.schema.slices()["age"].start
    assert (cands[..., col] >= ruled.factuals[rows][:, col] - 1e-12).all()
    _, free = _propose(toy, _space(toy, step=1.0), M=300)
    assert (free[..., col] < toy.factuals[rows][:, col] - 1e-12).any()  # without the rule ages do fall
