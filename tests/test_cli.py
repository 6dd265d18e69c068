"""The `recourselab` command."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from recourselab import cli
from tests.conftest import REPO_ROOT


def test_help_lists_every_stage():
    proc = subprocess.run([sys.executable, "-m", "recourselab.cli", "--help"], capture_output=True,
                          text=True, check=True)
    for stage in cli.STAGES:
        assert stage in proc.stdout
    dvc_stages = (REPO_ROOT / "dvc.yaml").read_text()
    for stage in cli.STAGES:
        assert f"  {stage}:" in dvc_stages, f"CLI stage {stage} has no DVC stage"


def test_stage_subcommand_passes_its_arguments(capfd):
    assert cli.main(["prepare", "--help"]) == 0  # the stage runs in a child interpreter, as under DVC
    assert "--dataset" in capfd.readouterr().out


def test_profile_lists_and_rejects_unknown(monkeypatch, tmp_path, capsys, caplog):
    monkeypatch.chdir(REPO_ROOT)
    assert cli.main(["profile"]) == 0
    assert capsys.readouterr().out.split() == ["default", "paper", "tiny"]
    target = tmp_path / "params.yaml"
    assert cli.main(["profile", "tiyn", "--params", str(target)]) == 1
    assert "did you mean 'tiny'" in caplog.text and not target.exists()
    assert cli.main(["profile", "tiny", "--params", str(target)]) == 0
    assert "datasets:\n- moons\n" in target.read_text()


def test_datasets_lists_builtins(capsys):
    assert cli.main(["datasets"]) == 0
    out = capsys.readouterr().out
    assert {line.split()[0] for line in out.splitlines()} == {
        "moons", "circles", "spirals", "chessboard", "adult", "compas", "german", "cardio",
        "heloc", "blood", "hotel"}


def test_outside_a_project_is_a_clear_error(monkeypatch, tmp_path, caplog):
    monkeypatch.chdir(tmp_path)
    assert cli.main(["prepare", "--dataset", "moons"]) == 1
    assert "no recourselab project" in caplog.text


def test_relative_path_options_are_read_from_the_callers_folder(tmp_path):
    argv = ["--dataset", "moons", "--params", "my.yaml", "--out=out", "--prepared", "/abs/prepared", "-v"]
    assert cli.absolute_path_args(argv, tmp_path) == [
        "--dataset", "moons", "--params", str(tmp_path / "my.yaml"), f"--out={tmp_path / 'out'}",
        "--prepared", "/abs/prepared", "-v"]


def test_pipeline_env_creates_the_prefect_home_on_a_fresh_checkout(monkeypatch, tmp_path):
    from recourselab.cli import pipeline_env

    monkeypatch.delenv("PREFECT_HOME", raising=False)
    env = pipeline_env(tmp_path)
    home = tmp_path / ".recourselab" / "prefect"
    assert env["PREFECT_HOME"] == str(home) and home.is_dir()
    assert env["PATH"].split(os.pathsep)[0] == str(Path(sys.executable).parent)


def test_profile_from_a_subfolder_writes_the_projects_params(monkeypatch, tmp_path):
    import shutil

    (tmp_path / "dvc.yaml").write_text("stages: {}\n")
    (tmp_path / "stages").mkdir()
    shutil.copytree(REPO_ROOT / "profiles", tmp_path / "profiles")
    (tmp_path / "sub").mkdir()
    monkeypatch.chdir(tmp_path / "sub")
    assert cli.main(["profile", "tiny"]) == 0
    assert "datasets:\n- moons\n" in (tmp_path / "params.yaml").read_text()
    assert not (tmp_path / "sub" / "params.yaml").exists()


def test_stage_options_cannot_be_abbreviated(monkeypatch, capfd):
    monkeypatch.chdir(REPO_ROOT)
    # "--prep" would escape the relative-path rewriting
    assert cli.main(["train_flow", "--dataset", "moons", "--prep", "some/folder"]) == 2
    assert "unrecognized arguments: --prep some/folder" in capfd.readouterr().err


def test_stage_flags_reach_the_stage_and_it_logs_in_its_own_format():
    code = "from recourselab import cli; print(cli.main(['prepare', '--dataset', 'nosuch', '-v']))"
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, check=True)
    assert proc.stdout.strip() == "1"  # the unknown dataset fails the stage
    line = next(x for x in proc.stderr.splitlines() if "unknown dataset 'nosuch'" in x)
    assert re.match(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d", line)  # the stage's own log format


def _project(tmp_path, params_text=None):
    tmp_path.mkdir(exist_ok=True)
    (tmp_path / "dvc.yaml").write_text("stages: {}\n")
    (tmp_path / "stages").mkdir()
    if params_text is not None:
        (tmp_path / "params.yaml").write_text(params_text)
    return tmp_path


def test_fetch_data_uses_the_projects_cache_dir(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    assert cli.fetch_cache() is None  # outside a project: the default cache
    root = _project(tmp_path / "p", "data:\n  cache_dir: rel/cache\n")
    (root / "sub").mkdir()
    monkeypatch.chdir(root / "sub")
    assert cli.fetch_cache() == root / "rel" / "cache"
    (root / "params.yaml").write_text("data:\n  cache_dir: ~/somewhere\n")
    assert cli.fetch_cache() == Path.home() / "somewhere"
    (root / "params.yaml").write_text("seeds: [0]\n")
    assert cli.fetch_cache() is None
    fetched = []
    monkeypatch.setattr("recourselab.data.sources.fetch_all", lambda cache=None: fetched.append(cache) or [])
    (root / "params.yaml").write_text("data:\n  cache_dir: c\n")
    assert cli.main(["fetch-data"]) == 0 and fetched == [root / "c"]


@pytest.mark.parametrize("option", ["--dry", "--help", "-h"])
def test_repro_without_a_run_starts_no_server(monkeypatch, tmp_path, option):
    import recourselab.prefect_server as server

    root = _project(tmp_path)
    monkeypatch.chdir(root)
    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    calls = []
    monkeypatch.setattr(cli.subprocess, "call", lambda cmd, **kw: calls.append(cmd[3:]) or 0)
    monkeypatch.setattr(server, "local_server", lambda **kw: pytest.fail("a Prefect server was started"))
    assert cli.repro([option]) == 0
    assert calls == [["repro", option]]  # no `dvc status` either


def test_pipeline_env_names_this_interpreter_for_the_stage_shim(tmp_path):
    assert cli.pipeline_env(tmp_path)["RECOURSELAB_PYTHON"] == sys.executable


def _tiny_project(tmp_path, monkeypatch):
    from recourselab.config import dump_params, render_profile

    root = _project(tmp_path / "p", dump_params(render_profile("tiny", REPO_ROOT)))
    monkeypatch.chdir(root)
    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    return root


def _fake_dvc(monkeypatch, *, stale, repro_code=0, records=()):
    """Replace the DVC children of `recourselab repro`: status reports ``stale``; repro appends ``records``
    to the run log and exits with ``repro_code``. Returns the commands run."""
    import json

    from recourselab.pipeline.summary import RUN_LOG_ENV, append_stage_run

    calls = []

    def child(cmd, root, env, capture=False):
        calls.append(cmd[3:])
        if cmd[3] == "status":
            return 0, json.dumps({name: [] for name in stale})
        for record in records:
            append_stage_run(env[RUN_LOG_ENV], record)
        return repro_code, ""

    monkeypatch.setattr(cli, "_child", child)
    return calls


def _fake_server(monkeypatch, fail=False):
    from contextlib import contextmanager

    import recourselab.prefect_server as server

    @contextmanager
    def local_server(**kw):
        if fail:
            raise server.PrefectServerError("could not start a local Prefect server (2 tries: ...)")
        yield "http://127.0.0.1:1/api"

    monkeypatch.setattr(server, "local_server", local_server)


def test_repro_checks_params_before_dvc_runs(monkeypatch, tmp_path, caplog):
    root = _tiny_project(tmp_path, monkeypatch)
    text = (root / "params.yaml").read_text()
    (root / "params.yaml").write_text(text.replace("\ntune_ensemble:", "\ntune_ensembel:"))
    calls = _fake_dvc(monkeypatch, stale=["prepare@moons"])
    assert cli.main(["repro"]) == 1
    assert calls == []  # DVC never ran
    errors = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert len(errors) == 1 and "tune_ensembel" in errors[0]


def test_repro_server_failure_is_one_line(monkeypatch, tmp_path, caplog):
    _tiny_project(tmp_path, monkeypatch)
    calls = _fake_dvc(monkeypatch, stale=["prepare@moons"])
    _fake_server(monkeypatch, fail=True)
    assert cli.main(["repro"]) == 1
    assert calls == [["status", "--json"]]  # `dvc repro` never started
    errors = [r for r in caplog.records if r.levelname == "ERROR"]
    assert len(errors) == 1 and "Prefect server" in errors[0].getMessage() and not errors[0].exc_info


def test_repro_ends_with_a_summary_of_every_dataset(monkeypatch, tmp_path, capsys):
    _tiny_project(tmp_path, monkeypatch)
    records = [{"stage": "prepare", "dataset": "moons", "status": "ok", "wall_s": 2.5, "tasks": 1, "cache_hits": 1}]
    calls = _fake_dvc(monkeypatch, stale=["prepare@moons", "tune_ensemble@moons"], records=records)
    _fake_server(monkeypatch)
    assert cli.main(["repro"]) == 0
    assert calls == [["status", "--json"], ["repro"]]
    out = capsys.readouterr().out
    assert "== moons" in out and "run wall time:" in out
    rows = {line.split()[0]: line for line in out.splitlines() if line.startswith("  ")}
    assert rows["prepare"].split()[1:] == ["cached", "2.5", "s"]
    assert "up to date" in rows["discover"]


def test_repro_failure_says_how_to_restore_missing_outputs(monkeypatch, tmp_path, caplog):
    import yaml

    root = _tiny_project(tmp_path, monkeypatch)
    lock = {"schema": "2.0", "stages": {"prepare@moons": {"cmd": "c", "outs": [{"path": "data/prepared/moons"}]}}}
    (root / "dvc.lock").write_text(yaml.safe_dump(lock))
    _fake_dvc(monkeypatch, stale=["prepare@moons"], repro_code=1)
    _fake_server(monkeypatch)
    caplog.set_level("INFO")
    assert cli.main(["repro"]) == 1  # not in the DVC cache (a fresh clone): no checkout hint
    assert not [r for r in caplog.records if "checkout" in r.getMessage()]
    assert any("builds them" in r.getMessage() and r.levelname == "INFO" for r in caplog.records)
    caplog.clear()
    monkeypatch.setattr("recourselab.pipeline.preflight._in_dvc_cache", lambda root, hashes: set(hashes))
    assert cli.main(["repro"]) == 1
    warning, error = [r for r in caplog.records if "dvc checkout" in r.getMessage()]
    assert warning.levelname == "WARNING" and "otherwise this run rebuilds them" in warning.getMessage()
    assert error.levelname == "ERROR" and "`dvc checkout data/prepared/moons`" in error.getMessage()


@pytest.mark.parametrize(("code", "status"), [(0, 0), (3, 3), (-2, 130), (-9, 137), (-15, 143)])
def test_a_child_killed_by_a_signal_exits_128_plus_the_signal(code, status):
    assert cli.exit_status(code) == status


def test_profile_refuses_a_params_path_it_cannot_write(monkeypatch, tmp_path, caplog):
    monkeypatch.chdir(REPO_ROOT)
    assert cli.main(["profile", "tiny", "--params", str(tmp_path)]) == 1
    assert cli.main(["profile", "tiny", "--params", str(tmp_path / "no" / "params.yaml")]) == 1
    assert "is a folder" in caplog.text and "does not exist" in caplog.text
    assert list(tmp_path.iterdir()) == []


def _fake_pooled_dvc(monkeypatch, stale, *, fail=(), pool_code=0):
    """Like :func:`_fake_dvc` for :func:`cli.pooled_repro`: ``dvc status [TARGET]`` reports the names of
    ``stale`` that start with TARGET@ (or all); ``dvc repro`` of a stage in ``fail`` exits 1; the pool
    exits ``pool_code``. Returns (command after the interpreter, whether the tasks were marked warmed)."""
    import json

    from recourselab.orchestration import WARMED_ENV

    calls = []

    def child(cmd, root, env, capture=False):
        args = cmd[1:] if cmd[1] == "-m" and cmd[2] == "flows.pool" else cmd[3:]
        calls.append((args[1:] if args[0] == "-m" else args, env.get(WARMED_ENV) == "1"))
        if args[0] == "status":
            target = args[2] if len(args) > 2 else None
            names = [n for n in stale if target is None or n.startswith(f"{target}@")]
            return 0, json.dumps({name: [] for name in names})
        if args[0] == "-m":
            return pool_code, ""
        return (1 if args[-1] in fail else 0), ""

    monkeypatch.setattr(cli, "_child", child)
    return calls


def test_pooled_repro_pools_each_stage_over_its_changed_datasets_then_lets_dvc_run_it(monkeypatch, tmp_path):
    stale = ["train_flow@spirals", "train_flow@moons", "inputs@moons", "evaluate@adult"]
    calls = _fake_pooled_dvc(monkeypatch, stale)
    assert cli.pooled_repro(["py", "-m", "dvc"], tmp_path, {}) == 0
    assert calls[0] == (["repro", "inputs", "prepare"], False)  # the stages before the first pool, as DVC plans them
    assert (["flows.pool", "train_flow", "moons", "spirals"], False) in calls
    assert (["flows.pool", "evaluate", "adult"], False) in calls
    assert not [c for c, _ in calls if c[0] == "flows.pool" and c[1] in ("tune_ensemble", "distill")]  # none changed
    single = [(c[-1], warmed) for c, warmed in calls if c[:2] == ["repro", "--single-item"]]
    assert [name for name, _ in single] == list(cli.STAGES)[2:]  # every later stage once, in DVC's order
    assert all(warmed == (name in cli.POOLED_STAGES) for name, warmed in single)  # threads for the cache hits
    pool_at = calls.index((["flows.pool", "train_flow", "moons", "spirals"], False))
    assert calls[pool_at + 1] == (["repro", "--single-item", "train_flow"], True)
    assert calls[-1] == (["repro"], False)  # something is still listed: a plain run catches it


def test_pooled_repro_stops_at_a_failed_stage_and_a_failed_pool_leaves_the_stage_its_workers(monkeypatch, tmp_path):
    calls = _fake_pooled_dvc(monkeypatch, ["distill@moons"], fail={"generate"}, pool_code=1)
    assert cli.pooled_repro(["py", "-m", "dvc"], tmp_path, {}) == 1
    assert calls[-1] == (["repro", "--single-item", "generate"], True)  # nothing after the failure
    assert (["repro", "--single-item", "distill"], False) in calls  # its pool failed: processes, not threads
    calls = _fake_pooled_dvc(monkeypatch, ["inputs@moons"])
    assert cli.pooled_repro(["py", "-m", "dvc"], tmp_path, {}) == 0
    assert calls[-1][0] != ["repro"]  # only the always-changed inputs are listed: no extra run


def test_repro_pools_only_a_plain_run_with_several_workers(monkeypatch, tmp_path):
    root = _tiny_project(tmp_path, monkeypatch)
    _fake_server(monkeypatch)
    pooled = []
    monkeypatch.setattr(cli, "pooled_repro", lambda dvc, root, env: pooled.append(1) or 0)
    calls = _fake_dvc(monkeypatch, stale=["prepare@moons"])
    assert cli.main(["repro"]) == 0 and not pooled  # the tiny profile has one worker
    text = (root / "params.yaml").read_text()
    (root / "params.yaml").write_text(text.replace("  max_workers: 1\n", "  max_workers: 2\n"))
    assert cli.main(["repro"]) == 0 and pooled == [1]
    calls.clear()
    assert cli.main(["repro", "train_flow@moons"]) == 0 and pooled == [1]  # targets: DVC's own plan
    assert calls[-1] == ["repro", "train_flow@moons"]
    (root / "params.yaml").write_text(text.replace("  max_workers: 1\n", "  max_workers: 2\n")
                                      .replace("  pool: true\n", "  pool: false\n"))
    assert cli.main(["repro"]) == 0 and pooled == [1]
