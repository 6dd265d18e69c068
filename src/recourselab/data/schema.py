"""Schema and encoder: train-median imputation, z-scores, TabRep phase encoding.

Numerical feature ``j``: missing values take the train median, then
``z = (x - mean_j) / std_j`` (train statistics). Categorical feature ``j`` with ``K_j``
levels: level ``k`` becomes the pair ``(cos(2*pi*k/K_j), sin(2*pi*k/K_j))``; decoding takes
``atan2`` and the nearest level, so any point of the plane decodes to a valid level.
Missing categorical values take the train mode. Levels are the dataset's domain (all values
seen in the file), statistics come from the training split only. A numerical feature may
carry declared bounds (the values it can take): :meth:`Schema.check_rows` names every row of
new data that breaks them, or the training range, or holds unknown levels or missing values.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from recourselab.data.feature import Feature, python_scalar, sorted_levels
from recourselab.data.rows import RowProblem, row_problems
from recourselab.errors import ArtifactError, DataError, UnknownCategoryError
from recourselab.io import RESTORE_HINT, error_reason, read_json, write_json

SCHEMA_VERSION = 1


@dataclass(frozen=True)
class Schema:
    """Everything needed to encode raw rows and to decode counterfactuals back.

    ``classes[i]`` is the original label of encoded class ``i``; the favourable label is
    always the last class (1 for binary data).
    """

    dataset: str
    target: str
    classes: tuple[Any, ...]
    features: tuple[Feature, ...]
    version: int = SCHEMA_VERSION
    extra: dict[str, Any] = field(default_factory=dict)

    # ------------------------------------------------------------------ construction
    @classmethod
    def fit(
        cls,
        train: pd.DataFrame,
        *,
        dataset: str,
        target: str,
        favourable: Any,
        categorical: list[str] | tuple[str, ...],
        integer: list[str] | tuple[str, ...] = (),
        immutable: list[str] | tuple[str, ...] = (),
        levels: dict[str, list[Any]] | None = None,
        classes: list[Any] | None = None,
        bounds: dict[str, tuple[float | None, float | None]] | None = None,
        monotone: dict[str, str] | None = None,
    ) -> Schema:
        """Fit statistics on ``train`` (raw units, target column included).

        Parameters
        ----------
        levels : categorical levels of the whole domain; default: those seen in ``train``.
        classes : all labels of the dataset; default: those seen in ``train``.
        bounds : numerical feature -> declared (lower, upper) values it may take (None: open side).
        monotone : mutable numerical feature -> ``"increasing"`` or ``"decreasing"``: the one direction a
            counterfactual may move it.

        Raises
        ------
        DataError
            A monotone rule names a feature that is not a mutable numerical one.
        """
        bounds = bounds or {}
        monotone = monotone or {}
        feats = []
        for name in (c for c in train.columns if c != target):
            col = train[name]
            if name in categorical:
                lv = list(levels[name]) if levels and name in levels else sorted_levels(col)
                observed = col.dropna()
                mode = python_scalar(observed.mode().iloc[0]) if len(observed) else lv[0]
                feats.append(Feature(name=name, kind="categorical", immutable=name in immutable,
                                     levels=tuple(lv), mode=mode))
            else:
                values = col.to_numpy(dtype=float)
                finite = values[~np.isnan(values)]
                if finite.size == 0:
                    raise DataError(
                        f"dataset {dataset!r}: column {name!r} has no values in the training split")
                median = float(np.median(finite))
                filled = np.where(np.isnan(values), median, values)
                std = float(filled.std())
                constant = finite.max() == finite.min()  # its std is 0 or a rounding error (1e-17)
                feats.append(Feature(
                    name=name, kind="numerical", integer=name in integer, immutable=name in immutable,
                    median=median, mean=float(filled.mean()), std=std if std > 0 and not constant else 1.0,
                    lower=float(finite.min()), upper=float(finite.max()),
                    bounds=tuple(bounds[name]) if name in bounds else None, monotone=monotone.get(name),
                ))
        one_way = {f.name for f in feats if f.kind == "numerical" and not f.immutable}
        wrong = sorted(set(monotone) - one_way)
        if wrong:
            raise DataError(f"dataset {dataset!r}: monotone rules for {wrong}, which are not mutable numerical "
                            f"features; mutable numerical features: {sorted(one_way)}")
        unbounded = sorted(set(bounds) - {f.name for f in feats if f.kind == "numerical"})
        if unbounded:
            raise DataError(f"dataset {dataset!r}: bounds given for {unbounded}, which are not numerical features")
        if classes is None:
            classes = sorted_levels(train[target])
        others = [c for c in classes if c != favourable]
        return cls(dataset=dataset, target=target, classes=tuple(others + [python_scalar(favourable)]),
                   features=tuple(feats))

    # ------------------------------------------------------------------ layout
    @property
    def feature_names(self) -> list[str]:
        return [f.name for f in self.features]

    @property
    def encoded_columns(self) -> list[str]:
        return [c for f in self.features for c in f.encoded_names]

    @property
    def n_encoded(self) -> int:
        return sum(f.width for f in self.features)

    @property
    def n_classes(self) -> int:
        return len(self.classes)

    @property
    def favourable_index(self) -> int:
        return len(self.classes) - 1

    def slices(self) -> dict[str, slice]:
        """Encoded column range of every feature."""
        out, start = {}, 0
        for f in self.features:
            out[f.name] = slice(start, start + f.width)
            start += f.width
        return out

    def immutable_mask(self) -> np.ndarray:
        """Boolean mask over encoded columns, True where the feature is immutable. Shape (d,)."""
        return np.array([f.immutable for f in self.features for _ in range(f.width)], dtype=bool)

    def monotone_signs(self) -> np.ndarray:
        """Per encoded column: +1 may only grow, -1 may only shrink, 0 free. Shape (d,), int8."""
        sign = {"increasing": 1, "decreasing": -1, None: 0}
        return np.array([sign[f.monotone] for f in self.features for _ in range(f.width)], dtype=np.int8)

    def project_monotone(self, X: np.ndarray, factuals: np.ndarray) -> np.ndarray:
        """Encoded rows ``X`` (m, d) with every monotone column moved back to its factual (m, d) value
        where it went the forbidden way. A new array; z-scores keep the order of original units."""
        X = np.array(X, dtype=float)
        sign = self.monotone_signs()
        up, down = sign > 0, sign < 0
        X[:, up] = np.maximum(X[:, up], factuals[:, up])
        X[:, down] = np.minimum(X[:, down], factuals[:, down])
        return X

    def categorical_mask(self) -> np.ndarray:
        """Boolean mask over encoded columns, True for phase-encoded (cos, sin) columns. Shape (d,)."""
        return np.array([f.kind == "categorical" for f in self.features for _ in range(f.width)])

    def encoded_bounds(self) -> tuple[np.ndarray, np.ndarray]:
        """Per encoded column (lower, upper) box of the training data. Shapes (d,), (d,)."""
        lo, hi = [], []
        for f in self.features:
            if f.kind == "numerical":
                lo.append((f.lower - f.mean) / f.std)
                hi.append((f.upper - f.mean) / f.std)
            else:
                lo += [-1.0, -1.0]
                hi += [1.0, 1.0]
        return np.array(lo), np.array(hi)

    # ------------------------------------------------------------------ transforms
    def check_columns(self, frame: pd.DataFrame) -> None:
        missing = [n for n in self.feature_names if n not in frame.columns]
        if missing:
            raise DataError(f"dataset {self.dataset!r}: input lacks feature columns {missing}; "
                            f"expected {self.feature_names}")
        twice = sorted({str(c) for c in frame.columns[frame.columns.duplicated()] if c in self.feature_names})
        if twice:
            raise DataError(f"dataset {self.dataset!r}: input has feature columns {twice} more than once")

    def check_rows(self, frame: pd.DataFrame) -> list[RowProblem]:
        """Every problem of raw rows that are to be explained (:func:`recourselab.data.rows.row_problems`)."""
        return row_problems(self, frame)

    def transform(self, frame: pd.DataFrame) -> np.ndarray:
        """Encode raw rows.

        Parameters
        ----------
        frame : DataFrame with (at least) the feature columns in original units.

        Returns
        -------
        ndarray of shape (n, n_encoded), float64.

        Raises
        ------
        UnknownCategoryError
            A categorical value that is not one of the schema's levels.
        DataError
            Missing columns, or non-numeric or infinite values in a numerical column.
        """
        self.check_columns(frame)
        out = np.empty((len(frame), self.n_encoded), dtype=float)
        for f, sl in zip(self.features, self.slices().values(), strict=True):
            col = frame[f.name]
            if f.kind == "numerical":
                values = pd.to_numeric(col, errors="coerce").to_numpy(dtype=float)
                bad = np.isnan(values) & col.notna().to_numpy()
                if bad.any():
                    examples = sorted({str(v) for v in col[bad].head(5)})
                    raise DataError(f"dataset {self.dataset!r}: non-numeric values in numerical "
                                    f"column {f.name!r}, e.g. {examples}")
                if np.isinf(values).any():
                    raise DataError(f"dataset {self.dataset!r}: infinite values in numerical column {f.name!r} "
                                    f"(rows {np.flatnonzero(np.isinf(values))[:5].tolist()})")
                values = np.where(np.isnan(values), f.median, values)
                out[:, sl.start] = (values - f.mean) / f.std
            else:
                index = {lv: k for k, lv in enumerate(f.levels)}
                filled = col.astype(object).where(col.notna(), f.mode)
                codes = np.array([index.get(python_scalar(v), -1) for v in filled])
                if (codes < 0).any():
                    unknown = sorted({str(v) for v, c in zip(filled, codes, strict=True) if c < 0})[:10]
                    raise UnknownCategoryError(
                        f"dataset {self.dataset!r}: unknown categories {unknown} in column "
                        f"{f.name!r}; known levels: {[str(v) for v in f.levels][:30]}")
                angle = 2 * math.pi * codes / len(f.levels)
                out[:, sl.start] = np.cos(angle)
                out[:, sl.start + 1] = np.sin(angle)
        return out

    def decode_categorical(self, X: np.ndarray, name: str) -> np.ndarray:
        """Level index of categorical ``name`` nearest in phase to encoded rows ``X`` (n, d)."""
        f = self.features[self.feature_names.index(name)]
        sl = self.slices()[name]
        angle = np.arctan2(X[:, sl.start + 1], X[:, sl.start])
        k = len(f.levels)
        return np.mod(np.rint(angle * k / (2 * math.pi)), k).astype(int)

    def _require_finite(self, X: np.ndarray) -> None:
        if not np.isfinite(X).all():
            rows = np.flatnonzero(~np.isfinite(X).all(axis=1))
            raise DataError(f"dataset {self.dataset!r}: cannot decode non-finite encoded values (NaN / inf) in "
                            f"{rows.size} rows, e.g. rows {rows[:5].tolist()}")

    def inverse_transform(self, X: np.ndarray, factuals: pd.DataFrame | None = None) -> pd.DataFrame:
        """Decode encoded rows (n, n_encoded) to a DataFrame in original units and levels.

        Mutable integer features are rounded; categoricals snap to the nearest level in phase.
        Immutable numerical features are never rounded to an integer: their decoded value is
        given back to 12 significant digits (so ``45.5`` stays ``45.5``), an integer column when
        every value is whole.

        Parameters
        ----------
        X : encoded rows, shape (n, n_encoded).
        factuals : the raw rows (n, ...) that ``X`` was derived from, in the same order; where
            given, immutable features take their values exactly as there (missing ones: decoded).

        Raises
        ------
        DataError
            Wrong shape, non-finite values (a diverged point has no original units), or
            ``factuals`` of another length.
        """
        X = np.asarray(X, dtype=float)
        if X.ndim != 2 or X.shape[1] != self.n_encoded:
            raise DataError(f"dataset {self.dataset!r}: expected encoded rows of width "
                            f"{self.n_encoded}, got shape {X.shape}")
        self._require_finite(X)
        if factuals is not None and len(factuals) != len(X):
            raise DataError(f"dataset {self.dataset!r}: {len(factuals)} factual rows for {len(X)} encoded rows")
        cols: dict[str, Any] = {}
        for f, sl in zip(self.features, self.slices().values(), strict=True):
            given = None
            if factuals is not None and f.immutable and f.name in factuals.columns:
                given = factuals[f.name].reset_index(drop=True)
            if f.kind == "numerical":
                v = X[:, sl.start] * f.std + f.mean
                if f.immutable:
                    v = np.array([float(f"{x:.12g}") for x in v])
                    if given is not None:
                        exact = pd.to_numeric(given, errors="coerce").to_numpy(dtype=float)
                        v = np.where(np.isnan(exact), v, exact)
                    whole = f.integer and bool((v == np.rint(v)).all())
                    cols[f.name] = v.astype(np.int64) if whole else v
                else:
                    cols[f.name] = np.rint(v).astype(np.int64) if f.integer else v
            else:
                idx = self.decode_categorical(X, f.name)
                levels = pd.Series([f.levels[i] for i in idx], dtype=object)
                cols[f.name] = levels if given is None else given.astype(object).where(given.notna(), levels)
        return pd.DataFrame(cols)

    def snap(self, X: np.ndarray) -> np.ndarray:
        """Project encoded rows onto valid points. Shape kept.

        Numerical features are clipped to the training range [lower, upper] (then rounded when
        integer and mutable), categoricals become exact phase pairs of their nearest level.
        Non-finite values are an error (DataError), not clipped.
        """
        X = np.array(X, dtype=float)
        self._require_finite(X)
        if X.ndim == 2 and X.shape[1] == self.n_encoded:
            lo, hi = self.encoded_bounds()
            num = [sl.start for f, sl in zip(self.features, self.slices().values(), strict=True)
                   if f.kind == "numerical"]
            X[:, num] = np.clip(X[:, num], lo[num], hi[num])
        return self.transform(self.inverse_transform(X))

    def encode_target(self, labels: pd.Series | np.ndarray) -> np.ndarray:
        """Original labels -> class indices (n,), int64."""
        index = {c: i for i, c in enumerate(self.classes)}
        codes = np.array([index.get(python_scalar(v), -1) for v in labels], dtype=np.int64)
        if (codes < 0).any():
            unknown = sorted({str(v) for v, c in zip(labels, codes, strict=True) if c < 0})[:10]
            raise UnknownCategoryError(f"dataset {self.dataset!r}: unknown labels {unknown} in "
                                       f"target {self.target!r}; known: {list(self.classes)}")
        return codes

    def decode_target(self, codes: np.ndarray) -> np.ndarray:
        return np.array([self.classes[int(i)] for i in codes], dtype=object)

    # ------------------------------------------------------------------ persistence
    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        for f in d["features"]:  # only declared bounds and rules are written (older schema files stay valid)
            for key in ("bounds", "monotone"):
                if f[key] is None:
                    del f[key]
        d["encoded_columns"] = self.encoded_columns
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Schema:
        d = dict(d)
        d.pop("encoded_columns", None)
        if d.get("version") != SCHEMA_VERSION:
            raise DataError(f"schema version {d.get('version')} is not supported (expected {SCHEMA_VERSION})")
        feats = tuple(Feature(**{**f, "levels": tuple(f["levels"]),
                                 **({"bounds": tuple(f["bounds"])} if f.get("bounds") is not None else {})})
                      for f in d.pop("features"))
        return cls(features=feats, classes=tuple(d.pop("classes")), **d)

    def save(self, path: str | Path) -> Path:
        return write_json(path, self.to_dict())

    @classmethod
    def load(cls, path: str | Path) -> Schema:
        """Read a schema written by :meth:`save` (a damaged file is an ``ArtifactError``)."""
        d = read_json(path, keys=["dataset", "target", "classes", "features", "version"])
        try:
            return cls.from_dict(d)
        except (KeyError, TypeError, AttributeError) as err:  # a feature entry without its fields
            raise ArtifactError(f"{path} does not describe a schema ({type(err).__name__}: {error_reason(err)}); "
                                f"{RESTORE_HINT}") from err
