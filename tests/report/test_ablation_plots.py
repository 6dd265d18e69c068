"""ablate.png: a PNG per call, and a clear error when a variant lacks a metric."""

from __future__ import annotations

import pytest

from recourselab.errors import DataError
from recourselab.report.ablation_plots import plot_ablation

ROW = {"mean_per_model": 0.9, "majority": 0.95, "unanimous": 0.6, "cost_l2": 1.4}


def test_plot_ablation_writes_a_png(tmp_path):
    path = plot_ablation(tmp_path / "a.png", {"full": ROW, "no_density": {**ROW, "cost_l2": 1.1}}, title="t")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_plot_ablation_names_missing_metrics(tmp_path):
    with pytest.raises(DataError, match=r"missing: \{'no_distill': \['cost_l2'\]\}"):
        plot_ablation(tmp_path / "a.png", {"full": ROW, "no_distill": {k: v for k, v in ROW.items() if k != "cost_l2"}})
    with pytest.raises(DataError, match="missing: rows"):
        plot_ablation(tmp_path / "a.png", {})
    assert not (tmp_path / "a.png").exists()


def test_a_metric_written_as_null_is_drawn_as_no_bar(tmp_path):
    path = plot_ablation(tmp_path / "a.png", {"full": ROW, "no_density": {**ROW, "unanimous": None}})
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"  # was a TypeError that lost ablate.json
