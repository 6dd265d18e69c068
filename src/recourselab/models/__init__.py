"""Model zoo, tuning, persistence and the query-counting BlackBox oracle."""

from recourselab.models.ensemble import load_ensemble, load_members, read_manifest, write_manifest
from recourselab.models.oracle import BlackBox, EnsembleOutput, QueryBudgetExceeded
from recourselab.models.registry import (
    ENSEMBLE,
    MODEL_KINDS,
    FitContext,
    FittedModel,
    UnknownModelError,
    fit_model,
    get_kind,
    load_model,
)
from recourselab.models.tuning import Split, TuneResult, tune_model

__all__ = [
    "ENSEMBLE", "MODEL_KINDS", "BlackBox", "EnsembleOutput", "FitContext", "FittedModel",
    "QueryBudgetExceeded", "Split", "TuneResult", "UnknownModelError", "fit_model", "get_kind",
    "load_ensemble", "load_members", "load_model", "read_manifest", "tune_model", "write_manifest",
]
