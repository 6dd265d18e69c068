"""Dataset loaders: raw file -> validated raw DataFrame -> per-seed encoded splits.

:func:`load_dataset` reads a built-in or user-declared dataset, drops the declared
columns, and validates it against the dataset's contract: declared columns present, every
CSV row with the header's fields, numeric columns numeric, the labels exactly the declared
classes (two by default, the favourable one among them), values within their declared bounds,
no row without feature values. Errors about values name the file's lines (header = line 1).
:func:`prepare_splits` does the per-seed work of the ``prepare`` stage: stratified split,
schema fitted on train, encoded tables.
"""

from __future__ import annotations

import bz2
import codecs
import csv
import dataclasses
import gzip
import io
import logging
import lzma
import math
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from recourselab.config import CustomDataset, Params
from recourselab.data import synthetic
from recourselab.data.registry import BUILTIN_DATASETS, DatasetSpec
from recourselab.data.schema import Feature, Schema, format_interval, format_number, python_scalar, sorted_levels
from recourselab.data.sources import read_registry_file, resolve_user_file
from recourselab.data.split import stratified_split, stratified_subsample
from recourselab.errors import DataError, MissingArtifactError
from recourselab.io import read_parquet, sha256_bytes, sha256_file

log = logging.getLogger(__name__)

ROW_ID = "row_id"
LABEL = "y"


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
PARQUET_SUFFIXES = (".parquet", ".pq")


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


# ---------------------------------------------------------------------------- readers
Reader = Callable[[DatasetSpec, Params], tuple[pd.DataFrame, str]]
_ADULT_COLUMNS = ["age", "workclass", "fnlwgt", "education", "education-num", "marital-status",
                  "occupation", "relationship", "race", "sex", "capital-gain", "capital-loss",
                  "hours-per-week", "native-country", "income"]


def _csv(data: bytes, **kw: Any) -> pd.DataFrame:
    return pd.read_csv(io.BytesIO(data), **kw)


def _read_synthetic(spec: DatasetSpec, params: Params) -> tuple[pd.DataFrame, str]:
    p = params.prepare
    kw: dict[str, Any] = {"n": p.n_synthetic, "seed": p.data_seed}
    if spec.name == "chessboard":
        kw["std"] = p.chessboard_std
    frame = synthetic.GENERATORS[spec.name](**kw)
    return frame, sha256_bytes(repr(sorted(kw.items())).encode())


def _read_adult(spec: DatasetSpec, params: Params) -> tuple[pd.DataFrame, str]:
    cache = params.data.cache_dir
    parts = []
    for key, skip in (("adult.data", 0), ("adult.test", 1)):
        data = read_registry_file(key, cache)
        parts.append(_csv(data, header=None, names=_ADULT_COLUMNS, skiprows=skip,
                          skipinitialspace=True, na_values="?"))
    frame = pd.concat(parts, ignore_index=True).dropna(subset=["income"])
    frame["income"] = frame["income"].str.rstrip(".")
    return frame, "adult.data+adult.test"


def _read_compas(spec: DatasetSpec, params: Params) -> tuple[pd.DataFrame, str]:
    frame = _csv(read_registry_file("compas.csv", params.data.cache_dir))
    frame = frame.loc[:, ~frame.columns.duplicated()]
    # ProPublica's filter: charge within 30 days of screening, known recidivism, no ordinary traffic.
    keep = (frame["days_b_screening_arrest"].between(-30, 30) & (frame["is_recid"] != -1)
            & (frame["c_charge_degree"] != "O") & (frame["score_text"] != "N/A"))
    return frame.loc[keep].reset_index(drop=True), "compas.csv"


def _read_german(spec: DatasetSpec, params: Params) -> tuple[pd.DataFrame, str]:
    return _csv(read_registry_file("germancredit.csv", params.data.cache_dir)), "germancredit.csv"


def _read_cardio(spec: DatasetSpec, params: Params) -> tuple[pd.DataFrame, str]:
    return _csv(read_registry_file("cardio.csv", params.data.cache_dir), sep=";"), "cardio.csv"


def _user_files(spec: DatasetSpec, params: Params) -> list[Path]:
    return [resolve_user_file(f, params.data.dir, dataset=spec.name) for f in spec.files]


def _read_heloc(spec: DatasetSpec, params: Params) -> tuple[pd.DataFrame, str]:
    (path,) = _user_files(spec, params)
    frame = pd.read_csv(path)
    feats = [c for c in frame.columns if c != spec.target]
    values = frame[feats].apply(pd.to_numeric, errors="coerce")
    no_record = (values == -9).all(axis=1)
    frame = frame.loc[~no_record].reset_index(drop=True)
    # -7 (condition not met), -8 (no usable trades), -9 (no record): missing -> train median.
    frame[feats] = frame[feats].mask(frame[feats].isin([-7, -8, -9]))
    return frame, sha256_file(path)


def _read_blood(spec: DatasetSpec, params: Params) -> tuple[pd.DataFrame, str]:
    (path,) = _user_files(spec, params)
    return pd.read_csv(path), sha256_file(path)


def _read_hotel(spec: DatasetSpec, params: Params) -> tuple[pd.DataFrame, str]:
    paths = _user_files(spec, params)
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
                       immutable=tuple(decl.immutable), drop=tuple(decl.drop),
                       files=(str(decl.path),),
                       classes=None if decl.classes is None else tuple(decl.classes),
                       on_bad_label=decl.on_bad_label,
                       bounds=tuple((f, lo, hi) for f, (lo, hi) in decl.bounds.items()))


def _read_custom(name: str, decl: CustomDataset, params: Params) -> tuple[pd.DataFrame, str, np.ndarray | None]:
    """Frame, sha256 and (for a CSV) the 1-based file line of each row of a ``data.custom`` dataset."""
    path = resolve_user_file(decl.path, params.data.dir, dataset=name, sha256=decl.sha256, known=False)
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


def dataset_spec(name: str, params: Params) -> DatasetSpec:
    """The declaration of dataset ``name`` (built-in or ``data.custom``).

    ``prepare.immutable[name]``, when present, replaces the declared immutable features.
    """
    if name in params.data.custom:
        spec = custom_spec(name, params.data.custom[name])
    elif name in BUILTIN_DATASETS:
        spec = BUILTIN_DATASETS[name]
    else:
        valid = sorted(BUILTIN_DATASETS) + sorted(params.data.custom)
        raise DataError(f"unknown dataset {name!r}; valid datasets: {', '.join(valid)}")
    immutable = tuple(params.prepare.immutable.get(name, spec.immutable))
    return spec if immutable == spec.immutable else dataclasses.replace(spec, immutable=immutable)


# ---------------------------------------------------------------------------- validation
def _where(at: np.ndarray, word: str, mask: np.ndarray, k: int = 3) -> str:
    """``"lines 4, 9, 12"``: where the first ``k`` rows of ``mask`` are (``at``: their lines or row numbers)."""
    shown = at[np.asarray(mask, dtype=bool)][:k]
    return f"{word}{'s' if len(shown) > 1 else ''} {', '.join(str(int(v)) for v in shown)}"


def _match_label(value: Any, labels: list[Any]) -> Any:
    """The label of ``labels`` that ``value`` (from YAML or the registry) means, or None.

    An exact match first, else the one label that prints the same (YAML ``"1"`` for an integer column).
    """
    value = python_scalar(value)
    exact = [lv for lv in labels if lv == value]
    if exact:
        return exact[0]
    same = [lv for lv in labels if str(lv) == str(value)]
    return same[0] if len(same) == 1 else None


def _check_labels(frame: pd.DataFrame, spec: DatasetSpec, at: np.ndarray, word: str
                  ) -> tuple[pd.DataFrame, np.ndarray]:
    """The label contract: the favourable label present, every label a class (declared, or exactly two).

    Returns the frame and ``at`` without the rows of undeclared labels when ``on_bad_label`` is
    ``"drop"``; otherwise unchanged.

    Raises
    ------
    DataError
        A single class; the favourable label missing; a declared class without rows; a label that
        is not a class (naming it, its row count and three of its lines).
    """
    name, target = spec.name, spec.target
    labels = sorted_levels(frame[target])
    if len(labels) < 2:
        raise DataError(f"dataset {name!r}: target {target!r} has a single class {labels}; "
                        "counterfactuals need at least two")
    favourable = _match_label(spec.favourable, labels)
    if favourable is None:  # a YAML favourable "1" for an integer column (or the reverse) is matched above
        raise DataError(f"dataset {name!r}: favourable label {spec.favourable!r} is not a value "
                        f"of target {target!r}; labels: {labels}")
    keys = np.array([python_scalar(v) for v in frame[target]], dtype=object)
    if spec.classes is None:
        others = [lv for lv in labels if lv is not favourable]
        counts = {lv: int((keys == lv).sum()) for lv in others} if len(others) > 1 else {}
        main = max(others, key=lambda lv: counts.get(lv, 0))  # max keeps the first of equals: stable
        classes = [favourable, main]
    else:
        classes = [_match_label(c, labels) for c in spec.classes]
        absent = [c for c, m in zip(spec.classes, classes, strict=True) if m is None]
        if absent:
            raise DataError(f"dataset {name!r}: declared class(es) {absent} of target {target!r} have no rows; "
                            f"labels in the file: {labels}")
    stray = [lv for lv in labels if not any(lv is c for c in classes)]
    if not stray:
        return frame, at
    kept = set(classes)
    bad = np.array([k not in kept for k in keys], dtype=bool)
    parts = []
    for lv in stray[:5]:
        rows = keys == lv
        parts.append(f"{lv!r} ({int(rows.sum())} row{'s' if rows.sum() > 1 else ''}, {_where(at, word, rows)})")
    found = "; ".join(parts) + (f"; and {len(stray) - 5} more values" if len(stray) > 5 else "")
    if spec.on_bad_label == "drop":
        log.warning("dataset %r: dropped %d of %d rows whose label is not one of the classes %s "
                    "(on_bad_label: drop): %s", name, int(bad.sum()), len(keys), classes, found)
        keep = ~bad
        return frame.loc[keep].reset_index(drop=True), at[keep]
    if spec.classes is None:
        raise DataError(
            f"dataset {name!r}: target {target!r} has {len(labels)} values, but a dataset without declared "
            f"`classes` has exactly two: the favourable {favourable!r} and one other (here {main!r}, the most "
            f"frequent). Not a class: {found}. Fix those rows; or drop them with `classes: {classes}` and "
            "`on_bad_label: drop` in the dataset's data.custom entry; or, for a task with more classes, list "
            "them all under `classes`")
    raise DataError(f"dataset {name!r}: target {target!r} has values that are not among the declared classes "
                    f"{list(spec.classes)}: {found}. Fix those rows, add the values to `classes`, or set "
                    "`on_bad_label: drop` to drop them")


def _check_bounds(name: str, col: str, values: np.ndarray, bounds: tuple[float | None, float | None],
                  at: np.ndarray, word: str) -> None:
    """Every given value of numerical feature ``col`` (n,) within its declared bounds (NaN passes)."""
    lo, hi = bounds
    outside = np.zeros(len(values), dtype=bool)
    if lo is not None:
        outside |= values < lo
    if hi is not None:
        outside |= values > hi
    if outside.any():
        idx = np.flatnonzero(outside)[:3]
        shown = ", ".join(f"{format_number(values[i])} on {word} {int(at[i])}" for i in idx)
        raise DataError(f"dataset {name!r}: {int(outside.sum())} value(s) of {col!r} outside its bounds "
                        f"{format_interval(lo, hi)}: {shown}; fix those rows, or widen bounds.{col} if the "
                        "values are real")


def validate_frame(frame: pd.DataFrame, spec: DatasetSpec, *, lines: np.ndarray | None = None) -> pd.DataFrame:
    """Apply ``spec`` to a raw frame: drop columns, check roles, types, labels and bounds.

    Parameters
    ----------
    frame : raw table (n, columns), as read from the file.
    spec : the dataset's declaration.
    lines : 1-based file line of each row (n,) (header = line 1), named in errors; default: errors
        name 0-based row numbers of ``frame``.

    Returns
    -------
    The frame restricted to the feature columns followed by the target (rows without a label,
    and with ``on_bad_label: drop`` the rows of undeclared labels, removed).

    Raises
    ------
    DataError
        Naming the dataset, the offending column(s), and for bad values three of their lines.
    """
    name = spec.name
    if lines is not None and len(lines) == len(frame):
        at, word = np.asarray(lines, dtype=np.int64), "line"
    else:
        at, word = np.arange(len(frame)), "row"
    twice = sorted({str(c) for c in frame.columns[frame.columns.duplicated()]})
    if twice:
        raise DataError(f"dataset {name!r}: column(s) {twice} appear more than once; rename or drop the copies")
    bounds = {f: (lo, hi) for f, lo, hi in spec.bounds}
    declared = {"target": [spec.target], "categorical": spec.categorical, "integer": spec.integer,
                "immutable": spec.immutable, "drop": spec.drop, "features": spec.features or (),
                "bounds": list(bounds)}
    for role, cols in declared.items():
        missing = [c for c in cols if c not in frame.columns]
        if missing:
            where = " (from prepare.immutable or the dataset's declaration)" if role == "immutable" else ""
            raise DataError(f"dataset {name!r}: {role} column(s) {missing}{where} not found in the file; "
                            f"available columns: {list(frame.columns)}")
    if spec.target in spec.drop:
        raise DataError(f"dataset {name!r}: the target {spec.target!r} is listed under drop")
    frame = frame.drop(columns=list(spec.drop))
    features = list(spec.features) if spec.features else [c for c in frame.columns if c != spec.target]
    reserved = sorted({ROW_ID, LABEL} & set(features))
    if reserved:
        raise DataError(f"dataset {name!r}: feature column(s) {reserved} use names the prepared tables "
                        f"reserve ({ROW_ID!r}, {LABEL!r}); rename or drop them")
    for role in ("categorical", "integer", "immutable", "bounds"):
        stray = [c for c in declared[role] if c not in features]
        if stray:
            raise DataError(f"dataset {name!r}: {role} column(s) {stray} are not features")
    both = sorted(set(spec.categorical) & set(spec.integer))
    if both:
        raise DataError(f"dataset {name!r}: column(s) {both} declared both categorical and integer")
    bounded_levels = sorted(set(spec.categorical) & set(bounds))
    if bounded_levels:
        raise DataError(f"dataset {name!r}: bounds apply to numerical features; {bounded_levels} are categorical")
    clashes = sorted({enc for c in spec.categorical for enc in Feature(c, "categorical").encoded_names}
                     & set(features))
    if clashes:
        raise DataError(f"dataset {name!r}: feature column(s) {clashes} have the names of a categorical "
                        "feature's encoded (cos, sin) columns; rename them")
    frame = frame[features + [spec.target]].copy()

    labelled = frame[spec.target].notna().to_numpy()
    if not labelled.all():
        log.warning("dataset %r: dropping %d rows without a label (%s)", name, int((~labelled).sum()),
                    _where(at, word, ~labelled))
        frame, at = frame.loc[labelled].reset_index(drop=True), at[labelled]
        target = frame[spec.target]
        # Missing labels turn an integer column into floats: restore the integers.
        if pd.api.types.is_float_dtype(target) and (target == np.round(target)).all():
            frame[spec.target] = target.astype(np.int64)
    empty = [c for c in features if frame[c].isna().all()]
    if empty:
        raise DataError(f"dataset {name!r}: feature column(s) {empty} have no values (all missing); drop them")
    for col in [*spec.categorical, spec.target]:
        _check_levels(name, col, frame[col])
    frame, at = _check_labels(frame, spec, at, word)
    for col in features:
        if col in spec.categorical:
            continue
        raw = frame[col]
        if (pd.api.types.is_datetime64_any_dtype(raw) or pd.api.types.is_timedelta64_dtype(raw)
                or isinstance(raw.dtype, pd.PeriodDtype)):
            raise DataError(f"dataset {name!r}: column {col!r} holds dates or durations ({raw.dtype}); convert it "
                            "to a number (e.g. days since an event) or to text")
        num = pd.to_numeric(raw, errors="coerce")
        bad = (num.isna() & raw.notna()).to_numpy()
        if bad.any():
            examples = sorted({str(v) for v in raw[bad].head(5)})
            raise DataError(f"dataset {name!r}: non-numeric values in numerical column {col!r}, "
                            f"e.g. {examples} ({_where(at, word, bad)}; declare it categorical if it is)")
        values = num.to_numpy(dtype=float)
        infinite = np.isinf(values)
        if infinite.any():
            raise DataError(f"dataset {name!r}: {int(infinite.sum())} infinite value(s) in numerical column "
                            f"{col!r} ({_where(at, word, infinite)}); use a finite value or leave the cell empty "
                            "(missing values are median-imputed)")
        if col in spec.integer:
            fractional = ~np.isnan(values) & (values != np.round(values))
            if fractional.any():
                raise DataError(f"dataset {name!r}: integer column {col!r} has non-integer values, e.g. "
                                f"{values[fractional][:3].tolist()} ({_where(at, word, fractional)}); remove it "
                                "from `integer` or round the values")
        if col in bounds:
            _check_bounds(name, col, values, bounds[col], at, word)
        frame[col] = num.astype(float)
    if frame[features].shape[1] == 0:
        raise DataError(f"dataset {name!r}: no feature columns left")
    blank = frame[features].isna().all(axis=1).to_numpy()
    if blank.any():
        raise DataError(f"dataset {name!r}: {int(blank.sum())} row(s) have a label but no feature value "
                        f"({_where(at, word, blank)}); remove them (missing values are imputed, and a row "
                        "without any would become a made-up typical row)")
    return frame

def _check_levels(name: str, col: str, values: pd.Series) -> None:
    """Categorical and label values must be text, integers, booleans or finite numbers (they go to JSON).

    Text levels that differ only in surrounding spaces are logged: they stay distinct levels.
    """
    levels = sorted_levels(values)
    bad = [v for v in levels if not isinstance(v, (str, int, float)) or (isinstance(v, float) and not math.isfinite(v))]
    if bad:
        raise DataError(f"dataset {name!r}: column {col!r} holds values a category cannot have, e.g. "
                        f"{[str(v) for v in bad[:3]]} ({type(bad[0]).__name__}); categories and labels must be "
                        "text, integers, booleans or finite numbers")
    stripped: dict[str, list[str]] = {}
    for v in levels:
        if isinstance(v, str):
            stripped.setdefault(v.strip(), []).append(v)
    spaced = [group for group in stripped.values() if len(group) > 1]
    if spaced:
        log.warning("dataset %r: column %r has values that differ only in surrounding spaces, kept as distinct "
                    "levels: %s", name, col, spaced[:3])


def load_dataset(name: str, params: Params) -> RawDataset:
    """Read and validate dataset ``name``.

    Returns
    -------
    RawDataset with the validated frame (original units) and its fingerprint.

    Raises
    ------
    DataError
        The dataset breaks its contract: an unreadable or ragged file, a label that is not a class, a
        value outside its bounds, a row without feature values... (naming the file's lines for a CSV).
    """
    spec = dataset_spec(name, params)
    lines = None
    if spec.source == "custom":
        frame, source_hash, lines = _read_custom(name, params.data.custom[name], params)
    else:
        frame, source_hash = READERS[name](spec, params)
    frame = validate_frame(frame, spec, lines=lines)
    favourable = python_scalar(spec.favourable)
    labels = sorted_levels(frame[spec.target])
    if favourable not in labels:
        favourable = next(lv for lv in labels if str(lv) == str(favourable))
        spec = dataclasses.replace(spec, favourable=favourable)
    max_rows = params.prepare.max_rows
    if max_rows is not None and len(frame) > max_rows:
        keep = stratified_subsample(frame[spec.target].to_numpy(), max_rows, params.prepare.data_seed)
        frame = frame.iloc[keep].reset_index(drop=True)
        log.info("dataset %r: subsampled to %d rows (prepare.max_rows)", name, len(frame))
    levels = {c: sorted_levels(frame[c]) for c in spec.categorical}
    content = pd.util.hash_pandas_object(frame, index=True).to_numpy().tobytes()  # parsing options show here
    fingerprint = sha256_bytes(repr((source_hash, dataclasses.astuple(spec), len(frame))).encode() + content)
    return RawDataset(frame=frame, spec=spec, fingerprint=fingerprint, levels=levels)


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
                        integer=spec.integer, immutable=spec.immutable, levels=raw.levels,
                        classes=raw.classes, bounds={f: (lo, hi) for f, lo, hi in spec.bounds})
    tables = {}
    for split, idx in parts.items():
        rows = frame.iloc[idx]
        table = pd.DataFrame(schema.transform(rows), columns=schema.encoded_columns)
        table.insert(0, ROW_ID, idx.astype(np.int64))
        table[LABEL] = schema.encode_target(rows[spec.target])
        tables[split] = table
    return PreparedSplits(schema=schema, tables=tables)
