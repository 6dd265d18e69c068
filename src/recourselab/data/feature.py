"""One input column (:class:`Feature`) and the value helpers shared by the data layer: numpy scalars as
Python scalars, stable level orders and numbers as a user writes them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import pandas as pd

from recourselab.errors import DataError


def python_scalar(value: Any) -> Any:
    """numpy scalars -> Python scalars (JSON-safe, exact equality with parsed JSON)."""
    return value.item() if isinstance(value, np.generic) else value


def sorted_levels(values: pd.Series) -> list[Any]:
    """Distinct non-missing values, as Python scalars, in a stable order."""
    uniq = {python_scalar(v) for v in pd.unique(values.dropna())}
    return sorted(uniq, key=lambda v: (type(v).__name__, v))


@dataclass(frozen=True)
class Feature:
    """One input column: its type, role and (train-fitted) encoding statistics."""

    name: str
    kind: Literal["numerical", "categorical"]
    integer: bool = False
    immutable: bool = False
    levels: tuple[Any, ...] = ()
    median: float = 0.0
    mean: float = 0.0
    std: float = 1.0
    lower: float = 0.0
    upper: float = 0.0
    mode: Any = None
    bounds: tuple[float | None, float | None] | None = None
    monotone: Literal["increasing", "decreasing"] | None = None

    def outside_bounds(self, values: np.ndarray) -> np.ndarray:
        """True where a numerical value (n,) is outside the declared bounds (NaN: False). Shape (n,)."""
        out = np.zeros(len(values), dtype=bool)
        if self.bounds is not None:
            lo, hi = self.bounds
            if lo is not None:
                out |= values < lo
            if hi is not None:
                out |= values > hi
        return out

    @property
    def width(self) -> int:
        """Number of encoded columns (1 numerical, 2 categorical)."""
        return 1 if self.kind == "numerical" else 2

    @property
    def encoded_names(self) -> list[str]:
        return [self.name] if self.kind == "numerical" else [f"{self.name}__cos", f"{self.name}__sin"]


def format_number(v: float) -> str:
    """A number as a user would write it: ``150`` rather than ``150.0``, else Python's shortest repr."""
    return str(int(v)) if float(v).is_integer() and abs(v) < 1e15 else repr(float(v))


def format_interval(lo: float | None, hi: float | None) -> str:
    """``[0, 120]``, with an open side (None) shown as ``-inf`` / ``inf``."""
    return f"[{'-inf' if lo is None else format_number(lo)}, {'inf' if hi is None else format_number(hi)}]"


def float_array(values: Any, what: str, *, ndim: int, kind: str) -> np.ndarray:
    """``values`` as a float64 array of ``ndim`` dimensions, or a DataError naming ``what``.

    Parameters
    ----------
    values : array-like.
    what : how the message calls the values (``"query"``, ``"target 'values': values"``).
    ndim : the number of dimensions required.
    kind : what such an array is, for the message (``"a 2-D array (n, d)"``, ``"a flat sequence"``).

    Returns
    -------
    float64 ndarray with ``ndim`` dimensions (not yet checked for finiteness).
    """
    try:
        arr = np.asarray(values, dtype=float)
    except (TypeError, ValueError) as err:
        raise DataError(f"{what} must be numeric ({err})") from err
    if arr.ndim != ndim:
        raise DataError(f"{what} must be {kind}, got {arr.ndim}-D shape {arr.shape}")
    return arr
