"""Raw inputs are DVC-tracked and the default remote works from a fresh clone.

A temporary git copy of the project declares one custom CSV dataset. The ``inputs`` stage runs
under DVC and ``prepare``'s lock is committed over a placeholder output (no Prefect run). Then:
one edited byte of the CSV makes ``dvc status`` report ``prepare`` changed; ``dvc push`` to the
default remote (``~`` is a temporary HOME), a fresh ``git clone`` and ``dvc pull`` restore the
tracked inputs, and ``dvc diff`` / ``dvc.api.read(rev=...)`` see both revisions.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from tests.conftest import copy_checkout

pytestmark = pytest.mark.e2e

INPUT = "data/inputs/mine"


class Repo:
    def __init__(self, root: Path, env: dict[str, str]):
        self.root, self.env = root, env

    def run(self, *cmd: str, check: bool = True) -> str:
        proc = subprocess.run(list(cmd), cwd=self.root, env=self.env, capture_output=True, text=True, timeout=300)
        if check:
            assert proc.returncode == 0, f"{cmd}: {proc.stdout}\n{proc.stderr}"
        return proc.stdout

    def dvc(self, *args: str) -> str:
        return self.run(sys.executable, "-m", "dvc", *args)

    def git(self, *args: str) -> str:
        return self.run("git", *args)


def _flip_one_byte(path: Path) -> bytes:
    data = bytearray(path.read_bytes())
    at = data.index(b"0.")  # a digit of the first number
    data[at] = ord("1")
    path.write_bytes(bytes(data))
    return bytes(data)


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    base = tmp_path_factory.mktemp("tracked")
    home, data = base / "home", base / "data"
    home.mkdir()
    data.mkdir()
    rng = np.random.default_rng(0)
    pd.DataFrame({"x": rng.uniform(0, 1, 40).round(4), "label": np.arange(40) % 2}).to_csv(data / "mine.csv",
                                                                                          index=False)
    root = copy_checkout(base / "repo")
    params = yaml.safe_load((root / "params.yaml").read_text())
    params["datasets"] = ["mine"]
    params["data"] = {"dir": str(data), "cache_dir": None,
                      "custom": {"mine": {"path": "mine.csv", "target": "label", "favourable": 1}}}
    (root / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    env = {**os.environ, "HOME": str(home), "DVC_NO_ANALYTICS": "1", "GIT_AUTHOR_NAME": "t",
           "GIT_AUTHOR_EMAIL": "t@example.com", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.com",
           "PYTHONPATH": os.pathsep.join([str(root / "src"), str(root)]), "RECOURSELAB_PYTHON": sys.executable}
    env.pop("XDG_CACHE_HOME", None)
    env.pop("RECOURSELAB_DATA_DIR", None)
    repo = Repo(root, env)
    repo.git("init", "-q")
    repo.dvc("repro", "--single-item", "inputs@mine")
    placeholder = root / "data" / "prepared" / "mine"
    placeholder.mkdir(parents=True)
    (placeholder / "placeholder.txt").write_text("stands for prepare's output\n")
    repo.dvc("commit", "--force", "prepare@mine")
    repo.git("add", "-A")
    repo.git("commit", "-q", "-m", "first run")
    repo.dvc("push")  # `dvc push` sends the workspace's outputs: push after each approved run
    return repo, data / "mine.csv", home


def test_the_inputs_stage_tracks_the_exact_bytes(project):
    repo, csv, _ = project
    assert (repo.root / INPUT / "mine.csv").read_bytes() == csv.read_bytes()
    lock = yaml.safe_load((repo.root / "dvc.lock").read_text())["stages"]
    assert any(dep["path"] == INPUT for dep in lock["prepare@mine"]["deps"])
    assert "up to date" in repo.dvc("status", "prepare@mine")


def test_one_edited_byte_of_a_custom_csv_reruns_prepare_and_the_remote_serves_both_revisions(project):
    repo, csv, home = project
    original = csv.read_bytes()
    edited = _flip_one_byte(csv)
    repo.dvc("repro", "--single-item", "inputs@mine")  # what `dvc repro` runs first, every time
    status = repo.dvc("status", "prepare@mine")
    assert "changed deps" in status and INPUT in status, status

    repo.git("add", "-A")
    repo.git("commit", "-q", "-m", "edited input")
    repo.dvc("push")
    assert any((home / ".cache" / "recourselab" / "dvc-remote").rglob("*")), "nothing reached the default remote"

    clone = Repo(repo.root.parent / "clone", repo.env)
    repo.run("git", "clone", "-q", str(repo.root), str(clone.root))
    clone.dvc("pull", "inputs@mine", "prepare@mine")  # the stages this partial run has outputs of
    assert (clone.root / INPUT / "mine.csv").read_bytes() == edited
    clone.dvc("fetch", "--all-commits", "inputs@mine")
    diff = clone.dvc("diff", "HEAD~1")
    modified = diff.split("Modified:\n", 1)[1].split("\n\n", 1)[0].split()
    assert modified == [f"{INPUT}/", f"{INPUT}/inputs.json", f"{INPUT}/mine.csv"], diff
    read = ("import dvc.api, sys; sys.stdout.buffer.write(dvc.api.read('data/inputs/mine/mine.csv', repo='.', "
            "rev=sys.argv[1], mode='rb'))")
    for rev, expected in (("HEAD~1", original), ("HEAD", edited)):
        proc = subprocess.run([sys.executable, "-c", read, rev], cwd=clone.root, env=clone.env, capture_output=True,
                              timeout=300)
        assert proc.returncode == 0, proc.stderr.decode()
        assert proc.stdout == expected, rev
