"""DensityFlow: NCE surrogate, density-guided Neural ODE, query-budgeted distillation, inference."""

from recourselab.densityflow.flow import VelocityField, integrate
from recourselab.densityflow.model import CounterfactualResult, DensityFlow, DensityFlowConfig
from recourselab.densityflow.surrogate import Surrogate, noise_bound

__all__ = ["CounterfactualResult", "DensityFlow", "DensityFlowConfig", "Surrogate", "VelocityField",
           "integrate", "noise_bound"]
