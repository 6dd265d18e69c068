"""recourselab: robust and distributional counterfactual explanations as a reproducible pipeline.

The names a library user needs are importable from here (loaded on first use, so that
``import recourselab`` stays light)::

    from recourselab import BlackBox, DensityFlow, Discover, Schema, load_dataset, make_target
"""

from __future__ import annotations

from recourselab._version import __version__
from recourselab.lazy import lazy_exports

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


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)

__all__ = ["__version__", *_EXPORTS]
