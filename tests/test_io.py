"""Artifact I/O: atomic writes, Parquet provenance, JSON, hashing, checksum checks."""

from __future__ import annotations

import hashlib
import json
import stat

import numpy as np
import pandas as pd
import pytest

from recourselab.errors import ArtifactError, ChecksumError, MissingArtifactError
from recourselab.io import (
    RECOURSE_SCHEMA,
    SchemaVersionError,
    atomic_path,
    check_schema,
    copy_atomic,
    read_json,
    read_parquet,
    read_provenance,
    read_recourse,
    restore_hint,
    schema_version,
    sha256_bytes,
    sha256_file,
    shown_path,
    verify_sha256,
    write_bytes,
    write_json,
    write_parquet,
)


def _leftovers(directory):
    """Temporary files that atomic_path may have left behind."""
    return sorted(p.name for p in directory.iterdir() if p.name.endswith(".tmp"))


# ---------------------------------------------------------------------------- atomic writes
def test_write_bytes_creates_parents_and_leaves_no_temp(tmp_path):
    target = tmp_path / "a" / "b" / "out.bin"
    assert write_bytes(target, b"hello") == target
    assert target.read_bytes() == b"hello"
    assert sorted(p.name for p in target.parent.iterdir()) == ["out.bin"]


def test_write_bytes_replaces_existing(tmp_path):
    target = tmp_path / "out.bin"
    write_bytes(target, b"old")
    write_bytes(target, b"new")
    assert target.read_bytes() == b"new"
    assert _leftovers(tmp_path) == []


def test_atomic_path_yields_a_temp_beside_the_target(tmp_path):
    target = tmp_path / "f.txt"
    with atomic_path(target) as tmp:
        assert tmp.parent == target.parent
        assert tmp != target
        assert tmp.name.startswith(".f.txt.") and tmp.name.endswith(".tmp")
        tmp.write_text("x")
        assert not target.exists()  # nothing is visible before success
    assert target.read_text() == "x"
    assert not tmp.exists()
    assert _leftovers(tmp_path) == []


def test_exception_inside_atomic_path_keeps_old_file(tmp_path):
    target = tmp_path / "f.txt"
    target.write_text("old content")
    with pytest.raises(RuntimeError, match="boom"):
        with atomic_path(target) as tmp:
            tmp.write_text("half-written new cont")
            raise RuntimeError("boom")
    assert target.read_text() == "old content"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f.txt"]


def test_exception_inside_atomic_path_creates_nothing(tmp_path):
    target = tmp_path / "new.txt"
    with pytest.raises(KeyboardInterrupt):
        with atomic_path(target) as tmp:
            tmp.write_text("partial")
            raise KeyboardInterrupt
    assert list(tmp_path.iterdir()) == []


def test_copy_atomic(tmp_path):
    src = tmp_path / "src.bin"
    src.write_bytes(bytes(range(256)) * 10)
    dst = tmp_path / "sub" / "dst.bin"
    assert copy_atomic(src, dst) == dst
    assert dst.read_bytes() == src.read_bytes()
    assert _leftovers(dst.parent) == []


# ---------------------------------------------------------------------------- JSON
def test_json_writes_non_finite_floats_as_null(tmp_path):
    obj = {"rho": float("nan"), "per_seed": [1.5, float("inf"), (float("-inf"), 2)], "n": np.float64("nan")}
    path = write_json(tmp_path / "x.json", obj)
    text = path.read_text()
    assert "NaN" not in text and "Infinity" not in text
    assert json.loads(text, parse_constant=lambda c: pytest.fail(f"non-standard JSON token {c}")) == {
        "rho": None, "per_seed": [1.5, None, [None, 2]], "n": None}


def test_json_round_trip_sorted_and_indented(tmp_path):
    obj = {"b": [1, 2.5, None], "a": {"z": "s", "y": True}}
    path = write_json(tmp_path / "x.json", obj)
    assert read_json(path) == obj
    text = path.read_text()
    assert text.endswith("\n")
    assert text.index('"a"') < text.index('"b"')  # keys sorted
    assert '\n  "a"' in text  # indented
    assert _leftovers(tmp_path) == []


def test_read_json_names_a_missing_or_damaged_file(tmp_path):
    with pytest.raises(MissingArtifactError, match=r"missing file .*gone\.json") as info:
        read_json(tmp_path / "gone.json")
    assert isinstance(info.value, FileNotFoundError)  # callers that expect the OS error still get it
    path = write_json(tmp_path / "x.json", {"a": [1, 2, 3]})
    path.write_bytes(path.read_bytes()[:9])  # truncated
    with pytest.raises(ArtifactError, match=r"x\.json is damaged, not valid JSON .*dvc checkout"):
        read_json(path)
    path.write_bytes(b"\xff\xfe{}")  # not UTF-8
    with pytest.raises(ArtifactError, match=r"x\.json is damaged"):
        read_json(path)
    write_json(path, {"a": 1})
    assert read_json(path, keys=["a"]) == {"a": 1}
    with pytest.raises(ArtifactError, match=r"x\.json lacks the keys \['b'\]"):
        read_json(path, keys=["a", "b"])
    write_json(path, [1, 2])
    with pytest.raises(ArtifactError, match=r"lacks the keys \['a'\]"):
        read_json(path, keys=["a"])  # not an object at all


# ---------------------------------------------------------------------------- Parquet
def _frame():
    rng = np.random.default_rng(0)
    return pd.DataFrame({
        "row_id": np.arange(5, dtype=np.int64),
        "x": rng.normal(size=5),
        "c": ["a", "b", "a", "c", "b"],
    }, index=[10, 11, 12, 13, 14])


def test_parquet_round_trip_drops_index(tmp_path):
    frame = _frame()
    path = write_parquet(tmp_path / "t.parquet", frame)
    back = read_parquet(path)
    pd.testing.assert_frame_equal(back, frame.reset_index(drop=True), check_dtype=False)
    assert back["row_id"].dtype == np.int64
    assert back.index.equals(pd.RangeIndex(5))
    assert _leftovers(tmp_path) == []


def test_parquet_provenance_round_trip(tmp_path):
    prov = {"dataset": "moons", "seed": 3, "params": {"split": [0.6, 0.2, 0.2]}, "sha": "ab" * 32}
    path = write_parquet(tmp_path / "t.parquet", _frame(), provenance=prov)
    assert read_provenance(path) == prov
    # the provenance does not disturb the data
    pd.testing.assert_frame_equal(read_parquet(path), _frame().reset_index(drop=True), check_dtype=False)


def test_parquet_without_provenance_reads_empty(tmp_path):
    path = write_parquet(tmp_path / "t.parquet", _frame())
    assert read_provenance(path) == {}


def test_parquet_overwrite_replaces_provenance(tmp_path):
    path = tmp_path / "t.parquet"
    write_parquet(path, _frame(), provenance={"v": 1})
    write_parquet(path, _frame().iloc[:2], provenance={"v": 2})
    assert read_provenance(path) == {"v": 2}
    assert len(read_parquet(path)) == 2


# ---------------------------------------------------------------------------- hashing
def test_sha256_bytes_and_file_agree(tmp_path):
    data = b"recourselab" * 1000
    path = tmp_path / "blob"
    path.write_bytes(data)
    expected = hashlib.sha256(data).hexdigest()
    assert sha256_bytes(data) == expected
    assert sha256_file(path) == expected
    # chunked reading gives the same digest whatever the chunk size
    assert sha256_file(path, chunk=7) == expected


def test_sha256_of_empty_file(tmp_path):
    path = tmp_path / "empty"
    path.write_bytes(b"")
    assert sha256_file(path) == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"


def test_atomic_write_has_the_permissions_of_a_plain_write(tmp_path):
    plain = tmp_path / "plain.txt"
    plain.write_text("x")
    atomic = write_bytes(tmp_path / "atomic.txt", b"x")
    assert stat.S_IMODE(atomic.stat().st_mode) == stat.S_IMODE(plain.stat().st_mode)


def test_read_parquet_selects_columns_and_names_a_damaged_file(tmp_path):
    path = write_parquet(tmp_path / "t.parquet", _frame())
    assert list(read_parquet(path, columns=["c", "x"]).columns) == ["c", "x"]
    holds = r"\(it holds \['row_id', 'x', 'c'\]\)"
    with pytest.raises(ArtifactError, match=r"t\.parquet lacks the columns \['nope'\] " + holds):
        read_parquet(path, columns=["x", "nope"])
    with pytest.raises(MissingArtifactError, match=r"missing file .*u\.parquet"):
        read_parquet(tmp_path / "u.parquet")
    raw = path.read_bytes()
    for damaged in (raw[: len(raw) // 2], b"", b"PAR1 not parquet"):
        path.write_bytes(damaged)
        with pytest.raises(ArtifactError, match=r"cannot read .*t\.parquet as Parquet"):
            read_parquet(path)


# ---------------------------------------------------------------------------- checksum checks
def test_verify_sha256_names_the_damaged_file_and_the_commands_that_restore_it(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = write_bytes(tmp_path / "data" / "ensemble" / "moons" / "seed=0" / "lightgbm.txt", b"tree=1\n")
    manifest = path.parent / "manifest.json"
    good = sha256_bytes(b"tree=1\n")
    verify_sha256(path, good, listed_in=manifest)  # intact: no error
    path.write_bytes(b"tree")  # truncated
    shown = "data/ensemble/moons/seed=0/lightgbm.txt"  # relative to the working directory, as typed
    message = (rf"lightgbm\.txt is damaged: its sha256 \w+\.\.\. is not the {good[:12]}\.\.\. that manifest\.json "
               rf"records .*`dvc checkout --force {shown}` or rebuild it with "
               r"`recourselab repro -f tune_ensemble@moons`")
    with pytest.raises(ChecksumError, match=message):
        verify_sha256(path, good, listed_in=manifest, stage="tune_ensemble", dataset="moons")
    path.unlink()
    with pytest.raises(MissingArtifactError, match=rf"lists .*lightgbm\.txt, which is missing; .*--force {shown}"):
        verify_sha256(path, good, listed_in=manifest)


def test_restore_hint_without_a_stage_and_outside_the_working_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    outside = tmp_path.parent / "other place" / "x.parquet"
    assert shown_path(outside) == f"'{outside}'"  # absolute, quoted for the shell
    assert restore_hint(outside) == (f"restore it with `dvc checkout --force '{outside}'` or re-run the stage that "
                                     "wrote it")
    assert restore_hint("x.parquet", stage="prepare") == restore_hint("x.parquet")  # no dataset: no repro target


def test_a_recourse_table_records_its_schema_version_beside_its_provenance(tmp_path):
    path = tmp_path / "counterfactuals.parquet"
    frame = pd.DataFrame({"row_id": [3, 1], "cf__x": [0.5, -1.0]})
    write_parquet(path, frame, {"seed": 0}, schema=RECOURSE_SCHEMA)
    assert schema_version(path) == RECOURSE_SCHEMA
    assert read_provenance(path) == {"seed": 0}
    pd.testing.assert_frame_equal(read_recourse(path), frame)
    pd.testing.assert_frame_equal(read_recourse(path, columns=["cf__x"]), frame[["cf__x"]])


def test_reading_a_recourse_table_without_a_schema_version_names_both_versions(tmp_path):
    path = tmp_path / "old.parquet"
    write_parquet(path, pd.DataFrame({"a": [1]}), {"seed": 0})  # written before versions were recorded
    assert schema_version(path) is None
    with pytest.raises(SchemaVersionError) as err:
        read_recourse(path)
    assert str(path) in str(err.value) and "records no schema version" in str(err.value)
    assert repr(RECOURSE_SCHEMA) in str(err.value) and "recourselab repro" in str(err.value)
    assert isinstance(err.value, ArtifactError)
    assert read_parquet(path)["a"].tolist() == [1]  # a plain read does not ask for a version


def test_reading_a_recourse_table_of_a_foreign_version_names_both_versions(tmp_path):
    path = tmp_path / "new.parquet"
    write_parquet(path, pd.DataFrame({"a": [1]}), schema="recourse/99")
    with pytest.raises(SchemaVersionError) as err:
        read_recourse(path)
    message = str(err.value)
    assert "'recourse/99'" in message and repr(RECOURSE_SCHEMA) in message and str(path) in message
    check_schema(path, "recourse/99")  # the version it records passes
    with pytest.raises(MissingArtifactError):
        check_schema(tmp_path / "absent.parquet", RECOURSE_SCHEMA)
    (tmp_path / "bad.parquet").write_bytes(b"PAR1 not parquet")
    with pytest.raises(ArtifactError, match="cannot read"):
        check_schema(tmp_path / "bad.parquet", RECOURSE_SCHEMA)
