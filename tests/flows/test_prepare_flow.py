"""The prepare flow: per-seed Prefect tasks whose artifacts are cached."""

from __future__ import annotations

import shutil
from pathlib import Path

import pandas as pd
import pytest

import flows.prepare as prepare_module
from recourselab.data import Schema

# In-process task bodies, so that the monkeypatched counter sees them.
THREADS = {"task_runner": "thread"}


@pytest.fixture()
def counting(monkeypatch):
    """Count executions of the task body (it calls prepare_splits once per run)."""
    calls: list[int] = []
    original = prepare_module.prepare_splits

    def wrapped(raw, seed, fractions):
        calls.append(seed)
        return original(raw, seed, fractions)

    monkeypatch.setattr(prepare_module, "prepare_splits", wrapped)
    return calls


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_second_run_is_a_cache_hit_and_republishes(tmp_path, params_factory, counting):
    params = params_factory(datasets=["moons"], seeds=[0, 1], prepare={"n_synthetic": 200},
                            orchestration=THREADS)
    cache = tmp_path / "cache"

    first = prepare_module.run_prepare("moons", params, tmp_path / "out1", cache)
    assert sorted(counting) == [0, 1]
    assert [r.state for r in first] == ["Completed", "Completed"]
    for seed in (0, 1):
        seed_dir = tmp_path / "out1" / "moons" / f"seed={seed}"
        assert sorted(p.name for p in seed_dir.iterdir()) == [
            "schema.json", "test.parquet", "train.parquet", "val.parquet"]
        schema = Schema.load(seed_dir / "schema.json")
        train = pd.read_parquet(seed_dir / "train.parquet")
        assert list(train.columns) == ["row_id", *schema.encoded_columns, "y"]
        assert len(train) == 120

    second = prepare_module.run_prepare("moons", params, tmp_path / "out2", cache)
    assert sorted(counting) == [0, 1], "task body ran again on a cache hit"
    assert all(r.cached for r in second)
    assert _files(tmp_path / "out1") == _files(tmp_path / "out2")


def test_changed_section_misses_the_cache(tmp_path, params_factory, counting):
    cache = tmp_path / "cache"
    base = params_factory(datasets=["moons"], seeds=[3], prepare={"n_synthetic": 200}, orchestration=THREADS)
    prepare_module.run_prepare("moons", base, tmp_path / "a", cache)
    changed = params_factory(datasets=["moons"], seeds=[3],
                             prepare={"n_synthetic": 200, "split": [0.5, 0.25, 0.25]}, orchestration=THREADS)
    result = prepare_module.run_prepare("moons", changed, tmp_path / "b", cache)
    assert counting == [3, 3]
    assert not result[0].cached
    assert len(pd.read_parquet(tmp_path / "b" / "moons" / "seed=3" / "train.parquet")) == 100


def test_vanished_staged_files_are_recomputed(tmp_path, params_factory, counting):
    params = params_factory(datasets=["moons"], seeds=[5], prepare={"n_synthetic": 200},
                            orchestration=THREADS)
    cache = tmp_path / "cache"
    prepare_module.run_prepare("moons", params, tmp_path / "a", cache)
    shutil.rmtree(cache / "artifacts")
    result = prepare_module.run_prepare("moons", params, tmp_path / "b", cache)
    assert counting == [5, 5]
    assert _files(tmp_path / "a") == _files(tmp_path / "b")
    assert result[0].files.keys() == {"schema.json", "test.parquet", "train.parquet", "val.parquet"}


def test_immutables_of_another_dataset_keep_the_cache(tmp_path, params_factory, counting):
    cache = tmp_path / "cache"
    base = params_factory(datasets=["moons"], seeds=[4], prepare={"n_synthetic": 200}, orchestration=THREADS)
    prepare_module.run_prepare("moons", base, tmp_path / "a", cache)
    other = params_factory(datasets=["moons"], seeds=[4], orchestration=THREADS,
                           prepare={"n_synthetic": 200, "immutable": {"adult": ["age"]}})
    assert prepare_module.run_prepare("moons", other, tmp_path / "b", cache)[0].cached
    own = params_factory(datasets=["moons"], seeds=[4], orchestration=THREADS,
                         prepare={"n_synthetic": 200, "immutable": {"moons": ["x1"]}})
    result = prepare_module.run_prepare("moons", own, tmp_path / "c", cache)
    assert counting == [4, 4] and not result[0].cached
    assert _files(tmp_path / "a") == _files(tmp_path / "b")
    schema = Schema.load(tmp_path / "c" / "moons" / "seed=4" / "schema.json")
    assert [f.name for f in schema.features if f.immutable] == ["x1"]


def test_data_settings_key_the_cache_only_where_they_change_the_data(tmp_path, params_factory, counting):
    cache = tmp_path / "cache"
    base = params_factory(datasets=["moons"], seeds=[6], prepare={"n_synthetic": 200}, orchestration=THREADS)
    prepare_module.run_prepare("moons", base, tmp_path / "a", cache)
    chess_only = params_factory(datasets=["moons"], seeds=[6], orchestration=THREADS,
                                prepare={"n_synthetic": 200, "chessboard_std": 0.2})  # not a moons setting
    assert prepare_module.run_prepare("moons", chess_only, tmp_path / "b", cache)[0].cached
    assert _files(tmp_path / "a") == _files(tmp_path / "b")  # provenance included
    more = params_factory(datasets=["moons"], seeds=[6], prepare={"n_synthetic": 300}, orchestration=THREADS)
    assert not prepare_module.run_prepare("moons", more, tmp_path / "c", cache)[0].cached  # other rows
    assert counting == [6, 6]
