"""Argument parsing, logging, output staging and the run log shared by the stage scripts (``stages/*.py``).

Importable from the installed package; the scripts under ``stages/`` are thin entry points for DVC.
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import signal
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

from recourselab.config import Params
from recourselab.data.registry import BUILTIN_DATASETS
from recourselab.errors import ConfigError, RecourselabError, did_you_mean, quiet_known_tracebacks
from recourselab.io import FILE_MODE
from recourselab.orchestration import LOG_FORMAT
from recourselab.pipeline.summary import RUN_LOG_ENV, append_stage_run
from recourselab.pipeline.validate import load_checked_params

log = logging.getLogger("recourselab.stages")

#: Seconds a stage run alone waits for Prefect's temporary server (Prefect's default is shorter).
EPHEMERAL_STARTUP_TIMEOUT_S = "120"

#: What the running stage reports to the run log: its name, dataset, task and cache-hit counts.
_run: dict[str, Any] = {}


def parser(step: str, doc: str) -> argparse.ArgumentParser:
    _run.clear()
    _run["stage"] = step
    # no abbreviations: `recourselab <stage>` rewrites the relative paths of full option names only
    ap = argparse.ArgumentParser(prog=f"recourselab {step}", description=doc, allow_abbrev=False)
    ap.add_argument("--dataset", required=True, help="dataset name (from params.yaml `datasets`)")
    ap.add_argument("--params", type=Path, default=Path("params.yaml"), help="params file")
    ap.add_argument("--out", type=Path, default=None, help="output root (default: data/<stage folder>)")
    ap.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    ap.add_argument("--dask-address", default=None, help="run the per-seed tasks on this Dask scheduler")
    return ap


def setup(args: argparse.Namespace, *, prefect: bool = True) -> Params:
    _run["dataset"] = args.dataset
    if getattr(args, "dask_address", None):
        from recourselab.orchestration import DASK_ADDRESS_ENV

        os.environ[DASK_ADDRESS_ENV] = args.dask_address
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format=LOG_FORMAT)
    for noisy in ("httpx", "httpcore"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    quiet_known_tracebacks()  # each failure is reported once, by `guarded`, naming its task
    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", EPHEMERAL_STARTUP_TIMEOUT_S)
    params = load_checked_params(args.params)
    others = [n for n in [*BUILTIN_DATASETS, *params.data.custom] if n not in params.datasets]
    known = [*params.datasets, *others]
    if args.dataset not in known:  # a typo: name it before a stage looks for its upstream folders
        raise ConfigError(f"unknown dataset {args.dataset!r}{did_you_mean(args.dataset, known)}; "
                          f"params.yaml `datasets`: {', '.join(params.datasets)}; "
                          f"other built-in and custom datasets: {', '.join(others)}")
    if prefect:  # a stage that runs no Prefect task starts no server
        _shared_server(params)
    return params


#: What the running stage holds until it exits (the shared Prefect server of :func:`_shared_server`).
_resources = ExitStack()


def _shared_server(params: Params) -> None:
    """Under DVC (``$DVC_STAGE`` set) without ``PREFECT_API_URL``, with the ``process`` task runner and
    several workers: start one local Prefect server for this stage and point ``PREFECT_API_URL`` at it,
    so that its worker processes share it instead of each starting a temporary server. It is
    stopped when the stage exits (see :func:`guarded`). `recourselab repro` sets ``PREFECT_API_URL``."""
    orchestration = params.orchestration
    if (os.environ.get("PREFECT_API_URL") or not os.environ.get("DVC_STAGE")
            or orchestration.task_runner not in ("process", "dask") or orchestration.max_workers < 2):
        return
    from recourselab.prefect_server import local_server

    os.environ["PREFECT_API_URL"] = _resources.enter_context(local_server())
    _resources.callback(os.environ.pop, "PREFECT_API_URL", None)
    _resources.callback(_drain_prefect)  # first (last in, first out): while the server still answers


def _drain_prefect() -> None:
    """Send Prefect's queued run logs and events to the API now, not at interpreter exit (when the
    stage's own server is gone and Prefect would retry for a long time)."""
    import sys

    if "prefect" not in sys.modules:
        return
    from prefect.events.worker import EventsWorker
    from prefect.logging.handlers import APILogWorker

    for worker in (APILogWorker, EventsWorker):
        try:
            worker.drain_all(timeout=5)
        except Exception as err:  # noqa: BLE001 - flushing logs must not fail a finished stage
            log.debug("could not flush Prefect's %s: %s", worker.__name__, err)


def cache_root(params: Params, params_file: Path) -> Path:
    root = params.orchestration.cache_dir.expanduser()  # like data.dir and data.cache_dir
    return root if root.is_absolute() else (params_file.resolve().parent / root)


def finish(results: list[Any]) -> int:
    """Log and record (for the run log) how many tasks ran and how many were cache hits; return 0."""
    hits = sum(r.cached for r in results)
    _run.update(tasks=len(results), cache_hits=hits)
    log.info("%s %s: %d tasks, %d cache hits", _run.get("stage"), _run.get("dataset"), len(results), hits)
    return 0


STAGING_PREFIX = "staging"


def _owner_alive(folder: Path) -> bool:
    """Whether the process named in a staging folder's name (``.<ds>.staging-<pid>-<random>``) still runs."""
    try:
        pid = int(folder.name.rsplit(f".{STAGING_PREFIX}-", 1)[1].split("-", 1)[0])
        os.kill(pid, 0)
    except (IndexError, ValueError, ProcessLookupError):
        return False
    except PermissionError:  # another user's live process
        return True
    return True


@contextmanager
def _signals_deferred() -> Iterator[None]:
    """Hold SIGTERM and SIGINT back until the block ends, then deliver them to the handlers in place
    before: the swap of a stage's outputs is a few renames that must not be cut in half. (Python runs
    signal handlers in the main thread; off it, nothing is changed.)"""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    pending: list[int] = []
    before = {sig: signal.signal(sig, lambda signum, frame: pending.append(signum))
              for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)
        for signum in pending:
            signal.raise_signal(signum)


def _restore_previous(staging: Path, final: Path) -> None:
    """Put the last good outputs back when a run stopped between moving them aside and moving the new
    ones in (``final`` is missing while ``<staging>/previous`` holds them)."""
    previous = staging / "previous"
    if previous.is_dir() and not final.exists():
        os.rename(previous, final)
        log.warning("restored %s from %s, where an interrupted run had moved it aside", final, previous)


@contextmanager
def staged_outputs(out_root: Path, dataset: str, metrics_root: Path | None = None,
                   *, keep: bool = False) -> Iterator[tuple[Path, Path]]:
    """Let a stage write its outputs into a staging folder; swap them in only when it succeeds.

    DVC keeps a ``persist: true`` output in place while its stage reruns, so the last good
    outputs stay there until this block ends without an error. The block gets two fresh roots:
    ``staged_out`` for ``<staged_out>/<dataset>/...`` (the stage's DVC output) and
    ``staged_metrics`` for ``<staged_metrics>/<dataset>/<name>.json`` (its metrics files). On
    success ``<out_root>/<dataset>`` is replaced whole by the staged folder (files the new run
    did not write are gone, as after a fresh run), then each staged metrics file replaces its
    namesake under ``metrics_root/<dataset>``. On failure the staging folder is removed and
    every existing output is left as it was.

    Parameters
    ----------
    out_root : parent of the stage's output folder ``<out_root>/<dataset>``.
    dataset : the dataset the stage runs for.
    metrics_root : parent of the stage's metrics folder ``<metrics_root>/<dataset>`` (None: none).
    keep : start from a copy of the existing output (a run that refreshes only part of it).

    Yields
    ------
    (staged_out, staged_metrics) : the roots to hand to the stage's flow.
    """
    out_root = Path(out_root)
    created = not out_root.exists()
    out_root.mkdir(parents=True, exist_ok=True)
    final = out_root / dataset
    for old in out_root.glob(f".{dataset}.{STAGING_PREFIX}-*"):  # left behind by a killed run
        if old.is_dir() and not _owner_alive(old):
            _restore_previous(old, final)
            shutil.rmtree(old, ignore_errors=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{dataset}.{STAGING_PREFIX}-{os.getpid()}-", dir=out_root))
    previous = staging / "previous"
    ready: list[tuple[Path, Path]] = []  # (temporary copy beside the target, target) of each metrics file
    try:
        staged_out, staged_metrics = staging / "out", staging / "metrics"
        staged_out.mkdir()
        if keep and final.is_dir():
            shutil.copytree(final, staged_out / dataset, symlinks=True)
        yield staged_out, staged_metrics
        new = staged_out / dataset
        if not new.is_dir():
            raise RecourselabError(f"the stage wrote nothing to {final}; its previous outputs are kept")
        metrics = sorted((staged_metrics / dataset).glob("*")) if metrics_root is not None else []
        for staged in metrics:  # copied beside their targets first: a full disk fails before anything changes
            target = Path(metrics_root) / dataset / staged.name
            target.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=f".{staged.name}.", suffix=".tmp", dir=target.parent)
            os.close(fd)
            ready.append((Path(tmp), target))
            shutil.copyfile(staged, tmp)
            os.chmod(tmp, FILE_MODE)
        with _signals_deferred():  # a Ctrl-C or SIGTERM lands after the swap, not inside it
            if final.exists():
                os.rename(final, previous)
            os.rename(new, final)
            for tmp, target in ready:
                os.replace(tmp, target)
    finally:
        for tmp, _ in ready:
            tmp.unlink(missing_ok=True)
        _restore_previous(staging, final)  # a swap that failed half-way keeps the last good outputs
        shutil.rmtree(staging, ignore_errors=True)
        if created and not any(out_root.iterdir()):
            out_root.rmdir()


def _exit_on_sigterm() -> Any:
    """Make SIGTERM raise SystemExit(143) in the main thread, so a stopped stage removes its staging
    folder on the way out; returns the previous handler (None off the main thread: nothing changed)."""
    if threading.current_thread() is not threading.main_thread():
        return None

    def handler(signum: int, frame: object) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a second SIGTERM ends the process at once
        raise SystemExit(128 + signum)

    return signal.signal(signal.SIGTERM, handler)


def guarded(main):  # noqa: ANN001, ANN201 - decorator
    """Turn recourselab errors and OS errors into a one-line message and exit status 1; append the stage's
    outcome and wall time to the run log (``$RECOURSELAB_RUN_LOG``, set by `recourselab repro`)."""

    def wrapper(argv: list[str] | None = None) -> int:
        start, status = time.monotonic(), "failed"
        previous = _exit_on_sigterm()
        try:
            code = main(argv)
            status = "ok" if code == 0 else "failed"
            return code
        except RecourselabError as err:
            log.error("%s", err)
            return 1
        except OSError as err:  # a full disk, a read-only --out, an unreachable Dask scheduler...
            log.error("%s: %s (the last good outputs are kept)", type(err).__name__, err)
            log.debug("traceback", exc_info=True)
            return 1
        except RuntimeError as err:
            if "ephemeral Prefect API server" not in str(err):
                raise
            log.error("Prefect's temporary server did not start in time (%s s; the machine may be busy): "
                      "run the pipeline with `recourselab repro`, which starts one server for the whole run, "
                      "or set PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS higher",
                      os.environ.get("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS"))
            return 1
        finally:
            _resources.close()
            if previous is not None:
                signal.signal(signal.SIGTERM, previous)
            if os.environ.get(RUN_LOG_ENV) and "stage" in _run:
                append_stage_run(Path(os.environ[RUN_LOG_ENV]), {**_run, "status": status,
                                                                  "wall_s": round(time.monotonic() - start, 3)})

    wrapper.__doc__ = main.__doc__
    return wrapper
