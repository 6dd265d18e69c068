"""The ``discover`` params section: defaults mirror DiscoverSettings, validation messages, profiles."""

from __future__ import annotations

import dataclasses

import pytest

from recourselab.config import Params, parse_params, render_profile
from recourselab.discover import DiscoverSettings, make_target
from recourselab.errors import ConfigError
from tests.conftest import REPO_ROOT


def test_solver_section_mirrors_discover_settings():
    solver = Params().discover.solver.model_dump()
    fields = {f.name: f for f in dataclasses.fields(DiscoverSettings)}
    assert set(solver) == set(fields) - {"seed", "budget"}
    defaults = DiscoverSettings()
    for name, value in solver.items():
        assert value == getattr(defaults, name), name
    assert DiscoverSettings.from_kwargs(**solver, seed=3) == dataclasses.replace(defaults, seed=3)


def test_defaults_are_the_paper_protocol():
    d = Params().discover
    assert d.models == ["svm", "mlp", "rf", "xgboost", "lightgbm"]
    assert (d.n_factuals, d.split, d.factuals) == (50, "test", "unfavourable")
    assert d.target.kind == "beta" and d.target.target_params() == {"a": 0.1, "b": 0.9, "oriented": True}
    ours = make_target(d.target.kind, seed=0, **d.target.target_params()).values(50)
    assert (ours == make_target("beta", a=0.1, b=0.9, seed=0).values(50)).all()  # bench/discover.py's TARGET
    assert ours.mean() > 0.8  # 1 - Beta(0.1, 0.9): mass near the favourable side


@pytest.mark.parametrize(("kind", "params"), [("constant", {"value": 1.0}), ("shift", {"delta": 0.3})])
def test_target_kinds_pass_only_their_parameters(kind, params):
    target = parse_params({"discover": {"target": {"kind": kind}}}).discover.target
    assert target.target_params() == params


def test_unknown_model_lists_the_valid_ones():
    with pytest.raises(ConfigError) as info:
        parse_params({"discover": {"models": ["svm", "lgbm"]}})
    msg = str(info.value)
    assert "discover.models" in msg and "unknown model 'lgbm' (did you mean 'lightgbm'?)" in msg
    assert "valid: knn, svm, rf, mlp, xgboost, catboost, tabnet, lightgbm" in msg


@pytest.mark.parametrize(
    ("raw", "pattern"),
    [
        ({"models": []}, r"non-empty list of distinct models"),
        ({"models": ["rf", "rf"]}, r"non-empty list of distinct models"),
        ({"n_factuals": 1}, r"discover\.n_factuals: .*greater than or equal to 2"),
        ({"split": "holdout"}, r"discover\.split: Input should be 'train', 'val' or 'test'"),
        ({"target": {"kind": "values"}}, r"discover\.target\.kind: Input should be 'constant', 'beta' or 'shift'"),
        ({"target": {"a": 0}}, r"discover\.target\.a: .*greater than 0"),
        ({"solver": {"delta": 0.5}}, r"discover\.solver\.delta: .*less than 0\.5"),
        ({"solver": {"delta": 0}}, r"discover\.solver\.delta: .*greater than 0"),
        ({"solver": {"eta_l": 0.9, "eta_r": 0.5}}, r"eta_l \(0\.9\) must not exceed eta_r \(0\.5\)"),
        ({"solver": {"edit_numerical": False, "edit_categorical": False}}, r"cannot both be False"),
        ({"solver": {"actionability": {"age": "up"}}}, r"discover\.solver\.actionability\.age: Input should be"),
    ],
)
def test_bad_values_name_the_key(raw, pattern):
    with pytest.raises(ConfigError, match=pattern):
        parse_params({"discover": raw})


def test_unknown_solver_key_lists_the_solver_keys():
    with pytest.raises(ConfigError) as info:
        parse_params({"discover": {"solver": {"top_kk": 3}}})
    msg = str(info.value)
    assert "unknown key 'discover.solver.top_kk' in section 'discover.solver' (did you mean 'top_k'?)" in msg
    assert "valid keys: n_projections, resample_directions, top_k, h, trials, max_iter, strategy" in msg


def test_tiny_profile_keeps_the_e2e_run_small():
    tiny = render_profile("tiny", REPO_ROOT).discover
    assert tiny.models == ["lightgbm"] and tiny.n_factuals <= 20 and tiny.solver.max_iter <= 10
    assert tiny.solver.n_projections == DiscoverSettings().n_projections  # merged, not replaced


def test_an_unknown_strategy_is_named_at_stage_start_up():
    from recourselab.pipeline.validate import validate_params

    params = parse_params({"discover": {"solver": {"strategy": "annealing"}}})  # a name: the registry decides
    with pytest.raises(ConfigError, match=r"discover\.solver\.strategy: unknown strategy 'annealing'; valid: "
                                          r"monte_carlo, genetic"):
        validate_params(params)
