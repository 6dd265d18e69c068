"""The evaluate runner on tiny moons: the plan, one score per run, exact query counts, the dataset outputs."""

from __future__ import annotations

import json
import time
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
from sklearn.ensemble import RandomForestClassifier
from sklearn.neighbors import KNeighborsClassifier

from recourselab.errors import ConfigError
from recourselab.methods.base import Counterfactuals
from recourselab.metrics.recourse import ROW_COLUMNS, TABLE_KEYS
from recourselab.models.oracle import BlackBox
from recourselab.pipeline.evaluate import (
    MethodRun,
    SeedInputs,
    build,
    evaluate_seed,
    plan,
    query_rows,
    write_dataset_outputs,
)


class Shift:
    """A toy method: every row moves ``step`` along x0 towards class 1; queries the oracle ``probe`` rows."""

    name = "shift"

    def __init__(self, oracle, schema, step: float = 1.0, probe: int = 3) -> None:
        self.oracle, self.schema, self.step, self.probe = oracle, schema, step, probe

    def explain(self, factuals, target=None, *, budget=None):
        t0 = time.perf_counter()
        self.oracle.query(factuals[:self.probe], budget="search")
        cf = factuals + np.array([self.step, -self.step])
        return Counterfactuals(method=self.name, factuals=factuals, counterfactuals=cf, counterfactuals_original=None,
                               target=np.asarray(target), queries=self.probe, wall_time=time.perf_counter() - t0)


class StubFlow:
    """Stands in for the distilled flow: ``generate``/``explain`` move rows to the nearest training row of their
    target class, halfway; ``queries_used_`` are its distillation rows."""

    queries_used_ = 40

    def __init__(self, X, y) -> None:
        self.X, self.y = X, y

    def _move(self, X, tgt):
        near = np.array([self.X[self.y == t][np.linalg.norm(self.X[self.y == t] - x, axis=1).argmin()]
                         for x, t in zip(X, tgt, strict=True)])
        return X + 0.5 * (near - X)

    def generate(self, X, target):
        return SimpleNamespace(counterfactuals=self._move(X, np.asarray(target)))

    def explain(self, X, target=None, *, budget=None):
        return Counterfactuals(method="densityflow", factuals=X, counterfactuals=self._move(X, np.asarray(target)),
                               counterfactuals_original=None, target=np.asarray(target), queries=0, wall_time=0.0)


@pytest.fixture(scope="module")
def inputs():
    from recourselab.config import parse_params
    from recourselab.data import load_dataset, prepare_splits

    splits = prepare_splits(load_dataset("moons", parse_params({"prepare": {"n_synthetic": 400}})), 0,
                            (0.6, 0.2, 0.2))
    X, y = splits.arrays("train")
    Xt, yt = splits.arrays("test")
    box = BlackBox({"knn": KNeighborsClassifier(9).fit(X, y),
                    "rf": RandomForestClassifier(20, max_depth=5, random_state=0).fit(X, y)}, schema=splits.schema)
    q = query_rows(box, Xt, yt, cap=30, seed=0)
    return SeedInputs(dataset="moons", seed=0, schema=splits.schema, oracle=box, X_train=X, y_train=y,
                      factuals=Xt[q], target=1 - yt[q], rows=q, flow=StubFlow(X, y))


METHODS = {"shift": Shift, "densityflow": None, "densityflow_r": None}
SECTION = {"methods": {"shift": {"small": {"step": 0.5}, "large": {"step": 2.0, "budget": 10}},
                       "densityflow_r": {"default": {"settings": "default"}, "paper": {"settings": "paper"}}},
           "exclude": []}


def test_plan_runs_configured_settings_then_unconfigured_methods_at_defaults():
    runs = plan(SECTION, list(METHODS))
    assert [(r.method, r.setting, r.budget) for r in runs] == [
        ("shift", "small", None), ("shift", "large", 10), ("densityflow_r", "default", None),
        ("densityflow_r", "paper", None), ("densityflow", "default", None)]
    assert runs[1].kwargs == {"step": 2.0}
    assert [r.method for r in plan({**SECTION, "exclude": ["shift"]}, list(METHODS))] == [
        "densityflow_r", "densityflow_r", "densityflow"]
    with pytest.raises(ConfigError, match="unknown methods \\['nearst'\\]; registered methods: densityflow"):
        plan({"methods": {"nearst": {"a": {}}}}, list(METHODS))
    assert len(plan({"exclude": ["dice"], "methods": {"dice": {"a": {}}}}, list(METHODS))) == 3


def test_unknown_keywords_are_named_with_the_valid_ones(inputs):
    with pytest.raises(ConfigError, match="unknown keywords \\['stpe'\\]; valid: probe, step"):
        build(MethodRun("shift", "x", {"stpe": 1.0}), Shift, inputs)


def test_every_run_is_scored_with_exact_queries(inputs):
    box = inputs.oracle
    runs = plan(SECTION, list(METHODS))
    ev = evaluate_seed(inputs, runs, METHODS, plausibility=False)
    got = {(s.method, s.setting): s for s in ev.scores}
    assert len(ev.scores) == len(runs) == len(got)
    assert got[("shift", "small")].queries == 3
    assert got[("densityflow", "default")].queries == 40              # the distillation rows
    assert got[("densityflow_r", "paper")].queries == 40
    r = got[("densityflow_r", "default")]
    assert r.queries > 40 + len(inputs.factuals) and r.validity_unanimous >= 0.9
    assert all(s.immutable_violations == 0 for s in ev.scores)
    assert tuple(ev.rows.columns) == ROW_COLUMNS and len(ev.rows) == len(runs) * len(inputs.factuals)
    assert box.used("search") == sum(s.queries for s in ev.scores) - 3 * 40


def test_dataset_outputs_have_one_row_per_run_and_no_missing_cell(inputs, tmp_path):
    runs = plan(SECTION, list(METHODS))
    seeds = [evaluate_seed(inputs, runs, METHODS), evaluate_seed(inputs, runs, METHODS)]
    scores = [s for ev in seeds for s in ev.scores]
    rows = pd.concat([ev.rows for ev in seeds])
    write_dataset_outputs(tmp_path, "moons", [0, 1], scores, rows, own="densityflow_r", own_setting="default")
    table = json.loads((tmp_path / "methods.json").read_text())
    assert set(table) == {"dataset", "seeds", "methods"} and table["seeds"] == [0, 1]
    assert [(e["method"], e["setting"]) for e in table["methods"]] == [(r.method, r.setting) for r in runs]
    for entry in table["methods"]:
        for k in TABLE_KEYS:
            assert entry[k] is not None and entry[f"{k}_std"] is not None, (entry["method"], k)
    md = (tmp_path / "methods.md").read_text()
    assert sum(line.startswith("| ") for line in md.splitlines()) == 1 + len(runs) and "n/a" not in md
    check = json.loads((tmp_path / "frontier.json").read_text())["check"]
    assert set(check) == {"point", "dominated", "dominated_by"}
    assert (tmp_path / "frontier.png").stat().st_size > 0
    assert len(pd.read_parquet(tmp_path / "rows.parquet")) == 2 * len(runs) * len(inputs.factuals)
