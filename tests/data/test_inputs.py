"""Tracked raw inputs: the inputs folder holds the exact bytes a dataset reads, and prepare reads them."""

from __future__ import annotations

import logging

import numpy as np
import pandas as pd
import pytest

from recourselab.data import load_dataset
from recourselab.data.inputs import MANIFEST, REGISTRY_KEYS, input_files, input_hashes, sync_inputs
from recourselab.data.registry import BUILTIN_DATASETS
from recourselab.data.sources import FILES, read_registry_file, tracked_inputs
from recourselab.errors import ChecksumError, ConfigError, DataError, MissingArtifactError
from recourselab.io import read_json, sha256_file


def _csv(path, n=60, seed=0):
    rng = np.random.default_rng(seed)
    pd.DataFrame({"x": rng.normal(size=n).round(4), "c": rng.choice(["a", "b"], n),
                  "label": np.arange(n) % 2}).to_csv(path, index=False)
    return path


def _params(params_factory, data_dir, **decl):
    spec = {"path": "mine.csv", "target": "label", "favourable": "1", "categorical": ["c"], **decl}
    return params_factory(datasets=["mine"], data={"dir": str(data_dir), "custom": {"mine": spec}})


def _folder_bytes(folder):
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def test_a_custom_csv_is_copied_byte_for_byte_with_its_manifest(params_factory, tmp_path):
    (tmp_path / "src").mkdir()
    src = _csv(tmp_path / "src" / "mine.csv")
    params = _params(params_factory, tmp_path / "src")
    folder = tmp_path / "inputs" / "mine"
    manifest = sync_inputs("mine", params, folder)
    assert (folder / "mine.csv").read_bytes() == src.read_bytes()
    assert manifest == read_json(folder / MANIFEST)
    assert manifest["files"] == {"mine.csv": {"origin": "mine.csv", "sha256": sha256_file(src),
                                              "bytes": src.stat().st_size}}
    assert input_hashes(folder) == {"mine.csv": sha256_file(src)}
    before = _folder_bytes(folder)
    sync_inputs("mine", params, folder)  # unchanged sources: a byte-identical folder (DVC reruns nothing)
    assert _folder_bytes(folder) == before


def test_a_changed_byte_changes_the_copy_and_a_file_no_longer_read_is_removed(params_factory, tmp_path):
    src = _csv(tmp_path / "mine.csv")
    params = _params(params_factory, tmp_path)
    folder = tmp_path / "inputs" / "mine"
    sync_inputs("mine", params, folder)
    (folder / "old.csv").write_text("a file of an earlier declaration")
    data = bytearray(src.read_bytes())
    data[-3] = ord("1") if data[-3] != ord("1") else ord("2")
    src.write_bytes(bytes(data))
    manifest = sync_inputs("mine", params, folder)
    assert (folder / "mine.csv").read_bytes() == bytes(data)
    assert manifest["files"]["mine.csv"]["sha256"] == sha256_file(src)
    assert sorted(p.name for p in folder.iterdir()) == [MANIFEST, "mine.csv"]


def test_an_unreachable_source_keeps_the_tracked_copy_or_fails_without_one(params_factory, tmp_path, caplog):
    src = _csv(tmp_path / "mine.csv")
    params = _params(params_factory, tmp_path)
    folder = tmp_path / "inputs" / "mine"
    sync_inputs("mine", params, folder)
    src.unlink()  # e.g. the data directory is not mounted on the audit machine
    with caplog.at_level(logging.WARNING):
        manifest = sync_inputs("mine", params, folder)
    assert "keeping the tracked copy" in caplog.text
    assert manifest["files"]["mine.csv"]["sha256"] == sha256_file(folder / "mine.csv")
    with pytest.raises(DataError, match="file not found"):
        sync_inputs("mine", params, tmp_path / "elsewhere" / "mine")


def test_a_pinned_file_whose_source_is_gone_is_kept_only_with_the_pinned_sha256(params_factory, tmp_path):
    src = _csv(tmp_path / "mine.csv")
    params = _params(params_factory, tmp_path, sha256=sha256_file(src))
    folder = tmp_path / "inputs" / "mine"
    sync_inputs("mine", params, folder)
    src.unlink()
    (folder / "mine.csv").write_bytes(b"x,c,label\n")  # the copy was altered too
    with pytest.raises(DataError, match="file not found"):
        sync_inputs("mine", params, folder)


def test_prepare_reads_the_tracked_copy_inside_tracked_inputs(params_factory, tmp_path):
    src = _csv(tmp_path / "mine.csv")
    params = _params(params_factory, tmp_path)
    folder = tmp_path / "inputs" / "mine"
    sync_inputs("mine", params, folder)
    _csv(src, seed=1)  # the source moves on; the tracked copy is what prepare reads
    with tracked_inputs(folder):
        tracked = load_dataset("mine", params)
    direct = load_dataset("mine", params)
    assert not tracked.frame.equals(direct.frame)
    assert tracked.fingerprint != direct.fingerprint
    _csv(src, seed=0)
    assert load_dataset("mine", params).fingerprint == tracked.fingerprint
    with tracked_inputs(tmp_path / "empty"), pytest.raises(MissingArtifactError, match="recourselab inputs"):
        load_dataset("mine", params)


def test_a_tracked_registry_file_is_checked_against_its_pinned_sha256(tmp_path):
    folder = tmp_path / "german"
    folder.mkdir()
    (folder / "germancredit.csv").write_text("not the pinned file\n")
    with tracked_inputs(folder), pytest.raises(ChecksumError) as err:
        read_registry_file("germancredit.csv")
    assert "germancredit.csv" in str(err.value) and "recourselab repro -f inputs@german" in str(err.value)


def test_every_dataset_declares_its_input_files(params_factory, tmp_path):
    params = params_factory(data={"dir": str(tmp_path)})
    for name, spec in BUILTIN_DATASETS.items():
        files = input_files(name, params)
        if spec.source == "synthetic":
            assert files == []
        elif spec.source == "registry":
            assert [f.name for f in files] == list(REGISTRY_KEYS[name])
            assert all(f.sha256 == FILES[f.name].sha256 and "==" in f.origin for f in files)
        else:
            assert [f.origin for f in files] == list(spec.files)


def test_two_input_files_of_one_name_are_rejected(params_factory, tmp_path, monkeypatch):
    from recourselab.data import inputs

    monkeypatch.setitem(inputs.REGISTRY_KEYS, "adult", ("adult.data", "adult.data"))
    with pytest.raises(ConfigError, match="adult.data"):
        input_files("adult", params_factory())
