"""The run's local Prefect server: time and one retry to start, a one-line error, nothing left running.

A fake ``prefect`` executable stands in for the real one: it records each start, then hangs,
exits, or answers ``/api/health`` as the test needs.
"""

from __future__ import annotations

import sys
import time
import urllib.request
from pathlib import Path

import pytest

import recourselab.prefect_server as server
from recourselab.prefect_server import PrefectServerError, local_server

FAKE = """#!{python}
import http.server, os, sys, time
starts = {starts!r}
with open(starts, "a") as f:
    f.write(f"{{os.getpid()}}\\n")
n = len(open(starts).read().split())
mode = {modes!r}[min(n, len({modes!r})) - 1]
if mode == "exit":
    sys.exit(3)
if mode == "hang":
    time.sleep(600)
port = int(sys.argv[sys.argv.index("--port") + 1])

class Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200 if self.path == "/api/health" else 404)
        self.end_headers()

    def log_message(self, *args):
        pass

http.server.HTTPServer(("127.0.0.1", port), Health).serve_forever()
"""


def _fake(tmp_path: Path, monkeypatch, *modes: str) -> Path:
    starts = tmp_path / "starts"
    script = tmp_path / "prefect"
    script.write_text(FAKE.format(python=sys.executable, starts=str(starts), modes=list(modes)))
    script.chmod(0o755)
    monkeypatch.setattr(server, "prefect_executable", lambda: str(script))
    return starts


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"


def _pids(starts: Path) -> list[int]:
    return [int(p) for p in starts.read_text().split()]


pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")


def test_a_server_that_never_answers_is_retried_once_then_a_one_line_error(tmp_path, monkeypatch):
    starts = _fake(tmp_path, monkeypatch, "hang")
    log_file = tmp_path / "home" / "server.log"
    with pytest.raises(PrefectServerError) as err:
        with local_server(timeout=1.5, log_file=log_file):
            pytest.fail("the block ran without a server")
    message = str(err.value)
    assert "\n" not in message and "2 tries" in message and "did not answer within 1.5 s" in message
    assert str(log_file) in message and "PREFECT_API_URL" in message
    assert len(_pids(starts)) == 2 and not any(_alive(p) for p in _pids(starts))  # both stopped


def test_the_second_start_is_used_when_the_first_fails(tmp_path, monkeypatch, caplog):
    starts = _fake(tmp_path, monkeypatch, "exit", "serve")
    with local_server(timeout=30, env={"PREFECT_HOME": str(tmp_path / "home")}) as url:
        with urllib.request.urlopen(f"{url}/health", timeout=5) as resp:
            assert resp.status == 200
        first, second = _pids(starts)
        assert _alive(second)
    assert "start 1 of 2 failed (it exited with status 3); retrying" in caplog.text
    assert (tmp_path / "home" / "server.log").is_file()
    deadline = time.monotonic() + 10
    while _alive(second) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(second)  # stopped when the block exited


def test_the_server_is_stopped_when_the_block_is_interrupted(tmp_path, monkeypatch):
    starts = _fake(tmp_path, monkeypatch, "serve")
    with pytest.raises(KeyboardInterrupt):
        with local_server(timeout=30, log_file=tmp_path / "log"):
            raise KeyboardInterrupt
    assert not _alive(_pids(starts)[0])


def test_a_missing_executable_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setattr(server, "prefect_executable", lambda: str(tmp_path / "no-prefect"))
    with pytest.raises(PrefectServerError, match="cannot run .*no-prefect"):
        with local_server(timeout=1, log_file=tmp_path / "log"):
            pass


def test_start_timeout_from_the_environment(monkeypatch):
    monkeypatch.delenv("RECOURSELAB_PREFECT_START_TIMEOUT", raising=False)
    assert server.start_timeout() == server.START_TIMEOUT_S
    monkeypatch.setenv("RECOURSELAB_PREFECT_START_TIMEOUT", "45")
    assert server.start_timeout() == 45
    for bad in ("soon", "-1"):
        monkeypatch.setenv("RECOURSELAB_PREFECT_START_TIMEOUT", bad)
        with pytest.raises(PrefectServerError, match="RECOURSELAB_PREFECT_START_TIMEOUT"):
            server.start_timeout()
