"""The frontier check on constructed points, the methods table and the frontier figure."""

from __future__ import annotations

import math

import pytest

from recourselab.errors import DataError
from recourselab.metrics.recourse import TABLE_KEYS
from recourselab.report.frontier import (
    MD_COLUMNS,
    FrontierPoint,
    dominated_by,
    dominates,
    frontier_check,
    frontier_figure,
    methods_markdown,
)


def P(v, c, q, name="b"):
    return FrontierPoint(method=name, setting="s", validity=v, cost=c, queries=q)


def test_a_cheaper_more_valid_baseline_at_fewer_queries_dominates():
    mine = P(0.90, 1.5, 1000, "mine")
    assert dominates(P(0.95, 1.4, 500), mine)
    assert dominates(P(0.90, 1.4, 1000), mine)          # equal validity and queries, strictly cheaper
    assert dominates(P(0.95, 1.5, 1000), mine)          # equal cost, strictly more valid


def test_points_that_do_not_dominate():
    mine = P(0.90, 1.5, 1000, "mine")
    assert not dominates(P(0.95, 1.4, 1001), mine)      # more queries
    assert not dominates(P(0.99, 1.6, 10), mine)        # costlier
    assert not dominates(P(0.85, 1.0, 10), mine)        # less valid
    assert not dominates(P(0.90, 1.5, 1000), mine)      # equal: not strictly better
    assert not dominates(mine, mine)
    assert not dominates(P(math.nan, 1.0, 0), mine) and not dominates(P(1.0, 1.0, 0), P(math.nan, 2, 5))
    assert dominates(P(0.905, 1.5, 1000), mine) and not dominates(P(0.905, 1.5, 1000), mine, tol=0.01)


def test_dominated_by_lists_exactly_the_dominating_baselines():
    mine = P(0.9, 1.5, 1000, "mine")
    a, b, c = P(0.95, 1.4, 500, "a"), P(0.99, 1.6, 10, "b"), P(0.9, 1.2, 1000, "c")
    assert dominated_by(mine, [a, b, c]) == [a, c]
    assert dominated_by(mine, [b]) == []


def _entry(method, setting, v, c, q):
    e = {"method": method, "setting": setting, **{k: 0.5 for k in TABLE_KEYS}, **{f"{k}_std": 0.0 for k in TABLE_KEYS}}
    return e | {"validity_unanimous": v, "cost_l2": c, "queries": q}


TABLE = [_entry("mine", "default", 0.97, 1.4, 2000), _entry("mine", "paper", 0.5, 1.2, 0),
         _entry("nearest", "full", 1.0, 1.65, 3700), _entry("nearest", "480", 0.96, 1.9, 480),
         _entry("wachter", "0.5", 0.35, 1.3, 0)]


def test_frontier_check_compares_with_baselines_only():
    out = frontier_check(TABLE, "mine", "default")
    assert out == {"point": {"validity_unanimous": 0.97, "cost_l2": 1.4, "queries": 2000.0}, "dominated": False,
                   "dominated_by": []}
    worse = [*TABLE, _entry("cheap", "x", 0.98, 1.3, 1500)]
    assert frontier_check(worse, "mine", "default")["dominated_by"] == ["cheap/x"]
    # the method's own settings are not its rivals
    assert not frontier_check([*TABLE, _entry("mine", "better", 1.0, 1.0, 1)], "mine", "default")["dominated"]
    with pytest.raises(DataError, match="no entry mine/absent"):
        frontier_check(TABLE, "mine", "absent")
    with pytest.raises(DataError, match="two entries"):
        frontier_check([*TABLE, TABLE[0]], "mine", "default")


def test_markdown_table_has_one_row_per_entry_and_no_missing_cell():
    md = methods_markdown(TABLE, title="compas")
    lines = [ln for ln in md.splitlines() if ln.startswith("| ") and "---" not in ln]
    assert len(lines) == 1 + len(TABLE)
    n_cols = 2 + len(MD_COLUMNS)
    for ln in lines:
        cells = [c.strip() for c in ln.strip().strip("|").split("|")]
        assert len(cells) == n_cols and all(cells)
    assert "0.970 ± 0.000" in md


def test_frontier_figure_is_written(tmp_path):
    path = frontier_figure(TABLE, tmp_path / "frontier.png", title="compas")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(DataError):
        frontier_figure([], tmp_path / "empty.png")
