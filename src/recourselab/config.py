"""Typed parameters: ``params.yaml`` validated into frozen pydantic models.

``load_params`` rejects unknown or misspelled keys with a message naming the key, the
section it appeared in and the valid keys there. The model defaults *are* the default
profile; other profiles (``profiles/<name>.yaml``) are overlays rendered on top of them by
:func:`render_profile`.
"""

from __future__ import annotations

import codecs
import dataclasses
import hashlib
import json
from pathlib import Path
from typing import Any, ClassVar, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model, field_validator, model_validator

from recourselab.config_audit import AuditParams
from recourselab.config_evaluate import EvaluateParams
from recourselab.densityflow.config import SECTIONS, DensityFlowConfig, settings_of
from recourselab.discover.settings import DiscoverSettings
from recourselab.errors import ConfigError, did_you_mean
from recourselab.fields import BOUNDS, base_type

DEFAULT_DATASETS = ["moons", "circles", "spirals", "chessboard", "adult", "compas", "german"]
PROFILES_DIR = "profiles"
#: The largest seed: scikit-learn takes seeds below 2**32 and the split also draws with seed + 1.
MAX_SEED = 2**32 - 2


class StrictModel(BaseModel):
    """Base of every params section: frozen, unknown keys rejected, numbers finite."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


def _validate_strict(model: type[StrictModel], data: dict[str, Any]) -> Any:
    """Validate a YAML-like mapping without lax coercions.

    Goes through pydantic's strict JSON mode: YAML lists still fill tuples and strings still fill
    paths and literals, but ``true`` is not a number, ``"yes"`` not a boolean and ``2.5`` not an
    integer (the lax mode turned ``budget: true`` into 1 and ``adjoint: "yes"`` into True).
    """
    return model.model_validate_json(json.dumps(data, default=str), strict=True)


def _with_override(section: StrictModel, override: dict[str, Any], where: str,
                   exclude: frozenset[str] = frozenset()) -> Any:
    """``section`` with the keys of ``override`` replaced, validated as a whole (``exclude``: emptied).

    Raises ValueError naming ``where`` and the valid keys for unknown keys or invalid values.
    """
    cls = type(section)
    fields = set(cls.model_fields) - exclude
    unknown = sorted(set(override) - fields)
    if unknown:
        hint = did_you_mean(unknown[0], fields) if len(unknown) == 1 else ""
        raise ValueError(f"{where}: unknown keys {unknown}{hint}; valid keys: {', '.join(sorted(fields))}")
    base = section.model_dump(exclude=set(exclude))
    try:
        return _validate_strict(cls, {**base, **override, **{k: {} for k in exclude}})
    except ValidationError as err:
        raise ValueError(f"{where}: {'; '.join(_problem(e) for e in err.errors())}") from None


_TYPES: dict[str, type] = {"int": int, "float": float, "bool": bool, "str": str}


def _pydantic_field(f: dataclasses.Field) -> tuple[Any, Any]:
    """(annotation, pydantic Field) of a library settings field: its type, default and declared range."""
    base, optional = base_type(f)
    choices = f.metadata.get("choices")
    if base in _TYPES:
        annotation: Any = Literal[choices] if base == "str" and choices else _TYPES[base]
    else:  # a mapping of names to rules
        annotation = dict[str, Literal[choices]] if choices else dict[str, str]
    if optional:
        annotation = annotation | None
    bounds = {k: f.metadata[k] for k in BOUNDS if k in f.metadata}
    if f.default_factory is not dataclasses.MISSING:
        return annotation, Field(default_factory=f.default_factory, **bounds)
    return annotation, Field(default=f.default, **bounds)


def derived_section(name: str, rules: type[StrictModel], settings: type, fields: dict[str, str], *,
                    before: dict[str, Any] | None = None, after: dict[str, Any] | None = None,
                    doc: str | None = None) -> Any:
    """A params section whose keys ``fields`` (section key -> field) are fields of the library's ``settings``
    dataclass: same types, defaults and ranges, declared once there. ``before`` / ``after``: the section's
    own fields ((annotation, Field) by key), placed before / after the derived ones; ``rules``: the base
    class with the section's validators and helpers."""
    declared = {f.name: f for f in dataclasses.fields(settings)}
    spec = {**(before or {}), **{key: _pydantic_field(declared[field]) for key, field in fields.items()},
            **(after or {})}
    return create_model(name, __base__=rules, __doc__=doc or rules.__doc__, __module__=__name__, **spec)


def _library_check(section: StrictModel, settings: type, values: dict[str, Any]) -> Any:
    """``section`` if the library's ``settings`` accept ``values`` (its rules across fields), else ValueError."""
    try:
        settings(**values)
    except ConfigError as err:
        raise ValueError(str(err)) from None
    return section


class CustomDataset(StrictModel):
    """A user-declared dataset read from a CSV or Parquet file (no code needed)."""

    path: Path = Field(description="Parquet (.parquet, .pq) or CSV file (optionally .gz); relative to the data dir")
    target: str = Field(description="Name of the label column")
    favourable: str | int | float | bool = Field(description="The favourable (desired) label")
    categorical: list[str] = Field(default_factory=list)
    integer: list[str] = Field(default_factory=list)
    immutable: list[str] = Field(default_factory=list)
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


def _known_models(v: list[str], what: str) -> list[str]:
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
        return _known_models(v, "members")


#: Default-profile overrides: more optimizer steps for the synthetic sets whose thin structures
#: need more than 60 epochs of 1800 rows give (spirals: 0.64 -> 0.99 validity); on moons a milder
#: margin and cost weight keep validity 1.0 at lower cost without sending every query to one point.
DEFAULT_FLOW_OVERRIDES: dict[str, dict[str, Any]] = {"spirals": {"min_steps": 20000},
                                                     "chessboard": {"min_steps": 12000},
                                                     "moons": {"lambda_cost": 0.4, "density_quantile": 0.5}}


class _PerDatasetRules(StrictModel):
    """Checks every ``per_dataset`` entry at load time by applying it (``_apply`` names the method)."""

    _apply: ClassVar[str]

    @model_validator(mode="after")
    def _overrides_valid(self) -> Any:
        for name in self.per_dataset:
            getattr(self, self._apply)(name)
        return self


class _DensityFlowRules(StrictModel):
    """Base of the sections derived from :class:`DensityFlowConfig` (``_section`` names the section)."""

    _section: ClassVar[str]

    @model_validator(mode="after")
    def _library_valid(self) -> Any:
        return _library_check(self, DensityFlowConfig, self.densityflow_settings())

    def densityflow_settings(self) -> dict[str, Any]:
        """The :class:`DensityFlowConfig` keyword settings of this section (without the pipeline's own keys)."""
        return settings_of(self._section, self.model_dump(mode="json"))


class _TrainFlowRules(_PerDatasetRules, _DensityFlowRules):
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
        return _with_override(self, self.per_dataset.get(name, {}), f"train_flow.per_dataset.{name}",
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
        return _library_check(self, DiscoverSettings, self.model_dump())


#: DISCOVER solver settings: the fields of :class:`~recourselab.discover.DiscoverSettings` (same
#: names, defaults and ranges) except ``seed`` (the run seed) and ``budget`` (always ``"discover"``).
DiscoverSolverParams = derived_section(
    "DiscoverSolverParams", _SolverRules, DiscoverSettings,
    {f.name: f.name for f in dataclasses.fields(DiscoverSettings) if f.name not in ("seed", "budget")})


#: Actionability of the discover stage: ages only grow (the feature names differ per dataset).
DEFAULT_DISCOVER_OVERRIDES: dict[str, dict[str, Any]] = {
    "adult": {"actionability": {"age": "increasing"}},
    "compas": {"actionability": {"age": "increasing"}},
    "german": {"actionability": {"age_in_years": "increasing"}},
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


class DiscoverParams(_PerDatasetRules):
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
        default_factory=lambda: {k: {kk: dict(vv) for kk, vv in v.items()}
                                 for k, v in DEFAULT_DISCOVER_OVERRIDES.items()},
        description="dataset -> solver settings that replace the common ones (e.g. actionability)")

    @field_validator("models")
    @classmethod
    def _models_known(cls, v: list[str]) -> list[str]:
        return _known_models(v, "models")

    def solver_for(self, name: str) -> DiscoverSolverParams:
        """The solver settings of dataset ``name``: ``solver`` with its ``per_dataset`` entry applied."""
        return _with_override(self.solver, self.per_dataset.get(name, {}), f"discover.per_dataset.{name}")


class OrchestrationParams(StrictModel):
    """Prefect settings shared by every multi-seed stage."""

    cache_dir: Path = Field(
        default=Path(".recourselab/cache"),
        description="Prefect result store and staged task artifacts (relative to the project)",
    )
    max_workers: int = Field(default=2, ge=1, description="Concurrent per-seed tasks")
    threads_per_task: int | None = Field(
        default=1, ge=1,
        description="CPU threads of each task (torch, BLAS, OpenMP); outputs can differ in their last digits "
                    "with another count, so it is a DVC param and part of the task keys; null: the CPUs this "
                    "process may use divided by max_workers",
    )
    task_runner: Literal["process", "thread", "dask"] = Field(
        default="process",
        description="process: true parallelism for CPU-bound tasks; thread: no start-up cost; dask: prefect-dask's "
                    "DaskTaskRunner on the cluster at dask_address (else a LocalCluster of max_workers processes)",
    )
    dask_address: str | None = Field(
        default=None,
        description="scheduler of an existing Dask cluster (tcp://host:8786) for task_runner dask; its workers "
                    "must see this project's folders (cache_dir, data/) at the same paths",
    )


class Params(StrictModel):
    """The whole ``params.yaml``."""

    profile: str = "default"
    seeds: list[int] = Field(default_factory=lambda: [0, 1, 2])
    datasets: list[str] = Field(default_factory=lambda: list(DEFAULT_DATASETS))
    data: DataParams = Field(default_factory=DataParams)
    prepare: PrepareParams = Field(default_factory=PrepareParams)
    models: ModelsParams = Field(default_factory=ModelsParams)
    tune_ensemble: TuneEnsembleParams = Field(default_factory=TuneEnsembleParams)
    train_flow: TrainFlowParams = Field(default_factory=TrainFlowParams)
    distill: DistillParams = Field(default_factory=DistillParams)
    generate: GenerateParams = Field(default_factory=GenerateParams)
    discover: DiscoverParams = Field(default_factory=DiscoverParams)
    ablate: AblateParams = Field(default_factory=AblateParams)
    evaluate: EvaluateParams = Field(default_factory=EvaluateParams)
    orchestration: OrchestrationParams = Field(default_factory=OrchestrationParams)
    audit: AuditParams = Field(default_factory=AuditParams)

    @field_validator("datasets")
    @classmethod
    def _datasets_given(cls, v: list[str]) -> list[str]:
        if not v:
            raise ValueError("at least one dataset is required (the stages run per dataset)")
        return v

    @field_validator("seeds")
    @classmethod
    def _seeds_valid(cls, v: list[int]) -> list[int]:
        if not v:
            raise ValueError("at least one seed is required")
        if len(set(v)) != len(v) or min(v) < 0 or max(v) > MAX_SEED:
            raise ValueError(f"seeds must be distinct integers from 0 to {MAX_SEED}, got {v}")
        return v

    @model_validator(mode="after")
    def _lists_consistent(self) -> Params:
        """Rules between sections that need no registry (dataset names are checked at stage start-up by
        :func:`recourselab.pipeline.validate.validate_params`)."""
        if len(set(self.datasets)) != len(self.datasets):
            raise ValueError(f"datasets listed twice: {self.datasets}")
        if self.ablate.n_seeds > len(self.seeds):
            raise ValueError(f"ablate.n_seeds is {self.ablate.n_seeds} but only {len(self.seeds)} seeds are listed "
                             f"({self.seeds}); ablate.n_seeds counts the first seeds of `seeds`")
        return self


def _valid_keys(loc: tuple[Any, ...]) -> tuple[str, list[str]]:
    """Walk ``loc`` (minus its last element) through the model tree to the enclosing model."""
    model: type[BaseModel] = Params
    section: list[str] = []
    parts = list(loc[:-1])
    while parts:
        part = parts.pop(0)
        section.append(str(part))
        annotation = model.model_fields[str(part)].annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            model = annotation
        elif getattr(annotation, "__origin__", None) is dict:
            section.append(str(parts.pop(0)))
            model = annotation.__args__[1]
        else:  # pragma: no cover - extra keys only occur inside models
            break
    return ".".join(section) or "<top level>", list(model.model_fields)


def _format_errors(err: ValidationError, source: str) -> str:
    lines = [f"invalid parameters in {source}:"]
    for e in err.errors():
        loc = tuple(e["loc"])
        key = ".".join(str(p) for p in loc)
        if e["type"] == "extra_forbidden":
            section, valid = _valid_keys(loc)
            name = str(loc[-1])
            lines.append(
                f"  unknown key {key!r} in section {section!r}{did_you_mean(name, valid)}; "
                f"valid keys: {', '.join(valid)}"
            )
        else:
            lines.append(f"  {_problem(e)}")
    return "\n".join(lines)


def _problem(e: Any) -> str:
    """``"a.b: message"`` for one pydantic error (no location for model-level errors), in YAML words
    and without pydantic's ``"Value error, "`` prefix for messages our validators raise (which may
    already begin with their own, longer location)."""
    key = ".".join(str(p) for p in e["loc"])
    msg = _JSON_WORDS.get(e["msg"], e["msg"]).removeprefix("Value error, ")
    return f"{key}: {msg}" if key and not msg.startswith(f"{key}.") else msg  # an override names its own place


#: Strict JSON-mode messages in YAML words.
_JSON_WORDS = {"Input should be an object": "Input should be a valid dictionary",
               "Input should be a valid array": "Input should be a valid list"}


def parse_params(raw: dict[str, Any] | None, source: str = "<params>") -> Params:
    """Validate a params mapping into :class:`Params`.

    Raises
    ------
    ConfigError
        Naming every unknown key with the valid keys of its section, and every bad value.
    """
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ConfigError(f"{source} must hold a mapping at the top level, got {type(raw).__name__}")
    try:
        return _validate_strict(Params, raw)
    except ValidationError as err:
        raise ConfigError(_format_errors(err, source)) from None


class _StrictLoader(yaml.SafeLoader):
    """A safe YAML loader that refuses a key given twice in one mapping (YAML would keep the last)."""


def _unique_mapping(loader: _StrictLoader, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
    first: dict[Any, int] = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=True)
        try:
            if key in first:
                raise ConfigError(f"key {key!r} is given twice in one mapping (lines {first[key] + 1} and "
                                  f"{key_node.start_mark.line + 1}); YAML would silently keep only the last")
            first[key] = key_node.start_mark.line
        except TypeError:  # an unhashable key: the mapping constructor names it
            pass
    return loader.construct_mapping(node, deep=deep)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _unique_mapping)


def read_yaml(path: Path) -> Any:
    """The content of the YAML file ``path``; every problem is a :class:`ConfigError` naming it.

    Raises
    ------
    ConfigError
        Not UTF-8 text, not valid YAML, or a key given twice in one mapping.
    """
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        raise ConfigError(f"{path} is not UTF-8 text ({err.reason} at byte {err.start})") from None
    try:
        return yaml.load(text, Loader=_StrictLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as err:
        raise ConfigError(f"{path} is not valid YAML: {err}") from None
    except ConfigError as err:
        raise ConfigError(f"{path}: {err}") from None


def load_params(path: str | Path = "params.yaml") -> Params:
    """Read and validate ``params.yaml``."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"params file not found: {path}")
    return parse_params(read_yaml(path), source=str(path))


#: Mappings that a profile replaces whole instead of merging into (search spaces).
REPLACED_KEYS = ("grid", "fixed", "per_dataset")


def _deep_merge(base: dict[str, Any], overlay: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in overlay.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict) and key not in REPLACED_KEYS:
            out[key] = _deep_merge(out[key], value)
        else:
            out[key] = value
    return out


def available_profiles(root: str | Path = ".") -> list[str]:
    """Names of the profiles: ``default`` plus every ``profiles/<name>.yaml``."""
    found = sorted(p.stem for p in (Path(root) / PROFILES_DIR).glob("*.yaml"))
    return ["default", *[n for n in found if n != "default"]]


def _user_settings(current: Any, source: str) -> dict[str, Any]:
    """What a profile switch keeps of the params it replaces: the ``data`` section, the custom
    datasets listed in ``datasets`` and their ``prepare.immutable`` entries (an overlay mapping).

    Raises
    ------
    ConfigError
        ``current`` or one of those sections is not of the expected YAML type.
    """
    if current is None:
        return {}
    if not isinstance(current, dict):
        raise ConfigError(f"{source} must hold a mapping at the top level, got {type(current).__name__}")

    def section(mapping: dict[str, Any], key: str, kind: type, where: str) -> Any:
        value = mapping.get(key) or kind()
        if not isinstance(value, kind):
            raise ConfigError(f"{source}: {where} must be a {'mapping' if kind is dict else 'list'}, got "
                              f"{type(value).__name__}")
        return value

    data = section(current, "data", dict, "data")
    datasets = section(current, "datasets", list, "datasets")
    immutable = section(section(current, "prepare", dict, "prepare"), "immutable", dict, "prepare.immutable")
    custom = section(data, "custom", dict, "data.custom")
    kept: dict[str, Any] = {"data": data} if data else {}
    mine = [d for d in datasets if isinstance(d, str) and d in custom]
    if mine:
        kept["datasets"] = mine
    fixed = {d: v for d, v in immutable.items() if d in custom}
    if fixed:
        kept["prepare"] = {"immutable": fixed}
    return kept


def render_profile(name: str, root: str | Path = ".", *, current: Any = None,
                   current_source: str = "the current params") -> Params:
    """The full params of a profile: the model defaults with ``profiles/<name>.yaml`` on top.

    Parameters
    ----------
    name : ``default`` or a profile of ``root/profiles``.
    root : the project folder.
    current : the mapping of the params file the profile replaces (as read from YAML), or None.
        Its ``data`` section (merged over the profile's), the custom datasets it lists in
        ``datasets`` (appended to the profile's) and their ``prepare.immutable`` entries are kept:
        they describe the user's machine and data, not the profile.
    current_source : how errors name where ``current`` came from.

    Raises
    ------
    ConfigError
        An unknown or broken profile, or kept settings that do not validate (naming both files).
    """
    merged = Params().model_dump(mode="json")
    source = "default profile"
    if name != "default":
        path = Path(root) / PROFILES_DIR / f"{name}.yaml"
        if not path.is_file():
            valid = available_profiles(root)
            raise ConfigError(f"unknown profile {name!r}{did_you_mean(name, valid)}; valid: {', '.join(valid)}")
        overlay = read_yaml(path)
        if overlay is None:
            overlay = {}
        if not isinstance(overlay, dict):
            raise ConfigError(f"{path} must hold a mapping of params sections at the top level, got "
                              f"{type(overlay).__name__}")
        overlay["profile"] = name
        merged, source = _deep_merge(merged, overlay), str(path)
    kept = _user_settings(current, current_source)
    if kept:
        extra = [d for d in kept.pop("datasets", []) if d not in merged["datasets"]]
        merged = _deep_merge(merged, kept)
        merged["datasets"] = [*merged["datasets"], *extra]
        source = f"{source} with the data section and custom datasets kept from {current_source}"
    return parse_params(merged, source=source)


def write_params(path: str | Path, params: Params) -> Path | None:
    """Write ``params`` to ``path`` (atomically), first copying a different existing file to a backup.

    Returns
    -------
    The backup's path (``<name>.<YYYYmmdd-HHMMSS>.bak`` next to it, never overwriting an earlier
    backup), or None when there was nothing to keep (no file, or the same text).
    """
    from datetime import datetime

    from recourselab.io import copy_atomic, write_bytes

    path = Path(path)
    text = dump_params(params).encode()
    backup = None
    if path.is_file() and path.read_bytes() != text:
        stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
        backup = path.with_name(f"{path.name}.{stamp}.bak")
        n = 1
        while backup.exists():
            backup = path.with_name(f"{path.name}.{stamp}-{n}.bak")
            n += 1
        copy_atomic(path, backup)
    write_bytes(path, text)
    return backup


def dump_params(params: Params) -> str:
    """YAML text of ``params`` in declaration order (what ``params.yaml`` holds)."""
    header = (
        f"# recourselab parameters, profile {params.profile!r}.\n"
        "# Switch profile with `recourselab profile NAME`; every key is documented in README.md.\n"
    )
    return header + yaml.safe_dump(params.model_dump(mode="json"), sort_keys=False)


def section_hash(section: BaseModel | Any) -> str:
    """Stable sha256 of a params section (used in cache keys and provenance)."""
    payload = section.model_dump(mode="json") if isinstance(section, BaseModel) else section
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()
