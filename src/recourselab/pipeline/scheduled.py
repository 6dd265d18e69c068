"""The whole pipeline as scheduled work: ``dvc repro`` of a profile, the audit, ``dvc push``.

``dvc.lock`` and the DVC cache stay the source of truth: each step runs DVC in the project
checkout, and the Prefect flow ``pipeline`` (``flows/pipeline.py``) only sequences the steps
and reports them as a markdown artifact. The deployments that schedule the flow are declared
in the project's ``prefect.yaml`` and read by :func:`read_deployments`.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from recourselab.errors import ConfigError, RecourselabError

log = logging.getLogger(__name__)

#: The DVC stage of the audit reports (run as its own step when ``dvc.yaml`` declares it).
AUDIT_STAGE = "audit"
#: Keys a deployment of ``prefect.yaml`` may set (what :func:`read_deployments` understands).
DEPLOYMENT_KEYS = ("name", "entrypoint", "description", "parameters", "schedules", "tags", "version",
                   "work_pool", "concurrency_limit", "enforce_parameter_schema")
#: Seconds a cancelled run's ``recourselab repro`` gets to stop, after SIGTERM, before SIGKILL: more than
#: its own two stops in turn (DVC's group, then the Prefect server's, up to 15 s each).
STOP_GRACE_S = 45.0
#: Keys of one schedule entry.
SCHEDULE_KEYS = ("cron", "interval", "rrule", "timezone", "active", "parameters")


@dataclass(frozen=True)
class StepResult:
    """One step of the pipeline flow.

    ``status`` is ``ok``, ``failed`` or ``skipped``; ``detail`` says why (one line).
    """

    name: str
    status: str
    detail: str = ""
    wall_s: float = 0.0

    @property
    def ok(self) -> bool:
        return self.status != "failed"


@dataclass(frozen=True)
class ReproOutcome(StepResult):
    """The ``dvc repro`` step with what each stage did.

    ``stale`` holds the ``stage@dataset`` names DVC reported changed before the run (None:
    unknown); ``runs`` the stages' run-log records (stage, dataset, status, tasks, cache_hits, wall_s).
    """

    stale: frozenset[str] | None = None
    runs: tuple[dict[str, Any], ...] = field(default_factory=tuple)


def dvc_command() -> list[str]:
    return [sys.executable, "-m", "dvc"]


def dvc_stages(root: str | Path) -> list[str]:
    """Names of the stages of ``root/dvc.yaml`` in declaration order."""
    from recourselab.config import read_yaml

    stages = (read_yaml(Path(root) / "dvc.yaml") or {}).get("stages") or {}
    return list(stages)


def use_profile(root: str | Path, profile: str | None) -> bool:
    """Write profile ``profile`` to ``root/params.yaml`` unless it already holds it; True when written.

    ``None`` keeps params.yaml as it is. The replaced file is backed up (see ``recourselab profile``).
    """
    from recourselab.config import load_params, read_yaml, render_profile, write_params

    if profile is None:
        return False
    path = Path(root) / "params.yaml"
    if path.is_file() and load_params(path).profile == profile:
        return False
    current = read_yaml(path) if path.is_file() else None
    backup = write_params(path, render_profile(profile, root, current=current, current_source=str(path)))
    log.info("wrote profile %r to %s%s", profile, path, f" (previous file: {backup})" if backup else "")
    return True


def _run(cmd: list[str], root: Path, env: Mapping[str, str]) -> int:
    """Run ``cmd`` in ``root`` in its own process group; its exit status. Whatever stops the caller
    (an error, Prefect cancelling the flow run) stops the whole group first, with
    :data:`STOP_GRACE_S` for ``recourselab repro`` to stop its own DVC run and Prefect server."""
    from recourselab.prefect_server import stop_group

    proc = subprocess.Popen(cmd, cwd=root, env=dict(env), start_new_session=True)
    try:
        return proc.wait()
    except BaseException:
        stop_group(proc, grace=STOP_GRACE_S)
        raise


def _stale(root: Path, targets: Sequence[str], env: Mapping[str, str]) -> frozenset[str] | None:
    """``stage@dataset`` names ``dvc status`` reports changed (None when it failed)."""
    proc = subprocess.run([*dvc_command(), "status", "--json", *targets], cwd=root, capture_output=True, text=True,
                          env=dict(env), check=False)
    try:
        status = json.loads(proc.stdout) if proc.returncode == 0 else None
    except ValueError:
        status = None
    return frozenset(status) if isinstance(status, dict) else None


def recourselab_repro(root: str | Path, targets: Sequence[str] = (), *, name: str = "dvc repro",
                      env: Mapping[str, str] | None = None) -> ReproOutcome:
    """``recourselab repro`` of ``targets`` (all stages when empty) in ``root``: the project checks,
    one Prefect server for the stages (``$PREFECT_API_URL`` when set: a served flow run has it), and
    SIGTERM handling; its stages' run-log records are read back."""
    from recourselab.pipeline.summary import RUN_LOG_ENV, new_run_log, read_run_log

    root = Path(root)
    run_log = new_run_log(root, uuid.uuid4().hex[:12])  # a name no earlier run (a reused pid, say) had
    env = {**os.environ, **(env or {}), RUN_LOG_ENV: str(run_log)}
    start = time.monotonic()
    stale = _stale(root, targets, env)
    code = _run([sys.executable, "-m", "recourselab.cli", "repro", *targets], root, env)
    runs = tuple(read_run_log(run_log))
    ran = [f"{r['stage']}@{r['dataset']}" for r in runs]
    detail = (f"dvc repro {' '.join(targets) or '(all stages)'}: " + (f"ran {', '.join(ran)}" if ran else "nothing ran")
              + ("" if code == 0 else f"; exit status {code}"))
    return ReproOutcome(name, "ok" if code == 0 else "failed", detail, time.monotonic() - start, stale=stale,
                        runs=runs)


def repro(root: str | Path, targets: Sequence[str] = (), *, env: Mapping[str, str] | None = None) -> ReproOutcome:
    """The pipeline's ``dvc repro`` step (see :func:`recourselab_repro`)."""
    return recourselab_repro(root, targets, env=env)


def audit(root: str | Path, *, env: Mapping[str, str] | None = None) -> StepResult:
    """``dvc repro audit`` when ``dvc.yaml`` declares an ``audit`` stage, else skipped (logged)."""
    root = Path(root)
    if AUDIT_STAGE not in dvc_stages(root):
        why = f"dvc.yaml has no {AUDIT_STAGE!r} stage"
        log.info("audit skipped: %s", why)
        return StepResult("audit", "skipped", why)
    outcome = recourselab_repro(root, [AUDIT_STAGE], name="audit", env=env)
    return StepResult("audit", outcome.status, outcome.detail, outcome.wall_s)


def remotes(root: str | Path, env: Mapping[str, str] | None = None) -> list[str]:
    """Names of the DVC remotes configured for the project (every config level, ``dvc config --list``)."""
    proc = subprocess.run([*dvc_command(), "config", "--list"], cwd=root, capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, check=False)
    if proc.returncode != 0:
        raise RecourselabError(f"`dvc config --list` failed in {root}: {proc.stderr.strip() or proc.stdout.strip()}")
    keys = [line.split("=", 1)[0].split("\t")[-1] for line in proc.stdout.splitlines()]
    return sorted({k[len("remote."):-len(".url")] for k in keys if k.startswith("remote.") and k.endswith(".url")})


def push(root: str | Path, *, env: Mapping[str, str] | None = None) -> StepResult:
    """``dvc push`` to the default remote; skipped (logged) when the project has no remote."""
    root = Path(root)
    names = remotes(root, env)
    if not names:
        why = "no DVC remote is configured (add one with `dvc remote add -d <name> <url>`)"
        log.info("dvc push skipped: %s", why)
        return StepResult("dvc push", "skipped", why)
    start = time.monotonic()
    proc = subprocess.run([*dvc_command(), "push"], cwd=root, capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, check=False)
    if proc.returncode != 0:
        last = ((proc.stderr or proc.stdout).strip().splitlines() or [f"exit status {proc.returncode}"])[-1]
        raise RecourselabError(f"`dvc push` to {', '.join(names)} failed: {last}")
    return StepResult("dvc push", "ok", f"pushed to {', '.join(names)}", time.monotonic() - start)


def render_markdown(profile: str | None, steps: Sequence[StepResult], root: str | Path,
                    datasets: Sequence[str]) -> str:
    """The pipeline run's summary: one row per step, what each stage did, headline metrics per dataset."""
    from recourselab.pipeline.summary import format_seconds, headline, stage_outcome

    lines = [f"# recourselab pipeline: profile `{profile or 'params.yaml as it is'}`", "",
             "| step | status | seconds | detail |", "|---|---|---|---|"]
    lines += [f"| {s.name} | {s.status} | {s.wall_s:.1f} | {s.detail} |" for s in steps]
    outcome = next((s for s in steps if isinstance(s, ReproOutcome)), None)
    if outcome is not None:
        latest = {f"{r['stage']}@{r['dataset']}": r for r in outcome.runs}
        names = sorted(set(latest) | set(outcome.stale or ()))
        if names:
            lines += ["", "## Stages", "", "| stage | outcome | wall time |", "|---|---|---|"]
            for name in names:
                record = latest.get(name)
                what = stage_outcome(record, stale=None if outcome.stale is None else name in outcome.stale,
                                     run_ok=outcome.ok)
                wall = record.get("wall_s") if record else None
                lines.append(f"| {name} | {what} | {format_seconds(wall) if wall is not None else '-'} |")
        else:
            lines += ["", "Every stage was up to date (DVC cache)."]
    lines += ["", "## Headline metrics", "", "| dataset | metric | value |", "|---|---|---|"]
    for dataset in datasets:
        for key, value in headline(Path(root) / "data" / "metrics" / dataset).items():
            lines.append(f"| {dataset} | {key} | {value} |")
    return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class DeploymentSpec:
    """One deployment of ``prefect.yaml``: its name, flow parameters, schedules and tags."""

    name: str
    entrypoint: str
    parameters: dict[str, Any]
    schedules: tuple[dict[str, Any], ...]
    tags: tuple[str, ...] = ()
    description: str | None = None


def _known(where: str, mapping: Mapping[str, Any], keys: Sequence[str]) -> None:
    unknown = sorted(set(mapping) - set(keys))
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {', '.join(unknown)}; valid keys: {', '.join(keys)}")


def _typed(where: str, value: Any, kind: type, what: str) -> Any:
    """``value`` when it is missing or a ``kind``, else a :class:`ConfigError`."""
    if value is not None and not isinstance(value, kind):
        raise ConfigError(f"{where} must be {what}, got {type(value).__name__} {value!r}")
    return value


def read_deployments(path: str | Path) -> list[DeploymentSpec]:
    """The deployments declared in ``prefect.yaml`` (unknown keys are refused, naming the valid ones)."""
    from recourselab.config import read_yaml

    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{path} not found: `recourselab serve` reads the deployments of the project's prefect.yaml")
    document = read_yaml(path) or {}
    entries = _typed(f"{path}: deployments", document.get("deployments") if isinstance(document, Mapping) else None,
                     list, "a list") or []
    specs = []
    for i, entry in enumerate(entries):
        where = f"{path}: deployments[{i}]"
        if not isinstance(entry, Mapping) or "name" not in entry or "entrypoint" not in entry:
            raise ConfigError(f"{where} must be a mapping with at least `name` and `entrypoint`")
        _known(where, entry, DEPLOYMENT_KEYS)
        _typed(f"{where}.parameters", entry.get("parameters"), Mapping, "a mapping")
        _typed(f"{where}.tags", entry.get("tags"), list, "a list")
        schedules = _typed(f"{where}.schedules", entry.get("schedules"), list, "a list") or []
        for j, schedule in enumerate(schedules):
            if not isinstance(schedule, Mapping):
                raise ConfigError(f"{where}.schedules[{j}] must be a mapping (e.g. cron: \"0 2 * * *\")")
            _known(f"{where}.schedules[{j}]", schedule, SCHEDULE_KEYS)
            if sum(k in schedule for k in ("cron", "interval", "rrule")) != 1:
                raise ConfigError(f"{where}.schedules[{j}] needs exactly one of cron, interval, rrule")
        specs.append(DeploymentSpec(name=str(entry["name"]), entrypoint=str(entry["entrypoint"]),
                                    parameters=dict(entry.get("parameters") or {}),
                                    schedules=tuple(dict(s) for s in schedules),
                                    tags=tuple(entry.get("tags") or ()), description=entry.get("description")))
    if not specs:
        raise ConfigError(f"{path} declares no deployments")
    return specs


def prefect_schedule(entry: Mapping[str, Any]) -> Any:
    """A Prefect schedule object from one ``schedules`` entry of ``prefect.yaml``."""
    from datetime import timedelta

    from prefect.schedules import Cron, Interval, RRule

    extra = {k: entry[k] for k in ("timezone", "active", "parameters") if k in entry}
    if "cron" in entry:
        return Cron(entry["cron"], **extra)
    if "interval" in entry:
        return Interval(timedelta(seconds=float(entry["interval"])), **extra)
    return RRule(entry["rrule"], **extra)


def to_deployments(flows: Mapping[str, Any], specs: Sequence[DeploymentSpec]) -> list[Any]:
    """``flow.to_deployment(...)`` of every spec; ``flows`` maps each entrypoint to its flow object."""
    out = []
    for spec in specs:
        if spec.entrypoint not in flows:
            raise ConfigError(f"deployment {spec.name!r}: unknown entrypoint {spec.entrypoint!r}; "
                              f"known: {', '.join(flows)}")
        out.append(flows[spec.entrypoint].to_deployment(
            name=spec.name, parameters=spec.parameters, schedules=[prefect_schedule(s) for s in spec.schedules],
            tags=list(spec.tags), description=spec.description))
    return out
