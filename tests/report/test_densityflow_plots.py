"""DensityFlow figures: PNGs written atomically, trajectories only for 2-D data, clear errors."""

from __future__ import annotations

import numpy as np
import pytest

from recourselab.errors import DataError
from recourselab.report.densityflow_plots import densityflow_figures, plot_trajectories, plot_validity

PNG = b"\x89PNG\r\n\x1a\n"
METRICS = {"per_model": {"knn": 0.5, "svm": 1.0}, "mean_per_model": 0.75, "unanimous": 0.5}


@pytest.fixture()
def drawn(capture_figures):
    from recourselab.report import densityflow_plots

    return capture_figures(densityflow_plots)


def test_validity_and_trajectory_figures_are_pngs(tmp_path):
    rng = np.random.default_rng(0)
    X, y = rng.normal(size=(100, 2)), rng.integers(0, 2, 100)
    paths = np.cumsum(rng.normal(0, 0.1, size=(20, 5, 2)), axis=0)
    writers = densityflow_figures(METRICS, X=X, y=y, trajectories=paths, target=np.ones(5, dtype=int), title="t")
    assert set(writers) == {"validity.png", "trajectories.png"}
    for name, write in writers.items():
        assert write(tmp_path / name).read_bytes()[:8] == PNG
    assert not list(tmp_path.glob("*.tmp*"))


def test_no_trajectories_for_wider_data_and_errors_name_the_problem(tmp_path):
    wide = np.zeros((10, 3))
    assert set(densityflow_figures(METRICS, X=wide, y=np.zeros(10), trajectories=np.zeros((4, 2, 3)),
                                   target=np.zeros(2))) == {"validity.png"}
    with pytest.raises(DataError, match="2-D data"):
        plot_trajectories(tmp_path / "t.png", wide, np.zeros(10), np.zeros((4, 2, 3)), np.zeros(2))
    with pytest.raises(DataError, match="at least one member"):
        plot_validity(tmp_path / "v.png", {}, mean=0.0, unanimous=0.0)
    assert not (tmp_path / "t.png").exists() and not (tmp_path / "v.png").exists()


def test_validity_bars_are_labelled_and_the_legend_sits_above_them(tmp_path, drawn):
    per_model = {"knn": 0.1, "svm": 0.12, "rf": 0.9}
    plot_validity(tmp_path / "v.png", per_model, mean=0.37, unanimous=0.0)
    ax = drawn[-1].axes[0]
    assert [t.get_text() for t in ax.texts] == ["0.10", "0.12", "0.90"]  # every bar carries its value
    assert ax.get_ylim()[0] < 0  # a unanimous line at 0 is drawn above the axis
    fig = drawn[-1]
    fig.canvas.draw()
    legend = ax.get_legend().get_window_extent()
    assert legend.y0 >= ax.get_window_extent().y1 - 1  # above the plotting area, over no bar


def test_many_members_get_slanted_labels(tmp_path, drawn):
    plot_validity(tmp_path / "v.png", {f"member_{i}": 0.5 for i in range(12)}, mean=0.5, unanimous=0.1)
    labels = drawn[-1].axes[0].get_xticklabels()
    assert [t.get_text() for t in labels] == [f"member_{i}" for i in range(12)]
    assert all(t.get_rotation() == 30 and t.get_ha() == "right" for t in labels)


def test_trajectories_name_axes_and_classes_colour_each_class_and_frame_the_data(tmp_path, drawn):
    rng = np.random.default_rng(0)
    X, y = rng.normal(size=(140, 2)), np.repeat(np.arange(7), 20)  # seven classes
    paths = np.cumsum(rng.normal(0, 0.1, size=(20, 3, 2)), axis=0)
    ends = paths[-1].copy()
    paths[-1, 0] = [1e6, -1e6]  # one path diverges (its reported counterfactual is clamped): the frame stays
    classes = ["$low", "mid", "c2", "c3", "c4", "c5", "c6"]
    plot_trajectories(tmp_path / "t.png", X, y, paths, np.array([1, 5, 6]), counterfactuals=ends,
                      feature_names=("age", "income"), class_names=classes)
    ax = drawn[-1].axes[0]
    assert (ax.get_xlabel(), ax.get_ylabel()) == ("age", "income")
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert legend[:2] == [r"class \$low", "class mid"] and len(legend) == 7
    colours = {tuple(np.round(c.get_facecolor()[0][:3], 3)) for c in ax.collections[:7]}
    assert len(colours) == 7  # classes 5 and 6 no longer reuse the colours of 0 and 1
    assert abs(ax.get_xlim()[1]) < 100 and abs(ax.get_ylim()[0]) < 100


def test_a_figure_that_fails_leaves_a_note_and_the_other_outputs(tmp_path, caplog):
    writers = densityflow_figures({"per_model": {}, "mean_per_model": 0.0, "unanimous": 0.0})
    path = writers["validity.png"](tmp_path / "v.png")
    assert path.read_bytes()[:8] == PNG
    assert "figure validity.png could not be drawn (DataError: plot_validity needs at least one member)" in caplog.text
