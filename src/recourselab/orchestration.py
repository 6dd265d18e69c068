"""The per-seed Prefect pattern shared by every multi-seed stage.

A stage's flow submits one task per (dataset, seed[, model]). A task writes its artifacts
into a *staging* directory named after their content hash and returns a small JSON
manifest; Prefect persists that manifest (JSON serializer, never pickle) in a result store
under ``orchestration.cache_dir`` and keys it by task source + inputs (the params section,
upstream fingerprints and a fingerprint of the library code). The flow then *publishes*
the staged files into the stage's output folder with atomic copies. A second run with the
same key is a cache hit: the task body does not run, the manifest is read back and the
files are published again (DVC removes a stage's outputs before it reruns it). If staged
files have vanished or changed, the task is rerun with ``refresh_cache=True`` and its fresh
files replace the damaged staging folder; nothing that fails its sha256 is published, and a
rerun that fails is reported with its key like any failed task.

Staged files and the folders they are renamed into are fsynced, so a staged manifest survives
a power loss. Temporary files and folders that a killed run left behind (``.staging-*`` in a
staging folder, ``.<name>.*.tmp`` in an out dir) are swept by the next write there once they
are older than :data:`STALE_AFTER_S`.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import shutil
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from recourselab.errors import RecourselabError, TaskFailedError, quiet_known_tracebacks
from recourselab.io import FILE_MODE, error_reason, sha256_file

log = logging.getLogger(__name__)

Writer = Callable[[Path], Any]

#: Age (seconds) past which a temporary file or folder is a killed run's leftover and is swept; a live
#: writer's are seconds old, so a concurrent run's are kept.
STALE_AFTER_S = 3600.0
#: Names of the temporary files :func:`publish` makes beside its targets (``tempfile.mkstemp``).
_PUBLISH_TMP = re.compile(r"\..+\.[a-z0-9_]+\.tmp")


@dataclass(frozen=True)
class SeedResult:
    """Outcome of one per-seed task: where its files went and whether it was a cache hit."""

    key: str
    out_dir: Path
    files: dict[str, str]
    state: str

    @property
    def cached(self) -> bool:
        return self.state == "Cached"


def stage_artifacts(staging_dir: str | Path, writers: Mapping[str, Writer]) -> dict[str, Any]:
    """Write artifacts into a content-addressed staging directory.

    Parameters
    ----------
    staging_dir : parent of the staged copies (e.g. ``<cache>/artifacts/prepare/moons/seed=0``).
    writers : file name -> callable writing that file at the given path.

    Returns
    -------
    JSON-safe manifest ``{"dir": str, "files": {name: sha256}}``.
    """
    staging_dir = Path(staging_dir)
    staging_dir.mkdir(parents=True, exist_ok=True)
    _sweep_stale(staging_dir, staging_dir.glob(".staging-*"), "staging folder")
    tmp = Path(tempfile.mkdtemp(prefix=".staging-", dir=staging_dir))
    try:
        for name, write in writers.items():
            write(tmp / name)
        files = {name: sha256_file(tmp / name) for name in writers}
        digest = hashlib.sha256(repr(sorted(files.items())).encode()).hexdigest()[:16]
        final = staging_dir / digest
        if final.exists() and manifest_intact({"dir": str(final), "files": files}):
            shutil.rmtree(tmp)
        else:
            if final.exists():  # a damaged earlier copy (a file deleted or altered): replace it
                log.warning("staged artifacts in %s were damaged; replacing them", final)
                shutil.rmtree(final)
            for name in writers:
                _fsync_file(tmp / name)
            _fsync_dir(tmp)
            os.replace(tmp, final)
            _fsync_dir(staging_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return {"dir": str(final), "files": files}


def manifest_intact(manifest: Mapping[str, Any]) -> bool:
    """True when every staged file of ``manifest`` exists with its recorded sha256."""
    src = Path(manifest["dir"])
    return all((src / n).is_file() and sha256_file(src / n) == h for n, h in manifest["files"].items())


def publish(manifests: Sequence[Mapping[str, Any]], out_dirs: Sequence[str | Path]) -> list[dict[str, str]]:
    """Publish the staged files of every manifest into its out dir (hard links, else copies), all or none.

    Every file is first linked or copied to a temporary file beside its target; only when all copies
    exist are they renamed into place, one ``os.replace`` each. An interruption or a full disk
    while copying (the slow part) removes the temporary files and leaves every existing output
    as it was; the renames that follow take microseconds, then each out dir is fsynced. Temporary
    files that a killed publish left in an out dir are swept first (see :data:`STALE_AFTER_S`).
    Returns each manifest's files (name -> sha256).
    """
    staged: list[tuple[Path, Path]] = []
    try:
        for manifest, out_dir in zip(manifests, out_dirs, strict=True):
            out_dir = Path(out_dir)
            out_dir.mkdir(parents=True, exist_ok=True)
            _sweep_stale(out_dir, (p for p in out_dir.glob(".*.tmp") if _PUBLISH_TMP.fullmatch(p.name)),
                         "temporary file")
            for name in manifest["files"]:
                fd, tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=".tmp", dir=out_dir)
                os.close(fd)
                staged.append((Path(tmp), out_dir / name))
                _link_or_copy(Path(manifest["dir"]) / name, Path(tmp))
    except BaseException:
        for tmp, _ in staged:
            tmp.unlink(missing_ok=True)
        raise
    for tmp, target in staged:
        if target.exists() and os.path.samefile(tmp, target):
            tmp.unlink()  # already this very file (a link to the same staged copy): rename would keep both names
        else:
            os.replace(tmp, target)
    for out_dir in dict.fromkeys(target.parent for _, target in staged):
        _fsync_dir(out_dir)
    return [dict(manifest["files"]) for manifest in manifests]


def _sweep_stale(folder: Path, paths: Iterable[Path], what: str) -> int:
    """Remove the files or folders among ``paths`` (in ``folder``) last modified over :data:`STALE_AFTER_S` ago.

    Returns how many were removed (a count logged at INFO when not zero); one that another
    run removes first is skipped.
    """
    cutoff = time.time() - STALE_AFTER_S
    removed = 0
    for path in paths:
        try:
            if path.lstat().st_mtime > cutoff:
                continue
        except FileNotFoundError:
            continue
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
        removed += not os.path.lexists(path)
    if removed:
        log.info("removed %d stale %s(s) of killed runs in %s", removed, what, folder)
    return removed


def _fsync_file(path: Path) -> None:
    """Flush ``path``'s data to disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_dir(path: Path) -> None:
    """Flush ``path``'s entries (names created or renamed in it) to disk; best effort, as some file
    systems cannot fsync a folder."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


#: Waits (seconds) before each new try of a task that failed with a transient error: growing backoff.
RETRY_DELAYS_S: tuple[float, ...] = (5.0, 30.0)
#: Errors that a new try may not meet again (a busy network, disk or GPU); anything else fails at once.
TRANSIENT_ERRORS: tuple[type[BaseException], ...] = (ConnectionError, TimeoutError, BlockingIOError,
                                                      InterruptedError)


def is_transient(exc: BaseException | None) -> bool:
    """Whether ``exc`` is worth another try: a :data:`TRANSIENT_ERRORS` or a CUDA out-of-memory error
    (another process held the GPU's memory). Recourselab's own errors (bad data, params) never are."""
    if exc is None or isinstance(exc, RecourselabError):
        return False
    return isinstance(exc, TRANSIENT_ERRORS) or type(exc).__name__ == "OutOfMemoryError"


def _retry_transient(task: Any, task_run: Any, state: Any) -> bool:
    """Prefect ``retry_condition_fn``: retry only transient failures (see :func:`is_transient`)."""
    exc = state.result(raise_on_failure=False)
    retry = is_transient(exc if isinstance(exc, BaseException) else None)
    if retry:
        log.warning("%s: transient error (%s: %s); trying again", task_run.name, type(exc).__name__, exc)
    return retry


def _link_or_copy(src: Path, tmp: Path) -> None:
    """Make ``tmp`` a hard link of the staged file ``src`` (no second copy on disk), else a copy.

    Staged files are never written in place (a damaged staging folder is replaced whole) and
    every use checks their sha256, so sharing the inode with the published output is safe.
    """
    try:
        os.unlink(tmp)
        os.link(src, tmp)
    except OSError:  # another file system, or links not allowed: copy
        shutil.copyfile(src, tmp)
        _fsync_file(tmp)
    os.chmod(tmp, FILE_MODE)


def _cached_task(task: Any, result_storage: Path) -> Any:
    """``task`` storing its JSON manifest in ``result_storage`` (its cache), retried on transient errors."""
    return task.with_options(result_storage=Path(result_storage), persist_result=True, result_serializer="json",
                             retries=len(RETRY_DELAYS_S), retry_delay_seconds=list(RETRY_DELAYS_S),
                             retry_condition_fn=_retry_transient)


def _submit_all(configured: Any, calls: Sequence[dict[str, Any]], keys: Sequence[str]) -> list[Any]:
    """Submit every call, in order; wait for all of them, logging each one that completes. Returns the futures."""
    from prefect.futures import as_completed

    futures = [configured.submit(**kw) for kw in calls]
    index = {id(f): k for f, k in zip(futures, keys, strict=True)}
    for done, fut in enumerate(as_completed(futures), start=1):
        fut.wait()  # records the final state in the future (its `state` would ask the API, which may lag)
        if fut.state.is_completed():  # a failure is reported once, with its error, by the caller
            log.info("[%d/%d] %s finished%s", done, len(futures), index[id(fut)],
                     " (cache hit)" if fut.state.name == "Cached" else "")
    return futures


def _failures(futures: Sequence[Any], keys: Sequence[str]) -> list[tuple[str, Any]]:
    """(key, error) of every future that did not complete."""
    return [(key, fut.result(raise_on_failure=False)) for key, fut in zip(keys, futures, strict=True)
            if not fut.state.is_completed()]


def warm_tasks(task: Any, calls: Sequence[dict[str, Any]], result_storage: Path,
               keys: Sequence[str]) -> list[tuple[str, str, Any]]:
    """Run every call of ``task`` into its cache without publishing anything (:func:`run_tasks` with the
    same calls then finds cache hits). Must be called inside a Prefect flow.

    Calls of several datasets share the flow's workers, so no worker waits for one dataset's last
    seed. Returns (key, final state name, error or None) per call, in order; a failed call's stage
    runs it again and reports it.
    """
    futures = _submit_all(_cached_task(task, result_storage), calls, keys)
    return [(key, fut.state.name, None if fut.state.is_completed() else fut.result(raise_on_failure=False))
            for key, fut in zip(keys, futures, strict=True)]


def run_tasks(task: Any, calls: Sequence[dict[str, Any]], out_dirs: Sequence[Path],
              result_storage: Path, keys: Sequence[str] | None = None) -> list[SeedResult]:
    """Submit ``task`` once per call, wait, publish every manifest into its ``out_dir``.

    Must be called inside a Prefect flow. A task that fails with a transient error (:func:`is_transient`)
    is tried again after each of :data:`RETRY_DELAYS_S`. Tasks whose staged files are gone or altered are
    rerun with ``refresh_cache=True``. Publishing happens only after *all* tasks (and reruns) succeeded,
    so a failing seed leaves every existing output untouched; the seeds that succeeded keep their
    staged artifacts and cached results (cache hits on the next run).

    Raises
    ------
    RecourselabError
        One or more tasks failed: one error whose message has a line ``<key> failed: <error>``
        per failed task (see :func:`task_failure`). When the first failure is a recourselab error,
        it is that error (same type) with this message; an unexpected exception becomes a
        :class:`TaskFailedError` chained to it (Prefect's task log shows its traceback). A failed
        rerun of a damaged cache hit is reported the same way, with its own key.
    """
    keys = list(keys) if keys is not None else [str(i) for i in range(len(calls))]
    configured = _cached_task(task, result_storage)
    futures = _submit_all(configured, calls, keys)
    failed = _failures(futures, keys)
    if failed:
        raise task_failure(failed)
    manifests, states = [], []
    for key, kw, fut in zip(keys, calls, futures, strict=True):
        manifest = fut.result()
        state = fut.state.name
        if not manifest_intact(manifest):
            log.warning("%s: staged artifacts missing or altered, recomputing", key)
            try:
                manifest = configured.with_options(refresh_cache=True)(**kw)
            except Exception as exc:
                err = task_failure([(key, exc)])
                if err is exc:
                    raise
                raise err from exc
            state = "Completed"
            if not manifest_intact(manifest):
                raise RecourselabError(f"{key}: the recomputed artifacts in {manifest['dir']} do not match their "
                                       "manifest; run `make clean-cache` and retry")
        manifests.append(manifest)
        states.append(state)
    published = publish(manifests, out_dirs)
    return [SeedResult(key=key, out_dir=Path(out), files=files, state=state)
            for key, files, state, out in zip(keys, published, states, out_dirs, strict=True)]


def task_failure(failed: Sequence[tuple[str, Any]]) -> RecourselabError:
    """The one error to raise for the failed tasks of a :func:`run_tasks` call.

    Parameters
    ----------
    failed : (key, what the task's future returned: its exception) per failed task, in order.

    Returns
    -------
    RecourselabError
        Its message has one line ``<key> failed: <error>`` per failed task. The first failure's own
        error when it is a recourselab error with a one-part message (so callers can still catch its
        type); otherwise a :class:`TaskFailedError` whose cause is the first exception.
    """
    def line(key: str, exc: Any) -> str:
        if isinstance(exc, RecourselabError):
            return f"{key} failed: {exc}"
        what = f"{type(exc).__name__}: {error_reason(exc)}" if isinstance(exc, BaseException) else str(exc)
        return f"{key} failed: {what} (unexpected; its traceback is in the task's log above)"

    message = "\n".join(line(key, exc) for key, exc in failed)
    first = failed[0][1]
    if isinstance(first, RecourselabError) and len(first.args) == 1:
        first.args = (message,)
        return first
    err = TaskFailedError(message)
    if isinstance(first, BaseException):
        err.__cause__ = first
    return err


#: The stages' log line format (worker processes use it too).
LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def worker_logging(level: int) -> None:
    """Set up a task worker process: recourselab's records at ``level`` go to stderr as in the stage.

    A worker process starts without the stage's logging setup, so progress lines of long tasks
    (DensityFlow training, model tuning) would otherwise be dropped.
    """
    logger = logging.getLogger("recourselab")
    if not any(getattr(h, "recourselab_worker", False) for h in logger.handlers):
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter(LOG_FORMAT))
        handler.recourselab_worker = True  # type: ignore[attr-defined]
        logger.addHandler(handler)
    logger.setLevel(level)
    logger.propagate = False  # the worker's root logger may have handlers of its own
    quiet_known_tracebacks()  # the stage reports a task's failure once (see run_tasks)


#: Environment variable with a Dask scheduler address: overrides ``orchestration.dask_address`` and selects
#: the ``dask`` task runner (``--dask-address`` of the stages and of ``recourselab repro`` set it).
DASK_ADDRESS_ENV = "RECOURSELAB_DASK_ADDRESS"


def dask_address(orchestration: Any) -> str | None:
    """The Dask scheduler to run on: ``$RECOURSELAB_DASK_ADDRESS``, else ``orchestration.dask_address``."""
    return os.environ.get(DASK_ADDRESS_ENV) or getattr(orchestration, "dask_address", None)


def dask_task_runner(address: str | None, n_workers: int) -> Any:
    """prefect-dask's ``DaskTaskRunner`` on the cluster at ``address``, else on a new ``LocalCluster``
    of ``n_workers`` single-threaded worker processes on loopback (closed with the flow).

    Tasks exchange their artifacts through the result store (``orchestration.cache_dir``), never
    through worker memory: every worker must see that folder at the same path.
    """
    try:
        from prefect_dask import DaskTaskRunner
    except ImportError:
        raise RecourselabError("orchestration.task_runner 'dask' needs prefect-dask: pip install prefect-dask") \
            from None
    if address:
        return DaskTaskRunner(address=address)
    return DaskTaskRunner(cluster_class="distributed.LocalCluster",
                          cluster_kwargs={"n_workers": n_workers, "threads_per_worker": 1, "processes": True,
                                          "host": "127.0.0.1", "dashboard_address": ":0"})


#: Set to ``1`` by ``recourselab repro`` for stages whose tasks it has already run in one pool across datasets
#: (see ``flows.pool``): their cache hits need no worker processes, so :func:`task_runner` gives threads.
WARMED_ENV = "RECOURSELAB_TASKS_WARMED"


def task_runner(orchestration: Any) -> Any:
    """The Prefect task runner of an ``orchestration`` params section (threads under :data:`WARMED_ENV`).

    Process workers log recourselab's records at this process's level (see :func:`worker_logging`).
    """
    from prefect.task_runners import ProcessPoolTaskRunner, ThreadPoolTaskRunner

    if os.environ.get(WARMED_ENV) == "1":  # the tasks are cache hits: no worker processes to start
        return ThreadPoolTaskRunner(max_workers=orchestration.max_workers)
    address = dask_address(orchestration)
    if orchestration.task_runner == "dask" or address:
        return dask_task_runner(address, orchestration.max_workers)
    if orchestration.task_runner == "process" and orchestration.max_workers > 1:
        level = logging.getLogger("recourselab").getEffectiveLevel()
        return ProcessPoolTaskRunner(max_workers=orchestration.max_workers, initializer=worker_logging,
                                     initargs=(level,))
    return ThreadPoolTaskRunner(max_workers=orchestration.max_workers)


