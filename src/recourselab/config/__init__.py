"""Typed parameters: ``params.yaml`` validated into frozen pydantic models.

``load_params`` rejects unknown or misspelled keys with a message naming the key, the
section it appeared in and the valid keys there. The model defaults *are* the default
profile; other profiles (``profiles/<name>.yaml``) are overlays rendered on top of them by
:func:`render_profile`.

One module per group of sections: :mod:`~recourselab.config.base` (the strict model and the
sections derived from the library's settings), :mod:`~recourselab.config.data`,
:mod:`~recourselab.config.models`, :mod:`~recourselab.config.methods`,
:mod:`~recourselab.config.evaluate`, :mod:`~recourselab.config.audit`, the whole file in
:mod:`~recourselab.config.params` and reading/writing it in :mod:`~recourselab.config.files`.
"""

from __future__ import annotations

from recourselab.config.audit import AuditParams
from recourselab.config.base import MAX_SEED, StrictModel, derived_section
from recourselab.config.data import (
    BUILTIN_IMMUTABLE,
    BUILTIN_MONOTONE,
    MONOTONE_RULES,
    CustomDataset,
    DataParams,
    PrepareParams,
)
from recourselab.config.evaluate import EvaluateParams
from recourselab.config.files import (
    PROFILES_DIR,
    REPLACED_KEYS,
    available_profiles,
    dump_params,
    load_params,
    read_yaml,
    render_profile,
    section_hash,
    write_params,
)
from recourselab.config.methods import (
    ABLATION_DATASETS,
    ABLATION_VARIANTS,
    DEFAULT_DISCOVER_OVERRIDES,
    DEFAULT_FLOW_OVERRIDES,
    DISCOVER_MODELS,
    AblateParams,
    DiscoverParams,
    DiscoverSolverParams,
    DiscoverTargetParams,
    DistillParams,
    GenerateParams,
    TrainFlowParams,
)
from recourselab.config.models import ModelsParams, ModelSpec, TuneEnsembleParams
from recourselab.config.params import DEFAULT_DATASETS, OrchestrationParams, Params, parse_params

__all__ = [
    "ABLATION_DATASETS", "ABLATION_VARIANTS", "BUILTIN_IMMUTABLE", "BUILTIN_MONOTONE", "DEFAULT_DATASETS",
    "DEFAULT_DISCOVER_OVERRIDES", "DEFAULT_FLOW_OVERRIDES", "DISCOVER_MODELS", "MAX_SEED", "MONOTONE_RULES",
    "PROFILES_DIR", "REPLACED_KEYS", "AblateParams", "AuditParams", "CustomDataset", "DataParams", "DiscoverParams",
    "DiscoverSolverParams", "DiscoverTargetParams", "DistillParams", "EvaluateParams", "GenerateParams", "ModelSpec",
    "ModelsParams", "OrchestrationParams", "Params", "PrepareParams", "StrictModel", "TrainFlowParams",
    "TuneEnsembleParams", "available_profiles", "derived_section", "dump_params", "load_params", "parse_params",
    "read_yaml", "render_profile", "section_hash", "write_params",
]
