"""The ``models`` and ``tune_ensemble`` params sections: search grids of the model zoo and the ensemble."""

from __future__ import annotations

from typing import Any

from pydantic import Field, field_validator, model_validator

from recourselab.config.base import StrictModel
from recourselab.errors import did_you_mean


class ModelSpec(StrictModel):
    """Search space and row caps of one model kind."""

    grid: dict[str, list[Any]] = Field(default_factory=dict, description="hyperparameter -> values")
    fixed: dict[str, Any] = Field(default_factory=dict, description="hyperparameters not searched")
    max_tune_rows: int | None = Field(default=None, ge=30, description="rows used by the CV search")
    max_fit_rows: int | None = Field(default=None, ge=30, description="rows used by the final refit")

    @model_validator(mode="after")
    def _grid_not_empty(self) -> ModelSpec:
        empty = [k for k, v in self.grid.items() if not v]
        if empty:
            raise ValueError(f"empty value lists in grid: {empty}")
        both = sorted(set(self.grid) & set(self.fixed))
        if both:
            raise ValueError(f"hyperparameters both searched and fixed: {both}")
        return self


def _spec(grid: dict[str, list[Any]], fixed: dict[str, Any] | None = None, tune: int | None = 5000,
          fit: int | None = None) -> Any:
    return Field(default_factory=lambda: ModelSpec(grid=grid, fixed=fixed or {}, max_tune_rows=tune,
                                                   max_fit_rows=fit))


class ModelsParams(StrictModel):
    """Search grids of the model zoo (default profile: small grids, row caps for 2 cores).

    kNN keeps the reference grid of the DensityFlow paper (it is cheap to search).
    """

    knn: ModelSpec = _spec({"n_neighbors": [3, 5, 7, 9], "weights": ["uniform", "distance"]})
    svm: ModelSpec = _spec({"C": [1, 10], "gamma": [0.05, 0.5, 5]}, tune=3000, fit=10000)
    rf: ModelSpec = _spec({"max_depth": [10, 20, None]}, {"n_estimators": 200})
    mlp: ModelSpec = _spec({"hidden_layer_sizes": [[64, 64], [128, 64]]},
                           {"alpha": 1e-3, "learning_rate_init": 0.01, "max_iter": 200})
    xgboost: ModelSpec = _spec({"max_depth": [3, 5, 7]}, {"n_estimators": 300, "learning_rate": 0.1})
    catboost: ModelSpec = _spec({"depth": [4, 6]},
                                {"learning_rate": 0.1, "l2_leaf_reg": 3, "iterations": 500})
    tabnet: ModelSpec = _spec({}, {"lr": 0.02, "mask_type": "sparsemax", "max_epochs": 100, "patience": 10})
    lightgbm: ModelSpec = _spec({"num_leaves": [15, 31, 63]}, {"n_estimators": 300, "learning_rate": 0.1})


def known_models(v: list[str], what: str) -> list[str]:
    """Check a list of model kinds: known (listing the valid ones), distinct, non-empty."""
    valid = list(ModelsParams.model_fields)
    for name in v:
        if name not in valid:
            raise ValueError(f"unknown model {name!r}{did_you_mean(name, valid)}; valid: {', '.join(valid)}")
    if not v or len(set(v)) != len(v):
        raise ValueError(f"{what} must be a non-empty list of distinct models, got {v}")
    return v


class TuneEnsembleParams(StrictModel):
    """Settings of the ``tune_ensemble`` stage."""

    members: list[str] = Field(default_factory=lambda: ["knn", "svm", "rf", "mlp", "xgboost", "catboost",
                                                        "tabnet"])
    cv_folds: int = Field(default=3, ge=2)

    @field_validator("members")
    @classmethod
    def _members_known(cls, v: list[str]) -> list[str]:
        return known_models(v, "members")
