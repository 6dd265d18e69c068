"""stages/run.sh: the DVC stage commands find a Python with recourselab, or say what to do."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO_ROOT

SH = shutil.which("sh") or "/bin/sh"
PROBE = "import os, sys\nprint(os.environ.get('VIA', 'plain'), sys.argv[1:])\n"


def _project(tmp_path: Path) -> Path:
    """A folder with the shim and a probe stage that prints which interpreter ran it."""
    root = tmp_path / "project"
    (root / "stages").mkdir(parents=True)
    shutil.copy(REPO_ROOT / "stages" / "run.sh", root / "stages" / "run.sh")
    (root / "stages" / "__init__.py").write_text("")
    (root / "stages" / "probe.py").write_text(PROBE)
    return root


def _python_wrapper(bindir: Path, name: str, via: str, target: str = sys.executable) -> None:
    """``bindir/name``: a `python` that runs ``target`` with VIA=``via`` in its environment."""
    bindir.mkdir(parents=True, exist_ok=True)
    script = bindir / name
    script.write_text(f'#!{SH}\nVIA={via} exec "{target}" "$@"\n')
    script.chmod(0o755)


def _run(root: Path, path: str, *args: str, cwd: Path | None = None, **env: str) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if k not in ("RECOURSELAB_PYTHON", "PYTHONPATH")}
    environ.update(PATH=path, **env)
    return subprocess.run([SH, str(root / "stages" / "run.sh"), *args], cwd=cwd or root, env=environ,
                          capture_output=True, text=True, timeout=60)


def test_every_dvc_stage_command_goes_through_the_shim():
    stages = yaml.safe_load((REPO_ROOT / "dvc.yaml").read_text())["stages"]
    for name, stage in stages.items():
        assert stage["do"]["cmd"].startswith(f"sh stages/run.sh {name} --dataset ${{item}}"), name
        assert (REPO_ROOT / "stages" / f"{name}.py").is_file()


def test_the_python_on_path_is_used_when_it_has_recourselab(tmp_path):
    root = _project(tmp_path)
    _python_wrapper(tmp_path / "bin", "python", "path")
    proc = _run(root, str(tmp_path / "bin"), "probe", "--dataset", "moons")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split(maxsplit=1) == ["path", "['--dataset', 'moons']\n"]


def test_the_projects_venv_is_used_when_the_python_on_path_lacks_recourselab(tmp_path):
    root = _project(tmp_path)
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "python").write_text(f"#!{SH}\nexit 1\n")  # a python without recourselab
    (bindir / "python").chmod(0o755)
    _python_wrapper(root / ".venv" / "bin", "python", "venv")
    proc = _run(root, str(bindir), "probe", "x", cwd=tmp_path)  # from another folder too
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("venv ['x']")


def test_recourselab_python_comes_first(tmp_path):
    root = _project(tmp_path)
    _python_wrapper(tmp_path / "bin", "python", "path")
    _python_wrapper(tmp_path / "chosen", "py", "chosen")
    proc = _run(root, str(tmp_path / "bin"), "probe", RECOURSELAB_PYTHON=str(tmp_path / "chosen" / "py"))
    assert proc.returncode == 0 and proc.stdout.startswith("chosen"), proc.stderr


def test_without_recourselab_anywhere_it_says_what_to_do_in_one_line(tmp_path):
    root = _project(tmp_path)
    empty = tmp_path / "empty-bin"  # no python at all: PATH lacks recourselab
    empty.mkdir()
    proc = _run(root, str(empty), "probe", "--dataset", "moons")
    assert proc.returncode == 1 and proc.stdout == ""
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    for hint in ("make setup", "source .venv/bin/activate", "make repro", "stage probe"):
        assert hint in lines[0]
    assert "Traceback" not in proc.stderr


def test_an_unknown_stage_is_named(tmp_path):
    root = _project(tmp_path)
    proc = _run(root, str(tmp_path), "nosuch")
    assert proc.returncode == 2 and "stages/nosuch.py" in proc.stderr


def test_the_real_stages_run_through_the_shim_from_a_plain_shell():
    # the project's own venv: found even when PATH holds neither python nor the venv
    if not (REPO_ROOT / ".venv" / "bin" / "python").exists():
        pytest.skip("no .venv in this checkout")
    proc = _run(REPO_ROOT, "/nonexistent", "prepare", "--help")
    assert proc.returncode == 0, proc.stderr
    assert "--dataset" in proc.stdout
