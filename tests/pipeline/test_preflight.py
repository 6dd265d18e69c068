"""Checks of `recourselab repro` before DVC runs, and the restore hint for outputs that are gone."""

from __future__ import annotations

import logging
import shutil
import subprocess
import sys

import pandas as pd
import pytest
import yaml

from recourselab.config import dump_params, render_profile
from recourselab.errors import ConfigError, DataError
from recourselab.pipeline.preflight import (
    MissingInputError,
    check_project,
    classify_missing,
    declared_inputs,
    missing_notes,
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


def test_restore_hint_shortens_long_lists_and_then_restores_everything():
    paths = [f"data/prepared/d{i}" for i in range(12)]
    hint = restore_hint(paths)
    assert hint.startswith("12 output(s)") and "d7 and 4 more" in hint and hint.endswith("`dvc checkout`")
    assert restore_hint(paths[:2], git=True).endswith("`git checkout -- data/prepared/d0 data/prepared/d1`")


def test_missing_outputs_are_sorted_by_where_they_can_come_back_from(tmp_path):
    """In the DVC cache -> dvc checkout (warning); committed -> git checkout (warning); neither, as in a
    fresh clone -> one informational line that the run builds them, with no checkout hint."""
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    subprocess.run([sys.executable, "-m", "dvc", "init", "-q"], cwd=tmp_path, check=True,
                   env={"DVC_NO_ANALYTICS": "1", "PATH": "/usr/bin:/bin"})
    cached_md5 = "0a3e9e02a6d58a98f8e3cc65ff52b8fd.dir"
    obj = tmp_path / ".dvc" / "cache" / "files" / "md5" / cached_md5[:2] / cached_md5[2:]
    obj.parent.mkdir(parents=True)
    obj.write_text("[]")
    metrics = tmp_path / "data" / "metrics" / "moons" / "train.json"
    metrics.parent.mkdir(parents=True)
    metrics.write_text("{}")
    subprocess.run(["git", "add", str(metrics)], cwd=tmp_path, check=True)
    metrics.unlink()
    lock = {"schema": "2.0", "stages": {"train@moons": {"cmd": "c", "outs": [
        {"path": "data/ensemble/moons", "md5": cached_md5},
        {"path": "data/metrics/moons/train.json", "md5": "1" * 32},
        {"path": "data/distill/moons", "md5": "2" * 32 + ".dir"}]}}}
    (tmp_path / "dvc.lock").write_text(yaml.safe_dump(lock))

    gone = classify_missing(tmp_path, missing_outputs(tmp_path))
    assert gone.in_cache == ["data/ensemble/moons"]
    assert gone.in_git == ["data/metrics/moons/train.json"]
    assert gone.elsewhere == ["data/distill/moons"]
    (dvc_level, dvc_note), (git_level, git_note), (info_level, info_note) = missing_notes(tmp_path)
    assert dvc_level == git_level == logging.WARNING and info_level == logging.INFO
    assert dvc_note.endswith("`dvc checkout data/ensemble/moons`")
    assert git_note.endswith("`git checkout -- data/metrics/moons/train.json`")
    assert "data/distill/moons" in info_note and "checkout" not in info_note and "builds them" in info_note


def test_missing_outputs_outside_a_dvc_repo_are_only_rebuilt(tmp_path):
    lock = {"schema": "2.0", "stages": {"p@m": {"cmd": "c", "outs": [{"path": "data/x", "md5": "3" * 32}]}}}
    (tmp_path / "dvc.lock").write_text(yaml.safe_dump(lock))
    gone = classify_missing(tmp_path, ["data/x"])
    assert (gone.in_cache, gone.in_git, gone.elsewhere) == ([], [], ["data/x"])
