"""DensityFlow figures: PNGs written atomically, trajectories only for 2-D data, clear errors."""

from __future__ import annotations

import numpy as np
import pytest

from recourselab.errors import DataError
from recourselab.report.densityflow_plots import densityflow_figures, plot_trajectories, plot_validity

PNG = b"\x89PNG\r\n\x1a\n"
METRICS = {"per_model": {"knn": 0.5, "svm": 1.0}, "mean_per_model": 0.75, "unanimous": 0.5}


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


def test_validity_bars_are_labelled_and_the_legend_sits_above_them(tmp_path, monkeypatch):
    from recourselab.report import densityflow_plots

    drawn = []
    original = densityflow_plots._save
    monkeypatch.setattr(densityflow_plots, "_save", lambda fig, path: drawn.append(fig) or original(fig, path))
    per_model = {"knn": 0.1, "svm": 0.12, "rf": 0.9}
    plot_validity(tmp_path / "v.png", per_model, mean=0.37, unanimous=0.0)
    ax = drawn[-1].axes[0]
    assert [t.get_text() for t in ax.texts] == ["0.10", "0.12", "0.90"]  # every bar carries its value
    assert ax.get_ylim()[0] < 0  # a unanimous line at 0 is drawn above the axis
    fig = drawn[-1]
    fig.canvas.draw()
    legend = ax.get_legend().get_window_extent()
    assert legend.y0 >= ax.get_window_extent().y1 - 1  # above the plotting area, over no bar
