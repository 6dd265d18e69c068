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

from __future__ import annotations

from recourselab.lazy import lazy_exports

#: Public name -> the module that defines it (loaded on first use: :mod:`recourselab.config` reads
#: :mod:`recourselab.discover.settings` without importing the solver).
_EXPORTS = {
    "EtaStep": "recourselab.discover.certify",
    "dkw_epsilon": "recourselab.discover.certify",
    "eta_rule": "recourselab.discover.certify",
    "is_feasible": "recourselab.discover.certify",
    "ucl_sw2": "recourselab.discover.certify",
    "ucl_w2": "recourselab.discover.certify",
    "DCE": "recourselab.discover.dce",
    "TorchClassifier": "recourselab.discover.dce",
    "fit_torch_mlp": "recourselab.discover.dce",
    "ares_cost": "recourselab.discover.metrics",
    "mmd2": "recourselab.discover.metrics",
    "ot_x": "recourselab.discover.metrics",
    "ot_y": "recourselab.discover.metrics",
    "Matching": "recourselab.discover.ot",
    "match": "recourselab.discover.ot",
    "random_directions": "recourselab.discover.ot",
    "sliced_wasserstein_sq": "recourselab.discover.ot",
    "trim_weights": "recourselab.discover.ot",
    "wasserstein_1d_sq": "recourselab.discover.ot",
    "ProposalSpace": "recourselab.discover.proposals",
    "sample_cone": "recourselab.discover.proposals",
    "sample_factuals": "recourselab.discover.sampling",
    "DiscoverSettings": "recourselab.discover.settings",
    "Discover": "recourselab.discover.solver",
    "DiscoverResult": "recourselab.discover.result",
    "NotCertifiedWarning": "recourselab.discover.setup",
    "UnreachableCertificateWarning": "recourselab.discover.setup",
    "STRATEGIES": "recourselab.discover.strategies",
    "UnknownStrategyError": "recourselab.discover.strategies",
    "get_strategy": "recourselab.discover.strategies",
    "TARGETS": "recourselab.discover.targets",
    "Target": "recourselab.discover.targets",
    "UnknownTargetError": "recourselab.discover.targets",
    "make_target": "recourselab.discover.targets",
}


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)

#: The public names; the lower-level pieces above (OT, certificate, proposals) stay importable by name.
__all__ = [
    "DCE", "STRATEGIES", "TARGETS", "Discover", "DiscoverResult", "DiscoverSettings", "NotCertifiedWarning",
    "Target", "TorchClassifier", "UnknownStrategyError", "UnknownTargetError", "UnreachableCertificateWarning",
    "ares_cost", "fit_torch_mlp", "make_target", "mmd2", "ot_x", "ot_y", "sample_factuals",
]
