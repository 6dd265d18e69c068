"""The summary stage writes the headline file and the plot tables, or fails leaving them as they were."""

from __future__ import annotations

import shutil

import numpy as np
import pandas as pd
import pytest
import yaml

from recourselab.config import render_profile
from recourselab.io import read_json
from recourselab.pipeline.headline import HEADLINE_KEYS, PLOTS
from stages import summary
from tests.conftest import REPO_ROOT
from tests.pipeline.test_headline import _discover_tables


def test_main_writes_the_headline_and_every_plot_table_then_keeps_them_on_failure(tmp_path):
    committed = REPO_ROOT / "data" / "metrics" / "moons"
    if not (committed / "densityflow.json").is_file():
        pytest.skip("the committed moons metrics are absent")
    params = tmp_path / "params.yaml"
    params.write_text(yaml.safe_dump(render_profile("default").model_dump(mode="json")))
    metrics = tmp_path / "metrics"
    shutil.copytree(committed, metrics / "moons")
    _discover_tables(tmp_path / "discover" / "moons", np.random.default_rng(0))
    args = ["--dataset", "moons", "--params", str(params), "--metrics", str(metrics), "--out", str(tmp_path / "plots"),
            "--discover", str(tmp_path / "discover"), "--evaluate", str(tmp_path / "evaluate")]
    assert summary.main(args) == 0
    headline = read_json(metrics / "moons" / "summary.json")
    assert list(headline) == sorted(HEADLINE_KEYS)
    written = {p.name: p.read_bytes() for p in sorted((tmp_path / "plots" / "moons").iterdir())}
    assert sorted(written) == sorted(PLOTS)
    for name, columns in PLOTS.items():
        table = pd.read_csv(tmp_path / "plots" / "moons" / name)
        assert list(table.columns) == list(columns) and len(table) > 0, name

    (metrics / "moons" / "discover.json").write_text("{damaged")
    assert summary.main(args) == 1
    assert read_json(metrics / "moons" / "summary.json") == headline
    assert {p.name: p.read_bytes() for p in sorted((tmp_path / "plots" / "moons").iterdir())} == written
