"""Typed parameters: ``params.yaml`` validated into frozen pydantic models.

``load_params`` rejects unknown or misspelled keys with a message naming the key, the
section it appeared in and the valid keys there. The model defaults *are* the default
profile; other profiles (``profiles/<name>.yaml``) are overlays rendered on top of them by
:func:`render_profile`.
"""

from __future__ import annotations

import codecs
import hashlib
import json
import math
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from recourselab.errors import ConfigError, did_you_mean

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


def _builtin_immutables() -> dict[str, list[str]]:
    """The built-in datasets' declared immutable features (dataset -> feature names)."""
    from recourselab.data.registry import BUILTIN_DATASETS

    return {name: list(spec.immutable) for name, spec in BUILTIN_DATASETS.items() if spec.immutable}


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

    @model_validator(mode="after")
    def _known_hyperparameters(self) -> ModelsParams:
        from recourselab.models.registry import MODEL_KINDS

        for name in type(self).model_fields:
            spec: ModelSpec = getattr(self, name)
            valid = MODEL_KINDS[name].hyperparameters
            for key in [*spec.grid, *spec.fixed]:
                if key not in valid:
                    raise ValueError(f"unknown hyperparameter {key!r} for model {name!r}"
                                     f"{did_you_mean(key, valid)}; valid: {', '.join(valid)}")
        return self


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


class TrainFlowParams(StrictModel):
    """Settings of the ``train_flow`` stage (DensityFlow surrogate + generator training).

    The default profile trains shorter than the paper (800 epochs, lr_phi 1e-4, EMA 0.999)
    on a row cap so that it runs on 2 CPU cores, with lambda_cost 0.2 (from the paper's grid)
    and the density margin at the 0.8 quantile of S over real target-class rows (extension,
    lambda_den 1.0), and more optimizer steps for spirals and chessboard (``per_dataset``,
    replaced whole by a profile); the paper profile restores the paper values.
    """

    lambda_valid: float = Field(default=1.0, ge=0)
    lambda_cost: float = Field(default=0.2, ge=0)
    lambda_den: float = Field(default=1.0, ge=0)
    noise_ratio: float = Field(default=0.2, gt=0)
    lambda_noise: float = Field(default=1.0, ge=0)
    beta: float = Field(default=1.2, gt=0)
    score_mode: Literal["target", "max"] = "target"
    hidden: int = Field(default=128, ge=4)
    epochs: int = Field(default=60, ge=1)
    min_steps: int = Field(default=0, ge=0, description="raise epochs to at least this many optimizer steps")
    density_quantile: float | None = Field(
        default=0.8, gt=0, lt=1, description="extension: density margin = this quantile of S over real rows")
    batch_size: int = Field(default=64, ge=2)
    lr_g: float = Field(default=1e-3, gt=0)
    lr_phi: float = Field(default=1e-3, gt=0)
    weight_decay: float = Field(default=1e-4, ge=0)
    warmup_epochs: int = Field(default=3, ge=0)
    ema_decay: float = Field(default=0.99, ge=0, lt=1)
    adjoint: bool = False
    field_spectral_norm: bool = Field(
        default=False, description="extension: spectral-normalise the velocity field (no stiff ODE in long runs)")
    max_train_rows: int | None = Field(default=6000, ge=10)
    lambda_grid: dict[Literal["lambda_cost", "lambda_den", "lambda_valid"], list[float]] = Field(
        default_factory=dict, description="grid searched by validity on val (empty: fixed lambdas)")
    per_dataset: dict[str, dict[str, Any]] = Field(
        default_factory=lambda: {k: dict(v) for k, v in DEFAULT_FLOW_OVERRIDES.items()},
        description="dataset -> settings of this section that replace the common ones")

    @field_validator("lambda_grid")
    @classmethod
    def _grid_values(cls, grid: dict[str, list[float]]) -> dict[str, list[float]]:
        for key, values in grid.items():
            if not values or any(not (v >= 0) for v in values):
                raise ValueError(f"train_flow.lambda_grid.{key}: needs at least one value, all >= 0 (got {values})")
        return grid

    @model_validator(mode="after")
    def _overrides_valid(self) -> TrainFlowParams:
        for name in self.per_dataset:
            self.for_dataset(name)
        return self

    def for_dataset(self, name: str) -> TrainFlowParams:
        """The settings of dataset ``name``: the common ones with its ``per_dataset`` entry applied."""
        return _with_override(self, self.per_dataset.get(name, {}), f"train_flow.per_dataset.{name}",
                              frozenset({"per_dataset"}))


class DistillParams(StrictModel):
    """Settings of the ``distill`` stage (query-budgeted alignment with the ensemble)."""

    budget: int = Field(default=500, ge=0, description="max queried rows per run")
    epochs: int = Field(default=20, ge=0)
    inner: int = Field(default=3, ge=1)
    points: int = Field(default=8, ge=1)
    lr_phi: float = Field(default=1e-4, gt=0)
    lr_g: float = Field(default=2e-4, gt=0)
    replay: bool = Field(default=True, description="fit every surrogate step on all support points queried so far")
    gen_steps: int = Field(default=10, ge=0, description="generator steps per distillation epoch")


class GenerateParams(StrictModel):
    """Settings of the ``generate`` stage (inference and evaluation)."""

    n_starts: int = Field(default=30, ge=1)
    jitter: float = Field(default=0.05, ge=0)
    max_queries: int = Field(default=400, ge=1, description="cap of the evaluation query set")


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


class DiscoverSolverParams(StrictModel):
    """DISCOVER solver settings: mirrors :class:`recourselab.discover.DiscoverSettings` (same names,
    same defaults) except ``seed`` (the run seed) and ``budget`` (always ``"discover"``).

    Every distance, UCL and threshold is a squared Wasserstein-2 quantity in the encoded space.
    """

    n_projections: int = Field(default=10, ge=1, description="N, random directions of the sliced objective")
    resample_directions: bool = Field(default=False, description="fresh N directions at every iteration")
    top_k: int = Field(default=3, ge=1, description="k, rows editable per outer iteration (top-k by q_i)")
    h: int = Field(default=1, ge=1, description="features edited per selected row and candidate")
    trials: int = Field(default=200, ge=1, description="M, candidates per outer iteration")
    max_iter: int = Field(default=100, ge=0, description="T, outer iterations")
    strategy: Literal["monte_carlo", "genetic"] = "monte_carlo"
    recombine: bool = Field(default=True, description="also score the row-wise recombination of candidates")
    delta: float = Field(default=0.01, gt=0, lt=0.5, description="trimming of the objective and of the UCLs")
    alpha: float = Field(default=0.05, gt=0, lt=1, description="confidence level of the certificate")
    U_x: float | None = Field(default=None, gt=0, description="threshold on UCL_x; null: calibrated")
    U_y: float | None = Field(default=None, gt=0, description="threshold on UCL_y; null: calibrated")
    U_x_margin: float = Field(default=0.25, ge=0, description="relative input budget when U_x is null")
    U_y_margin: float = Field(default=0.15, ge=0, description="absolute output budget when U_y is null")
    eta_l: float = Field(default=0.2, ge=0, le=1, description="initial interval [l, r] of eta")
    eta_r: float = Field(default=1.0, ge=0, le=1)
    kappa: float = Field(default=0.05, ge=0, lt=1, description="interval-narrowing factor")
    stop: Literal["stalled", "certified", "ot_y"] = Field(
        default="stalled", description="stalled: run until Q stalls (or T); certified: stop at the first "
        "certified edited iterate (least intervention); ot_y: at the first one with OT(y) <= stop_ot_y")
    stop_ot_y: float | None = Field(default=None, ge=0, description="OT(y) level of stop: ot_y (e.g. a "
                                    "baseline's); required there, rejected otherwise")
    patience: int = Field(default=5, ge=1, description="stop after this many feasible stalled iterations")
    tol: float = Field(default=1e-6, ge=0, description="relative improvement counted as a stall")
    cone_angle: float = Field(default=math.pi / 4, gt=0, le=math.pi, description="half-angle phi (radians)")
    step: float = Field(default=0.2, gt=0, description="lambda_max, numerical step in feature ranges")
    step_range: Literal["training", "factuals"] = Field(
        default="training", description="range that scales numerical steps: the training split's or the "
        "factual sample's (the released notebook's)")
    categorical_step: float = Field(default=1.2, ge=0, description="max step in a categorical embedding")
    temperature: float = Field(default=2.0, gt=0, description="tau of the categorical decoding")
    embedding_dim: int | None = Field(default=None, ge=1, description="r of the categorical embeddings")
    guidance: bool = Field(default=True, description="OT guidance field (false: isotropic proposals)")
    edit_numerical: bool = True
    edit_categorical: bool = True
    actionability: dict[str, Literal["increasing", "decreasing", "fixed"]] = Field(
        default_factory=dict, description="feature -> increasing / decreasing / fixed")
    generations: int = Field(default=3, ge=1, description="genetic: generations per outer iteration")
    crossover_prob: float = Field(default=0.8, ge=0, le=1)
    gene_swap_prob: float = Field(default=0.5, ge=0, le=1)
    mutation_prob: float = Field(default=0.5, ge=0, le=1)
    elite: int = Field(default=2, ge=0)
    metric_projections: int = Field(default=5000, ge=1, description="directions of the reported OT(x)")
    metric_delta: float = Field(default=0.1, ge=0, lt=0.5, description="trimming of the reported OT(x), OT(y)")
    holdout_sets: int = Field(default=100, ge=0, description="fresh direction sets of the certified_x_holdout "
                              "metric (0: skip)")
    mmd_sigma: float = Field(default=1.0, gt=0, description="Gaussian kernel bandwidth of the reported MMD^2")
    max_elements: int = Field(default=4_000_000, ge=1, description="floats of the reused sort buffer")

    @model_validator(mode="after")
    def _settings_valid(self) -> DiscoverSolverParams:
        from recourselab.discover.settings import DiscoverSettings

        if self.eta_l > self.eta_r:
            raise ValueError(f"eta_l ({self.eta_l}) must not exceed eta_r ({self.eta_r})")
        try:
            DiscoverSettings.from_kwargs(**self.model_dump())
        except ConfigError as err:
            raise ValueError(str(err)) from None
        return self


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


class DiscoverParams(StrictModel):
    """Settings of the ``discover`` stage (distributional counterfactuals, one run per model and seed).

    Protocol (the paper's, as in ``bench/discover.py``): ``n_factuals`` rows of ``split`` sampled
    with the run seed among those the model predicts unfavourable (``factuals: unfavourable``),
    target ``1 - Beta(0.1, 0.9)``.
    """

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

    @model_validator(mode="after")
    def _overrides_valid(self) -> DiscoverParams:
        for name in self.per_dataset:
            self.solver_for(name)
        return self

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
    orchestration: OrchestrationParams = Field(default_factory=OrchestrationParams)

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
    def _datasets_known(self) -> Params:
        from recourselab.data.registry import BUILTIN_DATASETS

        valid = sorted(BUILTIN_DATASETS) + sorted(self.data.custom)
        clash = set(self.data.custom) & set(BUILTIN_DATASETS)
        if clash:
            raise ValueError(f"custom datasets may not reuse built-in names: {sorted(clash)}")
        for name in self.datasets:
            if name not in valid:
                raise ValueError(
                    f"unknown dataset {name!r}{did_you_mean(name, valid)}; valid datasets: "
                    f"{', '.join(valid)} (declare your own under data.custom)"
                )
        if len(set(self.datasets)) != len(self.datasets):
            raise ValueError(f"datasets listed twice: {self.datasets}")
        for name in self.ablate.datasets:
            if name not in valid:
                raise ValueError(f"ablate.datasets: unknown dataset {name!r}{did_you_mean(name, valid)}; "
                                 f"valid datasets: {', '.join(valid)}")
        for name in self.prepare.immutable:
            if name not in valid:
                raise ValueError(f"prepare.immutable: unknown dataset {name!r}{did_you_mean(name, valid)}; "
                                 f"valid datasets: {', '.join(valid)}")
        for name in self.discover.per_dataset:
            if name not in valid:
                raise ValueError(f"discover.per_dataset: unknown dataset {name!r}{did_you_mean(name, valid)}; "
                                 f"valid datasets: {', '.join(valid)}")
        for name in self.train_flow.per_dataset:
            if name not in valid:
                raise ValueError(f"train_flow.per_dataset: unknown dataset {name!r}{did_you_mean(name, valid)}; "
                                 f"valid datasets: {', '.join(valid)}")
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
