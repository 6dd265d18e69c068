"""The start-up validation: names the params use are checked against the registries."""

from __future__ import annotations

import pytest
import yaml

from recourselab.config import parse_params
from recourselab.errors import ConfigError
from recourselab.pipeline.validate import load_checked_params, validate_params


def test_defaults_and_profiles_pass():
    assert validate_params(parse_params({})) == parse_params({})


def test_every_problem_is_listed_once_with_its_place():
    params = parse_params({"datasets": ["moon"], "models": {"rf": {"grid": {"max_dept": [3]}}},
                           "discover": {"per_dataset": {"adult": {"strategy": "genetc"}}}})
    with pytest.raises(ConfigError) as err:
        validate_params(params, "my.yaml")
    lines = str(err.value).splitlines()
    assert lines[0] == "invalid parameters in my.yaml:"
    assert lines[1].startswith("  unknown dataset 'moon' (did you mean 'moons'?)")
    assert lines[2].startswith("  models: unknown hyperparameter 'max_dept' for model 'rf' (did you mean 'max_depth'?)")
    assert lines[3] == ("  discover.per_dataset.adult.strategy: unknown strategy 'genetc' (did you mean 'genetic'?); "
                        "valid: monte_carlo, genetic")
    assert len(lines) == 4


def test_load_checked_params_reads_and_checks(tmp_path):
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump({"datasets": ["moons", "nosuch"]}))
    with pytest.raises(ConfigError, match=rf"invalid parameters in {path}:\n  unknown dataset 'nosuch'"):
        load_checked_params(path)
    path.write_text(yaml.safe_dump({"datasets": ["moons"]}))
    assert load_checked_params(path).datasets == ["moons"]
