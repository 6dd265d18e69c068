"""A local Prefect server for one pipeline run.

A Prefect flow in a fresh process without ``PREFECT_API_URL`` starts a temporary server
(10-20 s, longer on a busy machine). DVC runs every ``foreach`` stage in its own process, so
``recourselab repro`` starts one server on 127.0.0.1 for the whole run and stops it (its whole
process group) afterwards, also when the run is interrupted. A server that does not answer
in time is stopped and started once more on a new port; if that fails too,
:class:`PrefectServerError` says so in one line, naming the server's log file.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from recourselab.errors import RecourselabError

log = logging.getLogger(__name__)

#: Seconds one server start may take before it is retried (override: $RECOURSELAB_PREFECT_START_TIMEOUT).
START_TIMEOUT_S = 120.0
#: Server starts tried before giving up.
ATTEMPTS = 2


class PrefectServerError(RecourselabError):
    """The local Prefect server of a run could not be started."""


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=1) as resp:  # noqa: S310 - loopback only
            return resp.status == 200
    except OSError:
        return False


def prefect_executable() -> str:
    beside = Path(sys.executable).parent / "prefect"
    return str(beside) if beside.exists() else (shutil.which("prefect") or "prefect")


def stop_group(proc: subprocess.Popen, *, grace: float = 15.0, first: int = signal.SIGTERM) -> None:
    """Stop ``proc`` and every process of its process group (it must lead its own group).

    Sends ``first`` to the group, waits up to ``grace`` seconds for the leader, then SIGKILLs
    whatever of the group is left. The leader is reaped.
    """
    try:
        os.killpg(proc.pid, first)
    except ProcessLookupError:
        pass
    try:
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        pass
    try:  # members that outlived the leader (or a leader that ignored the signal)
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def start_timeout() -> float:
    """:data:`START_TIMEOUT_S`, or ``$RECOURSELAB_PREFECT_START_TIMEOUT`` (seconds) when set."""
    value = os.environ.get("RECOURSELAB_PREFECT_START_TIMEOUT")
    if not value:
        return START_TIMEOUT_S
    try:
        seconds = float(value)
    except ValueError:
        raise PrefectServerError(f"RECOURSELAB_PREFECT_START_TIMEOUT must be a number of seconds, got {value!r}") \
            from None
    if seconds <= 0:
        raise PrefectServerError(f"RECOURSELAB_PREFECT_START_TIMEOUT must be positive, got {value!r}")
    return seconds


def _start(cmd: list[str], env: dict[str, str], url: str, timeout: float,
           log_file: Path) -> tuple[subprocess.Popen | None, str]:
    """One start: the running server, or ``(None, why)`` after stopping what did not come up."""
    with open(log_file, "ab") as out:
        try:
            proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    start_new_session=True)
        except OSError as err:
            return None, f"cannot run {cmd[0]!r} ({err.strerror or err})"
    deadline = time.monotonic() + timeout
    try:
        while not _healthy(url):
            if proc.poll() is not None:
                return None, f"it exited with status {proc.returncode}"
            if time.monotonic() > deadline:
                stop_group(proc, grace=5)
                return None, f"it did not answer within {timeout:g} s"
            time.sleep(0.3)
    except BaseException:  # interrupted while waiting: leave no server behind
        stop_group(proc, grace=5)
        raise
    return proc, ""


@contextmanager
def local_server(*, timeout: float | None = None, attempts: int = ATTEMPTS, env: dict[str, str] | None = None,
                 log_file: str | Path | None = None) -> Iterator[str]:
    """Start ``prefect server start`` on a free loopback port; yield its API URL.

    Parameters
    ----------
    timeout : seconds one start may take (default :func:`start_timeout`).
    attempts : starts tried, each on a new port, before giving up.
    env : environment of the server (``PREFECT_API_URL`` is dropped from it).
    log_file : where the server's output goes (default ``$PREFECT_HOME/server.log``, else a temporary file).

    Raises
    ------
    PrefectServerError
        No start answered in time, in one line naming the log file and what to do.

    The server (its whole process group) is stopped when the block exits, however it exits.
    """
    timeout = start_timeout() if timeout is None else timeout
    child_env = {**os.environ, **(env or {}), "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}
    child_env.pop("PREFECT_API_URL", None)
    if log_file is None:
        home = child_env.get("PREFECT_HOME")
        log_file = Path(home).expanduser() / "server.log" if home else Path(os.devnull)
    log_file = Path(log_file)
    if log_file != Path(os.devnull):
        log_file.parent.mkdir(parents=True, exist_ok=True)
        log_file.write_bytes(b"")
    reasons = []
    proc = None
    for attempt in range(1, attempts + 1):
        port = free_port()
        url = f"http://127.0.0.1:{port}/api"
        cmd = [prefect_executable(), "server", "start", "--host", "127.0.0.1", "--port", str(port)]
        proc, why = _start(cmd, child_env, url, timeout, log_file)
        if proc is not None:
            break
        reasons.append(why)
        if attempt < attempts:
            log.warning("Prefect server start %d of %d failed (%s); retrying", attempt, attempts, why)
    if proc is None:
        raise PrefectServerError(
            f"could not start a local Prefect server ({attempts} tries: {'; '.join(reasons)}; its output: "
            f"{log_file}); retry when the machine is less busy (or set RECOURSELAB_PREFECT_START_TIMEOUT higher), "
            "or start one with `prefect server start` and set PREFECT_API_URL")
    log.info("local Prefect server at %s", url)
    try:
        yield url
    finally:
        if proc.poll() is None:
            log.info("stopping the local Prefect server")
        stop_group(proc)
