"""The contract of a raw dataset: :func:`validate_frame` checks a frame against its declaration.

Declared columns present, numeric columns numeric, the labels exactly the declared classes (two
by default, the favourable one among them), values within their declared bounds, no row without
feature values; errors about values name the file's lines (header = line 1).
"""

from __future__ import annotations

import logging
import math
from typing import Any

import numpy as np
import pandas as pd

from recourselab.data.feature import Feature, format_interval, format_number, python_scalar, sorted_levels
from recourselab.data.registry import DatasetSpec
from recourselab.errors import DataError

log = logging.getLogger(__name__)

#: Columns of the prepared tables: the raw row of each encoded row, and its class index.
ROW_ID = "row_id"
LABEL = "y"


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


