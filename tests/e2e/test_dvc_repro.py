"""End to end: `recourselab repro` (dvc repro + a local Prefect server) on the tiny profile."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from recourselab.io import read_json
from tests.conftest import copy_checkout

pytestmark = pytest.mark.e2e


def _run(cmd: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"{cmd} failed:\n{proc.stdout}\n{proc.stderr}"
    return proc


def test_dvc_repro_tiny_profile_in_a_git_copy(tmp_path):
    work = copy_checkout(tmp_path / "project")
    bindir = str(Path(sys.executable).parent)
    env = {**os.environ, "PATH": bindir + os.pathsep + os.environ["PATH"], "DVC_NO_ANALYTICS": "1",
           "PREFECT_HOME": str(tmp_path / "prefect-home")}
    env.pop("PREFECT_API_URL", None)
    cli = [sys.executable, "-m", "recourselab.cli"]

    for cmd in (["git", "init", "-q"], ["git", "add", "-A"],
                ["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "init"]):
        _run(cmd, work, env)
    _run([*cli, "profile", "tiny"], work, env)
    params = (work / "params.yaml").read_text()
    assert "profile: tiny" in params
    # two workers: `recourselab repro` runs each per-seed stage's tasks in one pool, then DVC runs the stage
    (work / "params.yaml").write_text(params.replace("  max_workers: 1\n", "  max_workers: 2\n"))

    first = _run([*cli, "repro"], work, env)
    assert "pool train_flow: 1 tasks of moons" in first.stderr
    summary = first.stdout.split("== moons")[-1]
    assert re.search(r"train_flow +ran in pool", summary) and re.search(r"discover +ran ", summary), summary
    assert "Running stage 'prepare@moons'" in first.stdout
    train = pd.read_parquet(work / "data/prepared/moons/seed=0/train.parquet")
    assert len(train) == 180 and set(train["y"]) == {0, 1}
    assert not (work / "data/prepared/moons/seed=1").exists()
    assert "prepare@moons" in (work / "dvc.lock").read_text()
    assert "Running stage 'ablate@moons'" in first.stdout  # moons is in ablate.datasets
    ablation = read_json(work / "data/metrics/moons/ablate.json")
    assert {"full.mean_per_model", "no_density.mean_per_model"} <= set(ablation["summary"])

    second = _run([sys.executable, "-m", "dvc", "repro"], work, env)
    assert "didn't change" in second.stdout or "up to date" in second.stdout
    # only the inputs stage re-reads the raw sources (always_changed); unchanged bytes rerun nothing after it
    ran = [line for line in second.stdout.splitlines() if "Running stage" in line]
    assert len(ran) == 1 and "'inputs@moons'" in ran[0], second.stdout
    assert "moons" in first.stdout.split("Running stage")[-1]  # the end-of-run summary names the dataset

    # the README's tour, step 2: explain the example rows with the artifacts just made
    explained = _run([*cli, "explain", "--dataset", "moons", "--seed", "0", "examples/moons_rows.csv"], work, env)
    n_rows = len(pd.read_csv(work / "examples/moons_rows.csv"))
    assert f"{n_rows} of {n_rows} rows explained" in explained.stdout
    assert "valid for: knn" in explained.stdout and "agreement" in explained.stdout
