"""Dataset readers: the raw files of the built-in and user-declared datasets as DataFrames.

Each reader takes the dataset's declaration and a :class:`DataSources` (where files live, the
synthetic generators' settings) and returns the raw frame with a hash of its source.
"""

from __future__ import annotations

import bz2
import codecs
import csv
import gzip
import io
import logging
import lzma
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from recourselab.config import CustomDataset
from recourselab.data import synthetic
from recourselab.data.feature import python_scalar
from recourselab.data.registry import DatasetSpec
from recourselab.data.sources import read_registry_file, resolve_user_file
from recourselab.errors import DataError
from recourselab.io import sha256_bytes, sha256_file

log = logging.getLogger(__name__)

PARQUET_SUFFIXES = (".parquet", ".pq")


@dataclass(frozen=True)
class DataSources:
    """Where a dataset's rows come from.

    Attributes
    ----------
    n_synthetic, data_seed, chessboard_std : rows, seed and (chessboard) cluster std of the synthetic generators.
    data_dir : folder of user-supplied files (None: ``$RECOURSELAB_DATA_DIR``).
    cache_dir : cache of downloaded registry files (None: ``$RECOURSELAB_CACHE_DIR``, then ~/.cache/recourselab).
    """

    n_synthetic: int
    data_seed: int
    chessboard_std: float
    data_dir: Path | None = None
    cache_dir: Path | None = None


# ---------------------------------------------------------------------------- readers
Reader = Callable[[DatasetSpec, DataSources], tuple[pd.DataFrame, str]]
_ADULT_COLUMNS = ["age", "workclass", "fnlwgt", "education", "education-num", "marital-status",
                  "occupation", "relationship", "race", "sex", "capital-gain", "capital-loss",
                  "hours-per-week", "native-country", "income"]


def _csv(data: bytes, **kw: Any) -> pd.DataFrame:
    return pd.read_csv(io.BytesIO(data), **kw)


def _read_synthetic(spec: DatasetSpec, sources: DataSources) -> tuple[pd.DataFrame, str]:
    kw: dict[str, Any] = {"n": sources.n_synthetic, "seed": sources.data_seed}
    if spec.name == "chessboard":
        kw["std"] = sources.chessboard_std
    frame = synthetic.GENERATORS[spec.name](**kw)
    return frame, sha256_bytes(repr(sorted(kw.items())).encode())


def _read_adult(spec: DatasetSpec, sources: DataSources) -> tuple[pd.DataFrame, str]:
    cache = sources.cache_dir
    parts = []
    for key, skip in (("adult.data", 0), ("adult.test", 1)):
        data = read_registry_file(key, cache)
        parts.append(_csv(data, header=None, names=_ADULT_COLUMNS, skiprows=skip,
                          skipinitialspace=True, na_values="?"))
    frame = pd.concat(parts, ignore_index=True).dropna(subset=["income"])
    frame["income"] = frame["income"].str.rstrip(".")
    return frame, "adult.data+adult.test"


def _read_compas(spec: DatasetSpec, sources: DataSources) -> tuple[pd.DataFrame, str]:
    frame = _csv(read_registry_file("compas.csv", sources.cache_dir))
    frame = frame.loc[:, ~frame.columns.duplicated()]
    # ProPublica's filter: charge within 30 days of screening, known recidivism, no ordinary traffic.
    keep = (frame["days_b_screening_arrest"].between(-30, 30) & (frame["is_recid"] != -1)
            & (frame["c_charge_degree"] != "O") & (frame["score_text"] != "N/A"))
    return frame.loc[keep].reset_index(drop=True), "compas.csv"


def _read_german(spec: DatasetSpec, sources: DataSources) -> tuple[pd.DataFrame, str]:
    return _csv(read_registry_file("germancredit.csv", sources.cache_dir)), "germancredit.csv"


def _read_cardio(spec: DatasetSpec, sources: DataSources) -> tuple[pd.DataFrame, str]:
    return _csv(read_registry_file("cardio.csv", sources.cache_dir), sep=";"), "cardio.csv"


def _user_files(spec: DatasetSpec, sources: DataSources) -> list[Path]:
    return [resolve_user_file(f, sources.data_dir, dataset=spec.name) for f in spec.files]


def _read_heloc(spec: DatasetSpec, sources: DataSources) -> tuple[pd.DataFrame, str]:
    (path,) = _user_files(spec, sources)
    frame = pd.read_csv(path)
    feats = [c for c in frame.columns if c != spec.target]
    values = frame[feats].apply(pd.to_numeric, errors="coerce")
    no_record = (values == -9).all(axis=1)
    frame = frame.loc[~no_record].reset_index(drop=True)
    # -7 (condition not met), -8 (no usable trades), -9 (no record): missing -> train median.
    frame[feats] = frame[feats].mask(frame[feats].isin([-7, -8, -9]))
    return frame, sha256_file(path)


def _read_blood(spec: DatasetSpec, sources: DataSources) -> tuple[pd.DataFrame, str]:
    (path,) = _user_files(spec, sources)
    return pd.read_csv(path), sha256_file(path)


def _read_hotel(spec: DatasetSpec, sources: DataSources) -> tuple[pd.DataFrame, str]:
    paths = _user_files(spec, sources)
    parts = []
    for path, hotel in zip(paths, ("City Hotel", "Resort Hotel"), strict=True):
        part = pd.read_csv(path, dtype={"agent": str, "company": str})
        part.insert(0, "hotel", hotel)
        parts.append(part)
    frame = pd.concat(parts, ignore_index=True)
    for col in frame.select_dtypes(include=["object", "string"]).columns:
        frame[col] = frame[col].str.strip()
    # NULL agent/company means "booked without one": a level of its own, not a missing value.
    frame[["agent", "company"]] = frame[["agent", "company"]].replace("NULL", "none")
    frame["country"] = frame["country"].replace("NULL", np.nan)
    return frame, "+".join(sha256_file(p) for p in paths)


READERS: dict[str, Reader] = {
    "moons": _read_synthetic, "circles": _read_synthetic, "spirals": _read_synthetic,
    "chessboard": _read_synthetic, "adult": _read_adult, "compas": _read_compas,
    "german": _read_german, "cardio": _read_cardio, "heloc": _read_heloc, "blood": _read_blood,
    "hotel": _read_hotel,
}


def custom_spec(name: str, decl: CustomDataset) -> DatasetSpec:
    """A :class:`DatasetSpec` from a ``data.custom`` declaration in params.yaml."""
    return DatasetSpec(name=name, target=decl.target, favourable=decl.favourable, source="custom",
                       description=f"user dataset from {decl.path}",
                       categorical=tuple(decl.categorical), integer=tuple(decl.integer),
                       immutable=tuple(decl.immutable), monotone=tuple(decl.monotone.items()),
                       drop=tuple(decl.drop),
                       files=(str(decl.path),),
                       classes=None if decl.classes is None else tuple(decl.classes),
                       on_bad_label=decl.on_bad_label,
                       bounds=tuple((f, lo, hi) for f, (lo, hi) in decl.bounds.items()))


def read_custom(name: str, decl: CustomDataset, sources: DataSources) -> tuple[pd.DataFrame, str, np.ndarray | None]:
    """Frame, sha256 and (for a CSV) the 1-based file line of each row of a ``data.custom`` dataset."""
    path = resolve_user_file(decl.path, sources.data_dir, dataset=name, sha256=decl.sha256, known=False)
    suffixes = path.suffixes
    lines = None
    try:
        if suffixes and suffixes[-1].lower() in PARQUET_SUFFIXES:
            frame = pd.read_parquet(path)
        else:
            frame, lines = _read_custom_csv(path, decl, name)
    except DataError:
        raise
    except Exception as err:  # noqa: BLE001 - re-raised with the file named
        raise DataError(f"dataset {name!r}: cannot read {path}: {err}") from err
    return frame, sha256_file(path), lines


def _prints_as(value: Any, text: Any) -> bool:
    """True when a value pandas parsed from a CSV cell prints back as the cell's text."""
    if pd.isna(text) or pd.isna(value):
        return bool(pd.isna(text) and pd.isna(value))
    value = python_scalar(value)
    if isinstance(value, bool):
        return str(value).lower() == text.lower()
    if isinstance(value, float) and value.is_integer():  # integers of a column with missing cells
        return text in (str(value), str(int(value)))
    return str(value) == text


def _unzip(data: bytes) -> bytes:
    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        names = [n for n in zf.namelist() if not n.endswith("/")]
        if len(names) != 1:
            raise ValueError(f"a zipped CSV must hold exactly one file, this one holds {len(names)}")
        return zf.read(names[0])


#: Compressed CSV endings and their openers (what pandas would infer from the name).
_DECOMPRESS: dict[str, Callable[[bytes], bytes]] = {
    ".gz": gzip.decompress, ".bz2": bz2.decompress, ".xz": lzma.decompress, ".zip": _unzip}


def _decode_csv(path: Path, encoding: str, name: str) -> str:
    """The text of a (possibly compressed) CSV file; a decode error names its line and the option.

    A UTF-8 file may start with a byte-order mark (dropped, as pandas does).
    """
    data = path.read_bytes()
    suffix = path.suffix.lower()
    if suffix in _DECOMPRESS:
        data = _DECOMPRESS[suffix](data)
    elif suffix in (".zst", ".tar", ".tgz"):
        raise DataError(f"dataset {name!r}: {path}: {suffix} files are not read; decompress it or use .gz, .bz2, "
                        ".xz or .zip")
    codec = codecs.lookup(encoding).name
    try:
        return data.decode("utf-8-sig" if codec == "utf-8" else encoding)
    except UnicodeDecodeError as err:
        line = data.count(b"\n", 0, err.start) + 1
        raise DataError(f"dataset {name!r}: {path} is not {encoding} text: byte 0x{data[err.start]:02x} on line "
                        f"{line} cannot be decoded ({err.reason}); give the file's encoding with `encoding:` in its "
                        "data.custom entry (e.g. latin-1 or cp1252 for Western European text)") from None


def _record_lines(text: str, sep: str, path: Path, name: str) -> np.ndarray:
    """1-based file line where each data record of a CSV text starts (header = line 1). Shape (n,).

    Blank lines are skipped, as pandas skips them.

    Raises
    ------
    DataError
        A record with more or fewer fields than the header, naming its line (pandas would pad a short
        one with missing values).
    """
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=sep)
    try:
        header = next(reader, None)
        if header is None:
            raise DataError(f"dataset {name!r}: {path} is empty")
        width, starts, ragged = len(header), [], []
        for record in reader:
            if not record:
                continue
            start = reader.line_num - sum(field.count("\n") for field in record)
            if len(record) != width:
                ragged.append((start, len(record)))
            starts.append(start)
    except csv.Error as err:
        raise DataError(f"dataset {name!r}: {path} line {reader.line_num}: {err}") from None
    if ragged:
        shown = ", ".join(f"line {line} has {n}" for line, n in ragged[:5])
        raise DataError(f"dataset {name!r}: {path}: {len(ragged)} row(s) do not have the header's {width} fields "
                        f"({shown}{', ...' if len(ragged) > 5 else ''}); fix those rows (a quoted field holding "
                        f"the separator {sep!r}, a missing or extra separator), or set `sep` if the file uses another "
                        "separator")
    return np.array(starts, dtype=np.int64)


def _read_custom_csv(path: Path, decl: CustomDataset, name: str) -> tuple[pd.DataFrame, np.ndarray | None]:
    """Read a user CSV; categorical and target columns keep the file's text where parsing would change it.

    pandas turns cells such as ``NA`` or ``None`` into missing values and ``01`` into ``1``. For
    numerical columns that is wanted; a categorical or label column keeps its parsed values only
    when they print back as the file's text (so ``1, 2`` stay integers, ``True`` a boolean), and
    otherwise keeps the text, with only empty cells missing.

    Returns
    -------
    The frame and the 1-based file line of each of its rows (n,), or None where they cannot be told.
    """
    text = _decode_csv(path, decl.encoding, name)
    lines = _record_lines(text, decl.sep, path, name)

    def read(**kw: Any) -> pd.DataFrame:
        return pd.read_csv(io.StringIO(text), sep=decl.sep, **kw)

    header = read(header=None, nrows=1, dtype=str, keep_default_na=False).iloc[0]
    twice = sorted({str(c) for c in header[header.duplicated()]})
    if twice:
        raise DataError(f"dataset {name!r}: column(s) {twice} appear more than once in the header of {path}")
    frame = read()
    text_cols = [c for c in dict.fromkeys([*decl.categorical, decl.target]) if c in frame.columns]
    if text_cols:
        cells = read(usecols=text_cols, dtype=str, keep_default_na=False)
        for col in text_cols:
            raw = cells[col].mask(cells[col] == "")
            if not all(_prints_as(v, t) for v, t in zip(frame[col], raw, strict=True)):
                frame[col] = raw.astype(object)
    if len(lines) != len(frame):
        log.debug("dataset %r: %d CSV records but %d parsed rows; row numbers are reported instead of lines",
                  name, len(lines), len(frame))
        return frame, None
    return frame, lines


