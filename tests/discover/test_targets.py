"""Target output distributions: kinds, seeding, serialisation, errors."""

from __future__ import annotations

import json

import numpy as np
import pytest

from recourselab.discover.targets import TARGETS, Target, UnknownTargetError, make_target
from recourselab.errors import DataError


def test_constant_target():
    assert np.array_equal(make_target("constant", value=1.0).values(5), np.ones(5))


def test_beta_target_is_seeded_and_oriented_towards_favourable():
    t = make_target("beta", a=0.1, b=0.9, seed=3)
    v = t.values(2000)
    assert np.array_equal(v, make_target("beta", a=0.1, b=0.9, seed=3).values(2000))
    assert not np.array_equal(v, make_target("beta", a=0.1, b=0.9, seed=4).values(2000))
    assert ((v >= 0) & (v <= 1)).all() and v.mean() > 0.8  # 1 - Beta(0.1, 0.9): mean 0.9
    raw = make_target("beta", a=0.1, b=0.9, seed=3, oriented=False).values(2000)
    assert np.allclose(raw, 1 - v) and raw.mean() < 0.2


def test_shift_target_uses_factual_scores():
    scores = np.array([0.1, 0.5, 0.9])
    assert np.allclose(make_target("shift", delta=0.3).values(3, scores), [0.4, 0.8, 1.0])
    with pytest.raises(DataError, match="factual scores"):
        make_target("shift").values(3)


def test_explicit_values_fix_n():
    t = make_target("values", values=[0.2, 0.9, 1.0])
    assert t.n == 3 and np.allclose(t.values(3), [0.2, 0.9, 1.0])
    with pytest.raises(DataError, match="same size"):
        t.values(4)


def test_round_trip_through_json():
    for t in (make_target("beta", a=0.5, b=2.0, seed=7), make_target("constant", value=0.9),
              make_target("values", values=[0.1, 0.2])):
        d = json.loads(json.dumps(t.to_dict()))
        back = Target.from_dict(d)
        assert back.to_dict() == t.to_dict()
        n = t.n or 4
        assert np.array_equal(back.values(n, np.full(n, 0.5)), t.values(n, np.full(n, 0.5)))


def test_unknown_kind_and_parameters_list_the_valid_ones():
    with pytest.raises(UnknownTargetError) as err:
        make_target("gaussian")
    for name in TARGETS:
        assert name in str(err.value)
    with pytest.raises(DataError, match="valid: a, b, oriented"):
        make_target("beta", mean=0.5)
    with pytest.raises(DataError, match=r"\[0, 1\]"):
        make_target("constant", value=2.0, n=3)


def test_mappings_take_parameters_at_the_top_level_too_and_never_drop_them():
    nested = Target.from_dict({"kind": "beta", "params": {"a": 0.5, "b": 2.0}, "seed": 7})
    flat = Target.from_dict({"kind": "beta", "a": 0.5, "b": 2.0, "seed": 7})
    assert flat.to_dict() == nested.to_dict() == make_target("beta", a=0.5, b=2.0, seed=7).to_dict()
    # a bad or misspelled parameter is an error, not the default silently
    with pytest.raises(DataError, match="a > 0 and b > 0"):
        Target.from_dict({"kind": "beta", "a": -1, "b": 1})
    with pytest.raises(DataError, match=r"\[0, 1\]"):
        Target.from_dict({"kind": "constant", "value": 2.0})
    with pytest.raises(DataError, match=r"unknown parameters \['alpha'\]"):
        Target.from_dict({"kind": "beta", "alpha": 0.5})
    with pytest.raises(DataError, match=r"\['a'\] given both"):
        Target.from_dict({"kind": "beta", "a": 0.5, "params": {"a": 0.2}})
    with pytest.raises(DataError, match="needs a 'kind'"):
        Target.from_dict({"a": 0.5})


@pytest.mark.parametrize(("kind", "params", "pattern"), [
    ("shift", {"delta": "x"}, r"finite numbers: delta='x'"),
    ("beta", {"a": float("nan")}, r"finite numbers: a=nan"),
    ("beta", {"oriented": "yes"}, r"oriented='yes' \(True or False\)"),
    ("constant", {"value": True}, r"finite numbers: value=True"),
    ("beta", {"seed": -1}, r"seed must be an integer >= 0, got -1"),
    ("beta", {"seed": 1.7}, r"seed must be an integer >= 0, got 1\.7"),
    ("values", {"values": [[0.5, 0.5]]}, r"flat sequence, got 2-D shape \(1, 2\)"),
    ("values", {"values": ["high"]}, r"values \(numbers in \[0, 1\]\) must be numeric"),
    ("beta", {"n": -3}, r"n must be None or an integer >= 1 \(rows\), got -3"),
    ("beta", {"n": 2.5}, r"n must be None or an integer >= 1 \(rows\), got 2\.5"),
    ("beta", {"n": "30"}, r"got '30'"),
])
def test_target_parameters_of_the_wrong_type_are_refused_when_built(kind, params, pattern):
    with pytest.raises(DataError, match=pattern):
        make_target(kind, **params)


def test_targets_built_directly_are_checked_too():
    with pytest.raises(UnknownTargetError, match="unknown target 'nope'; valid targets: constant, beta"):
        Target("nope")
    with pytest.raises(DataError, match="seed must be an integer >= 0, got -1"):
        Target("beta", seed=-1)
    with pytest.raises(DataError, match="n must be None or an integer >= 1"):
        Target("constant", n=0)
    assert Target("beta", {"a": 0.1, "b": 0.9}, seed=np.int64(3), n=5).values(5).shape == (5,)


@pytest.mark.parametrize(("params", "exc", "pattern"), [
    ({"oriented": "no"}, DataError, r"oriented='no' \(True or False\)"),  # not read as True
    ({"alpha": 0.1}, DataError, r"unknown parameters \['alpha'\]; valid: a, b, oriented"),
    ({"a": -1.0}, DataError, r"beta target needs a > 0"),
    ({"a": float("nan")}, DataError, r"finite numbers: a=nan"),
])
def test_parameters_of_a_target_built_directly_are_checked_as_by_make_target(params, exc, pattern):
    with pytest.raises(exc, match=pattern):
        Target("beta", params=params)


def test_numpy_parameters_are_stored_as_plain_numbers_so_the_description_is_json():
    t = make_target("shift", delta=np.float32(0.25), n=np.int64(50), seed=np.int64(2))
    assert json.loads(json.dumps(t.to_dict())) == {"kind": "shift", "params": {"delta": 0.25}, "seed": 2, "n": 50}
    b = make_target("beta", oriented=np.False_)
    assert b.params["oriented"] is False
    assert np.array_equal(b.values(4), make_target("beta", oriented=False).values(4))
    v = Target("values", params={"values": np.array([0.2, 0.9], dtype=np.float32)})
    assert v.n == 2 and json.dumps(v.to_dict())


@pytest.mark.parametrize("params", [{}, {"values": []}])
def test_a_values_target_without_values_says_so(params):
    with pytest.raises(DataError, match=r"target 'values' needs a non-empty sequence values=\[\.\.\.\]"):
        make_target("values", **params)
