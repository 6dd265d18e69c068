"""The common recourse-method interface (:class:`CounterfactualMethod`, :class:`Counterfactuals`) and baselines."""

from recourselab.methods.base import CounterfactualMethod, Counterfactuals

__all__ = ["CounterfactualMethod", "Counterfactuals"]
