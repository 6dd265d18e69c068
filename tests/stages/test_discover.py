"""The discover stage's main(): arguments, and a model outside discover.models fails before any flow runs."""

from __future__ import annotations

import pytest
import yaml

import flows.discover  # noqa: F401 - Prefect configures logging on import: do it before caplog attaches
from recourselab.config import render_profile
from stages import discover


def test_help_names_the_model_option(capsys):
    with pytest.raises(SystemExit) as exc:
        discover.main(["--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert "--dataset" in out and "--model" in out and "discover.models" in out


def test_model_outside_discover_models_is_a_one_line_error(tmp_path, caplog):
    raw = render_profile("default").model_dump(mode="json")
    raw["discover"]["models"] = ["xgboost"]
    params = tmp_path / "params.yaml"
    params.write_text(yaml.safe_dump(raw))
    argv = ["--dataset", "moons", "--params", str(params), "--model", "svm", "--out", str(tmp_path / "out")]
    assert discover.main(argv) == 1
    assert "models ['svm'] are not in discover.models; valid: xgboost" in caplog.text
    assert not (tmp_path / "out").exists()
