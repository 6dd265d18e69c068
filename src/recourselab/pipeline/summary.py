"""The end-of-run summary of ``recourselab repro``: headline results and what each stage did.

Each stage appends one JSON line to the run log named by ``$RECOURSELAB_RUN_LOG`` (see
:func:`append_stage_run`); ``recourselab repro`` sets it for the run, then prints
:func:`render_summary`: per dataset, the headline results read from
``data/metrics/<dataset>/*.json`` and, per stage, whether it ran, was served from the task
cache, was up to date (DVC skipped it) or did not run, with its wall time.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

#: Environment variable naming the run log (a JSON-lines file) that the stages append to.
RUN_LOG_ENV = "RECOURSELAB_RUN_LOG"


def new_run_log(root: str | Path, tag: str) -> Path:
    """A new run log's path, ``<root>/.recourselab/runs/<start time>-<tag>.jsonl``."""
    return Path(root) / ".recourselab" / "runs" / f"{time.strftime('%Y%m%dT%H%M%S')}-{tag}.jsonl"


def append_stage_run(path: str | Path, record: Mapping[str, Any]) -> None:
    """Append ``record`` (``stage``, ``dataset``, ``status``, ``wall_s``, optional ``tasks`` and
    ``cache_hits``) to the run log ``path`` as one JSON line, written in one call."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    line = (json.dumps(dict(record), sort_keys=True) + "\n").encode()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o666)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


def read_run_log(path: str | Path) -> list[dict[str, Any]]:
    """The records of the run log ``path`` in order ([] when it does not exist); lines that are
    not JSON objects (a run killed while writing) are skipped with a warning."""
    path = Path(path)
    if not path.is_file():
        return []
    records = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        try:
            record = json.loads(line)
        except ValueError:
            record = None
        if isinstance(record, dict) and {"stage", "dataset", "status"} <= set(record):
            records.append(record)
        elif line.strip():
            log.warning("%s:%d is not a stage record; skipped", path, number)
    return records


def nested(data: Any, *keys: str) -> Any:
    """``data[k1][k2]...``, or None where a key or a mapping is missing."""
    for key in keys:
        if not isinstance(data, Mapping) or key not in data:
            return None
        data = data[key]
    return data


def _read(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def headline(metrics_dir: str | Path) -> dict[str, str]:
    """The headline results of one dataset from its metrics folder, formatted for the summary.

    Parameters
    ----------
    metrics_dir : ``data/metrics/<dataset>``.

    Returns
    -------
    dict
        ``ensemble test accuracy`` (min - max over the tuned models' mean test accuracy),
        ``DensityFlow`` (mean per-model validity and L2 cost) and ``DISCOVER certified``
        (certified (model, seed) runs out of all); ``"n/a"`` where the file or value is missing.
    """
    metrics_dir = Path(metrics_dir)
    out = {"ensemble test accuracy": "n/a", "DensityFlow": "n/a", "DISCOVER certified": "n/a"}

    members = nested(_read(metrics_dir / "tune_ensemble.json"), "members")
    if isinstance(members, Mapping):
        accuracy = [a for m in members.values() if (a := _number(nested(m, "test_accuracy", "mean"))) is not None]
        if accuracy:
            out["ensemble test accuracy"] = f"{min(accuracy):.3f} - {max(accuracy):.3f} ({len(accuracy)} models)"

    summary = nested(_read(metrics_dir / "densityflow.json"), "summary")
    validity = _number(nested(summary, "mean_per_model", "mean"))
    cost = _number(nested(summary, "cost_l2", "mean"))
    if validity is not None or cost is not None:
        parts = []
        if validity is not None:
            parts.append(f"validity {validity:.3f} (mean per model)")
        if cost is not None:
            parts.append(f"L2 cost {cost:.3f}")
        out["DensityFlow"] = ", ".join(parts)

    models = nested(_read(metrics_dir / "discover.json"), "models")
    if isinstance(models, Mapping):
        verdicts = [bool(run["feasible"]) for m in models.values()
                    for run in (nested(m, "per_seed") or {}).values()
                    if isinstance(run, Mapping) and isinstance(run.get("feasible"), bool)]
        if verdicts:
            certified = sum(verdicts)
            out["DISCOVER certified"] = (f"{certified} of {len(verdicts)} model x seed runs "
                                         f"({certified / len(verdicts):.0%})")
    return out


def stage_outcome(record: Mapping[str, Any] | None, *, stale: bool | None, run_ok: bool,
                  pool: Mapping[str, Any] | None = None) -> str:
    """What one stage did for one dataset: ``failed``, ``cached`` (every task a cache hit), ``ran``
    (with its cache hits, if any; ``ran in pool`` when ``recourselab repro`` ran its tasks in one pool
    across datasets first), ``up to date`` (DVC skipped it) or ``not run`` (stale, but the run stopped
    before it).

    Parameters
    ----------
    record : its run-log record, or None when it did not run.
    stale : whether DVC reported it changed before the run (None: unknown).
    run_ok : whether the whole run succeeded.
    pool : the run-log record of its pool (``"pool": true``), if any; its tasks count as the stage's.
    """
    if record is not None:
        if record.get("status") != "ok":
            return "failed"
        where = "ran"
        if pool is not None and pool.get("status") == "ok":
            record, where = pool, "ran in pool"
        tasks, hits = record.get("tasks"), record.get("cache_hits")
        if isinstance(tasks, int) and isinstance(hits, int) and tasks:
            if hits == tasks:
                return "cached"
            return f"{where} ({hits} of {tasks} tasks cached)" if hits else where
        return where
    if stale is False or (stale is None and run_ok):
        return "up to date"
    return "not run"


def format_seconds(seconds: float) -> str:
    """``"4.2 s"`` under a minute, else ``"3 min 07 s"`` (or ``"1 h 02 min"``)."""
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, secs = divmod(int(round(seconds)), 60)
    if minutes < 60:
        return f"{minutes} min {secs:02d} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min"


def render_summary(metrics_root: str | Path, datasets: Sequence[str], stages: Sequence[str],
                   runs: Sequence[Mapping[str, Any]], *, stale: set[str] | None = None,
                   run_ok: bool = True, wall_s: float | None = None) -> str:
    """The summary table printed at the end of ``recourselab repro``.

    Parameters
    ----------
    metrics_root : ``data/metrics`` of the project.
    datasets : the pipeline's datasets, in order; datasets met only in ``runs`` follow them.
    stages : stage names in pipeline order.
    runs : run-log records (:func:`read_run_log`); for a stage run twice, the last counts (pool records
        apart, see :func:`stage_outcome`). The wall time is the stage's own, its pool's not included.
    stale : ``<stage>@<dataset>`` names DVC reported changed before the run (None: unknown).
    run_ok : whether the run succeeded (a stage without a record then was up to date).
    wall_s : wall time of the whole run, printed last when given.

    Returns
    -------
    str
        One block per dataset: headline results, then one row per stage (outcome, wall time).
    """
    latest = {(r["stage"], r["dataset"]): r for r in runs if not r.get("pool")}
    pools = {(r["stage"], r["dataset"]): r for r in runs if r.get("pool")}
    names = list(dict.fromkeys([*datasets, *(r["dataset"] for r in runs)]))
    width = max([len(s) for s in stages] + [len(k) for k in headline(Path(metrics_root) / "-")])
    blocks = []
    for dataset in names:
        lines = [f"== {dataset}"]
        for key, value in headline(Path(metrics_root) / dataset).items():
            lines.append(f"  {key:<{width}}  {value}")
        lines.append(f"  {'stage':<{width}}  {'outcome':<34}wall time")
        for stage in stages:
            record = latest.get((stage, dataset))
            is_stale = None if stale is None else f"{stage}@{dataset}" in stale
            outcome = stage_outcome(record, stale=is_stale, run_ok=run_ok, pool=pools.get((stage, dataset)))
            wall = _number(record.get("wall_s")) if record else None
            lines.append(f"  {stage:<{width}}  {outcome:<34}{format_seconds(wall) if wall is not None else '-'}")
        blocks.append("\n".join(lines))
    text = "\n\n".join(blocks)
    if wall_s is not None:
        text += f"\n\nrun wall time: {format_seconds(wall_s)}"
    return text + "\n"
