"""Rows for ``recourselab explain``: read a CSV in original units and check each row against the schema.

Each row is checked on its own, before any model sees it: a feature column the input lacks, a
missing value (empty cell or NaN), a number outside the training range or not a number, a
fractional value of an integer feature, a category the training data never had. A bad row gets
one message naming its row number, every offending column, the value and what is allowed; the
other rows go on. A row whose every feature is missing is refused.
"""

from __future__ import annotations

import csv
import io
import math
import sys
from pathlib import Path
from typing import Any, TextIO

import numpy as np
import pandas as pd

from recourselab.data.feature import Feature
from recourselab.data.schema import Schema
from recourselab.errors import DataError

#: Cell texts read as a missing value (case-insensitive), unless a categorical has them as a level.
MISSING_WORDS = frozenset({"", "nan", "na", "n/a", "null", "none", "<na>"})
#: Levels listed in an unknown-category message (the rest are counted).
SHOWN_LEVELS = 20


def _text(source: str | Path | TextIO) -> str:
    """The whole input as text (a path, ``"-"`` for standard input, or an open stream)."""
    if str(source) == "-":
        return sys.stdin.read()
    if hasattr(source, "read"):
        return source.read()
    try:
        return Path(source).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise DataError(f"input file not found: {source}") from None
    except UnicodeDecodeError:
        raise DataError(f"{source} is not a readable CSV file: it is not UTF-8 text") from None
    except OSError as err:  # a folder, no permission...
        raise DataError(f"cannot read the input {source}: {err.strerror or err}") from None


def read_rows(source: str | Path | TextIO) -> pd.DataFrame:
    """Every cell of a CSV as text, one frame row per data line, indexed by row number from 1.

    The file is parsed once, by the ``csv`` module: a header naming a column twice and a line with
    more fields than the header are refused (pandas would rename the second column, or read the
    first column of such lines as the index and shift every value by a column, both silently); a
    shorter line gets empty cells.

    Parameters
    ----------
    source : a CSV path (UTF-8), ``"-"`` for standard input, or an open text stream. The first
        line names the columns; blank lines are kept as empty rows, so row ``i`` is line ``i + 1``.

    Returns
    -------
    DataFrame of str, shape (n_rows, n_columns), column names stripped of spaces.

    Raises
    ------
    DataError
        The file does not exist, is empty, has no data row, is not a readable CSV, names a column
        twice, or has a line with more fields than the header.
    """
    name = "standard input" if str(source) == "-" else str(getattr(source, "name", source))
    lines = csv.reader(io.StringIO(_text(source)), skipinitialspace=True)
    try:
        header = [c.strip() for c in next(lines, [])]
        if not any(header):
            raise DataError(f"{name} is empty: expected a header line with the dataset's column names, "
                            "then one row per line")
        repeated = sorted({c for c in header if c and header.count(c) > 1})
        if repeated:
            raise DataError(f"{name}: the header names column(s) {', '.join(map(repr, repeated))} more than once")
        rows = []
        for fields in lines:
            if len(fields) > len(header):
                raise DataError(f"{name}, line {lines.line_num}: {len(fields)} fields, but the header names "
                                f"{len(header)} columns (a trailing comma, or a comma inside an unquoted value?)")
            rows.append(fields + [""] * (len(header) - len(fields)))
    except csv.Error as err:
        raise DataError(f"{name} is not a readable CSV file: {err}") from None
    if not rows:
        raise DataError(f"{name} has a header but no rows to explain")
    return pd.DataFrame(rows, columns=header, dtype=str, index=pd.RangeIndex(1, len(rows) + 1, name="row"))


def _number(f: Feature, value: float) -> str:
    return str(int(value)) if f.integer else f"{value:.6g}"


def allowed(f: Feature) -> str:
    """What feature ``f`` accepts, in words (its training range or its levels)."""
    if f.kind == "numerical":
        kind = "an integer" if f.integer else "a number"
        return f"{kind} in the training range [{_number(f, f.lower)}, {_number(f, f.upper)}]"
    shown = ", ".join(str(v) for v in f.levels[:SHOWN_LEVELS])
    more = f", ... ({len(f.levels)} levels)" if len(f.levels) > SHOWN_LEVELS else ""
    return f"one of the levels {shown}{more}"


def match_level(f: Feature, text: str) -> tuple[bool, Any]:
    """(found, level) of categorical ``f`` written as ``text`` (its exact text, or an equal number)."""
    for level in f.levels:
        if str(level) == text:
            return True, level
    try:
        number = float(text)
    except ValueError:
        return False, None
    for level in f.levels:
        if isinstance(level, int | float) and not isinstance(level, bool) and float(level) == number:
            return True, level
    return False, None


def check_value(f: Feature, text: str) -> tuple[Any, str | None]:
    """The typed value of one cell of feature ``f`` and ``None``, or ``None`` and the problem.

    Numerical values become floats (ints for integer features); categorical values become the
    schema's level objects.
    """
    text = text.strip()
    if f.kind == "categorical":
        found, level = match_level(f, text)
        if found:
            return level, None
        if text.lower() in MISSING_WORDS:
            return None, f"column {f.name!r} is missing (empty or NaN); expected {allowed(f)}"
        return None, f"column {f.name!r}: unknown category {text!r}; expected {allowed(f)}"
    if text.lower() in MISSING_WORDS:
        return None, f"column {f.name!r} is missing (empty or NaN); expected {allowed(f)}"
    try:
        value = float(text)
    except ValueError:
        return None, f"column {f.name!r}: {text!r} is not a number; expected {allowed(f)}"
    if math.isnan(value):
        return None, f"column {f.name!r} is missing (empty or NaN); expected {allowed(f)}"
    if not math.isfinite(value):
        return None, f"column {f.name!r}: {text!r} is not a finite number; expected {allowed(f)}"
    if f.integer and value != round(value):
        return None, f"column {f.name!r}: {text} is not an integer; expected {allowed(f)}"
    if f.outside_bounds(np.array([value]))[0]:
        lo, hi = f.bounds
        return None, f"column {f.name!r}: value {text} is outside its declared bounds [{lo}, {hi}]"
    if not f.lower <= value <= f.upper:
        return None, (f"column {f.name!r}: value {text} is outside the training range "
                      f"[{_number(f, f.lower)}, {_number(f, f.upper)}]")
    return (int(value) if f.integer else value), None


def check_rows(frame: pd.DataFrame, schema: Schema) -> tuple[pd.DataFrame, dict[int, str]]:
    """Split the rows of :func:`read_rows` into valid rows and per-row errors.

    Columns that are not features of ``schema`` (the target, ids, notes) are ignored.

    Parameters
    ----------
    frame : text cells, indexed by row number.
    schema : the prepared schema of the dataset (feature kinds, training ranges, levels).

    Returns
    -------
    valid : DataFrame of the valid rows in original units, shape (n_valid, n_features), its
        index the row numbers, its columns ``schema.feature_names`` (floats, int64 for integer
        features, level objects for categoricals).
    errors : row number -> message, for every other row.

    Raises
    ------
    DataError
        The input has none of the dataset's feature columns (a file for another dataset).
    """
    present = [f for f in schema.features if f.name in frame.columns]
    if not present:
        raise DataError(f"the input has none of the feature columns of dataset {schema.dataset!r}: expected "
                        f"{', '.join(schema.feature_names)}; found {', '.join(map(str, frame.columns))}")
    absent = [f.name for f in schema.features if f.name not in frame.columns]
    valid: dict[int, dict[str, Any]] = {}
    errors: dict[int, str] = {}
    for row, cells in frame.iterrows():
        texts = {f.name: str(cells[f.name]).strip() for f in present}
        if all(t.lower() in MISSING_WORDS for t in texts.values()):
            errors[row] = "every feature is missing (an empty row): refused"
            continue
        problems = [f"column {name!r} is missing from the input (expected columns: "
                    f"{', '.join(schema.feature_names)})" for name in absent]
        typed = {}
        for f in present:
            typed[f.name], problem = check_value(f, texts[f.name])
            if problem:
                problems.append(problem)
        if problems:
            errors[row] = "; ".join(problems)
        else:
            valid[row] = typed
    rows = list(valid)
    columns = {}
    for f in schema.features:
        dtype = object if f.kind == "categorical" else np.int64 if f.integer else float
        columns[f.name] = pd.Series([valid[r][f.name] for r in rows], index=rows, dtype=dtype)
    return pd.DataFrame(columns, index=pd.Index(rows, name="row", dtype=np.int64)), errors


__all__ = ["allowed", "check_rows", "check_value", "match_level", "read_rows"]
