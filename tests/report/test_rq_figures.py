"""The RQ2 and RQ3 figures are written, and refuse inputs they cannot draw."""

from __future__ import annotations

import numpy as np
import pytest

from recourselab.errors import DataError
from recourselab.metrics.plausibility import density_variance_spearman
from recourselab.report.rq_figures import RQ3_BUDGETS, rq2_figure, rq3_figure

PNG = b"\x89PNG\r\n\x1a\n"


def test_rq2_figure(tmp_path):
    rng = np.random.default_rng(0)
    density = rng.normal(size=200)
    variance = np.abs(-density + rng.normal(scale=0.5, size=200)) / 10
    stats = density_variance_spearman(density, variance, n_boot=50)
    assert rq2_figure(density, variance, stats, tmp_path / "rq2.png", title="moons").read_bytes()[:8] == PNG
    with pytest.raises(DataError, match="1-D arrays of one length"):
        rq2_figure(density, variance[:5], stats, tmp_path / "bad.png")


def test_rq3_figure(tmp_path):
    rows = [{"budget": b, "validity_mean": 0.7 + b / 5000, "validity_unanimous": 0.4 + b / 4000} for b in RQ3_BUDGETS]
    assert RQ3_BUDGETS == (0, 60, 120, 240, 480, 960)
    assert rq3_figure(rows[::-1], tmp_path / "rq3.png").read_bytes()[:8] == PNG
    with pytest.raises(DataError, match="at least one budget"):
        rq3_figure([], tmp_path / "none.png")
