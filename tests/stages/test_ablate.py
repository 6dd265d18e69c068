"""The ablate stage's main(): datasets outside ablate.datasets get a note, unknown ones an error."""

from __future__ import annotations

import yaml

import flows.ablate  # noqa: F401 - Prefect configures logging on import: do it before caplog attaches
from recourselab.config import render_profile
from recourselab.io import read_json
from stages import ablate


def _params(tmp_path):
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(render_profile("default").model_dump(mode="json")))
    return str(path)


def test_a_dataset_outside_ablate_datasets_gets_a_note_and_no_run(tmp_path):
    out, metrics = tmp_path / "out", tmp_path / "metrics"
    argv = ["--dataset", "german", "--params", _params(tmp_path), "--out", str(out), "--metrics", str(metrics)]
    assert ablate.main(argv) == 0  # no prepared data, ensemble or flow exist: nothing was read
    note = read_json(metrics / "german" / "ablate.json")
    assert note == {"dataset": "german", "ablated": False,
                    "reason": "not in ablate.datasets ['moons', 'adult', 'compas']"}
    assert read_json(out / "german" / "not_ablated.json") == note


def test_ablate_datasets_outside_the_pipeline_are_named_in_a_warning(tmp_path, caplog):
    profile = render_profile("default").model_dump(mode="json")
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump({**profile, "datasets": ["moons", "german"]}))
    argv = ["--dataset", "german", "--params", str(path),
            "--out", str(tmp_path / "o"), "--metrics", str(tmp_path / "m")]
    assert ablate.main(argv) == 0
    assert "ablate.datasets lists ['adult', 'compas'], which are not in datasets ['moons', 'german']" in caplog.text
    caplog.clear()
    assert ablate.main([*argv[:2], "--params", _params(tmp_path), *argv[4:]]) == 0  # all of them in the pipeline
    assert "ablate.datasets lists" not in caplog.text


def test_a_dataset_outside_the_pipeline_is_a_one_line_error(tmp_path, caplog):
    argv = ["--dataset", "heloc", "--params", _params(tmp_path), "--out", str(tmp_path / "out")]
    assert ablate.main(argv) == 1
    assert "'heloc' is not in datasets ['moons', 'circles'" in caplog.text
    assert not (tmp_path / "out").exists()


def test_a_misspelled_dataset_is_named_with_a_suggestion_by_every_stage(tmp_path, caplog):
    from stages import discover, distill, generate, train_flow, tune_ensemble

    for stage in (tune_ensemble, train_flow, distill, generate, discover, ablate):
        caplog.clear()
        assert stage.main(["--dataset", "moon", "--params", _params(tmp_path), "--out", str(tmp_path / "o")]) == 1
        assert "unknown dataset 'moon' (did you mean 'moons'?)" in caplog.text, stage.__name__
        others = caplog.text.split("other built-in and custom datasets: ")[1].splitlines()[0].split(", ")
        assert others == ["cardio", "heloc", "blood", "hotel"]  # the pipeline's datasets are not listed twice
    assert not (tmp_path / "o").exists()
