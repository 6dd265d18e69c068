"""The one validation step a stage runs at start-up: the params checked against the registries.

:func:`recourselab.config.parse_params` checks what the params file says on its own (keys,
types, ranges, the library's rules across settings). What needs the registries of the layers
above it is checked here: dataset names (built-in and ``data.custom``), model hyperparameters
and DISCOVER strategy names. Stages, ``recourselab repro``'s preflight and ``recourselab
explain`` load their params through :func:`load_checked_params`.
"""

from __future__ import annotations

from pathlib import Path

from recourselab.config import Params, load_params
from recourselab.data.registry import BUILTIN_DATASETS
from recourselab.discover.strategies import STRATEGIES
from recourselab.errors import ConfigError, did_you_mean
from recourselab.models.registry import MODEL_KINDS


def _dataset_problems(params: Params) -> list[str]:
    valid = sorted(BUILTIN_DATASETS) + sorted(params.data.custom)
    clash = set(params.data.custom) & set(BUILTIN_DATASETS)
    out = [f"custom datasets may not reuse built-in names: {sorted(clash)}"] if clash else []
    for name in params.datasets:
        if name not in valid:
            out.append(f"unknown dataset {name!r}{did_you_mean(name, valid)}; valid datasets: {', '.join(valid)} "
                       "(declare your own under data.custom)")
    places = {"ablate.datasets": params.ablate.datasets, "prepare.immutable": params.prepare.immutable,
              "prepare.monotone": params.prepare.monotone,
              "discover.per_dataset": params.discover.per_dataset,
              "train_flow.per_dataset": params.train_flow.per_dataset}
    for where, names in places.items():
        out += [f"{where}: unknown dataset {name!r}{did_you_mean(name, valid)}; valid datasets: {', '.join(valid)}"
                for name in names if name not in valid]
    return out


def _model_problems(params: Params) -> list[str]:
    out = []
    for name in type(params.models).model_fields:
        spec = getattr(params.models, name)
        valid = MODEL_KINDS[name].hyperparameters
        out += [f"models: unknown hyperparameter {key!r} for model {name!r}{did_you_mean(key, valid)}; "
                f"valid: {', '.join(valid)}" for key in [*spec.grid, *spec.fixed] if key not in valid]
    return out


def _strategy_problems(params: Params) -> list[str]:
    valid = list(STRATEGIES)
    places = {"discover.solver": params.discover.solver.strategy}
    places |= {f"discover.per_dataset.{name}": params.discover.solver_for(name).strategy
               for name in params.discover.per_dataset}
    return [f"{where}.strategy: unknown strategy {name!r}{did_you_mean(name, valid)}; valid: {', '.join(valid)}"
            for where, name in places.items() if name not in valid]


def validate_params(params: Params, source: str = "<params>") -> Params:
    """``params`` if every name it uses is registered (datasets, model hyperparameters, strategies).

    Raises
    ------
    ConfigError
        ``invalid parameters in <source>:`` and one line per problem, naming the place, the
        unknown name, the closest valid one and every valid one.
    """
    problems = [*_dataset_problems(params), *_model_problems(params), *_strategy_problems(params)]
    if problems:
        raise ConfigError("\n".join([f"invalid parameters in {source}:", *(f"  {p}" for p in problems)]))
    return params


def load_checked_params(path: str | Path = "params.yaml") -> Params:
    """:func:`~recourselab.config.load_params` followed by :func:`validate_params`."""
    return validate_params(load_params(path), source=str(path))


__all__ = ["load_checked_params", "validate_params"]
