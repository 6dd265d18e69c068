"""The whole ``params.yaml`` as one model, and its validation with messages that name each bad key."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationError, create_model, field_validator, model_validator

from recourselab.config.audit import AuditParams
from recourselab.config.base import MAX_SEED, StrictModel, problem, validate_strict
from recourselab.config.data import DataParams, PrepareParams
from recourselab.config.evaluate import EvaluateParams
from recourselab.config.methods import (
    AblateParams,
    DiscoverParams,
    DistillParams,
    GenerateParams,
    TrainFlowParams,
)
from recourselab.config.models import ModelsParams, TuneEnsembleParams
from recourselab.errors import ConfigError, did_you_mean

DEFAULT_DATASETS = ["moons", "circles", "spirals", "chessboard", "adult", "compas", "german"]


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
    pool: bool = Field(
        default=True,
        description="`recourselab repro` runs each per-seed stage's tasks of every dataset in one pool of max_workers "
                    "before DVC runs the stage (which then finds cache hits): no worker waits for a dataset's "
                    "last seed. Same outputs; off: plain `dvc repro`",
    )
    dask_address: str | None = Field(
        default=None,
        description="scheduler of an existing Dask cluster (tcp://host:8786) for task_runner dask; its workers "
                    "must see this project's folders (cache_dir, data/) at the same paths",
    )


#: The sections of ``params.yaml`` after ``profile``, ``seeds`` and ``datasets``, in file order: key -> model.
SECTIONS: dict[str, type[StrictModel]] = {
    "data": DataParams, "prepare": PrepareParams, "models": ModelsParams, "tune_ensemble": TuneEnsembleParams,
    "train_flow": TrainFlowParams, "distill": DistillParams, "generate": GenerateParams,
    "discover": DiscoverParams, "ablate": AblateParams, "evaluate": EvaluateParams,
    "orchestration": OrchestrationParams, "audit": AuditParams,
}


class _ParamsRules(StrictModel):
    """The top-level keys and the rules across sections of :class:`Params` (its sections are added below)."""

    profile: str = "default"
    seeds: list[int] = Field(default_factory=lambda: [0, 1, 2])
    datasets: list[str] = Field(default_factory=lambda: list(DEFAULT_DATASETS))

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
    def _lists_consistent(self) -> Any:
        """Rules between sections that need no registry (dataset names are checked at stage start-up by
        :func:`recourselab.pipeline.validate.validate_params`)."""
        if len(set(self.datasets)) != len(self.datasets):
            raise ValueError(f"datasets listed twice: {self.datasets}")
        if self.ablate.n_seeds > len(self.seeds):
            raise ValueError(f"ablate.n_seeds is {self.ablate.n_seeds} but only {len(self.seeds)} seeds are listed "
                             f"({self.seeds}); ablate.n_seeds counts the first seeds of `seeds`")
        return self


#: The whole ``params.yaml``: the top-level keys, then one field per entry of :data:`SECTIONS` (its
#: defaults are that section's defaults).
Params = create_model("Params", __base__=_ParamsRules, __doc__="The whole ``params.yaml``.", __module__=__name__,
                      **{key: (model, Field(default_factory=model)) for key, model in SECTIONS.items()})


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
            lines.append(f"  {problem(e)}")
    return "\n".join(lines)


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
        return validate_strict(Params, raw)
    except ValidationError as err:
        raise ConfigError(_format_errors(err, source)) from None
