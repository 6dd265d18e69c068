"""The params sections of the methods' stages: ``train_flow``, ``distill``, ``generate``, ``ablate`` and
``discover``. Their settings are derived from the library's :class:`DensityFlowConfig` and
:class:`DiscoverSettings` (same names, defaults and ranges)."""

from __future__ import annotations

import copy
import dataclasses
from typing import Any, ClassVar, Literal

from pydantic import Field, field_validator, model_validator

from recourselab.config.base import PerDatasetRules, StrictModel, derived_section, library_check, with_override
from recourselab.config.models import known_models
from recourselab.densityflow.config import SECTIONS, DensityFlowConfig, settings_of
from recourselab.discover.settings import DiscoverSettings

#: Default-profile overrides: more optimizer steps for the synthetic sets whose thin structures
#: need more than 60 epochs of 1800 rows give (spirals: 0.64 -> 0.99 validity); on moons a milder
#: margin and cost weight keep validity 1.0 at lower cost without sending every query to one point.
DEFAULT_FLOW_OVERRIDES: dict[str, dict[str, Any]] = {"spirals": {"min_steps": 20000},
                                                     "chessboard": {"min_steps": 12000},
                                                     "moons": {"lambda_cost": 0.4, "density_quantile": 0.5}}

class _DensityFlowRules(StrictModel):
    """Base of the sections derived from :class:`DensityFlowConfig` (``_section`` names the section)."""

    _section: ClassVar[str]

    @model_validator(mode="after")
    def _library_valid(self) -> Any:
        return library_check(self, DensityFlowConfig, self.densityflow_settings())

    def densityflow_settings(self) -> dict[str, Any]:
        """The :class:`DensityFlowConfig` keyword settings of this section (without the pipeline's own keys)."""
        return settings_of(self._section, self.model_dump(mode="json"))


class _TrainFlowRules(PerDatasetRules, _DensityFlowRules):
    """Validators and helpers of :class:`TrainFlowParams` (its fields are derived below)."""

    _section = "train_flow"
    _apply = "for_dataset"

    @field_validator("lambda_grid", check_fields=False)
    @classmethod
    def _grid_values(cls, grid: dict[str, list[float]]) -> dict[str, list[float]]:
        for key, values in grid.items():
            if not values or any(not (v >= 0) for v in values):
                raise ValueError(f"train_flow.lambda_grid.{key}: needs at least one value, all >= 0 (got {values})")
        return grid

    def for_dataset(self, name: str) -> Any:
        """The settings of dataset ``name``: the common ones with its ``per_dataset`` entry applied."""
        return with_override(self, self.per_dataset.get(name, {}), f"train_flow.per_dataset.{name}",
                              frozenset({"per_dataset"}))


class _DistillRules(_DensityFlowRules):
    """Helpers of :class:`DistillParams` (its fields are derived below)."""

    _section = "distill"


class _GenerateRules(_DensityFlowRules):
    """Helpers of :class:`GenerateParams` (its fields are derived below)."""

    _section = "generate"


#: Settings of the ``train_flow`` stage (DensityFlow surrogate + generator training): the
#: :class:`DensityFlowConfig` fields of ``SECTIONS["train_flow"]`` (same defaults, same ranges),
#: a grid of lambdas selected by validity on val, and per-dataset overrides (replaced whole by a profile).
TrainFlowParams = derived_section(
    "TrainFlowParams", _TrainFlowRules, DensityFlowConfig, SECTIONS["train_flow"],
    after={"lambda_grid": (dict[Literal["lambda_cost", "lambda_den", "lambda_valid"], list[float]], Field(
               default_factory=dict, description="grid searched by validity on val (empty: fixed lambdas)")),
           "per_dataset": (dict[str, dict[str, Any]], Field(
               default_factory=lambda: {k: dict(v) for k, v in DEFAULT_FLOW_OVERRIDES.items()},
               description="dataset -> settings of this section that replace the common ones"))},
    doc=_TrainFlowRules.__doc__)
#: Settings of the ``distill`` stage (query-budgeted alignment with the ensemble): the
#: ``distill_*`` fields of :class:`DensityFlowConfig` without their prefix, and the query budget.
DistillParams = derived_section(
    "DistillParams", _DistillRules, DensityFlowConfig, SECTIONS["distill"],
    before={"budget": (int, Field(default=500, ge=0, description="max queried rows per run"))})
#: Settings of the ``generate`` stage (inference and evaluation).
GenerateParams = derived_section(
    "GenerateParams", _GenerateRules, DensityFlowConfig, SECTIONS["generate"],
    after={"max_queries": (int, Field(default=400, ge=1, description="cap of the evaluation query set"))})


#: Variants of the ``ablate`` stage (the paper's ablation study, section 5.5).
ABLATION_VARIANTS = ("no_distill", "no_density", "no_density_no_distill")
#: Datasets ablated by default.
ABLATION_DATASETS = ("moons", "adult", "compas")


class AblateParams(StrictModel):
    """Settings of the ``ablate`` stage: what the density term and the distillation buy.

    ``no_distill`` evaluates the ``train_flow`` model as trained (nothing is retrained);
    ``no_density`` retrains that flow (its settings, the selected lambdas) with lambda_den 0
    and distills it as ``distill`` does; ``no_density_no_distill`` is that flow before its
    distillation. The full method's numbers come from ``generate``. The stage runs for the
    pipeline's datasets that are also in ``datasets`` (the others get a note that they were
    not ablated) and for the first ``n_seeds`` of the pipeline's seeds: each retraining costs a
    ``train_flow`` run.
    """

    datasets: list[str] = Field(default_factory=lambda: list(ABLATION_DATASETS))
    n_seeds: int = Field(default=1, ge=1, description="ablate the first n seeds of `seeds`")
    variants: list[Literal["no_distill", "no_density", "no_density_no_distill"]] = Field(
        default_factory=lambda: list(ABLATION_VARIANTS))

    @field_validator("variants")
    @classmethod
    def _variants_distinct(cls, v: list[str]) -> list[str]:
        if not v or len(set(v)) != len(v):
            raise ValueError(f"variants must be a non-empty list without repeats, got {v}")
        return v


DISCOVER_MODELS = ["svm", "mlp", "rf", "xgboost", "lightgbm"]


class _SolverRules(StrictModel):
    """Validator of :class:`DiscoverSolverParams` (its fields are derived below)."""

    @model_validator(mode="after")
    def _library_valid(self) -> Any:
        return library_check(self, DiscoverSettings, self.model_dump())


#: DISCOVER solver settings: the fields of :class:`~recourselab.discover.DiscoverSettings` (same
#: names, defaults and ranges) except ``seed`` (the run seed) and ``budget`` (always ``"discover"``).
DiscoverSolverParams = derived_section(
    "DiscoverSolverParams", _SolverRules, DiscoverSettings,
    {f.name: f.name for f in dataclasses.fields(DiscoverSettings) if f.name not in ("seed", "budget")})


#: Per-dataset solver settings of the discover stage (ages only grow through the schema's monotone
#: features, ``prepare.monotone``, for every method alike).
DEFAULT_DISCOVER_OVERRIDES: dict[str, dict[str, Any]] = {
    # the output side binds on COMPAS (its scores move little under the immutable features): the full
    # weight on it, eta_r 1, certifies every run (docs/results/discover_pipeline.md)
    "compas": {"eta_r": 1.0},
}


class DiscoverTargetParams(StrictModel):
    """Target output distribution y* (seeded with the run seed); only the kind's parameters are used.

    Default: the paper's protocol, 1 - Beta(0.1, 0.9) (mass near the favourable side).
    """

    kind: Literal["constant", "beta", "shift"] = "beta"
    a: float = Field(default=0.1, gt=0, description="beta: first shape parameter")
    b: float = Field(default=0.9, gt=0, description="beta: second shape parameter")
    oriented: bool = Field(default=True, description="beta: reflect the draws towards the favourable side")
    value: float = Field(default=1.0, ge=0, le=1, description="constant: every target output")
    delta: float = Field(default=0.3, ge=-1, le=1, description="shift: added to the factual scores, clipped")

    def target_params(self) -> dict[str, Any]:
        """Keyword parameters of ``make_target`` for this kind."""
        keys = {"constant": ("value",), "beta": ("a", "b", "oriented"), "shift": ("delta",)}[self.kind]
        return {k: getattr(self, k) for k in keys}


class DiscoverParams(PerDatasetRules):
    """Settings of the ``discover`` stage (distributional counterfactuals, one run per model and seed).

    Protocol (the paper's, as in ``bench/discover.py``): ``n_factuals`` rows of ``split`` sampled
    with the run seed among those the model predicts unfavourable (``factuals: unfavourable``),
    target ``1 - Beta(0.1, 0.9)``.
    """

    _apply = "solver_for"

    models: list[str] = Field(default_factory=lambda: list(DISCOVER_MODELS),
                              description="model kinds explained (each tuned by tune_ensemble)")
    n_factuals: int = Field(default=50, ge=2, description="size n of the factual sample")
    split: Literal["train", "val", "test"] = Field(default="test", description="split the factuals come from")
    factuals: Literal["unfavourable", "all"] = Field(
        default="unfavourable", description="pool: rows the model predicts unfavourable (b < 0.5), or all rows")
    target: DiscoverTargetParams = Field(default_factory=DiscoverTargetParams)
    solver: DiscoverSolverParams = Field(default_factory=DiscoverSolverParams)
    per_dataset: dict[str, dict[str, Any]] = Field(
        default_factory=lambda: copy.deepcopy(DEFAULT_DISCOVER_OVERRIDES),
        description="dataset -> solver settings that replace the common ones (e.g. actionability)")

    @field_validator("models")
    @classmethod
    def _models_known(cls, v: list[str]) -> list[str]:
        return known_models(v, "models")

    def solver_for(self, name: str) -> DiscoverSolverParams:
        """The solver settings of dataset ``name``: ``solver`` with its ``per_dataset`` entry applied."""
        return with_override(self.solver, self.per_dataset.get(name, {}), f"discover.per_dataset.{name}")
