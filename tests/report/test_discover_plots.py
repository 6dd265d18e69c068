"""DISCOVER figures: every file written, non-empty PNG, atomic, feature ranking, bad input."""

from __future__ import annotations

import dataclasses
import warnings

import numpy as np
import pandas as pd
import pytest
from sklearn.linear_model import LogisticRegression

from recourselab.data.schema import Schema
from recourselab.discover import Discover, make_target
from recourselab.errors import DataError
from recourselab.models.oracle import BlackBox
from recourselab.report.discover_plots import (
    FIGURES,
    discover_figures,
    feature_changes,
    most_changed_features,
    plot_feature_cdfs,
    plot_row_scores,
    plot_shift,
    plot_trajectory,
    write_discover_figures,
)

PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def run():
    """A short DISCOVER run on 30 rows of a mixed-type toy set (numerical, integer, categorical, immutable)."""
    rng = np.random.default_rng(0)
    n = 300
    df = pd.DataFrame({"income": rng.normal(50.0, 10.0, n), "age": rng.integers(18, 70, n),
                       "job": rng.choice(["a", "b", "c"], n), "sex": rng.choice(["f", "m"], n)})
    logit = 0.1 * (df.income - 50) + 0.03 * (df.age - 40) + 1.0 * (df.job == "c")
    df["y"] = (rng.random(n) < 1 / (1 + np.exp(-logit))).astype(int)
    schema = Schema.fit(df, dataset="toy", target="y", favourable=1, categorical=["job", "sex"], integer=["age"],
                        immutable=["sex"])
    X = schema.transform(df)
    model = LogisticRegression(max_iter=500).fit(X, df["y"].to_numpy())
    factuals = X[np.sort(np.argsort(model.predict_proba(X)[:, 1])[:30])]
    solver = Discover(BlackBox({"lr": model}, schema=schema), schema=schema, max_iter=8, metric_projections=100)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = solver.solve(factuals, make_target("beta", seed=0))
    return schema, result


def _assert_png(path):
    data = path.read_bytes()
    assert data[:8] == PNG and len(data) > 2000


def test_every_figure_is_written_non_empty_and_atomically(run, tmp_path):
    schema, result = run
    paths = write_discover_figures(result, schema, tmp_path / "figs", title="toy / lr / seed=0")
    assert [p.name for p in paths] == list(FIGURES)
    for p in paths:
        _assert_png(p)
    assert sorted(p.name for p in (tmp_path / "figs").iterdir()) == sorted(FIGURES)  # no temporary files left


def test_without_row_scores_there_is_no_heatmap(run, tmp_path):
    schema, result = run
    writers = discover_figures(dataclasses.replace(result, row_scores=None), schema)
    assert set(writers) == set(FIGURES) - {"row_scores.png"}


def test_feature_ranking_follows_the_mean_change(run):
    schema, result = run
    changes = feature_changes(result.factuals, result.counterfactuals, schema)
    assert list(changes.index) != [] and set(changes.index) == set(schema.feature_names)
    assert (np.diff(changes.to_numpy()) <= 0).all()
    assert changes["sex"] == 0.0  # immutable: never edited
    assert most_changed_features(result.factuals, result.counterfactuals, schema, 2) == list(changes.index[:2])
    moved = result.factuals.copy()
    moved[:, schema.slices()["age"]] += 1.0
    assert most_changed_features(result.factuals, moved, schema, 1) == ["age"]


def test_explicit_features_categorical_and_single_feature(run, tmp_path):
    schema, result = run
    _assert_png(plot_feature_cdfs(tmp_path / "cat.png", result.factuals, result.counterfactuals, schema,
                                  features=["job", "sex"]))
    _assert_png(plot_shift(tmp_path / "shift_cat.png", result.factuals, result.counterfactuals, schema,
                           features=["income", "job"]))
    _assert_png(plot_shift(tmp_path / "shift_one.png", result.factuals, result.counterfactuals, schema,
                           features=["income"]))
    with pytest.raises(DataError, match=r"unknown features \['salary'\]"):
        plot_feature_cdfs(tmp_path / "bad.png", result.factuals, result.counterfactuals, schema, features=["salary"])


def test_row_score_heatmap_caps_rows_and_rejects_bad_shapes(run, tmp_path):
    _, result = run
    _assert_png(plot_row_scores(tmp_path / "q.png", result.row_scores, selected=result.log["rows"].tolist(),
                                accepted=result.log["accepted"].tolist(), max_rows=10))
    with pytest.raises(DataError, match="non-empty"):
        plot_row_scores(tmp_path / "empty.png", np.zeros((0, 3)))
    assert not (tmp_path / "empty.png").exists()


def test_mismatched_inputs_fail_before_writing(run, tmp_path):
    schema, result = run
    with pytest.raises(DataError, match="must both be encoded rows"):
        plot_shift(tmp_path / "s.png", result.factuals, result.counterfactuals[:5], schema)
    assert not list(tmp_path.iterdir())


def test_trajectory_marks_the_first_certified_iterate_and_rejects_bad_logs(run, tmp_path):
    _, result = run
    m = result.metrics
    _assert_png(plot_trajectory(tmp_path / "t.png", result.log, U_x=m["U_x"], U_y=m["U_y"],
                                returned=result.iteration))
    with pytest.raises(DataError, match=r"missing \['UCL_y'\]"):
        plot_trajectory(tmp_path / "bad.png", result.log.drop(columns=["UCL_y"]), U_x=1.0, U_y=1.0)
    with pytest.raises(DataError, match="thresholds must be positive"):
        plot_trajectory(tmp_path / "bad.png", result.log, U_x=0.0, U_y=1.0)
    assert not (tmp_path / "bad.png").exists()


@pytest.fixture()
def drawn(capture_figures):
    """Figures handed to the writer, kept for inspection (the file is still written)."""
    from recourselab.report import discover_plots

    return capture_figures(discover_plots)


def test_heatmap_draws_the_rows_with_the_largest_total_score(run, tmp_path, drawn):
    _, result = run
    q = result.row_scores
    plot_row_scores(tmp_path / "q.png", q, selected=result.log["rows"].tolist(), max_rows=10)
    image = drawn[-1].axes[0].images[0].get_array()
    top = np.sort(np.argsort(-q.sum(axis=0), kind="stable")[:10])
    assert image.shape == (10, len(q))
    np.testing.assert_array_equal(np.asarray(image), q[:, top].T)


def test_heatmap_ticks_name_the_drawn_rows(tmp_path, drawn):
    q = np.zeros((5, 300))
    q[:, 200:] = 1.0 + np.arange(100)  # only rows 200-299 score: they are the 100 drawn
    plot_row_scores(tmp_path / "q.png", q, max_rows=100)
    ax = drawn[-1].axes[0]
    labels = [int(lab.get_text()) for lab in ax.get_yticklabels()]
    positions = ax.get_yticks()
    assert 10 <= len(labels) <= 34 and labels[0] == 200 and all(lab >= 200 for lab in labels)
    np.testing.assert_array_equal(np.asarray(labels) - 200, positions)  # position i shows row 200 + i


def test_trajectory_lines_sit_at_the_first_certified_and_returned_iterates(run, tmp_path, drawn):
    _, result = run
    log = result.log.copy()
    log["feasible"] = log["iteration"] >= 3  # certified from iteration 3 on (edited rows there)
    log.loc[log["iteration"] < 3, "edited_rows"] = 0
    log.loc[log["iteration"] >= 3, "edited_rows"] = 2
    plot_trajectory(tmp_path / "t.png", log, U_x=1.0, U_y=1.0, returned=5)
    top = drawn[-1].axes[0]
    lines = {ln.get_label(): ln.get_xdata()[0] for ln in top.lines if ln.get_label() in ("first certified", "returned")}
    assert lines == {"first certified": 3.0, "returned": 5.0}


def test_trajectory_divides_each_iterations_ucl_by_its_own_threshold(run, tmp_path, drawn):
    _, result = run
    log = result.log.copy()
    log["U_x"] = np.linspace(1.0, 3.0, len(log))  # recalibrated per iteration (resample_directions)
    plot_trajectory(tmp_path / "t.png", log, U_x=99.0, U_y=2.0)
    cert = {ln.get_label(): ln.get_ydata() for ln in drawn[-1].axes[1].lines}
    np.testing.assert_allclose(cert["UCL_x / U_x"], log["UCL_x"] / log["U_x"])
    np.testing.assert_allclose(cert["UCL_y / U_y"], log["UCL_y"] / 2.0)
    plot_trajectory(tmp_path / "t2.png", log.drop(columns=["U_x"]), U_x=4.0, U_y=2.0)  # a log without the column
    cert = {ln.get_label(): ln.get_ydata() for ln in drawn[-1].axes[1].lines}
    np.testing.assert_allclose(cert["UCL_x / U_x"], log["UCL_x"] / 4.0)


def _categorical_schema():
    rng = np.random.default_rng(1)
    n = 400
    df = pd.DataFrame({"num": rng.normal(0.0, 1.0, n), "a40": rng.choice([f"L{i:02d}" for i in range(40)], n),
                       "b4": rng.choice(["w", "x", "y", "z"], n)})
    df["y"] = rng.integers(0, 2, n)
    schema = Schema.fit(df, dataset="toy", target="y", favourable=1, categorical=["a40", "b4"])
    return schema, df


def test_a_categorical_change_counts_the_rows_whose_level_changed():
    # Every row moves a40 to the next of its 40 levels (a short step on the phase circle); ten rows
    # jump b4 to the opposite level. The ranking used to follow the phase distance: b4 first.
    schema, df = _categorical_schema()
    rows = df.head(100).copy()
    X = schema.transform(rows)
    moved = rows.copy()
    levels = schema.features[schema.feature_names.index("a40")].levels
    moved["a40"] = [levels[(levels.index(v) + 1) % 40] for v in rows["a40"]]
    opposite = {"w": "y", "x": "z", "y": "w", "z": "x"}
    moved.loc[moved.index[:10], "b4"] = [opposite[v] for v in rows["b4"].iloc[:10]]
    changes = feature_changes(X, schema.transform(moved), schema)
    assert changes["a40"] == 1.0 and changes["b4"] == pytest.approx(0.1) and changes["num"] == 0.0
    assert list(changes.index) == ["a40", "b4", "num"]


def test_shift_axes_follow_the_schema_order_and_categorical_jitter_differs_per_axis(tmp_path, drawn):
    schema, df = _categorical_schema()
    rows = df.head(60).copy()
    X = schema.transform(rows)
    moved = rows.copy()
    moved["b4"] = "w"  # b4 changes most, then num: the axes are still (num, b4), in schema order
    moved["num"] += 0.5
    plot_shift(tmp_path / "s.png", X, schema.transform(moved), schema)
    ax = drawn[-1].axes[0]
    assert (ax.get_xlabel(), ax.get_ylabel()) == ("num", "b4")
    plot_shift(tmp_path / "c.png", X, X, schema, features=["a40", "b4"])
    xy = drawn[-1].axes[0].collections[0].get_offsets()  # the unedited rows: level + jitter on both axes
    jitter_x, jitter_y = xy[:, 0] - np.round(xy[:, 0]), xy[:, 1] - np.round(xy[:, 1])
    assert not np.allclose(jitter_x, jitter_y)  # not all on one diagonal per cell


def test_dollar_signs_in_names_are_text_and_a_failing_figure_leaves_a_note(run, tmp_path, caplog):
    schema, df = _categorical_schema()
    dollars = df.assign(b4=df["b4"].map({"w": "$0-$25k", "x": "a$^$b", "y": "${x$", "z": "z"}))
    s2 = Schema.fit(dollars, dataset="toy", target="y", favourable=1, categorical=["a40", "b4"])
    X = s2.transform(dollars.head(30))
    _assert_png(plot_feature_cdfs(tmp_path / "d.png", X, X, s2, features=["b4"]))  # was a mathtext ValueError
    _, result = run

    def broken(*args, **kwargs):
        raise ValueError("no room to draw")

    import recourselab.report.discover_plots as dp

    original = dp.plot_shift
    dp.plot_shift = broken
    try:
        writers = discover_figures(result, schema)
        path = writers["shift.png"](tmp_path / "shift.png")
    finally:
        dp.plot_shift = original
    _assert_png(path)
    assert "figure shift.png could not be drawn (ValueError: no room to draw)" in caplog.text


def test_a_single_iteration_trajectory_is_drawn_as_points(run, tmp_path, drawn):
    _, result = run
    plot_trajectory(tmp_path / "one.png", result.log.head(1), U_x=1.0, U_y=1.0, returned=0)
    top = drawn[-1].axes[0]
    assert [ln.get_marker() for ln in top.lines[:2]] == ["o", "o"]
