"""Manifest-based persistence of an ensemble and loading it as a BlackBox."""

from __future__ import annotations

import numpy as np
import pytest

from recourselab.errors import ArtifactError, ChecksumError, DataError, MissingArtifactError
from recourselab.io import read_json, sha256_file
from recourselab.models.ensemble import load_ensemble, member_entry, model_filename, write_manifest
from recourselab.models.registry import FitContext, fit_model


@pytest.fixture()
def saved(moons_small, tmp_path):
    train, val, test = moons_small
    ctx = FitContext(X_val=val.X, y_val=val.y, seed=0, n_classes=2)
    models = {"knn": fit_model("knn", {"n_neighbors": 5}, train.X, train.y, ctx),
              "lightgbm": fit_model("lightgbm", {"n_estimators": 40}, train.X, train.y, ctx)}
    entries = {}
    for name, m in models.items():
        path = m.save(tmp_path / model_filename(name))
        entries[name] = member_entry(name, m.params, 2, sha256_file(path))
    write_manifest(tmp_path, entries, dataset="moons", seed=0)
    return tmp_path, models, test


def test_load_ensemble_round_trip(saved, moons_schema):
    directory, models, test = saved
    box = load_ensemble(directory, schema=moons_schema)
    assert box.member_names == ("knn", "lightgbm")
    expected = np.mean([m.predict_proba(test.X) for m in models.values()], axis=0)
    np.testing.assert_array_equal(box.predict_proba(test.X), expected)
    only = load_ensemble(directory, ["lightgbm"])
    assert only.member_names == ("lightgbm",)
    assert load_ensemble(directory, "lightgbm").member_names == ("lightgbm",)  # one name, not its letters


def test_an_ensemble_of_another_dataset_is_refused(saved, moons_schema):
    import dataclasses

    directory, _, _ = saved
    circles_like = dataclasses.replace(moons_schema, dataset="circles")  # same width, other data
    with pytest.raises(DataError, match="tuned on dataset 'moons', not on the requested 'circles'"):
        load_ensemble(directory, schema=circles_like)


def test_an_ensemble_of_another_seed_is_refused(saved, moons_schema):
    directory, _, _ = saved
    assert load_ensemble(directory, schema=moons_schema, seed=0).member_names == ("knn", "lightgbm")
    with pytest.raises(DataError, match="tuned on seed 0's split, not on the requested seed 2's"):
        load_ensemble(directory, schema=moons_schema, seed=2)


def test_tampered_file_and_missing_members_are_errors(saved):
    directory, _, _ = saved
    with pytest.raises(DataError, match=r"has no members \['svm'\]"):
        load_ensemble(directory, ["svm"])
    (directory / "knn.skops").write_bytes(b"not a model")
    with pytest.raises(ChecksumError, match=r"knn\.skops is damaged: .*`dvc checkout --force .*knn\.skops` or "
                                            r"rebuild it with `recourselab repro -f tune_ensemble@moons`"):
        load_ensemble(directory)
    assert load_ensemble(directory, ["lightgbm"]).member_names == ("lightgbm",)  # only the members loaded are read
    with pytest.raises(MissingArtifactError, match="run the tune_ensemble stage first"):
        load_ensemble(directory / "nowhere")


def test_a_damaged_manifest_or_member_file_is_an_artifact_error(saved):
    directory, _, _ = saved
    manifest = read_json(directory / "manifest.json")
    (directory / "knn.skops").unlink()
    with pytest.raises(MissingArtifactError, match=r"lists knn in .*knn\.skops, which is missing"):
        load_ensemble(directory)
    # a file the library cannot read, although the manifest's sha256 matches it (another library version)
    (directory / "lightgbm.txt").write_text("not a LightGBM model")
    manifest["members"]["lightgbm"]["sha256"] = sha256_file(directory / "lightgbm.txt")
    write_manifest(directory, manifest["members"], dataset="moons", seed=0)
    with pytest.raises(ArtifactError, match=r"cannot load the lightgbm model from .*lightgbm\.txt .*tune_ensemble"):
        load_ensemble(directory, ["lightgbm"])
    del manifest["members"]["lightgbm"]["sha256"]
    write_manifest(directory, manifest["members"], dataset="moons", seed=0)
    with pytest.raises(ArtifactError, match=r"the entries \['lightgbm'\] are not members"):
        load_ensemble(directory, ["knn"])
    (directory / "manifest.json").write_text('{"dataset": "moons"}')
    with pytest.raises(ArtifactError, match=r"manifest\.json lacks the keys \['members'\]"):
        load_ensemble(directory)
