"""Evaluation metrics shared by the stages."""

from recourselab.metrics.robustness import query_set, summarize_seeds, validity_by_direction, validity_metrics

__all__ = ["query_set", "summarize_seeds", "validity_by_direction", "validity_metrics"]
