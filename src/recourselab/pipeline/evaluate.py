"""The ``evaluate`` stage's library part: every recourse method on one seed's query set, scored alike.

Per (dataset, seed): the query set is ``generate``'s (test rows that every member classifies
correctly, capped at ``generate.max_queries``, drawn with the seed; the target is the other
class). Each method of the plan runs on those rows against the same ensemble; its search
queries are read from the oracle's counters, its counterfactuals are verified once (budget
:data:`EVAL_BUDGET`, not a search query) and scored by :mod:`recourselab.metrics.recourse`.

Methods come from the baselines' registry (``recourselab.methods.registry.METHODS``, name ->
class or factory, built from the keyword arguments its signature asks for: ``oracle``,
``X_train``, ``y_train``, ``schema``, ``seed``) and the two DensityFlow entries of this module:
``densityflow`` (the distilled flow as published) and ``densityflow_r``
(:class:`~recourselab.methods.robust.RobustFlow`). Both add the flow's distillation queries to
their search queries.
"""

from __future__ import annotations

import inspect
import json
import logging
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from recourselab.data.schema import Schema
from recourselab.errors import ConfigError, DataError
from recourselab.io import write_json, write_parquet
from recourselab.methods.robust import RobustFlow
from recourselab.metrics.recourse import (
    ROW_COLUMNS,
    RecourseScore,
    rows_frame,
    score_counterfactuals,
    summarize_scores,
)
from recourselab.metrics.robustness import query_set
from recourselab.models.oracle import BlackBox
from recourselab.models.verdict import verify
from recourselab.report.frontier import frontier_check, frontier_figure, methods_markdown

log = logging.getLogger(__name__)

#: Oracle budget of the verification after each method (not counted as the method's queries).
EVAL_BUDGET = "evaluation"
#: Methods that need the distilled flow.
FLOW_METHODS = ("densityflow", "densityflow_r")
#: Keyword arguments a registered method's constructor may ask for, and where they come from.
CONTEXT_ARGS = ("oracle", "X_train", "y_train", "schema", "seed")


@dataclass(frozen=True)
class MethodRun:
    """One method at one setting: ``kwargs`` for its constructor, ``budget`` for ``explain``."""

    method: str
    setting: str
    kwargs: dict[str, Any] = field(default_factory=dict)
    budget: int | None = None


@dataclass(frozen=True)
class SeedInputs:
    """What every method of one (dataset, seed) shares.

    Attributes
    ----------
    schema, oracle : the dataset's schema and the ensemble.
    X_train, y_train : (m, d) encoded training rows and (m,) labels.
    factuals, target : (n, d) query rows and (n,) their target classes.
    rows : (n,) positions of the query rows in the test split.
    flow : the distilled DensityFlow, or None (the flow methods are then left out).
    """

    dataset: str
    seed: int
    schema: Schema
    oracle: BlackBox
    X_train: np.ndarray
    y_train: np.ndarray
    factuals: np.ndarray
    target: np.ndarray
    rows: np.ndarray
    flow: Any = None


@dataclass(frozen=True)
class SeedEvaluation:
    """Scores (one per run) and per-row results (:data:`~recourselab.metrics.recourse.ROW_COLUMNS`) of one seed."""

    scores: list[RecourseScore]
    rows: pd.DataFrame


def registered_methods() -> dict[str, Any]:
    """Method name -> class or factory: the baselines' registry and the two DensityFlow entries."""
    try:
        from recourselab.methods.registry import METHODS
    except ImportError:  # the baselines' registry is not installed: the flow methods alone
        log.warning("no baseline registry (recourselab.methods.registry); only the DensityFlow methods run")
        METHODS = {}
    return {**dict(METHODS), "densityflow": None, "densityflow_r": RobustFlow}


def plan(section: Mapping[str, Any], available: Sequence[str]) -> list[MethodRun]:
    """The runs of the ``evaluate`` section: each available method not excluded, at its configured settings
    (``{"default": {}}`` where none are given). An excluded name that is not registered is logged.

    Raises
    ------
    ConfigError
        A configured method that is neither available nor excluded (the valid names are listed).
    """
    configured = dict(section.get("methods", {}))
    excluded = set(section.get("exclude", []))
    unknown = sorted(set(configured) - set(available) - excluded)
    if unknown:
        raise ConfigError(f"evaluate: unknown methods {unknown}; registered methods: {', '.join(sorted(available))}")
    absent = sorted(excluded - set(available))
    if absent:  # an optional method (e.g. DiCE without its extra) may be excluded without being installed
        log.warning("evaluate: excluded methods %s are not registered; registered methods: %s", absent,
                    ", ".join(sorted(available)))
    runs = []
    for method in [*(m for m in configured if m not in excluded),
                   *(m for m in available if m not in configured and m not in excluded)]:
        for setting, kw in configured.get(method, {"default": {}}).items():
            kw = dict(kw)
            budget = kw.pop("budget", None)
            runs.append(MethodRun(method, setting, kw, budget))
    return runs


def build(run: MethodRun, factory: Any, inputs: SeedInputs) -> Any:
    """The method object of ``run``: ``factory`` called with the context arguments it asks for and ``run.kwargs``.

    Raises
    ------
    ConfigError
        A keyword in ``run.kwargs`` that the method does not take (its valid keywords are listed).
    """
    if run.method == "densityflow":
        if run.kwargs:
            raise ConfigError(f"evaluate: densityflow/{run.setting} takes no keywords (it is the distilled flow as "
                              f"published), got {sorted(run.kwargs)}")
        return inputs.flow
    context = {"oracle": inputs.oracle, "X_train": inputs.X_train, "y_train": inputs.y_train,
               "schema": inputs.schema, "seed": inputs.seed}
    if run.method == "densityflow_r":
        return RobustFlow(inputs.flow, inputs.oracle, inputs.X_train, inputs.y_train, schema=inputs.schema,
                          **run.kwargs)
    params = inspect.signature(factory).parameters
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    bad = sorted(k for k in run.kwargs if k not in params and not takes_any)
    if bad or set(run.kwargs) & set(CONTEXT_ARGS):
        valid = sorted(k for k in params if k not in CONTEXT_ARGS and k != "self")
        named = sorted(bad) or sorted(run.kwargs)
        raise ConfigError(f"evaluate: {run.method}/{run.setting}: unknown keywords {named}; "
                          f"valid: {', '.join(valid)} (and budget)")
    args = {k: v for k, v in context.items() if k in params}
    return factory(**args, **run.kwargs)


def _search_rows(before: Mapping[str, int], after: Mapping[str, int]) -> int:
    return sum(v - before.get(k, 0) for k, v in after.items() if k != EVAL_BUDGET)


def run_one(run: MethodRun, factory: Any, inputs: SeedInputs, *, plausibility: bool = True
            ) -> tuple[RecourseScore, pd.DataFrame]:
    """Run one method on the seed's query rows, verify and score it.

    The method's queries are the oracle rows its search sent (read from the oracle's counters),
    plus the flow's distillation rows for the flow methods.
    """
    method = build(run, factory, inputs)
    before = inputs.oracle.queries
    cf = method.explain(inputs.factuals, inputs.target, budget=run.budget)
    searched = _search_rows(before, inputs.oracle.queries)
    if searched != cf.queries:
        log.warning("%s/%s reports %d search queries, the oracle counted %d; the table uses the oracle's count",
                    run.method, run.setting, cf.queries, searched)
    upstream = int(getattr(inputs.flow, "queries_used_", 0)) if run.method in FLOW_METHODS else 0
    verdict = verify(inputs.oracle, cf.counterfactuals, inputs.target, budget_name=EVAL_BUDGET)
    score = score_counterfactuals(cf, verdict, immutable=inputs.schema.immutable_mask(),
                                  monotone=inputs.schema.monotone_signs(), setting=run.setting,
                                  seed=inputs.seed, X_train=inputs.X_train if plausibility else None,
                                  y_train=inputs.y_train if plausibility else None, queries=searched + upstream)
    log.info("%s %s/%s seed %d: unanimous %.3f, mean %.3f, L2 %.3f, queries %d, %.1f s", inputs.dataset, run.method,
             run.setting, inputs.seed, score.validity_unanimous, score.validity_mean, score.cost_l2, score.queries,
             score.wall_time_s)
    return score, rows_frame(cf, verdict, setting=run.setting, seed=inputs.seed)


def evaluate_seed(inputs: SeedInputs, runs: Sequence[MethodRun], methods: Mapping[str, Any], *,
                  plausibility: bool = True, progress: Callable[[Any], Any] | None = None) -> SeedEvaluation:
    """Every run of ``runs`` on one seed (flow methods left out, with a warning, when ``inputs.flow`` is None)."""
    todo = [r for r in runs if inputs.flow is not None or r.method not in FLOW_METHODS]
    if len(todo) < len(runs):
        log.warning("%s seed %d: no distilled flow; %s left out", inputs.dataset, inputs.seed,
                    ", ".join(sorted({r.method for r in runs if r not in todo})))
    if not todo:
        raise DataError(f"{inputs.dataset} seed {inputs.seed}: no method to evaluate")
    scores, frames = [], []
    for run in (progress(todo) if progress is not None else todo):
        score, frame = run_one(run, methods[run.method], inputs, plausibility=plausibility)
        scores.append(score)
        frames.append(frame)
    return SeedEvaluation(scores, pd.concat(frames, ignore_index=True))


def query_rows(oracle: BlackBox, X_test: np.ndarray, y_test: np.ndarray, cap: int, seed: int,
               max_rows: int | None = None) -> np.ndarray:
    """``generate``'s query set: test rows every member classifies correctly, at most ``cap``, drawn with ``seed``
    (the first ``max_rows`` of them when set). One query of the test rows under :data:`EVAL_BUDGET`."""
    q = query_set(oracle.query(X_test, budget=EVAL_BUDGET), y_test, cap, seed=seed)
    return q if max_rows is None else q[:max_rows]


# ---------------------------------------------------------------------- per-dataset outputs
def score_to_json(score: RecourseScore) -> dict[str, Any]:
    """A score as a JSON-safe dict (:func:`score_from_json` reads it back)."""
    return {**score.row(), "validity_per_model": score.validity_per_model}


def score_from_json(d: Mapping[str, Any]) -> RecourseScore:
    keys = {f for f in RecourseScore.__dataclass_fields__ if f != "extra"}
    return RecourseScore(**{k: d[k] for k in keys})


def methods_table(dataset: str, seeds: Sequence[int], scores: Sequence[RecourseScore]) -> dict[str, Any]:
    """``methods.json``: ``{"dataset", "seeds", "methods": [...]}``, one entry per (method, setting), mean and
    ``_std`` over seeds."""
    return {"dataset": dataset, "seeds": [int(s) for s in seeds], "methods": summarize_scores(scores)}


def _json_safe(table: dict[str, Any]) -> dict[str, Any]:
    """NaN (a value not defined) as null, so that the file is strict JSON."""
    def clean(v: Any) -> Any:
        if isinstance(v, float) and math.isnan(v):
            return None
        if isinstance(v, dict):
            return {k: clean(x) for k, x in v.items()}
        if isinstance(v, list):
            return [clean(x) for x in v]
        return v
    return clean(table)


def write_dataset_outputs(out_dir: str | Path, dataset: str, seeds: Sequence[int], scores: Sequence[RecourseScore],
                          rows: pd.DataFrame, *, own: str, own_setting: str) -> dict[str, Any]:
    """Write ``methods.json``, ``methods.md``, ``rows.parquet``, ``frontier.json`` and ``frontier.png`` into
    ``out_dir``; return the methods table."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    table = methods_table(dataset, seeds, scores)
    write_json(out_dir / "methods.json", _json_safe(table))
    md = methods_markdown(table["methods"], title=f"{dataset}, seeds {', '.join(map(str, seeds))}")
    check = None
    if any(e["method"] == own and e["setting"] == own_setting for e in table["methods"]):
        check = frontier_check(table["methods"], own, own_setting, own=("densityflow",))
        verdict = ("dominated by " + ", ".join(check["dominated_by"])) if check["dominated"] else "not dominated"
        md += f"\n{own}/{own_setting} on the frontier (unanimous validity, L2, queries): {verdict}.\n"
    (out_dir / "methods.md").write_text(md)
    write_json(out_dir / "frontier.json", {"method": own, "setting": own_setting, "check": check})
    write_parquet(out_dir / "rows.parquet", rows[list(ROW_COLUMNS)].reset_index(drop=True),
                  {"dataset": dataset, "stage": "evaluate"})
    frontier_figure(table["methods"], out_dir / "frontier.png", title=dataset)
    return table


def read_seed(seed_dir: str | Path) -> SeedEvaluation:
    """A seed's ``scores.json`` and ``rows.parquet`` (written by the evaluate task)."""
    seed_dir = Path(seed_dir)
    data = json.loads((seed_dir / "scores.json").read_text())
    return SeedEvaluation([score_from_json(d) for d in data], pd.read_parquet(seed_dir / "rows.parquet"))


__all__ = ["EVAL_BUDGET", "FLOW_METHODS", "MethodRun", "SeedEvaluation", "SeedInputs", "build", "evaluate_seed",
           "methods_table", "plan", "query_rows", "read_seed", "registered_methods", "run_one", "score_from_json",
           "score_to_json", "write_dataset_outputs"]
