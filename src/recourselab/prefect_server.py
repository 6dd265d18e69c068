"""A local Prefect server for one pipeline run.

A Prefect flow in a fresh process without ``PREFECT_API_URL`` starts a temporary server
(10-20 s). DVC runs every ``foreach`` stage in its own process, so ``recourselab repro``
starts one server on 127.0.0.1 for the whole run and stops it afterwards; if it cannot
start, the stages fall back to Prefect's temporary server.
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

log = logging.getLogger(__name__)


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


@contextmanager
def local_server(*, timeout: float = 60.0, env: dict[str, str] | None = None) -> Iterator[str | None]:
    """Start ``prefect server start`` on a free loopback port; yield its API URL (or None).

    The server is terminated (its whole process group) when the block exits.
    """
    port = free_port()
    url = f"http://127.0.0.1:{port}/api"
    child_env = {**os.environ, **(env or {}), "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}
    child_env.pop("PREFECT_API_URL", None)
    cmd = [prefect_executable(), "server", "start", "--host", "127.0.0.1", "--port", str(port)]
    try:
        proc = subprocess.Popen(cmd, env=child_env, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, start_new_session=True)
    except OSError as err:
        log.warning("could not start a Prefect server (%s); stages use a temporary one", err)
        yield None
        return
    try:
        deadline = time.monotonic() + timeout
        while not _healthy(url):
            if proc.poll() is not None or time.monotonic() > deadline:
                log.warning("Prefect server did not come up; stages use a temporary one")
                url = None
                break
            time.sleep(0.3)
        else:
            log.info("local Prefect server at %s", url)
        yield url
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
