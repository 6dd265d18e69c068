"""Raw rows to be explained: every problem of each row (:func:`row_problems`), and rows validated and
encoded for a model (:func:`encode_rows`)."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from recourselab.data.feature import float_array, format_interval, format_number, python_scalar
from recourselab.errors import DataError

if TYPE_CHECKING:
    from recourselab.data.schema import Schema

logger = logging.getLogger(__name__)


#: Kinds of :class:`RowProblem`, in the order :func:`row_problems` looks for them.
ROW_PROBLEMS = ("missing_column", "all_missing", "missing_value", "non_numeric", "infinite", "unknown_category",
                "out_of_bounds", "out_of_range")


@dataclass(frozen=True)
class RowProblem:
    """One reason why a raw row is not a valid input as given.

    Attributes
    ----------
    row : the row's index label in the checked frame.
    position : its 0-based position there.
    kind : one of :data:`ROW_PROBLEMS`: ``missing_column`` (the input lacks the feature's column),
        ``all_missing`` (no feature has a value), ``missing_value`` (NaN; would be imputed),
        ``non_numeric``, ``infinite``, ``unknown_category``, ``out_of_bounds`` (outside the
        feature's declared bounds), ``out_of_range`` (outside the training data's range).
    column : the feature concerned (None for ``all_missing``).
    value : the offending value (None where there is none).
    message : what is wrong, in the user's terms (``str(problem)`` adds the row).
    """

    row: Any
    position: int
    kind: str
    column: str | None
    value: Any
    message: str

    def __str__(self) -> str:
        return f"row {self.row}: {self.message}"


def row_problems(schema: Schema, frame: pd.DataFrame) -> list[RowProblem]:
    """Every problem of raw rows that are to be explained, row by row.

    Checks, per row: the feature columns present, at least one feature value, and per
    feature a value that is present, numeric and finite (numerical) or a known level
    (categorical), within the feature's declared bounds and within the training range. A
    row whose every feature is missing gets the single problem ``all_missing``.

    Parameters
    ----------
    schema : the dataset's fitted schema.
    frame : DataFrame (n, ...) of rows in original units.

    Returns
    -------
    list of :class:`RowProblem`, by row position then feature order; empty when every row is valid.

    Raises
    ------
    DataError
        A feature column given more than once (no row can be read unambiguously).
    """
    twice = sorted({str(c) for c in frame.columns[frame.columns.duplicated()] if c in schema.feature_names})
    if twice:
        raise DataError(f"dataset {schema.dataset!r}: input has feature columns {twice} more than once")
    n = len(frame)
    present = [f for f in schema.features if f.name in frame.columns]
    found: list[tuple[int, int, str, str | None, Any, str]] = []  # (position, feature order, ...)
    order = {f.name: k for k, f in enumerate(schema.features)}
    blank = (frame[[f.name for f in present]].isna().all(axis=1).to_numpy() if present
             else np.ones(n, dtype=bool))
    for pos in np.flatnonzero(blank):
        found.append((pos, -1, "all_missing", None, None, "every feature is missing; a row needs its values"))
    for f in schema.features:
        if f.name not in frame.columns:
            found += [(pos, order[f.name], "missing_column", f.name, None,
                       f"the input has no column {f.name!r}") for pos in range(n) if not blank[pos]]
    for f in present:
        col = frame[f.name].reset_index(drop=True)
        k = order[f.name]
        for pos in np.flatnonzero(col.isna().to_numpy() & ~blank):
            fill = format_number(f.median) if f.kind == "numerical" else repr(f.mode)
            found.append((pos, k, "missing_value", f.name, None,
                          f"{f.name} is missing (it would be imputed as {fill}, the training "
                          f"{'median' if f.kind == 'numerical' else 'most frequent level'})"))
        if f.kind == "categorical":
            known = set(f.levels)
            unknown = [v for v in pd.unique(col.dropna()) if python_scalar(v) not in known]
            for pos in np.flatnonzero(col.isin(unknown).to_numpy()) if unknown else ():
                v = python_scalar(col[pos])
                found.append((pos, k, "unknown_category", f.name, v,
                              f"{f.name} = {v!r} is not a known level (known: "
                              f"{', '.join(repr(lv) for lv in f.levels[:30])})"))
            continue
        values = pd.to_numeric(col, errors="coerce").to_numpy(dtype=float)
        for pos in np.flatnonzero(np.isnan(values) & col.notna().to_numpy()):
            found.append((pos, k, "non_numeric", f.name, col[pos], f"{f.name} = {col[pos]!r} is not a number"))
        for pos in np.flatnonzero(np.isinf(values)):
            found.append((pos, k, "infinite", f.name, values[pos], f"{f.name} = {values[pos]} is not finite"))
        finite = np.where(np.isfinite(values), values, np.nan)
        outside = f.outside_bounds(finite)
        for pos in np.flatnonzero(outside):
            found.append((pos, k, "out_of_bounds", f.name, values[pos], f"{f.name} = "
                          f"{format_number(values[pos])} is outside its bounds {format_interval(*f.bounds)}"))
        off = ~outside & ((finite < f.lower) | (finite > f.upper))
        for pos in np.flatnonzero(off):
            found.append((pos, k, "out_of_range", f.name, values[pos],
                          f"{f.name} = {format_number(values[pos])} is outside the training range "
                          f"{format_interval(f.lower, f.upper)}"))
    labels = frame.index
    return [RowProblem(row=python_scalar(labels[pos]), position=int(pos), kind=kind, column=col_name,
                       value=python_scalar(value) if value is not None else None, message=message)
            for pos, _, kind, col_name, value, message in sorted(found, key=lambda t: (t[0], t[1]))]


def encode_rows(X: np.ndarray | pd.DataFrame, schema: Schema | None = None, *, what: str = "rows",
                width: int | None = None) -> np.ndarray:
    """Validate rows for a model: a raw DataFrame (encoded through ``schema``) or encoded rows.

    Parameters
    ----------
    X : DataFrame in original units (missing values are imputed like the training data, with
        the training median / most frequent level, and logged as a warning), or array-like of
        shape (n, d) already encoded (NaN is an error).
    schema : encodes DataFrames and fixes the expected width ``schema.n_encoded``.
    what : how error messages call the rows ("query", "factuals", ...).
    width : expected width when there is no schema.

    Returns
    -------
    float64 ndarray of shape (n, d), all finite.

    Raises
    ------
    DataError
        A DataFrame without schema, non-numeric values, a row without any feature value, a value
        outside its feature's declared bounds, not 2-D, wrong width, NaN or inf.
    """
    if isinstance(X, pd.DataFrame):
        if schema is None:
            raise DataError(f"a DataFrame {what} needs a schema to encode it; pass schema= or encoded rows")
        schema.check_columns(X)
        refused = [p for p in schema.check_rows(X) if p.kind in ("all_missing", "out_of_bounds")]
        if refused:
            raise DataError(f"dataset {schema.dataset!r}: {len({p.position for p in refused})} {what} row(s) "
                            f"refused: {'; '.join(str(p) for p in refused[:5])}"
                            f"{'; ...' if len(refused) > 5 else ''}")
        missing = {f.name: int(X[f.name].isna().sum()) for f in schema.features
                   if f.name in X.columns and X[f.name].isna().any()}
        if missing:
            fixed = [f.name for f in schema.features if f.immutable and f.name in missing]
            logger.warning("%s: missing values %s imputed with the training median / most frequent level%s",
                           what, missing, f" (immutable features {fixed}: they stay at the imputed value)"
                           if fixed else "")
        X = schema.transform(X)
    X = float_array(X, what, ndim=2, kind="a 2-D array (n, d)")
    expected = schema.n_encoded if schema is not None else width
    if expected is not None and X.shape[1] != expected:
        where = f"dataset {schema.dataset!r}: " if schema is not None else ""
        owner = "the schema's" if schema is not None else "the model's"
        raise DataError(f"{where}{what} width {X.shape[1]} does not match {owner} {expected} encoded columns")
    if not np.isfinite(X).all():
        rows = np.flatnonzero(~np.isfinite(X).all(axis=1))
        kinds = "/".join(k for k, bad in (("NaN", np.isnan(X)), ("inf", np.isinf(X))) if bad.any())
        raise DataError(f"{what} contains non-finite values ({kinds}) in {rows.size} rows, "
                        f"e.g. rows {rows[:5].tolist()}")
    return X
