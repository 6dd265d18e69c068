"""recourselab.pipeline.stage: outputs swapped in only after success, the run log, the Prefect timeout error."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from recourselab.errors import DataError
from recourselab.pipeline import stage as _common
from recourselab.pipeline.stage import staged_outputs
from recourselab.pipeline.summary import RUN_LOG_ENV, read_run_log


def _tree(root):
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _old_outputs(tmp_path):
    out, metrics = tmp_path / "out", tmp_path / "metrics"
    (out / "moons" / "seed=0").mkdir(parents=True)
    (out / "moons" / "seed=0" / "model.txt").write_text("old model")
    (out / "moons" / "seed=9").mkdir()  # a seed the new run does not make
    (out / "moons" / "seed=9" / "stale.txt").write_text("stale")
    (out / "circles").mkdir()
    (out / "circles" / "other.txt").write_text("another dataset")
    (metrics / "moons").mkdir(parents=True)
    (metrics / "moons" / "stage.json").write_text('{"old": 1}')
    (metrics / "moons" / "other_stage.json").write_text('{"kept": 1}')
    return out, metrics


def test_success_replaces_the_output_whole_and_publishes_the_metrics(tmp_path):
    out, metrics = _old_outputs(tmp_path)
    with staged_outputs(out, "moons", metrics) as (staged_out, staged_metrics):
        assert not (staged_out / "moons").exists()  # a fresh folder: the new output equals a fresh run's
        (staged_out / "moons" / "seed=0").mkdir(parents=True)
        (staged_out / "moons" / "seed=0" / "model.txt").write_text("new model")
        (staged_metrics / "moons").mkdir(parents=True)
        (staged_metrics / "moons" / "stage.json").write_text('{"new": 1}')
        assert (out / "moons" / "seed=0" / "model.txt").read_text() == "old model"  # not yet swapped
    assert _tree(out) == {"moons/seed=0/model.txt": b"new model", "circles/other.txt": b"another dataset"}
    assert _tree(metrics) == {"moons/stage.json": b'{"new": 1}', "moons/other_stage.json": b'{"kept": 1}'}
    assert sorted(p.name for p in out.iterdir()) == ["circles", "moons"]  # no staging folder left


def test_failure_leaves_every_output_byte_identical(tmp_path):
    out, metrics = _old_outputs(tmp_path)
    before = _tree(tmp_path)
    with pytest.raises(DataError, match="bad csv"):
        with staged_outputs(out, "moons", metrics) as (staged_out, staged_metrics):
            (staged_out / "moons").mkdir()
            (staged_out / "moons" / "half.txt").write_text("half written")
            (staged_metrics / "moons").mkdir(parents=True)
            (staged_metrics / "moons" / "stage.json").write_text("{}")
            raise DataError("bad csv")
    assert _tree(tmp_path) == before
    assert sorted(p.name for p in out.iterdir()) == ["circles", "moons"]


def test_a_failure_creates_no_output_folder(tmp_path):
    with pytest.raises(KeyboardInterrupt):
        with staged_outputs(tmp_path / "new" / "out", "moons"):
            raise KeyboardInterrupt
    assert not (tmp_path / "new" / "out").exists()


def test_keep_starts_from_the_existing_output(tmp_path):
    out, _ = _old_outputs(tmp_path)
    with staged_outputs(out, "moons", keep=True) as (staged_out, _metrics):
        assert (staged_out / "moons" / "seed=9" / "stale.txt").read_text() == "stale"
        (staged_out / "moons" / "seed=0" / "model.txt").write_text("refreshed")
    assert _tree(out / "moons") == {"seed=0/model.txt": b"refreshed", "seed=9/stale.txt": b"stale"}


def test_a_stage_that_wrote_nothing_keeps_the_old_output(tmp_path):
    out, _ = _old_outputs(tmp_path)
    before = _tree(out)
    with pytest.raises(Exception, match="wrote nothing"):
        with staged_outputs(out, "moons"):
            pass
    assert _tree(out) == before


def test_staging_left_by_a_killed_run_is_removed(tmp_path):
    out, _ = _old_outputs(tmp_path)
    dead = out / ".moons.staging-999999999-abc"  # no such process
    (dead / "out").mkdir(parents=True)
    alive = out / f".moons.staging-{os.getpid()}-abc"  # a run still going
    alive.mkdir()
    with staged_outputs(out, "moons") as (staged_out, _metrics):
        (staged_out / "moons").mkdir()
    assert not dead.exists() and alive.exists()


def test_outputs_a_killed_run_had_moved_aside_are_restored(tmp_path):
    out, _ = _old_outputs(tmp_path)
    dead = out / ".moons.staging-999999999-abc"  # killed between moving data/<stage>/moons aside and the swap
    dead.mkdir()
    os.rename(out / "moons", dead / "previous")
    before = _tree(dead / "previous")
    with pytest.raises(DataError):
        with staged_outputs(out, "moons"):
            raise DataError("this run fails too")
    assert _tree(out / "moons") == before and not dead.exists()


def test_a_sigterm_during_the_swap_lands_after_it(tmp_path, monkeypatch):
    import signal

    out, metrics = _old_outputs(tmp_path)
    real_rename, calls = os.rename, []

    def rename_then_sigterm(src, dst):
        real_rename(src, dst)
        calls.append(dst)
        if len(calls) == 1:  # the old outputs were just moved aside
            os.kill(os.getpid(), signal.SIGTERM)

    previous = _common._exit_on_sigterm()
    try:
        monkeypatch.setattr(_common.os, "rename", rename_then_sigterm)
        with pytest.raises(SystemExit) as stop:
            with staged_outputs(out, "moons", metrics) as (staged_out, staged_metrics):
                (staged_out / "moons").mkdir()
                (staged_out / "moons" / "model.txt").write_text("new model")
                (staged_metrics / "moons").mkdir(parents=True)
                (staged_metrics / "moons" / "stage.json").write_text('{"new": 1}')
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert stop.value.code == 143 and len(calls) == 2  # both renames ran before the signal was handled
    assert _tree(out / "moons") == {"model.txt": b"new model"}
    assert (metrics / "moons" / "stage.json").read_text() == '{"new": 1}'


def test_a_failed_swap_keeps_the_old_outputs(tmp_path, monkeypatch):
    out, metrics = _old_outputs(tmp_path)
    before = _tree(out / "moons")
    real_rename = os.rename

    def fail_second(src, dst):
        if Path(src).parent.name == "out":  # moving the new outputs in (from <staging>/out/moons)
            raise OSError("disk went away")
        real_rename(src, dst)

    monkeypatch.setattr(_common.os, "rename", fail_second)
    with pytest.raises(OSError, match="disk went away"):
        with staged_outputs(out, "moons", metrics) as (staged_out, _metrics):
            (staged_out / "moons").mkdir()
    monkeypatch.setattr(_common.os, "rename", real_rename)
    assert _tree(out / "moons") == before


def _stage(tmp_path, monkeypatch, body):
    log = tmp_path / "run.jsonl"
    monkeypatch.setenv(RUN_LOG_ENV, str(log))

    @_common.guarded
    def main(argv=None):
        _common.parser("prepare", "doc")
        _common._run["dataset"] = "moons"
        return body()

    return main, log


def test_an_os_error_is_one_line_and_exit_1(tmp_path, monkeypatch, caplog):
    def full_disk():
        raise OSError(28, "No space left on device")

    main, log = _stage(tmp_path, monkeypatch, full_disk)
    assert main([]) == 1
    errors = [r for r in caplog.records if r.levelname == "ERROR"]
    assert [r.getMessage() for r in errors] == [
        "OSError: [Errno 28] No space left on device (the last good outputs are kept)"]
    assert errors[0].exc_info is None and read_run_log(log)[0]["status"] == "failed"


def test_the_run_log_records_outcome_counts_and_wall_time(tmp_path, monkeypatch):
    class R:
        def __init__(self, cached):
            self.cached = cached

    main, log = _stage(tmp_path, monkeypatch, lambda: _common.finish([R(True), R(False)]))
    assert main([]) == 0
    main_fail, _ = _stage(tmp_path, monkeypatch, lambda: (_ for _ in ()).throw(DataError("bad")))
    assert main_fail([]) == 1
    ok, failed = read_run_log(log)
    assert (ok["stage"], ok["dataset"], ok["status"], ok["tasks"], ok["cache_hits"]) == ("prepare", "moons", "ok", 2, 1)
    assert failed["status"] == "failed" and "tasks" not in failed
    assert ok["wall_s"] >= 0 and all(json.loads(line) for line in log.read_text().splitlines())


def test_no_run_log_without_the_variable(tmp_path, monkeypatch):
    main, log = _stage(tmp_path, monkeypatch, lambda: 0)
    monkeypatch.delenv(RUN_LOG_ENV)
    assert main([]) == 0 and not log.exists()


def test_a_prefect_startup_timeout_is_one_line(tmp_path, monkeypatch, caplog):
    def timeout():
        raise RuntimeError("Timed out while attempting to connect to ephemeral Prefect API server.")

    main, _ = _stage(tmp_path, monkeypatch, timeout)
    assert main([]) == 1
    errors = [r for r in caplog.records if r.levelname == "ERROR"]
    assert len(errors) == 1 and "recourselab repro" in errors[0].getMessage() and not errors[0].exc_info
    other, _ = _stage(tmp_path, monkeypatch, lambda: (_ for _ in ()).throw(RuntimeError("a bug")))
    with pytest.raises(RuntimeError, match="a bug"):  # any other error keeps its traceback
        other([])


@pytest.mark.parametrize(("runner", "workers", "dvc_stage", "started"), [
    ("process", 2, "prepare@moons", True), ("process", 1, "prepare@moons", False),
    ("thread", 2, "prepare@moons", False), ("process", 2, None, False)])
def test_under_dvc_process_workers_share_one_server(tmp_path, monkeypatch, runner, workers, dvc_stage, started):
    from contextlib import contextmanager

    import yaml

    import recourselab.prefect_server as server
    from recourselab.config import render_profile

    raw = render_profile("tiny").model_dump(mode="json")
    raw["orchestration"].update(task_runner=runner, max_workers=workers)
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(raw))
    events = []

    @contextmanager
    def local_server(**kw):
        events.append("start")
        yield "http://127.0.0.1:9/api"
        events.append("stop")

    monkeypatch.setattr(server, "local_server", local_server)
    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    if dvc_stage:
        monkeypatch.setenv("DVC_STAGE", dvc_stage)
    else:
        monkeypatch.delenv("DVC_STAGE", raising=False)

    @_common.guarded
    def main(argv=None):
        _common.setup(_common.parser("prepare", "doc").parse_args(argv))
        events.append(os.environ.get("PREFECT_API_URL"))
        return 0

    assert main(["--dataset", "moons", "--params", str(tmp_path / "params.yaml")]) == 0
    assert events == (["start", "http://127.0.0.1:9/api", "stop"] if started else [None])
    assert "PREFECT_API_URL" not in os.environ
