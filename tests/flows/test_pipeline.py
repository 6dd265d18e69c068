"""The pipeline flow's deployments (checked without a server) and its steps."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from recourselab.errors import ConfigError, RecourselabError
from recourselab.pipeline import scheduled
from tests.conftest import REPO_ROOT


@pytest.fixture(scope="module")
def deployments():
    from flows.pipeline import ENTRYPOINT, pipeline

    specs = scheduled.read_deployments(REPO_ROOT / "prefect.yaml")
    return {d.name: d for d in scheduled.to_deployments({ENTRYPOINT: pipeline}, specs)}


def test_nightly_default_and_weekly_paper_schedules_and_parameters(deployments):
    assert set(deployments) == {"nightly-default", "weekly-paper"}
    nightly, weekly = deployments["nightly-default"], deployments["weekly-paper"]
    assert nightly.parameters == {"profile": "default", "audit": True, "push": True}
    assert weekly.parameters == {"profile": "paper", "audit": True, "push": True}
    (n,), (w,) = nightly.schedules, weekly.schedules
    assert (n.schedule.cron, n.schedule.timezone, n.active) == ("0 2 * * *", "UTC", True)
    assert (w.schedule.cron, w.schedule.timezone, w.active) == ("0 3 * * 6", "UTC", True)
    for d in deployments.values():
        assert d.entrypoint.endswith("flows/pipeline.py:pipeline") and d.flow_name == "pipeline"
        assert set(d.parameters) <= set(d._parameter_openapi_schema.properties)  # every parameter is the flow's


def test_the_declared_profiles_exist():
    from recourselab.config import available_profiles

    for spec in scheduled.read_deployments(REPO_ROOT / "prefect.yaml"):
        assert spec.parameters["profile"] in available_profiles(REPO_ROOT)


@pytest.mark.parametrize(("edit", "message"), [
    (lambda d: d[0].update(cron_expr="x"), "unknown key(s) cron_expr; valid keys: name, entrypoint"),
    (lambda d: d[0]["schedules"][0].update(interval=60), "exactly one of cron, interval, rrule"),
    (lambda d: d[0]["schedules"][0].update(tz="UTC"), "unknown key(s) tz"),
    (lambda d: d[0].update(schedules={"cron": "0 2 * * *"}), "schedules must be a list, got dict"),
    (lambda d: d[0].update(schedules=["0 2 * * *"]), "schedules[0] must be a mapping"),
    (lambda d: d[0].update(tags="nightly"), "tags must be a list, got str 'nightly'"),
    (lambda d: d[0].update(parameters=["default"]), "parameters must be a mapping, got list"),
])
def test_a_bad_deployment_entry_is_refused_naming_the_valid_keys(tmp_path, edit, message):
    raw = yaml.safe_load((REPO_ROOT / "prefect.yaml").read_text())
    edit(raw["deployments"])
    path = tmp_path / "prefect.yaml"
    path.write_text(yaml.safe_dump(raw))
    with pytest.raises(ConfigError, match="deployments\\[0\\]") as err:
        scheduled.read_deployments(path)
    assert message in str(err.value)


def test_an_unknown_entrypoint_is_refused():
    specs = scheduled.read_deployments(REPO_ROOT / "prefect.yaml")
    with pytest.raises(ConfigError, match="unknown entrypoint"):
        scheduled.to_deployments({}, specs)


def _dvc_project(root: Path, stages: dict) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "dvc.yaml").write_text(yaml.safe_dump({"stages": stages}))
    (root / "stages").mkdir(exist_ok=True)
    subprocess.run([sys.executable, "-m", "dvc", "init", "--no-scm", "-q"], cwd=root, check=True)
    return root


def test_audit_is_skipped_without_its_stage_and_run_with_it(tmp_path, monkeypatch):
    ran: list[list[str]] = []
    monkeypatch.setattr(scheduled, "_run", lambda cmd, root, env: ran.append(cmd) or 0)
    plain = _dvc_project(tmp_path / "plain", {"prepare": {"cmd": "true"}})
    step = scheduled.audit(plain)
    assert (step.status, ran) == ("skipped", [])
    assert "no 'audit' stage" in step.detail
    with_audit = _dvc_project(tmp_path / "audited", {"prepare": {"cmd": "true"}, "audit": {"cmd": "true"}})
    step = scheduled.audit(with_audit)
    assert step.status == "ok" and ran == [[sys.executable, "-m", "recourselab.cli", "repro", "audit"]]
    monkeypatch.setattr(scheduled, "_run", lambda cmd, root, env: 3)
    assert scheduled.audit(with_audit).status == "failed"


def test_push_is_skipped_without_a_remote_and_pushes_to_one(tmp_path, caplog):
    root = _dvc_project(tmp_path / "p", {"prepare": {"cmd": "true"}})
    caplog.set_level("INFO", logger="recourselab")
    step = scheduled.push(root)
    assert step.status == "skipped" and "no DVC remote is configured" in step.detail
    assert any("dvc push skipped" in r.getMessage() for r in caplog.records)
    subprocess.run([sys.executable, "-m", "dvc", "remote", "add", "-d", "store", str(tmp_path / "remote")],
                   cwd=root, check=True)
    (root / "a.txt").write_text("payload")
    subprocess.run([sys.executable, "-m", "dvc", "add", "-q", "a.txt"], cwd=root, check=True)
    step = scheduled.push(root)
    assert (step.status, step.detail) == ("ok", "pushed to store")
    pushed = [p for p in (tmp_path / "remote").rglob("*") if p.is_file()]
    assert [p.read_text() for p in pushed] == ["payload"]


def test_a_failed_push_names_the_last_error_line(tmp_path):
    root = _dvc_project(tmp_path / "p", {"prepare": {"cmd": "true"}})
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where the remote's folder should be")
    subprocess.run([sys.executable, "-m", "dvc", "remote", "add", "-d", "store", str(blocker / "remote")],
                   cwd=root, check=True)
    (root / "a.txt").write_text("payload")
    subprocess.run([sys.executable, "-m", "dvc", "add", "-q", "a.txt"], cwd=root, check=True)
    with pytest.raises(RecourselabError, match=r"`dvc push` to store failed: [^\[]") as err:
        scheduled.push(root)
    assert "\n" not in str(err.value)


def test_repro_reads_back_only_its_own_run_records(tmp_path, monkeypatch):
    from recourselab.pipeline.summary import RUN_LOG_ENV, append_stage_run

    root = _dvc_project(tmp_path / "p", {"prepare": {"cmd": "true"}})
    runs = root / ".recourselab" / "runs"
    runs.mkdir(parents=True)
    old = {"stage": "prepare", "dataset": "old", "status": "ok"}
    (runs / f"20200101T000000-{12345}.jsonl").write_text(json.dumps(old) + "\n")  # an earlier run, any pid

    def fake_repro(cmd, cwd, env):
        append_stage_run(Path(env[RUN_LOG_ENV]), {"stage": "prepare", "dataset": "moons", "status": "ok"})
        return 0

    monkeypatch.setattr(scheduled, "_run", fake_repro)
    outcome = scheduled.repro(root)
    assert [r["dataset"] for r in outcome.runs] == ["moons"]
    assert outcome.detail.endswith("ran prepare@moons")


def test_use_profile_writes_a_different_profile_once(tmp_path):
    import shutil

    shutil.copytree(REPO_ROOT / "profiles", tmp_path / "profiles")
    (tmp_path / "params.yaml").write_text((REPO_ROOT / "params.yaml").read_text())
    assert scheduled.use_profile(tmp_path, None) is False
    assert scheduled.use_profile(tmp_path, "tiny") is True
    assert "profile: tiny" in (tmp_path / "params.yaml").read_text()
    assert scheduled.use_profile(tmp_path, "tiny") is False
    assert len(list(tmp_path.glob("params.yaml.*.bak"))) == 1


def test_markdown_reports_steps_stage_outcomes_and_headline_metrics(tmp_path):
    from recourselab.io import write_json

    write_json(tmp_path / "data/metrics/moons/densityflow.json",
               {"summary": {"mean_per_model": {"mean": 0.875}, "cost_l2": {"mean": 0.5}}})
    outcome = scheduled.ReproOutcome(
        "dvc repro", "ok", "ran", 12.0, stale=frozenset({"prepare@moons", "train_flow@moons"}),
        runs=({"stage": "prepare", "dataset": "moons", "status": "ok", "tasks": 1, "cache_hits": 1, "wall_s": 2.0},
              {"stage": "train_flow", "dataset": "moons", "status": "ok", "tasks": 2, "cache_hits": 0,
               "wall_s": 9.0}))
    md = scheduled.render_markdown("tiny", [outcome, scheduled.StepResult("audit", "skipped", "no audit stage"),
                                            scheduled.StepResult("dvc push", "skipped", "no remote")],
                                   tmp_path, ["moons"])
    assert "| dvc repro | ok | 12.0 | ran |" in md and "| audit | skipped |" in md and "| dvc push | skipped |" in md
    assert "| prepare@moons | cached | 2.0 s |" in md and "| train_flow@moons | ran | 9.0 s |" in md
    assert "| moons | DensityFlow | validity 0.875 (mean per model), L2 cost 0.500 |" in md


def test_artifact_keys_are_valid_prefect_keys():
    from flows.pipeline import artifact_key

    assert artifact_key("paper") == "pipeline-paper" and artifact_key(None) == "pipeline-current"
    assert artifact_key("My_Profile") == "pipeline-my-profile"


def test_serve_without_a_server_or_with_an_unknown_deployment_is_a_clear_error(monkeypatch, caplog):
    import logging

    from prefect.settings import PREFECT_API_URL, temporary_settings

    from recourselab.cli import main

    monkeypatch.chdir(REPO_ROOT)
    monkeypatch.setattr(logging.getLogger("recourselab.cli"), "handlers", [caplog.handler])
    with temporary_settings(updates={PREFECT_API_URL: None}):
        assert main(["serve"]) == 1
    assert "start one with `prefect server start` and set PREFECT_API_URL" in caplog.text
    with temporary_settings(updates={PREFECT_API_URL: "http://127.0.0.1:9/api"}):
        assert main(["serve", "hourly"]) == 1
    assert "unknown deployment(s) hourly; prefect.yaml declares nightly-default, weekly-paper" in caplog.text


def test_a_push_that_keeps_failing_is_reported_in_the_artifact_and_fails_the_flow(tmp_path, monkeypatch):
    import flows.pipeline as flow_module

    root = _dvc_project(tmp_path / "p", {"prepare": {"cmd": "true"}})
    (root / "params.yaml").write_text((REPO_ROOT / "params.yaml").read_text())
    monkeypatch.setattr(scheduled, "repro", lambda root, targets, env=None: scheduled.ReproOutcome("dvc repro", "ok"))

    def broken_push(root, env=None):
        raise RecourselabError("`dvc push` to store failed: no space left")

    monkeypatch.setattr(scheduled, "push", broken_push)
    monkeypatch.setattr(flow_module, "push_step", flow_module.push_step.with_options(retries=0))
    artifacts: list[str] = []
    monkeypatch.setattr(flow_module, "create_markdown_artifact", lambda markdown, **kw: artifacts.append(markdown))
    with pytest.raises(RecourselabError, match="dvc push failed .*no space left"):
        flow_module.pipeline.fn(profile=None, project=str(root))
    assert len(artifacts) == 1
    assert "| dvc push | failed |" in artifacts[0] and "no space left" in artifacts[0]
