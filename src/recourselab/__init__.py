"""recourselab: robust and distributional counterfactual explanations as a reproducible pipeline.

The names a library user needs are importable from here (loaded on first use, so that
``import recourselab`` stays light)::

    from recourselab import BlackBox, DensityFlow, Discover, Schema, load_dataset, make_target
"""

from __future__ import annotations

import importlib
from typing import Any

from recourselab._version import __version__

#: Public name -> the module that defines it.
_EXPORTS = {
    "Schema": "recourselab.data.schema",
    "load_dataset": "recourselab.data.datasets",
    "prepare_splits": "recourselab.data.datasets",
    "BlackBox": "recourselab.models.oracle",
    "load_ensemble": "recourselab.models.ensemble",
    "verify": "recourselab.models.verdict",
    "CounterfactualMethod": "recourselab.methods.base",
    "Counterfactuals": "recourselab.methods.base",
    "DensityFlow": "recourselab.densityflow.model",
    "Discover": "recourselab.discover.solver",
    "DCE": "recourselab.discover.dce",
    "make_target": "recourselab.discover.targets",
}


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'recourselab' has no attribute {name!r}; public names: {sorted(_EXPORTS)}")
    value = getattr(importlib.import_module(_EXPORTS[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])


__all__ = ["__version__", *_EXPORTS]
