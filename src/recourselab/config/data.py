"""The ``data`` and ``prepare`` params sections: where raw data comes from, user datasets, the split."""

from __future__ import annotations

import codecs
from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator, model_validator

from recourselab.config.base import MAX_SEED, StrictModel


class CustomDataset(StrictModel):
    """A user-declared dataset read from a CSV or Parquet file (no code needed)."""

    path: Path = Field(description="Parquet (.parquet, .pq) or CSV file (optionally .gz); relative to the data dir")
    target: str = Field(description="Name of the label column")
    favourable: str | int | float | bool = Field(description="The favourable (desired) label")
    categorical: list[str] = Field(default_factory=list)
    integer: list[str] = Field(default_factory=list)
    immutable: list[str] = Field(default_factory=list)
    monotone: dict[str, Literal["increasing", "decreasing"]] = Field(
        default_factory=dict, description="numerical feature -> the only direction a counterfactual may move it "
        "(e.g. age: increasing)")
    drop: list[str] = Field(default_factory=list)
    sha256: str | None = Field(default=None, description="Expected sha256 of the file, if known (64 hex "
                               "digits, any case, optionally prefixed `sha256:`)")
    sep: str = Field(default=",", description="CSV field separator (one character)")
    encoding: str = Field(default="utf-8", description="Text encoding of a CSV file (e.g. latin-1, cp1252)")
    classes: list[str | int | float | bool] | None = Field(
        default=None, description="Every label of the target, favourable included; null: exactly two "
        "(the favourable one and one other)")
    on_bad_label: Literal["error", "drop"] = Field(
        default="error", description="A label that is not a class: error (naming it), or drop its rows (logged); "
        "drop needs `classes`")
    bounds: dict[str, tuple[float | None, float | None]] = Field(
        default_factory=dict, description="numerical feature -> [lo, hi], the values it may take (null: open); "
        "checked by prepare and on new rows")

    @field_validator("sep")
    @classmethod
    def _one_character(cls, v: str) -> str:
        if len(v) != 1:
            raise ValueError(f"sep must be a single character, got {v!r}")
        return v

    @field_validator("encoding")
    @classmethod
    def _known_encoding(cls, v: str) -> str:
        try:
            codecs.lookup(v)
        except LookupError:
            raise ValueError(f"unknown text encoding {v!r} (e.g. utf-8, latin-1, cp1252)") from None
        return v

    @field_validator("bounds")
    @classmethod
    def _bounds_ordered(cls, v: dict[str, tuple[float | None, float | None]]
                        ) -> dict[str, tuple[float | None, float | None]]:
        for feature, (lo, hi) in v.items():
            if lo is None and hi is None:
                raise ValueError(f"{feature}: give a lower or an upper bound (null leaves a side open)")
            if lo is not None and hi is not None and lo > hi:
                raise ValueError(f"{feature}: lower bound {lo} is above the upper bound {hi}")
        return v

    @model_validator(mode="after")
    def _classes_declared(self) -> CustomDataset:
        if self.classes is None:
            if self.on_bad_label == "drop":
                raise ValueError("on_bad_label: drop needs `classes` (the labels to keep; the rows of any other "
                                 "label are dropped)")
            return self
        texts = [str(c) for c in self.classes]
        twice = sorted({t for t in texts if texts.count(t) > 1})
        if twice:
            raise ValueError(f"classes: {twice} listed twice")
        if len(texts) < 2:
            raise ValueError(f"classes: at least two are needed, got {self.classes}")
        if str(self.favourable) not in texts:
            raise ValueError(f"classes {self.classes} do not include the favourable label {self.favourable!r}")
        return self

    @field_validator("sha256")
    @classmethod
    def _sha256_hex(cls, v: str | None) -> str | None:
        if v is None:
            return None
        digest = v.strip().lower().removeprefix("sha256:")
        if len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest):
            raise ValueError(f"sha256 must be 64 hexadecimal digits, got {v!r}")
        return digest


class DataParams(StrictModel):
    """Where raw data comes from."""

    dir: Path | None = Field(
        default=None,
        description="Directory of user-supplied files (HELOC, Blood, Hotel, custom); "
        "falls back to $RECOURSELAB_DATA_DIR",
    )
    cache_dir: Path | None = Field(
        default=None,
        description="Cache of downloaded registry artifacts; falls back to "
        "$RECOURSELAB_CACHE_DIR, then ~/.cache/recourselab",
    )
    custom: dict[str, CustomDataset] = Field(default_factory=dict)


#: Features of the built-in datasets that no counterfactual may change (the registry of
#: :mod:`recourselab.data.registry` declares its datasets' immutables from this table).
BUILTIN_IMMUTABLE: dict[str, tuple[str, ...]] = {
    "adult": ("race", "sex", "native-country"),
    "compas": ("race", "sex"),
    "german": ("personal_status_and_sex", "foreign_worker"),
    "cardio": ("gender", "age"),
}


#: Numerical features of the built-in datasets that a counterfactual may move one way only: ages,
#: years of education and counts of past offences only grow.
BUILTIN_MONOTONE: dict[str, dict[str, str]] = {
    "adult": {"age": "increasing", "education-num": "increasing"},
    "compas": {"age": "increasing", "priors_count": "increasing", "juv_fel_count": "increasing",
               "juv_misd_count": "increasing", "juv_other_count": "increasing"},
    "german": {"age_in_years": "increasing"},
}

#: The directions a monotone feature may take.
MONOTONE_RULES = ("increasing", "decreasing")


def _builtin_monotone() -> dict[str, dict[str, str]]:
    """The built-in datasets' declared monotone features (dataset -> feature -> direction)."""
    return {name: dict(rules) for name, rules in BUILTIN_MONOTONE.items()}


def _builtin_immutables() -> dict[str, list[str]]:
    """The built-in datasets' declared immutable features (dataset -> feature names)."""
    return {name: list(features) for name, features in BUILTIN_IMMUTABLE.items()}


class PrepareParams(StrictModel):
    """Settings of the ``prepare`` stage."""

    split: tuple[float, float, float] = (0.6, 0.2, 0.2)
    n_synthetic: int = Field(default=3000, ge=20)
    data_seed: int = Field(default=0, ge=0, le=MAX_SEED, description="Seed of the synthetic generators")
    chessboard_std: float = Field(default=0.05, gt=0)
    max_rows: int | None = Field(
        default=None, ge=50, description="Stratified subsample of large datasets before splitting"
    )
    immutable: dict[str, list[str]] = Field(
        default_factory=_builtin_immutables,
        description="dataset -> features no counterfactual may change; a dataset listed here gets exactly "
        "this list (empty: none), one not listed keeps its declaration (built-in or data.custom)",
    )
    monotone: dict[str, dict[str, Literal["increasing", "decreasing"] | None]] = Field(
        default_factory=_builtin_monotone,
        description="dataset -> numerical feature -> increasing | decreasing (null: no rule): the one direction "
        "every method may move it; a dataset listed here gets exactly these rules, one not listed keeps its "
        "declaration (built-in or data.custom)",
    )

    @field_validator("split")
    @classmethod
    def _split_sums_to_one(cls, v: tuple[float, float, float]) -> tuple[float, float, float]:
        if any(p <= 0 for p in v) or abs(sum(v) - 1.0) > 1e-9:
            raise ValueError(f"split fractions must be positive and sum to 1, got {list(v)}")
        return v

    @field_validator("immutable")
    @classmethod
    def _immutable_distinct(cls, v: dict[str, list[str]]) -> dict[str, list[str]]:
        for name, features in v.items():
            twice = sorted({f for f in features if features.count(f) > 1})
            if twice:
                raise ValueError(f"prepare.immutable.{name}: feature(s) {twice} listed twice")
        return v
