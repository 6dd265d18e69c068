"""Prefect flow ``pipeline``: the whole pipeline of one profile, for scheduled deployments.

Steps: write the profile to params.yaml (when it differs), ``dvc repro`` (every stage but the
audit, or the given targets), the audit (when ``dvc.yaml`` has an ``audit`` stage), ``dvc push``
(skipped when no remote is configured). A markdown artifact ``pipeline-<profile>`` reports the
steps, what each stage did and the headline metrics. The deployments are declared in
``prefect.yaml``; ``recourselab serve`` serves them.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from prefect import flow, task
from prefect.artifacts import create_markdown_artifact
from prefect.cache_policies import NO_CACHE

from recourselab.config import load_params
from recourselab.errors import RecourselabError
from recourselab.pipeline import scheduled
from recourselab.pipeline.project import project_root

log = logging.getLogger("recourselab.flows.pipeline")

#: The flow's entrypoint as prefect.yaml names it.
ENTRYPOINT = "flows/pipeline.py:pipeline"


@task(name="repro", cache_policy=NO_CACHE)
def repro_step(root: str, targets: list[str]) -> scheduled.ReproOutcome:
    return scheduled.repro(root, targets)


@task(name="audit", cache_policy=NO_CACHE)
def audit_step(root: str) -> scheduled.StepResult:
    return scheduled.audit(root)


@task(name="push", cache_policy=NO_CACHE, retries=2, retry_delay_seconds=[10, 60])
def push_step(root: str) -> scheduled.StepResult:
    return scheduled.push(root)


def artifact_key(profile: str | None) -> str:
    """Prefect artifact keys allow lowercase letters, digits and dashes only."""
    name = "".join(c if c.isalnum() else "-" for c in (profile or "current").lower())
    return f"pipeline-{name}"


@flow(name="pipeline", validate_parameters=True)
def pipeline(profile: str | None = "default", targets: list[str] | None = None, audit: bool = True,
             push: bool = True, project: str | None = None) -> dict[str, Any]:
    """Run the pipeline of ``profile`` (None: params.yaml as it is) in the project checkout.

    Parameters
    ----------
    profile : profile written to params.yaml first (``recourselab profile``); DVC reruns what changed.
    targets : ``dvc repro`` targets (default: every stage but the audit).
    audit : run the ``audit`` stage after the others, when dvc.yaml has one.
    push : ``dvc push`` the results when a DVC remote is configured.
    project : the checkout (default: the one holding the current folder).

    Returns
    -------
    dict : step name -> status.
    """
    root = project_root(Path(project) if project else None)
    scheduled.use_profile(root, profile)
    stages = scheduled.dvc_stages(root)
    if not targets and scheduled.AUDIT_STAGE in stages:
        targets = [s for s in stages if s != scheduled.AUDIT_STAGE]
    steps: list[scheduled.StepResult] = [repro_step(str(root), list(targets or []))]
    if steps[0].ok and audit:
        steps.append(audit_step(str(root)))
    if all(s.ok for s in steps) and push:  # a push that still fails after its retries is reported, not raised
        pushed = push_step(str(root), return_state=True).result(raise_on_failure=False)
        steps.append(pushed if isinstance(pushed, scheduled.StepResult)
                     else scheduled.StepResult("dvc push", "failed", str(pushed)))
    markdown = scheduled.render_markdown(profile, steps, root, load_params(root / "params.yaml").datasets)
    create_markdown_artifact(markdown, key=artifact_key(profile), description="recourselab pipeline run")
    failed = [s for s in steps if not s.ok]
    if failed:
        raise RecourselabError("; ".join(f"{s.name} failed ({s.detail})" for s in failed))
    return {s.name: s.status for s in steps}
