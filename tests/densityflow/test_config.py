"""DensityFlowConfig: the one declaration of the settings, the params sections derived from it, the ODE methods."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from torchdiffeq import odeint

from recourselab.config import Params, parse_params
from recourselab.densityflow.config import LIBRARY_ONLY, ODE_METHODS, SECTIONS, DensityFlowConfig, settings_of
from recourselab.errors import ConfigError

FIELDS = [f.name for f in dataclasses.fields(DensityFlowConfig)]


def test_every_setting_is_in_one_section_or_library_only():
    mapped = [field for keys in SECTIONS.values() for field in keys.values()]
    assert sorted(mapped + list(LIBRARY_ONLY)) == sorted(FIELDS)  # each exactly once


@pytest.mark.parametrize("section", sorted(SECTIONS))
def test_sections_have_the_librarys_defaults_and_map_back(section):
    params = getattr(Params(), section)
    library = DensityFlowConfig()
    for key, field in SECTIONS[section].items():
        assert getattr(params, key) == getattr(library, field), key
    assert settings_of(section, params.model_dump(mode="json")) == params.densityflow_settings()
    assert DensityFlowConfig(**params.densityflow_settings()) == library  # the pipeline defaults are the library's


def test_a_range_is_enforced_alike_by_the_library_and_the_params():
    with pytest.raises(ConfigError, match=r"epochs=0 \(an integer >= 1\)"):
        DensityFlowConfig(epochs=0)
    with pytest.raises(ConfigError, match=r"train_flow\.epochs: Input should be greater than or equal to 1"):
        parse_params({"train_flow": {"epochs": 0}})
    with pytest.raises(ConfigError, match=r"distill\.lr_g: Input should be greater than 0"):
        parse_params({"distill": {"lr_g": 0}})


def test_a_rule_across_settings_is_the_librarys():
    with pytest.raises(ConfigError, match=r"lr_min=0\.1 \(at most lr_g and lr_phi"):
        DensityFlowConfig(lr_min=0.1)
    with pytest.raises(ConfigError, match=r"train_flow: invalid DensityFlow settings: lr_min"):
        parse_params({"train_flow": {"lr_g": 1e-7}})


@pytest.mark.parametrize("method", ODE_METHODS)
def test_every_listed_ode_method_integrates(method):
    ys = odeint(lambda t, y: -y, torch.ones(1), torch.tensor([0.0, 0.5]), method=method,
                options={"step_size": 0.05} if method in ("euler", "midpoint", "rk4", "explicit_adams",
                                                          "implicit_adams", "fixed_adams", "heun3") else None)
    assert abs(float(ys[-1, 0]) - 0.6065) < 0.05


def test_an_unlisted_method_is_refused_with_the_list():
    with pytest.raises(ConfigError, match=r"method='dopri' \(a torchdiffeq method: .*dopri5"):
        DensityFlowConfig(method="dopri")
