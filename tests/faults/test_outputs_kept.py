"""A failed or stopped run loses nothing: every previous DVC output stays byte-identical.

One tiny pipeline (a custom CSV dataset, prepare -> distill) runs once in a temporary git copy
of the project; each test then breaks one input as the reliability issue did, checks that
`recourselab repro` refuses it before DVC runs and that plain `dvc repro` (whose stage fails)
keeps every output, and restores the input.
"""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import pytest
import yaml

from recourselab.config import dump_params, parse_params, render_profile
from recourselab.pipeline.preflight import locked_outputs
from tests.conftest import copy_checkout

pytestmark = pytest.mark.e2e

TARGET = "distill@mine"


@dataclass
class Project:
    root: Path
    env: dict[str, str]
    csv: Path

    def run(self, *cmd: str, timeout: float = 900) -> subprocess.CompletedProcess:
        return subprocess.run(list(cmd), cwd=self.root, env=self.env, capture_output=True, text=True,
                              timeout=timeout)

    def recourselab(self, *args: str) -> subprocess.CompletedProcess:
        return self.run(sys.executable, "-m", "recourselab.cli", *args)

    def dvc(self, *args: str) -> subprocess.CompletedProcess:
        return self.run(sys.executable, "-m", "dvc", *args)

    def outputs(self) -> dict[str, bytes]:
        """Every file of every output recorded in dvc.lock, and dvc.lock itself."""
        files = {"dvc.lock": (self.root / "dvc.lock").read_bytes()}
        for out in locked_outputs(self.root):
            path = self.root / out
            found = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
            files.update({str(p.relative_to(self.root)): p.read_bytes() for p in found if p.exists()})
        return files

    def params(self) -> dict:
        return yaml.safe_load((self.root / "params.yaml").read_text())


def _write_moons_csv(path: Path) -> None:
    import numpy as np

    rng = np.random.default_rng(0)
    t = rng.uniform(0, np.pi, 300)
    upper = rng.integers(0, 2, 300)
    x1 = np.where(upper == 1, np.cos(t), 1 - np.cos(t)) + rng.normal(0, 0.1, 300)
    x2 = np.where(upper == 1, np.sin(t), 0.5 - np.sin(t)) + rng.normal(0, 0.1, 300)
    lines = ["x1,x2,label", *(f"{a:.4f},{b:.4f},{y}" for a, b, y in zip(x1, x2, upper, strict=True))]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Project:
    tmp = tmp_path_factory.mktemp("faults")
    root = copy_checkout(tmp / "project")
    env = {**os.environ, "PATH": str(Path(sys.executable).parent) + os.pathsep + os.environ["PATH"],
           "DVC_NO_ANALYTICS": "1", "PREFECT_HOME": str(tmp / "prefect-home")}
    env.pop("PREFECT_API_URL", None)
    proj = Project(root, env, tmp / "raw" / "mine.csv")
    _write_moons_csv(proj.csv)
    raw = render_profile("tiny", root).model_dump(mode="json")
    raw["datasets"] = ["mine"]
    raw["data"]["custom"] = {"mine": {"path": str(proj.csv), "target": "label", "favourable": 1}}
    (root / "params.yaml").write_text(dump_params(parse_params(raw)))
    for cmd in (["git", "init", "-q"], ["git", "add", "-A"],
                ["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "init"]):
        assert proj.run(*cmd).returncode == 0
    first = proj.recourselab("repro", TARGET)
    assert first.returncode == 0, first.stdout + first.stderr
    assert "== mine" in first.stdout  # the summary names the dataset
    assert set(locked_outputs(root)) >= {"data/prepared/mine", "data/ensemble/mine", "data/densityflow/mine",
                                         "data/distill/mine", "data/metrics/mine/tune_ensemble.json"}
    return proj


def _up_to_date(project: Project) -> bool:
    """Nothing to rerun but the inputs stage, which DVC always reruns (it rehashes the raw files)."""
    status = project.dvc("status", "--json", "--with-deps", TARGET)
    assert status.returncode == 0, status.stderr
    changes = json.loads(status.stdout or "{}")
    return all(entries == ["always changed"] for entries in changes.values())


def _refused_before_dvc(proc: subprocess.CompletedProcess, *words: str) -> None:
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "Running stage" not in proc.stdout and "Traceback" not in proc.stderr
    assert proc.stderr.count("ERROR") == 1 and all(w in proc.stderr for w in words), proc.stderr


def test_a_bad_csv_keeps_the_prepared_data(project):
    before, good = project.outputs(), project.csv.read_bytes()
    try:
        project.csv.write_text(good.decode().replace("x1,x2,label", "x1,x2,lable", 1))
        _refused_before_dvc(project.recourselab("repro", TARGET), "'mine'", "label")
        failed = project.dvc("repro", "--force", "--single-item", "inputs@mine")
        assert failed.returncode != 0 and "Running stage 'inputs@mine'" in failed.stdout
        assert project.outputs() == before
    finally:
        project.csv.write_bytes(good)
    assert _up_to_date(project)


def test_a_params_typo_keeps_the_ensemble_and_its_metrics(project):
    before, text = project.outputs(), (project.root / "params.yaml").read_text()
    try:
        raw = project.params()
        raw["tune_ensembel"] = raw.pop("tune_ensemble")
        (project.root / "params.yaml").write_text(yaml.safe_dump(raw, sort_keys=False))
        _refused_before_dvc(project.recourselab("repro", TARGET), "tune_ensembel")
        failed = project.dvc("repro", TARGET)
        assert failed.returncode != 0
        assert project.outputs() == before
    finally:
        (project.root / "params.yaml").write_text(text)
    assert _up_to_date(project)


def test_a_negative_budget_keeps_the_distilled_flow(project):
    before, text = project.outputs(), (project.root / "params.yaml").read_text()
    try:
        raw = project.params()
        raw["distill"]["budget"] = -5
        (project.root / "params.yaml").write_text(yaml.safe_dump(raw, sort_keys=False))
        _refused_before_dvc(project.recourselab("repro", TARGET), "distill.budget")
        failed = project.dvc("repro", TARGET)  # the first stage to read the params (inputs@mine) refuses them
        assert failed.returncode != 0 and "Running stage 'inputs@mine'" in failed.stdout
        assert project.outputs() == before
    finally:
        (project.root / "params.yaml").write_text(text)
    assert _up_to_date(project)


def _process_table() -> dict[int, tuple[int, int, str]]:
    """pid -> (parent pid, process group, state) of every process, from /proc."""
    table = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            table[int(entry.name)] = (int(fields[1]), int(fields[2]), fields[0])
    return table


def _descendants(pid: int) -> dict[int, int]:
    """pid -> process group of every live descendant of ``pid``."""
    table = _process_table()
    found, frontier = {}, [pid]
    while frontier:
        parent = frontier.pop()
        for child, (ppid, pgid, state) in table.items():
            if ppid == parent and child not in found and state != "Z":
                found[child] = pgid
                frontier.append(child)
    return found


def _survivors(pids: dict[int, int]) -> list[int]:
    """Live (not zombie) processes among ``pids`` or in their process groups."""
    groups = set(pids.values())
    return sorted(p for p, (_, pgid, state) in _process_table().items()
                  if state != "Z" and (p in pids or pgid in groups))


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
def test_sigterm_stops_the_server_and_dvc_and_keeps_the_outputs(project):
    before, text = project.outputs(), (project.root / "params.yaml").read_text()
    raw = project.params()
    raw["distill"]["epochs"] += 1  # distill@mine is stale: repro starts a server and runs it
    (project.root / "params.yaml").write_text(yaml.safe_dump(raw, sort_keys=False))
    proc = subprocess.Popen([sys.executable, "-m", "recourselab.cli", "repro", TARGET], cwd=project.root,
                            env=project.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True)
    reader.start()
    try:
        deadline = time.monotonic() + 600
        while not any("Running stage 'distill@mine'" in line for line in lines):
            assert proc.poll() is None and time.monotonic() < deadline, "".join(lines)
            time.sleep(0.5)
        assert any("local Prefect server at" in line for line in lines)
        time.sleep(3)  # the stage process is up
        children = _descendants(proc.pid)
        commands = [Path(f"/proc/{p}/cmdline").read_bytes().replace(b"\0", b" ") for p in children]
        assert any(b"server start" in c for c in commands) and any(b"stages.distill" in c for c in commands)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=120) == 128 + signal.SIGTERM
        reader.join(timeout=10)
        deadline = time.monotonic() + 30
        while _survivors(children) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert _survivors(children) == [], "".join(lines)
        assert any("stopped by SIGTERM" in line for line in lines)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        (project.root / "params.yaml").write_text(text)
    assert project.outputs() == before
    assert _up_to_date(project)


def test_a_rerun_over_a_persisted_output_equals_a_fresh_run(project):  # last: it may change data/prepared
    before = project.outputs()
    stray = project.root / "data" / "prepared" / "mine"
    (stray / "seed=7").mkdir()
    (stray / "seed=7" / "old.parquet").write_text("from an earlier run with more seeds")
    (stray / "seed=0" / "notes.txt").write_text("stray")
    rerun = project.dvc("repro", "prepare@mine")  # the output changed: DVC reruns the stage
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr
    assert "Running stage 'prepare@mine'" in rerun.stdout
    after = project.outputs()
    assert sorted(after) == sorted(before)  # no stray file left
    for name, content in before.items():  # the same content (provenance names the code, which may differ)
        if name.endswith(".parquet"):
            assert pd.read_parquet(io.BytesIO(after[name])).equals(pd.read_parquet(io.BytesIO(content))), name
        elif name != "dvc.lock":
            assert after[name] == content, name
    assert project.dvc("status", "--quiet", "prepare@mine").returncode == 0  # dvc.lock matches the new output
