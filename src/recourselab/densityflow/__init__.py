"""DensityFlow: NCE surrogate, density-guided Neural ODE, query-budgeted distillation, inference.

Names load on first use, so that :mod:`recourselab.config` can read the settings declaration
(:mod:`recourselab.densityflow.config`) without importing torch.
"""

from __future__ import annotations

from recourselab.lazy import lazy_exports

#: Public name -> the module that defines it.
_EXPORTS = {
    "CounterfactualResult": "recourselab.densityflow.model",
    "DensityFlow": "recourselab.densityflow.model",
    "DensityFlowConfig": "recourselab.densityflow.config",
    "Surrogate": "recourselab.densityflow.surrogate",
    "VelocityField": "recourselab.densityflow.ode",
    "integrate": "recourselab.densityflow.ode",
    "noise_bound": "recourselab.densityflow.surrogate",
}


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)

__all__ = sorted(_EXPORTS)
