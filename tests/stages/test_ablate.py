"""The ablate stage's main(): a dataset outside ablate.datasets fails before any flow runs."""

from __future__ import annotations

import yaml

import flows.ablate  # noqa: F401 - Prefect configures logging on import: do it before caplog attaches
from recourselab.config import render_profile
from stages import ablate


def test_dataset_outside_ablate_datasets_is_a_one_line_error(tmp_path, caplog):
    params = tmp_path / "params.yaml"
    params.write_text(yaml.safe_dump(render_profile("default").model_dump(mode="json")))
    argv = ["--dataset", "german", "--params", str(params), "--out", str(tmp_path / "out")]
    assert ablate.main(argv) == 1
    assert "'german' is not in ablate.datasets ['moons', 'adult', 'compas']" in caplog.text
    assert not (tmp_path / "out").exists()
