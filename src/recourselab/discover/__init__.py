"""DISCOVER: certified distributional counterfactuals for black-box tabular models.

Public API::

    from recourselab.discover import Discover, DiscoverSettings, make_target

    solver = Discover(blackbox, schema=schema, n_projections=10, top_k=3, h=3, trials=10,
                      max_iter=20, strategy="monte_carlo", seed=0)
    result = solver.solve(X_factual, make_target("beta", a=0.1, b=0.9, seed=0))
    result.counterfactuals, result.counterfactuals_frame, result.log, result.metrics, result.feasible

All distances, objective values, UCLs and thresholds are squared Wasserstein-2 quantities
(SW^2 on inputs, W^2 on outputs) in the schema's encoded space.
"""

from recourselab.discover.certify import EtaStep, dkw_epsilon, eta_rule, is_feasible, ucl_sw2, ucl_w2
from recourselab.discover.dce import DCE, TorchClassifier, fit_torch_mlp
from recourselab.discover.metrics import ares_cost, mmd2, ot_x, ot_y
from recourselab.discover.ot import (
    Matching,
    match,
    random_directions,
    sliced_wasserstein_sq,
    trim_weights,
    wasserstein_1d_sq,
)
from recourselab.discover.proposals import ProposalSpace, sample_cone
from recourselab.discover.sampling import sample_factuals
from recourselab.discover.settings import DiscoverSettings
from recourselab.discover.solver import Discover, DiscoverResult, NotCertifiedWarning
from recourselab.discover.strategies import STRATEGIES, UnknownStrategyError, get_strategy
from recourselab.discover.targets import TARGETS, Target, UnknownTargetError, make_target

__all__ = [
    "DCE", "STRATEGIES", "TARGETS", "Discover", "DiscoverResult", "DiscoverSettings", "EtaStep", "Matching",
    "NotCertifiedWarning", "ProposalSpace", "Target", "TorchClassifier", "UnknownStrategyError",
    "UnknownTargetError", "ares_cost", "dkw_epsilon", "eta_rule", "fit_torch_mlp", "get_strategy",
    "is_feasible", "make_target", "match", "mmd2", "ot_x", "ot_y", "random_directions", "sample_cone",
    "sample_factuals", "sliced_wasserstein_sq", "trim_weights", "ucl_sw2", "ucl_w2", "wasserstein_1d_sq",
]
