"""A real local Prefect server: `recourselab serve` serves the deployments; a run of the tiny profile
is triggered through the API and completes."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import copy_checkout

pytestmark = pytest.mark.slow


def _git_copy(dst: Path, env: dict[str, str]) -> Path:
    work = copy_checkout(dst)
    for cmd in (["git", "init", "-q"], ["git", "add", "-A"],
                ["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "init"]):
        subprocess.run(cmd, cwd=work, env=env, check=True, capture_output=True)
    return work


def _wait_for_deployment(client, name: str, serve: subprocess.Popen, log: Path, timeout: float = 240):  # noqa: ANN001, ANN202
    from prefect.exceptions import ObjectNotFound

    deadline = time.monotonic() + timeout
    while True:
        try:
            return client.read_deployment_by_name(name)
        except ObjectNotFound:
            assert serve.poll() is None, f"recourselab serve exited {serve.returncode}:\n{log.read_text()}"
            assert time.monotonic() < deadline, f"{name} not served in {timeout} s:\n{log.read_text()}"
            time.sleep(1)


def test_a_served_deployment_runs_the_tiny_profile_through_the_api(tmp_path):
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey
    from prefect.deployments import run_deployment
    from prefect.settings import PREFECT_API_URL, temporary_settings

    from recourselab.prefect_server import local_server, stop_group

    env = {**os.environ, "PATH": str(Path(sys.executable).parent) + os.pathsep + os.environ["PATH"],
           "DVC_NO_ANALYTICS": "1", "PREFECT_HOME": str(tmp_path / "prefect-home")}
    env.pop("PREFECT_API_URL", None)
    work = _git_copy(tmp_path / "project", env)
    remote = tmp_path / "remote"  # the project's default remote, pointed away from the user's cache
    subprocess.run([sys.executable, "-m", "dvc", "remote", "modify", "--local", "local", "url", str(remote)],
                   cwd=work, env=env, check=True, capture_output=True)
    serve_log = tmp_path / "serve.log"
    with local_server(env=env, log_file=tmp_path / "server.log") as url:
        with open(serve_log, "wb") as out:
            serve = subprocess.Popen([sys.executable, "-m", "recourselab.cli", "serve", "nightly-default"], cwd=work,
                                     env={**env, "PREFECT_API_URL": url}, stdout=out, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        try:
            with temporary_settings(updates={PREFECT_API_URL: url}), get_client(sync_client=True) as client:
                deployment = _wait_for_deployment(client, "pipeline/nightly-default", serve, serve_log)
                assert deployment.parameters == {"profile": "default", "audit": True, "push": True}
                assert [s.schedule.cron for s in deployment.schedules] == ["0 2 * * *"]
                run = run_deployment("pipeline/nightly-default", timeout=480, poll_interval=2,
                                     parameters={"profile": "tiny", "targets": ["prepare@moons"]})
                assert run.state is not None and run.state.is_completed(), \
                    f"{run.state}\n{serve_log.read_text()[-4000:]}"
                assert run.parameters["profile"] == "tiny"
                (artifact,) = client.read_artifacts(
                    artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=["pipeline-tiny"])))
                assert artifact.flow_run_id == run.id and artifact.type == "markdown"
                assert "| dvc repro | ok |" in artifact.data and "| prepare@moons | ran |" in artifact.data
                assert "| dvc push | ok |" in artifact.data, artifact.data
        finally:
            stop_group(serve)
    assert any(p.is_file() for p in remote.rglob("*"))  # the prepared outputs reached the remote
    assert "profile: tiny" in (work / "params.yaml").read_text()
    assert (work / "data/prepared/moons/seed=0/train.parquet").is_file()
    assert "prepare@moons" in (work / "dvc.lock").read_text()
