"""A damaged model or flow file is never used: every load checks its sha256 against its manifest.

Each kind of artifact (a LightGBM text model, an XGBoost UBJ, a scikit-learn .skops, DensityFlow's
surrogate.pt) is truncated or altered in place; loading it must fail with a ChecksumError that
names the file and the two commands that bring a good copy back. The flows' cache keys check the
ensemble's files too, so a cache hit (whose task never loads them) cannot hide the damage, and a
damaged *staged* copy in the task cache is recomputed instead of published.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path

import pytest
from prefect import flow, task
from prefect.cache_policies import INPUTS, TASK_SOURCE

from recourselab.config import parse_params
from recourselab.data import dataset_from_params, prepare_splits
from recourselab.densityflow import DensityFlow
from recourselab.errors import ArtifactError, ChecksumError
from recourselab.io import sha256_file
from recourselab.models.ensemble import load_ensemble, member_entry, model_filename, write_manifest
from recourselab.models.registry import FitContext, fit_model
from recourselab.orchestration import run_tasks, stage_artifacts

MEMBERS = {"lightgbm": {"n_estimators": 20}, "xgboost": {"n_estimators": 20}, "knn": {"n_neighbors": 5}}
ENSEMBLE_DIR = Path("data/ensemble/moons/seed=0")
FLOW_DIR = Path("data/densityflow/moons/seed=0")


@pytest.fixture(scope="module")
def moons():
    params = parse_params({"prepare": {"n_synthetic": 400}})
    return prepare_splits(dataset_from_params("moons", params), 0, (0.6, 0.2, 0.2))


@pytest.fixture(scope="module")
def members(moons):
    X, y = moons.arrays("train")
    Xv, yv = moons.arrays("val")
    ctx = FitContext(X_val=Xv, y_val=yv, seed=0, n_classes=2)
    return {name: fit_model(name, p, X, y, ctx) for name, p in MEMBERS.items()}


@pytest.fixture()
def project(tmp_path, monkeypatch, members):
    """A project folder (the working directory) holding a saved ensemble of ``members``."""
    monkeypatch.chdir(tmp_path)
    ENSEMBLE_DIR.mkdir(parents=True)
    entries = {}
    for name, model in members.items():
        path = model.save(ENSEMBLE_DIR / model_filename(name))
        entries[name] = member_entry(name, model.params, 2, sha256_file(path))
    write_manifest(ENSEMBLE_DIR, entries, dataset="moons", seed=0)
    return tmp_path


def truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def alter(path: Path) -> None:
    """Flip one byte in the middle: same size, still plausible to its library's reader."""
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))


def hint(path: Path, stage: str) -> str:
    """The regex of a damaged file's message: the file, `dvc checkout` of it and the stage's rerun."""
    return (rf"{re.escape(str(path))} .*restore it with `dvc checkout --force {re.escape(str(path))}` or rebuild "
            rf"it with `recourselab repro -f {stage}@moons`")


@pytest.mark.parametrize("damage", [truncate, alter])
@pytest.mark.parametrize("name", list(MEMBERS))
def test_a_damaged_member_file_is_refused_with_the_commands_that_restore_it(project, name, damage):
    path = ENSEMBLE_DIR / model_filename(name)
    others = [m for m in MEMBERS if m != name]
    assert load_ensemble(ENSEMBLE_DIR, others).member_names == tuple(others)
    damage(path)
    with pytest.raises(ChecksumError, match=hint(path, "tune_ensemble")):
        load_ensemble(ENSEMBLE_DIR)
    assert load_ensemble(ENSEMBLE_DIR, others).member_names == tuple(others)  # the intact members still load


def test_the_flows_cache_keys_check_the_member_files(project):
    """The upstream keys are computed before any task runs: a cache hit cannot skip the check."""
    from flows.densityflow import _members_fingerprint
    from flows.discover import _current_upstream, _member_fingerprint

    before = _members_fingerprint(str(ENSEMBLE_DIR), ["lightgbm", "knn"])
    assert _member_fingerprint(ENSEMBLE_DIR, "xgboost")
    truncate(ENSEMBLE_DIR / "lightgbm.txt")
    alter(ENSEMBLE_DIR / "xgboost.ubj")
    with pytest.raises(ChecksumError, match=hint(ENSEMBLE_DIR / "lightgbm.txt", "tune_ensemble")):
        _members_fingerprint(str(ENSEMBLE_DIR), ["lightgbm", "knn"])
    with pytest.raises(ChecksumError, match=hint(ENSEMBLE_DIR / "xgboost.ubj", "tune_ensemble")):
        _member_fingerprint(ENSEMBLE_DIR, "xgboost")
    assert _members_fingerprint(str(ENSEMBLE_DIR), ["knn"]) != before  # the members used are intact: no error
    # the summary of DISCOVER's models treats a damaged model as not current (left out, named in a warning)
    assert _current_upstream("prepared", ENSEMBLE_DIR, "xgboost") is None


@pytest.fixture(scope="module")
def trained(moons):
    X, y = moons.arrays("train")
    return DensityFlow(schema=moons.schema, seed=0, epochs=3, warmup_epochs=1, hidden=16, batch_size=64,
                       n_starts=2).fit(X, y)


@pytest.mark.parametrize("damage", [truncate, alter])
@pytest.mark.parametrize(("name", "queries", "stage"), [("surrogate.pt", 0, "train_flow"),
                                                       ("generator.pt", 8, "distill")])
def test_a_damaged_densityflow_weights_file_is_refused(tmp_path, monkeypatch, moons, trained, name, queries, stage,
                                                       damage):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(trained, "queries_used_", queries)  # a distilled flow records its queries
    trained.save(FLOW_DIR)
    assert DensityFlow.load(FLOW_DIR, schema=moons.schema).queries_used_ == queries
    damage(FLOW_DIR / name)
    with pytest.raises(ChecksumError, match=hint(FLOW_DIR / name, stage)):
        DensityFlow.load(FLOW_DIR, schema=moons.schema)


def test_a_checksum_error_is_an_artifact_error():
    assert issubclass(ChecksumError, ArtifactError)


CALLS: list[int] = []


@task(name="fault-stage", cache_policy=TASK_SOURCE + INPUTS)
def _stage_seed(*, seed: int, staging_root: str) -> dict:
    CALLS.append(seed)
    return stage_artifacts(Path(staging_root) / f"seed={seed}", {"model.txt": lambda p: p.write_text(f"seed {seed}")})


@flow(name="fault-flow")
def _fault_flow(root: Path) -> list:
    seeds = [0, 1]
    return run_tasks(_stage_seed, [dict(seed=s, staging_root=str(root / "artifacts")) for s in seeds],
                     [root / "out" / f"seed={s}" for s in seeds], root / "results",
                     keys=[f"moons/seed={s}" for s in seeds])


def test_a_damaged_staged_artifact_is_recomputed_on_a_cache_hit(tmp_path, caplog):
    CALLS.clear()
    first = _fault_flow(tmp_path)
    assert sorted(CALLS) == [0, 1] and not any(r.cached for r in first)
    staged = next((tmp_path / "artifacts" / "seed=0").iterdir()) / "model.txt"  # <digest>/model.txt
    staged.write_text("seed 0, trunc")  # the task cache's copy, not the published one
    (tmp_path / "out" / "seed=0" / "model.txt").write_text("published copy damaged too")
    with caplog.at_level(logging.WARNING, logger="recourselab.orchestration"):
        again = _fault_flow(tmp_path)
    assert sorted(CALLS) == [0, 0, 1], "seed 0 was not recomputed, or seed 1 was"
    assert [r.cached for r in again] == [False, True]
    assert "moons/seed=0: staged artifacts missing or altered, recomputing" in caplog.text
    assert staged.read_text() == "seed 0" and (tmp_path / "out" / "seed=0" / "model.txt").read_text() == "seed 0"
    assert again[0].files == first[0].files
