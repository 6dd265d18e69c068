"""Dataset loaders: raw file -> validated raw DataFrame -> per-seed encoded splits.

:func:`load_dataset` reads a built-in or user-declared dataset (:mod:`recourselab.data.readers`),
drops the declared columns, and validates it against the dataset's contract
(:func:`~recourselab.data.contract.validate_frame`). :func:`dataset_from_params` is the same
with the settings of a params tree.
:func:`prepare_splits` does the per-seed work of the ``prepare`` stage: stratified split,
schema fitted on train, encoded tables.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from recourselab.config import MONOTONE_RULES, CustomDataset, Params, PrepareParams
from recourselab.data.contract import LABEL, ROW_ID, validate_frame
from recourselab.data.feature import python_scalar, sorted_levels
from recourselab.data.readers import READERS, DataSources, custom_spec, read_custom
from recourselab.data.registry import BUILTIN_DATASETS, DatasetSpec
from recourselab.data.schema import Schema
from recourselab.data.split import stratified_split, stratified_subsample
from recourselab.errors import DataError, MissingArtifactError
from recourselab.io import read_parquet, sha256_bytes

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RawDataset:
    """A validated raw dataset in original units.

    Attributes
    ----------
    frame : DataFrame (n, p + 1): feature columns then the target column.
    spec : the dataset's declaration.
    fingerprint : sha256 of the source bytes and generator settings (cache keys, provenance).
    levels : categorical levels over the whole file (the domain).
    """

    frame: pd.DataFrame
    spec: DatasetSpec
    fingerprint: str
    levels: dict[str, list[Any]]

    @property
    def classes(self) -> list[Any]:
        return sorted_levels(self.frame[self.spec.target])


SPLITS = ("train", "val", "test")
SCHEMA_FILE = "schema.json"
#: File endings read as Parquet for a ``data.custom`` dataset (anything else is read as CSV).


@dataclass(frozen=True)
class PreparedSplits:
    """Encoded splits of one seed: tables with encoded features, ``y`` and ``row_id``."""

    schema: Schema
    tables: dict[str, pd.DataFrame]

    def arrays(self, split: str) -> tuple[np.ndarray, np.ndarray]:
        """Encoded features (n, d) float64 and class indices (n,) int64 of ``split``."""
        table = self.tables[split]
        return table[self.schema.encoded_columns].to_numpy(dtype=float), table[LABEL].to_numpy(dtype=np.int64)


def load_prepared(seed_dir: str | Path) -> PreparedSplits:
    """Read what the ``prepare`` stage wrote for one seed (``schema.json`` + split Parquet files)."""
    seed_dir = Path(seed_dir)
    if not (seed_dir / SCHEMA_FILE).is_file():
        raise MissingArtifactError(f"no prepared data in {seed_dir}; run the prepare stage first")
    schema = Schema.load(seed_dir / SCHEMA_FILE)
    tables = {s: read_parquet(seed_dir / f"{s}.parquet") for s in SPLITS}
    for split, table in tables.items():
        missing = [c for c in [ROW_ID, *schema.encoded_columns, LABEL] if c not in table.columns]
        if missing:
            raise DataError(f"{seed_dir / split}.parquet lacks columns {missing}")
    return PreparedSplits(schema=schema, tables=tables)


def dataset_spec(name: str, params: Params) -> DatasetSpec:
    """The declaration of dataset ``name`` (built-in or ``data.custom``) under ``params``.

    ``prepare.immutable[name]`` and ``prepare.monotone[name]``, when present, replace the declared
    immutable and monotone features.
    """
    if name not in params.data.custom and name not in BUILTIN_DATASETS:
        valid = sorted(BUILTIN_DATASETS) + sorted(params.data.custom)
        raise DataError(f"unknown dataset {name!r}; valid datasets: {', '.join(valid)}")
    return _spec(name, params.data.custom.get(name), params.prepare.immutable.get(name),
                 params.prepare.monotone.get(name))


def _spec(name: str, custom: CustomDataset | None, immutable: Sequence[str] | None,
          monotone: Mapping[str, str] | None = None) -> DatasetSpec:
    if custom is not None:
        spec = custom_spec(name, custom)
    elif name in BUILTIN_DATASETS:
        spec = BUILTIN_DATASETS[name]
    else:
        raise DataError(f"unknown dataset {name!r}; valid datasets: {', '.join(sorted(BUILTIN_DATASETS))} "
                        "(or pass custom= to declare your own)")
    fixed = spec.immutable if immutable is None else tuple(immutable)
    one_way = spec.monotone if monotone is None else tuple((f, r) for f, r in monotone.items() if r is not None)
    one_way = tuple((f, r) for f, r in one_way if f not in fixed)  # immutable is the stronger rule
    bad = sorted({rule for _, rule in one_way} - set(MONOTONE_RULES))
    if bad:
        raise DataError(f"dataset {name!r}: unknown monotone direction(s) {bad}; valid: {', '.join(MONOTONE_RULES)}")
    if (fixed, one_way) == (spec.immutable, spec.monotone):
        return spec
    return dataclasses.replace(spec, immutable=fixed, monotone=one_way)


_PREPARE = PrepareParams()


def load_dataset(name: str, params: Params | None = None, /, *, n_synthetic: int = _PREPARE.n_synthetic,
                 data_seed: int = _PREPARE.data_seed, chessboard_std: float = _PREPARE.chessboard_std,
                 max_rows: int | None = _PREPARE.max_rows,
                 data_dir: str | Path | None = None, cache_dir: str | Path | None = None,
                 custom: CustomDataset | Mapping[str, Any] | None = None,
                 immutable: Sequence[str] | None = None,
                 monotone: Mapping[str, str] | None = None) -> RawDataset:
    """Read and validate dataset ``name``.

    Parameters
    ----------
    name : a built-in dataset (:data:`~recourselab.data.BUILTIN_DATASETS`), or any name with ``custom``.
    n_synthetic, data_seed, chessboard_std : rows, seed and (chessboard) cluster std of a synthetic set.
    max_rows : a stratified subsample (seeded with ``data_seed``) of a larger dataset; None: every row.
    data_dir : folder of user-supplied files (None: ``$RECOURSELAB_DATA_DIR``).
    cache_dir : cache of downloaded registry files (None: ``$RECOURSELAB_CACHE_DIR``, then ~/.cache/recourselab).
    custom : the declaration of a user dataset (a :class:`~recourselab.config.CustomDataset` or its
        mapping, as under ``data.custom`` in params.yaml).
    immutable : the features no counterfactual may change, replacing the declared ones (None: declared).
    monotone : numerical feature -> ``"increasing"`` or ``"decreasing"`` (None: no rule), the one direction
        a counterfactual may move it, replacing the declared ones (None: declared).

    params : (positional, instead of the keywords) a params tree: the same as
        :func:`dataset_from_params`, the pipeline's form.

    Defaults are the ``prepare`` section's.

    Returns
    -------
    RawDataset with the validated frame (original units) and its fingerprint.

    Raises
    ------
    DataError
        The dataset breaks its contract: an unreadable or ragged file, a label that is not a class, a
        value outside its bounds, a row without feature values... (naming the file's lines for a CSV).
    """
    if params is not None:
        return load_dataset(name, **dataset_options(name, params))
    if custom is not None and not isinstance(custom, CustomDataset):
        custom = CustomDataset.model_validate(custom)
    spec = _spec(name, custom, immutable, monotone)
    sources = DataSources(n_synthetic=n_synthetic, data_seed=data_seed, chessboard_std=chessboard_std,
                          data_dir=None if data_dir is None else Path(data_dir),
                          cache_dir=None if cache_dir is None else Path(cache_dir))
    lines = None
    if spec.source == "custom":
        frame, source_hash, lines = read_custom(name, custom, sources)
    else:
        frame, source_hash = READERS[name](spec, sources)
    frame = validate_frame(frame, spec, lines=lines)
    favourable = python_scalar(spec.favourable)
    labels = sorted_levels(frame[spec.target])
    if favourable not in labels:
        favourable = next(lv for lv in labels if str(lv) == str(favourable))
        spec = dataclasses.replace(spec, favourable=favourable)
    if max_rows is not None and len(frame) > max_rows:
        keep = stratified_subsample(frame[spec.target].to_numpy(), max_rows, data_seed)
        frame = frame.iloc[keep].reset_index(drop=True)
        log.info("dataset %r: subsampled to %d rows (prepare.max_rows)", name, len(frame))
    levels = {c: sorted_levels(frame[c]) for c in spec.categorical}
    content = pd.util.hash_pandas_object(frame, index=True).to_numpy().tobytes()  # parsing options show here
    fingerprint = sha256_bytes(repr((source_hash, dataclasses.astuple(spec), len(frame))).encode() + content)
    return RawDataset(frame=frame, spec=spec, fingerprint=fingerprint, levels=levels)


def dataset_options(name: str, params: Params) -> dict[str, Any]:
    """The keyword arguments of :func:`load_dataset` for dataset ``name`` under ``params``.

    Raises
    ------
    DataError
        ``name`` is neither built in nor declared under ``data.custom`` (the valid names are listed).
    """
    dataset_spec(name, params)  # an unknown name lists the custom datasets too
    p = params.prepare
    return {"n_synthetic": p.n_synthetic, "data_seed": p.data_seed, "chessboard_std": p.chessboard_std,
            "max_rows": p.max_rows, "data_dir": params.data.dir, "cache_dir": params.data.cache_dir,
            "custom": params.data.custom.get(name), "immutable": p.immutable.get(name),
            "monotone": p.monotone.get(name)}


def dataset_from_params(name: str, params: Params) -> RawDataset:
    """:func:`load_dataset` with the settings of a params tree (``prepare`` and ``data``): the pipeline's form."""
    return load_dataset(name, **dataset_options(name, params))


def prepare_splits(raw: RawDataset, seed: int, fractions: tuple[float, float, float]) -> PreparedSplits:
    """Split ``raw`` for ``seed``, fit the schema on train and encode every split.

    Returns
    -------
    PreparedSplits whose tables hold ``row_id`` (row in the raw frame), the encoded feature
    columns (``schema.encoded_columns``) and ``y`` (class index; favourable = last).
    """
    spec, frame = raw.spec, raw.frame
    parts = stratified_split(frame[spec.target].to_numpy(), seed, fractions)
    schema = Schema.fit(frame.iloc[parts["train"]], dataset=spec.name, target=spec.target,
                        favourable=spec.favourable, categorical=spec.categorical,
                        integer=spec.integer, immutable=spec.immutable, monotone=dict(spec.monotone),
                        levels=raw.levels,
                        classes=raw.classes, bounds={f: (lo, hi) for f, lo, hi in spec.bounds})
    tables = {}
    for split, idx in parts.items():
        rows = frame.iloc[idx]
        table = pd.DataFrame(schema.transform(rows), columns=schema.encoded_columns)
        table.insert(0, ROW_ID, idx.astype(np.int64))
        table[LABEL] = schema.encode_target(rows[spec.target])
        tables[split] = table
    return PreparedSplits(schema=schema, tables=tables)
