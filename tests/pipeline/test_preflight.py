"""Checks of `recourselab repro` before DVC runs, and the restore hint for outputs that are gone."""

from __future__ import annotations

import shutil

import pandas as pd
import pytest
import yaml

from recourselab.config import dump_params, render_profile
from recourselab.errors import ConfigError, DataError
from recourselab.pipeline.preflight import (
    MissingInputError,
    check_project,
    declared_inputs,
    missing_outputs,
    restore_hint,
)
from tests.conftest import REPO_ROOT

DVC_YAML = {"stages": {
    "prepare": {"foreach": "${datasets}", "do": {
        "cmd": "sh stages/run.sh prepare --dataset ${item}",
        "deps": ["stages/prepare.py", "src/lib"], "outs": [{"data/prepared/${item}": {"persist": True}}]}},
    "train": {"foreach": "${datasets}", "do": {
        "cmd": "x", "deps": ["stages/train.py", "data/prepared/${item}", "data/prepared/${item}/seed=0"],
        "outs": ["data/model/${item}"], "metrics": [{"data/metrics/${item}/train.json": {"cache": False}}]}},
    "report": {"cmd": "y", "deps": ["data/metrics/moons/train.json", "report.py"], "outs": ["report.md"]}}}


def test_declared_inputs_are_the_deps_no_stage_produces():
    inputs = declared_inputs(DVC_YAML, ["moons", "german"])
    assert inputs == {"stages/prepare.py": ["prepare@moons", "prepare@german"],
                      "src/lib": ["prepare@moons", "prepare@german"],
                      "stages/train.py": ["train@moons", "train@german"], "report.py": ["report"]}


def test_the_projects_own_dvc_yaml_declares_only_existing_inputs():
    params = render_profile("default")
    inputs = declared_inputs(yaml.safe_load((REPO_ROOT / "dvc.yaml").read_text()), params.datasets)
    assert "stages/prepare.py" in inputs and "flows/prepare.py" in inputs
    assert not [p for p in inputs if p.startswith("data/")]
    assert [p for p in inputs if not (REPO_ROOT / p).exists()] == []


def _project(tmp_path, params=None, dvc_yaml=None):
    root = tmp_path / "project"
    root.mkdir()
    (root / "params.yaml").write_text(dump_params(params or render_profile("tiny", REPO_ROOT)))
    (root / "dvc.yaml").write_text(yaml.safe_dump(dvc_yaml or {"stages": {}}))
    shutil.copytree(REPO_ROOT / "profiles", root / "profiles")
    return root


def test_a_valid_project_passes(tmp_path):
    assert check_project(_project(tmp_path)).datasets == ["moons"]


def test_a_params_typo_is_named(tmp_path):
    root = _project(tmp_path)
    text = (root / "params.yaml").read_text()
    (root / "params.yaml").write_text(text.replace("\ntune_ensemble:", "\ntune_ensembel:"))
    with pytest.raises(ConfigError, match="tune_ensembel"):
        check_project(root)


def test_a_broken_profile_file_is_named(tmp_path):
    root = _project(tmp_path)
    (root / "profiles" / "tiny.yaml").write_text("distill: {budget: -5}\n")
    with pytest.raises(ConfigError, match="budget"):
        check_project(root)


def test_a_missing_declared_input_says_how_to_restore_it(tmp_path):
    root = _project(tmp_path, dvc_yaml=DVC_YAML)
    for path in ("stages/prepare.py", "stages/train.py", "report.py"):
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text("")
    with pytest.raises(MissingInputError) as err:
        check_project(root)
    assert str(err.value) == ("dvc.yaml declares inputs that are missing: src/lib (needed by prepare@moons); "
                              "restore them with `git checkout -- src/lib`")


def test_a_bad_csv_of_a_custom_dataset_is_found_before_any_stage(tmp_path):
    csv = tmp_path / "mine.csv"
    pd.DataFrame({"a": [1.0, 2.0, 3.0, 4.0], "label": [0, 1, 0, 1]}).to_csv(csv, index=False)
    raw = render_profile("tiny", REPO_ROOT).model_dump(mode="json")
    raw["datasets"] = ["mine"]
    raw["data"]["custom"] = {"mine": {"path": str(csv), "target": "label", "favourable": 1}}
    root = tmp_path / "p"
    root.mkdir()
    (root / "params.yaml").write_text(yaml.safe_dump(raw))
    (root / "dvc.yaml").write_text("stages: {}\n")
    check_project(root)
    csv.write_text("a,lable\n1.0,0\n2.0,1\n")  # the label column renamed by mistake
    with pytest.raises(DataError, match="'mine'.*label"):
        check_project(root)


def test_missing_outputs_come_from_dvc_lock(tmp_path):
    (tmp_path / "data" / "prepared" / "moons").mkdir(parents=True)
    lock = {"schema": "2.0", "stages": {
        "prepare@moons": {"cmd": "c", "outs": [{"path": "data/prepared/moons", "md5": "x.dir"}]},
        "tune_ensemble@moons": {"cmd": "c", "outs": [{"path": "data/ensemble/moons", "md5": "y.dir"},
                                                     {"path": "data/metrics/moons/tune_ensemble.json"}]}}}
    assert missing_outputs(tmp_path) == []  # no dvc.lock yet
    (tmp_path / "dvc.lock").write_text(yaml.safe_dump(lock))
    gone = missing_outputs(tmp_path)
    assert gone == ["data/ensemble/moons", "data/metrics/moons/tune_ensemble.json"]
    assert restore_hint(gone).endswith(
        "restore the last good version with `dvc checkout data/ensemble/moons data/metrics/moons/tune_ensemble.json`")
