"""Prefect flow of the ``prepare`` stage: one cached task per (dataset, seed)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prefect import flow, task
from prefect.cache_policies import INPUTS, TASK_SOURCE

from recourselab.config import Params, section_hash
from recourselab.data import SPLITS, RawDataset, dataset_from_params, prepare_splits
from recourselab.data.datasets import SCHEMA_FILE
from recourselab.data.inputs import input_hashes
from recourselab.data.sources import tracked_inputs
from recourselab.io import write_parquet
from recourselab.orchestration import SeedResult, run_tasks, stage_artifacts, task_runner
from recourselab.provenance import code_fingerprint, code_provenance

STEP = "prepare"


@task(name=STEP, task_run_name="prepare-{dataset}-seed={seed}",
      cache_policy=TASK_SOURCE + INPUTS - "raw")
def prepare(*, dataset: str, seed: int, section: dict[str, Any], fingerprint: str, code: str,
            staging_root: str, raw: RawDataset, inputs: dict[str, str] | None = None) -> dict[str, Any]:
    """Split, fit the schema on train, encode; stage the Parquet files and ``schema.json``."""
    splits = prepare_splits(raw, seed, tuple(section["split"]))
    provenance = {"dataset": dataset, "seed": seed, "step": STEP, "params_hash": section_hash(section),
                  "source_fingerprint": fingerprint, **code_provenance(code)}
    if inputs is not None:  # the sha256 of each tracked raw file read (data/inputs/<dataset>/inputs.json)
        provenance["inputs"] = inputs
    writers = {f"{s}.parquet": (lambda p, s=s: write_parquet(p, splits.tables[s], {**provenance, "split": s}))
               for s in SPLITS}
    writers[SCHEMA_FILE] = splits.schema.save
    return stage_artifacts(Path(staging_root) / STEP / dataset / f"seed={seed}", writers)


@flow(name=STEP, log_prints=False, validate_parameters=False)
def prepare_flow(dataset: str, params: Params, out_root: Path, cache_root: Path,
                 inputs_dir: Path | None = None) -> list[SeedResult]:
    """Prepare every seed of ``dataset`` into ``out_root/<dataset>/seed=<s>/``.

    The dataset is read and validated once, before any task runs or any file is written; from the
    tracked copies in ``inputs_dir`` (``data/inputs/<dataset>``) when given.
    """
    with tracked_inputs(inputs_dir):
        raw = dataset_from_params(dataset, params)
    inputs = None if inputs_dir is None else input_hashes(inputs_dir)
    # Only the split reaches the task as a setting: the data settings (n_synthetic, data_seed,
    # chessboard_std, max_rows, each dataset's immutables) shape the frame and its spec, so they reach
    # it through raw.fingerprint, and a setting of another dataset changes neither key nor provenance.
    section = {"split": list(params.prepare.split)}
    code = code_fingerprint("flows.prepare", "recourselab.config", "recourselab.data", "recourselab.io",
                            "recourselab.orchestration", "recourselab.runtime", "recourselab.provenance")
    calls = [dict(dataset=dataset, seed=s, section=section, fingerprint=raw.fingerprint, code=code,
                  staging_root=str(Path(cache_root) / "artifacts"), raw=raw, inputs=inputs) for s in params.seeds]
    out_dirs = [Path(out_root) / dataset / f"seed={s}" for s in params.seeds]
    return run_tasks(prepare, calls, out_dirs, Path(cache_root) / "results",
                     keys=[f"{dataset}/seed={s}" for s in params.seeds])


def run_prepare(dataset: str, params: Params, out_root: Path, cache_root: Path,
                inputs_dir: Path | None = None) -> list[SeedResult]:
    """Run :func:`prepare_flow` with ``orchestration.max_workers`` concurrent seeds."""
    return prepare_flow.with_options(task_runner=task_runner(params.orchestration))(
        dataset=dataset, params=params, out_root=Path(out_root), cache_root=Path(cache_root),
        inputs_dir=None if inputs_dir is None else Path(inputs_dir))
