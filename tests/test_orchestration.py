"""The per-seed Prefect pattern: staging, publishing, cache keys, thread limits and failure reports."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from recourselab.orchestration import manifest_intact, publish, stage_artifacts
from recourselab.provenance import code_fingerprint
from recourselab.runtime import limit_threads


def test_stage_is_content_addressed_and_publish_copies(tmp_path):
    writers = {"a.txt": lambda p: p.write_text("alpha"), "b.txt": lambda p: p.write_text("beta")}
    m1 = stage_artifacts(tmp_path / "stage", writers)
    m2 = stage_artifacts(tmp_path / "stage", writers)
    assert m1 == m2
    assert [p.name for p in (tmp_path / "stage").iterdir()] == [m1["dir"].rsplit("/", 1)[1]]
    assert manifest_intact(m1)
    publish([m1], [tmp_path / "out"])
    assert (tmp_path / "out" / "b.txt").read_text() == "beta"
    (tmp_path / "stage" / m1["dir"].rsplit("/", 1)[1] / "a.txt").write_text("tampered")
    assert not manifest_intact(m1)


def _no_links(src, dst):  # noqa: ANN001, ANN202
    raise OSError(18, "Invalid cross-device link")


def test_publish_links_the_staged_file_instead_of_a_second_copy(tmp_path):
    staged = stage_artifacts(tmp_path / "stage", {"a.bin": lambda p: p.write_bytes(b"x" * 4096)})
    publish([staged], [tmp_path / "out"])
    src, dst = Path(staged["dir"]) / "a.bin", tmp_path / "out" / "a.bin"
    assert dst.stat().st_ino == src.stat().st_ino and dst.read_bytes() == b"x" * 4096


def test_publish_is_all_or_nothing_when_a_copy_fails(tmp_path, monkeypatch):
    import os
    import shutil

    old = {"a.txt": lambda p: p.write_text("old a"), "b.txt": lambda p: p.write_text("old b")}
    new = {"a.txt": lambda p: p.write_text("new a"), "b.txt": lambda p: p.write_text("new b")}
    out = [tmp_path / "seed=0", tmp_path / "seed=1"]
    publish([stage_artifacts(tmp_path / "stage", old)] * 2, out)
    fresh = stage_artifacts(tmp_path / "stage", new)
    real, calls = shutil.copyfile, []

    def copy_then_fail(src, dst):  # the third of four copies hits a full disk
        calls.append(dst)
        if len(calls) == 3:
            raise OSError(28, "No space left on device")
        return real(src, dst)

    monkeypatch.setattr(shutil, "copyfile", copy_then_fail)
    monkeypatch.setattr(os, "link", _no_links)  # another file system: publish copies
    with pytest.raises(OSError, match="No space left"):
        publish([fresh, fresh], out)
    for d in out:  # every old file whole, no temporary file left behind
        assert sorted(p.name for p in d.iterdir()) == ["a.txt", "b.txt"]
        assert (d / "a.txt").read_text() == "old a" and (d / "b.txt").read_text() == "old b"
    monkeypatch.setattr(shutil, "copyfile", real)
    assert publish([fresh, fresh], out) == [fresh["files"]] * 2
    assert all((d / "b.txt").read_text() == "new b" for d in out)


def test_failing_writer_leaves_no_staging_dir(tmp_path):
    def boom(path):
        path.write_text("half")
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError, match="disk full"):
        stage_artifacts(tmp_path / "stage", {"x": boom})
    assert list((tmp_path / "stage").iterdir()) == []


def test_code_fingerprint_changes_with_modules():
    a = code_fingerprint("recourselab.data")
    assert a == code_fingerprint("recourselab.data")
    assert a != code_fingerprint("recourselab.data", "recourselab.io")


def test_a_damaged_staging_folder_is_replaced_by_the_fresh_write(tmp_path):
    writers = {"a.txt": lambda p: p.write_text("alpha"), "b.txt": lambda p: p.write_text("beta")}
    m1 = stage_artifacts(tmp_path / "stage", writers)
    staged = tmp_path / "stage" / m1["dir"].rsplit("/", 1)[1]
    (staged / "a.txt").unlink()
    (staged / "b.txt").write_text("tampered")
    m2 = stage_artifacts(tmp_path / "stage", writers)
    assert m2 == m1 and manifest_intact(m2)  # same content address, repaired in place
    publish([m2], [tmp_path / "out"])
    assert (tmp_path / "out" / "a.txt").read_text() == "alpha" and (tmp_path / "out" / "b.txt").read_text() == "beta"


def test_code_fingerprint_covers_flow_modules_outside_the_package():
    import flows.densityflow as fd
    import flows.discover as fdi

    assert "flows.densityflow" in fd.CODE and "recourselab.config" in fd.CODE
    for code in (fd.CODE, fdi.CODE):  # seeding and thread limits shape the outputs
        assert {"recourselab.orchestration", "recourselab.runtime", "recourselab.provenance"} <= set(code)
    assert code_fingerprint("flows.densityflow") != code_fingerprint("flows.discover")


def test_limit_threads_caps_each_concurrent_task_and_restores_its_thread():
    import threading

    import torch

    base, cap = 2, 1
    # torch keeps a thread's own setting once the thread has used torch: give each one its own first
    both_ready, both_in = threading.Barrier(2, timeout=10), threading.Barrier(2, timeout=10)
    first_out = threading.Event()
    seen: dict[str, int] = {}

    def task(name: str) -> None:
        torch.set_num_threads(base)
        seen[f"{name}_before"] = torch.get_num_threads()
        both_ready.wait()
        try:
            with limit_threads(cap):
                both_in.wait()
                if name == "second":
                    first_out.wait(10)  # the first task has left: this one is still capped
                seen[name] = torch.get_num_threads()
                if name == "first":
                    raise RuntimeError("a failing task")
        except RuntimeError:
            pass
        finally:
            if name == "first":
                first_out.set()
        seen[f"{name}_after"] = torch.get_num_threads()

    threads = [threading.Thread(target=task, args=(n,)) for n in ("first", "second")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    assert seen["first_before"] == seen["second_before"] == base
    assert seen["first"] == seen["second"] == cap
    assert seen["first_after"] == seen["second_after"] == seen["first_before"]  # restored, after a failure too


def _say(n: int) -> int:
    import logging

    logging.getLogger("recourselab.test_worker").info("worker %d says hello", n)
    return n


def test_process_workers_log_recourselab_records_in_the_stage_format(capfd):
    import logging

    from prefect import flow, task

    from recourselab.config import OrchestrationParams
    from recourselab.orchestration import task_runner

    say = task(_say, name="say")

    @flow(name="say-flow")
    def say_flow() -> list[int]:
        return [f.result() for f in [say.submit(i) for i in range(2)]]

    logger = logging.getLogger("recourselab")
    before = logger.level
    logger.setLevel(logging.INFO)  # the stage's level (`--verbose`: DEBUG)
    try:
        runner = task_runner(OrchestrationParams(task_runner="process", max_workers=2))
        assert say_flow.with_options(task_runner=runner)() == [0, 1]
    finally:
        logger.setLevel(before)
    err = capfd.readouterr().err
    for n in (0, 1):
        assert f"INFO recourselab.test_worker: worker {n} says hello" in err


def test_warmed_tasks_run_on_threads_whatever_the_runner(monkeypatch):
    from prefect.task_runners import ThreadPoolTaskRunner

    from recourselab.config import OrchestrationParams
    from recourselab.orchestration import WARMED_ENV, task_runner

    params = OrchestrationParams(task_runner="process", max_workers=2)
    monkeypatch.delenv(WARMED_ENV, raising=False)
    assert not isinstance(task_runner(params), ThreadPoolTaskRunner)
    monkeypatch.setenv(WARMED_ENV, "1")
    runner = task_runner(params)
    assert isinstance(runner, ThreadPoolTaskRunner) and runner._max_workers == 2


def test_code_fingerprint_covers_the_package_version(monkeypatch):
    import recourselab._version

    before = code_fingerprint("recourselab.io")
    monkeypatch.setattr(recourselab._version, "__version__", "99.0")
    assert code_fingerprint("recourselab.io") != before  # provenance records the version


def test_code_fingerprint_covers_library_versions(monkeypatch):
    import importlib.metadata

    from recourselab import provenance

    versions = provenance.library_versions()
    assert versions["torch"] == importlib.metadata.version("torch")
    assert versions["xgboost-cpu"] != "absent"  # found under either distribution name
    before = code_fingerprint("recourselab.io")
    real = importlib.metadata.version

    def upgraded(name):
        return "9.9.9" if name == "lightgbm" else real(name)

    monkeypatch.setattr(importlib.metadata, "version", upgraded)
    assert provenance.library_versions()["lightgbm"] == "9.9.9"
    assert code_fingerprint("recourselab.io") != before  # a LightGBM upgrade is a new key


def test_threads_per_task_is_the_param_or_the_usable_cpus_per_worker(monkeypatch):
    import os

    from recourselab.config import parse_params
    from recourselab.runtime import threads_per_task

    assert threads_per_task(parse_params({}).orchestration) == 1
    assert threads_per_task(parse_params({"orchestration": {"threads_per_task": 3}}).orchestration) == 3
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3, 4, 5}, raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 64)  # the host's count, not what this process may use
    orch = parse_params({"orchestration": {"threads_per_task": None, "max_workers": 2}}).orchestration
    assert threads_per_task(orch) == 3


RAN: list[int] = []


def _seed_task_fn(*, seed: int, broken: bool, staging_root: str) -> dict:
    RAN.append(seed)
    if broken:
        from recourselab.errors import DataError

        raise DataError(f"the rows of seed {seed} are broken")
    return stage_artifacts(f"{staging_root}/seed={seed}", {"a.txt": lambda p: p.write_text(f"seed {seed}")})


def _seeds_flow(root, broken: int | None):  # noqa: ANN001, ANN202
    from prefect import flow, task
    from prefect.cache_policies import INPUTS, TASK_SOURCE

    seed_task = task(_seed_task_fn, name="seed-task", cache_policy=TASK_SOURCE + INPUTS)

    @flow(name="seeds-flow")
    def seeds_flow() -> list:
        from recourselab.orchestration import run_tasks

        seeds = [0, 1, 2]
        return run_tasks(seed_task, [dict(seed=s, broken=s == broken, staging_root=str(root / "staged"))
                                     for s in seeds],
                         [root / "out" / f"seed={s}" for s in seeds], root / "results",
                         keys=[f"moons/seed={s}" for s in seeds])

    return seeds_flow()


class _Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture
def stage_logging():  # noqa: ANN201 - fixture
    """Logging as in a stage: recourselab at INFO, Prefect's run loggers filtered (restored afterwards).

    Yields every record that reaches the root logger's handlers (what a terminal shows). Prefect
    replaces the root logger's handlers when it sets up its logging, on its first flow run in the
    process: one trivial flow runs first.
    """
    from prefect import flow

    from recourselab.errors import PREFECT_RUN_LOGGERS, quiet_known_tracebacks

    flow(name="warm-up")(lambda: None)()
    saved = {n: list(logging.getLogger(n).filters) for n in PREFECT_RUN_LOGGERS}
    ours, root = logging.getLogger("recourselab"), logging.getLogger()
    level = ours.level
    handler = _Collect()
    root.addHandler(handler)
    ours.setLevel(logging.INFO)
    quiet_known_tracebacks()
    yield handler.records
    root.removeHandler(handler)
    ours.setLevel(level)
    for name, filters in saved.items():
        logging.getLogger(name).filters[:] = filters


def test_a_failed_seed_is_reported_once_never_as_finished_and_the_others_stay_cached(tmp_path, stage_logging):
    from recourselab.pipeline.stage import guarded

    @guarded
    def stage(argv=None) -> int:  # noqa: ANN001
        _seeds_flow(tmp_path, broken=1)
        return 0

    RAN.clear()
    assert stage([]) == 1
    messages = [r.getMessage() for r in stage_logging]
    reports = [r for r in stage_logging if "are broken" in r.getMessage()]
    assert [r.getMessage() for r in reports] == ["moons/seed=1 failed: the rows of seed 1 are broken"], messages
    assert reports[0].levelno == logging.ERROR and reports[0].exc_info is None
    assert not any("seed=1 finished" in m for m in messages)
    assert sum(m.endswith(("moons/seed=0 finished", "moons/seed=2 finished")) for m in messages) == 2, messages
    assert sorted(RAN) == [0, 1, 2] and not (tmp_path / "out").exists()  # nothing published

    results = _seeds_flow(tmp_path, broken=None)  # the fixed rerun: seeds 0 and 2 are cache hits
    assert sorted(RAN) == [0, 1, 1, 2]
    assert [r.cached for r in results] == [True, False, True]
    assert [(r.out_dir / "a.txt").read_text() for r in results] == ["seed 0", "seed 1", "seed 2"]


def test_task_failure_names_every_failed_task_and_keeps_a_known_error_s_type():
    from recourselab.errors import DataError, TaskFailedError
    from recourselab.orchestration import task_failure

    err = task_failure([("moons/seed=1", DataError("bad rows")), ("moons/seed=2/knn", ZeroDivisionError("x"))])
    assert isinstance(err, DataError)
    assert str(err).splitlines() == ["moons/seed=1 failed: bad rows",
                                     "moons/seed=2/knn failed: ZeroDivisionError: x (unexpected; its traceback is "
                                     "in the task's log above)"]
    bug = ZeroDivisionError("division by zero")
    err = task_failure([("adult/seed=0", bug)])
    assert isinstance(err, TaskFailedError) and err.__cause__ is bug
    assert str(err).startswith("adult/seed=0 failed: ZeroDivisionError: division by zero")


def test_dask_address_option_is_taken_out_of_the_dvc_arguments():
    from recourselab.cli import pop_option
    from recourselab.errors import RecourselabError

    assert pop_option(["-f", "--dask-address", "tcp://h:8786", "train_flow"], "--dask-address") == (
        ["-f", "train_flow"], "tcp://h:8786")
    assert pop_option(["--dask-address=tcp://h:1"], "--dask-address") == ([], "tcp://h:1")
    assert pop_option(["prepare"], "--dask-address") == (["prepare"], None)
    with pytest.raises(RecourselabError, match="needs a value"):
        pop_option(["--dask-address"], "--dask-address")


def _hold_gpu(device: str, lock_dir: str, seconds: float) -> tuple:
    import os
    import time

    from recourselab.runtime import device_slot

    with device_slot(device, lock_dir, poll_s=0.02) as slot:
        start = time.monotonic()
        time.sleep(seconds)
        return os.environ.get("CUDA_VISIBLE_DEVICES"), slot.name, slot.torch_device, start, time.monotonic()


def _max_overlap(intervals: list[tuple[float, float]]) -> int:
    events = sorted([(s, 1) for s, _ in intervals] + [(e, -1) for _, e in intervals])
    best = now = 0
    for _, step in events:
        now += step
        best = max(best, now)
    return best


def test_a_gpu_slot_holds_one_task_per_device_across_threads(tmp_path):
    import threading
    import time

    from recourselab.runtime import device_slot

    spans: dict[str, list[tuple[float, float]]] = {"cuda:0": [], "cuda:1": []}

    def work(device: str) -> None:
        with device_slot(device, tmp_path, isolate=False, poll_s=0.02) as slot:
            assert (slot.name, slot.torch_device) == (device, device)
            start = time.monotonic()
            time.sleep(0.2)
            spans[device].append((start, time.monotonic()))

    threads = [threading.Thread(target=work, args=(f"cuda:{i % 2}",)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [len(v) for v in spans.values()] == [3, 3]
    assert _max_overlap(spans["cuda:0"]) == 1 and _max_overlap(spans["cuda:1"]) == 1
    assert _max_overlap(spans["cuda:0"] + spans["cuda:1"]) == 2  # the two GPUs work side by side


def test_a_worker_process_sees_only_its_gpu_and_waits_for_its_slot(tmp_path):
    import multiprocessing
    import os
    from concurrent.futures import ProcessPoolExecutor

    before = os.environ.get("CUDA_VISIBLE_DEVICES")
    with ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("fork")) as pool:
        results = list(pool.map(_hold_gpu, ["cuda:1", "cuda:1"], [str(tmp_path)] * 2, [0.3, 0.3]))
    assert [r[:3] for r in results] == [("1", "cuda:1", "cuda:0")] * 2  # the machine's GPU 1 is the worker's cuda:0
    assert _max_overlap([r[3:] for r in results]) == 1
    assert os.environ.get("CUDA_VISIBLE_DEVICES") == before


def test_cpu_needs_no_slot_and_the_round_robin_falls_back_to_cpu(tmp_path):
    from recourselab.runtime import device_slot, pick_device

    with device_slot("cpu", tmp_path / "slots") as slot:
        assert (slot.name, slot.torch_device) == ("cpu", "cpu")
    assert not (tmp_path / "slots").exists()
    assert [pick_device(s, n_gpus=2) for s in range(4)] == ["cuda:0", "cuda:1", "cuda:0", "cuda:1"]
    assert pick_device(3, n_gpus=0) == "cpu"


TRIES: list[int] = []


def _flaky_fn(*, seed: int, error: str, staging_root: str) -> dict:
    TRIES.append(seed)
    if len(TRIES) == 1:
        from recourselab.errors import DataError

        raise {"connection": ConnectionError("connection reset by peer"), "data": DataError("bad rows")}[error]
    return stage_artifacts(f"{staging_root}/seed={seed}", {"a.txt": lambda p: p.write_text(f"seed {seed}")})


@pytest.mark.parametrize(("error", "tries", "ok"), [("connection", [0, 0], True), ("data", [0], False)])
def test_transient_errors_are_retried_and_others_fail_at_once(tmp_path, monkeypatch, error, tries, ok):
    from prefect import flow, task
    from prefect.cache_policies import NO_CACHE

    from recourselab import orchestration
    from recourselab.errors import DataError

    monkeypatch.setattr(orchestration, "RETRY_DELAYS_S", (0.0, 0.0))
    flaky = task(_flaky_fn, name="flaky", cache_policy=NO_CACHE)

    @flow(name="flaky-flow")
    def run() -> list:
        return orchestration.run_tasks(flaky, [dict(seed=0, error=error, staging_root=str(tmp_path / "s"))],
                                       [tmp_path / "out"], tmp_path / "results", keys=["moons/seed=0"])

    TRIES.clear()
    if ok:
        assert (run()[0].out_dir / "a.txt").read_text() == "seed 0"
    else:
        with pytest.raises(DataError, match="moons/seed=0 failed: bad rows"):
            run()
    assert TRIES == tries
    assert orchestration.is_transient(TimeoutError()) and not orchestration.is_transient(ValueError())


def _resumable_fn(*, seed: int, staging_root: str) -> dict:
    import os
    import time

    RAN.append(seed)
    if str(seed) in os.environ.get("RECOURSELAB_TEST_SLOW_SEEDS", "").split(","):
        time.sleep(600)  # killed before it ends
    return stage_artifacts(f"{staging_root}/seed={seed}", {"a.txt": lambda p: p.write_text(f"seed {seed}")})


def _resumable_run(root: str) -> list:
    from prefect import flow, task
    from prefect.cache_policies import INPUTS, TASK_SOURCE
    from prefect.task_runners import ThreadPoolTaskRunner

    from recourselab.orchestration import run_tasks

    seed_task = task(_resumable_fn, name="resumable", cache_policy=TASK_SOURCE + INPUTS)

    @flow(name="resumable", task_runner=ThreadPoolTaskRunner(max_workers=1))
    def run() -> list:
        return run_tasks(seed_task, [dict(seed=s, staging_root=f"{root}/staged") for s in (0, 1, 2)],
                         [Path(root) / "out" / f"seed={s}" for s in (0, 1, 2)], Path(root) / "results")

    return run()


@pytest.mark.slow  # starts a local Prefect server, shared by the killed run and the resumed one
def test_a_stage_killed_after_its_first_seed_resumes_with_that_seed_as_a_cache_hit(tmp_path):
    import os
    import signal
    import subprocess
    import sys
    import time

    from prefect.settings import PREFECT_API_URL, temporary_settings

    from recourselab.prefect_server import local_server
    from tests.conftest import REPO_ROOT

    with local_server(env={"PREFECT_HOME": str(tmp_path / "prefect-home")}) as url:
        env = {**os.environ, "RECOURSELAB_TEST_SLOW_SEEDS": "1", "PREFECT_API_URL": url}
        proc = subprocess.Popen([sys.executable, "-c", f"from tests.test_orchestration import _resumable_run; "
                                 f"_resumable_run({str(tmp_path)!r})"], cwd=REPO_ROOT, env=env,
                                start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 300
        results = tmp_path / "results"
        while not (results.is_dir() and any(results.iterdir())):  # seed 0's result is stored
            assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read().decode()[-3000:]
            time.sleep(0.2)
        time.sleep(0.5)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        assert not (tmp_path / "out").exists()  # nothing published by the killed run
        RAN.clear()
        with temporary_settings(updates={PREFECT_API_URL: url}):
            resumed = _resumable_run(str(tmp_path))
    assert [r.cached for r in resumed] == [True, False, False] and sorted(RAN) == [1, 2]
    assert [(r.out_dir / "a.txt").read_text() for r in resumed] == ["seed 0", "seed 1", "seed 2"]


def test_stale_leftovers_of_killed_runs_are_swept_and_fresh_ones_kept(tmp_path, caplog):
    import os
    import time

    from recourselab.orchestration import STALE_AFTER_S

    stage, out = tmp_path / "stage", tmp_path / "out"
    writers = {"a.txt": lambda p: p.write_text("alpha")}
    kept = Path(stage_artifacts(stage, writers)["dir"])
    old = time.time() - STALE_AFTER_S - 60
    for name in (".staging-old", ".staging-new"):
        (stage / name).mkdir()
        (stage / name / "a.txt").write_text("half")
    out.mkdir()
    for name in (".x.abc.tmp", ".y.def.tmp", ".notes.tmp", "keep.txt"):
        (out / name).write_text("half")
    for path in (stage / ".staging-old", kept, out / ".x.abc.tmp", out / ".notes.tmp", out / "keep.txt"):
        os.utime(path, (old, old))

    with caplog.at_level(logging.INFO, logger="recourselab.orchestration"):
        manifest = stage_artifacts(stage, writers)
        publish([manifest], [out])
    assert sorted(p.name for p in stage.iterdir()) == sorted([".staging-new", kept.name])
    assert sorted(p.name for p in out.iterdir()) == [".notes.tmp", ".y.def.tmp", "a.txt", "keep.txt"]
    assert manifest_intact(manifest) and (out / "a.txt").read_text() == "alpha"
    swept = [r.getMessage() for r in caplog.records if "stale" in r.getMessage()]
    assert swept == [f"removed 1 stale staging folder(s) of killed runs in {stage}",
                     f"removed 1 stale temporary file(s) of killed runs in {out}"]


def test_staged_files_and_their_folders_are_fsynced_once(tmp_path, monkeypatch):
    import os

    real, synced = os.fsync, []

    def fsync(fd):  # folders refuse, as on file systems without directory fsync
        st = os.fstat(fd)
        synced.append((st.st_dev, st.st_ino))
        if os.path.stat.S_ISDIR(st.st_mode):
            raise OSError(22, "Invalid argument")
        return real(fd)

    def ident(path):  # noqa: ANN001, ANN202
        st = path.stat()
        return st.st_dev, st.st_ino

    monkeypatch.setattr(os, "fsync", fsync)
    writers = {"a.txt": lambda p: p.write_text("alpha"), "b.txt": lambda p: p.write_text("beta")}
    manifest = stage_artifacts(tmp_path / "stage", writers)
    final = Path(manifest["dir"])
    files = [ident(final / n) for n in writers]
    assert all(synced.count(f) == 1 for f in files), synced
    assert ident(final) in synced and ident(tmp_path / "stage") in synced
    assert len(synced) == len(writers) + 2
    synced.clear()
    publish([manifest], [tmp_path / "out"])
    assert synced == [ident(tmp_path / "out")]  # hard links share the staged files' synced data
    assert (tmp_path / "out" / "b.txt").read_text() == "beta"


FAIL_SEEDS_ENV = "RECOURSELAB_TEST_FAIL_SEEDS"


def _recompute_fn(*, seed: int, error: str, staging_root: str) -> dict:
    import os

    if str(seed) in os.environ.get(FAIL_SEEDS_ENV, "").split(","):
        from recourselab.errors import DataError

        raise {"data": DataError(f"the rows of seed {seed} are broken"), "bug": ZeroDivisionError("oops")}[error]
    return stage_artifacts(f"{staging_root}/seed={seed}", {"a.txt": lambda p: p.write_text(f"seed {seed}")})


@pytest.mark.parametrize("error", ["data", "bug"])
def test_a_failed_recompute_of_a_damaged_cache_hit_names_its_key_and_publishes_nothing(tmp_path, monkeypatch,
                                                                                       error):
    from prefect import flow, task
    from prefect.cache_policies import INPUTS, TASK_SOURCE

    from recourselab import orchestration
    from recourselab.errors import DataError, TaskFailedError

    monkeypatch.setattr(orchestration, "RETRY_DELAYS_S", (0.0, 0.0))
    seed_task = task(_recompute_fn, name="recompute", cache_policy=TASK_SOURCE + INPUTS)
    out = [tmp_path / "out" / f"seed={s}" for s in (0, 1, 2)]

    @flow(name="recompute-flow")
    def run() -> list:
        return orchestration.run_tasks(seed_task, [dict(seed=s, error=error, staging_root=str(tmp_path / "s"))
                                                   for s in (0, 1, 2)],
                                       out, tmp_path / "results", keys=[f"moons/seed={s}" for s in (0, 1, 2)])

    run()
    for d in out:  # the last good outputs, told apart from what a new publish would write
        (d / "a.txt").unlink()
        (d / "a.txt").write_text("last good")
    staged, = (tmp_path / "s" / "seed=1").iterdir()
    (staged / "a.txt").unlink()  # the cache hit's staged file is gone: the task reruns, and now fails
    monkeypatch.setenv(FAIL_SEEDS_ENV, "1")
    with pytest.raises(DataError if error == "data" else TaskFailedError) as info:
        run()
    assert str(info.value).splitlines()[0].startswith("moons/seed=1 failed: ")
    assert ("are broken" if error == "data" else "ZeroDivisionError: oops") in str(info.value)
    if error == "bug":
        assert isinstance(info.value.__cause__, ZeroDivisionError)
    assert [(d / "a.txt").read_text() for d in out] == ["last good"] * 3
    assert sorted(p.name for d in out for p in d.iterdir()) == ["a.txt"] * 3


def test_publishing_the_same_staged_files_again_leaves_no_temporary_file(tmp_path):
    manifest = stage_artifacts(tmp_path / "stage", {"a.txt": lambda p: p.write_text("alpha")})
    out = tmp_path / "out"
    for _ in range(2):  # the second publish links the same staged file: a rename onto itself is a no-op
        publish([manifest], [out])
    assert sorted(p.name for p in out.iterdir()) == ["a.txt"] and (out / "a.txt").read_text() == "alpha"
