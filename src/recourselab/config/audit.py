"""The ``audit:`` params section: subgroups, gap thresholds and diff tolerances of the audit report.

Layer 1 (beside :mod:`recourselab.config`): it imports nothing above :mod:`recourselab.errors`.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator

#: Protected attributes looked for in every dataset (a name absent from a dataset is skipped).
DEFAULT_PROTECTED = ("sex", "gender", "race", "age", "age_in_years", "personal_status_and_sex")


class AuditParams(BaseModel):
    """Settings of the ``audit`` stage and of ``recourselab audit diff``."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    protected: list[str] = Field(
        default_factory=lambda: list(DEFAULT_PROTECTED),
        description="feature names whose subgroups the report breaks validity, cost and certification down by")
    bands: dict[str, list[float]] = Field(
        default_factory=lambda: {"age": [25.0, 45.0, 65.0], "age_in_years": [25.0, 45.0, 65.0]},
        description="numerical protected feature -> band edges (ascending); others are split at their quartiles")
    gap_threshold: float = Field(
        default=0.1, ge=0, le=1, description="largest tolerated gap between subgroups in validity or certified share")
    cost_gap_threshold: float = Field(
        default=0.25, ge=0, description="largest tolerated gap in mean L1 cost, relative to the overall mean")
    min_group_rows: int = Field(default=10, ge=1, description="smaller subgroups are shown but never flagged")
    row_tolerance: float = Field(
        default=1e-6, ge=0, description="a counterfactual moving at most this (encoded units, max over columns) "
                                        "between revisions is numerical noise, not change")
    metric_tolerance: float = Field(
        default=1e-9, ge=0, description="a headline metric changing at most this between revisions is noise")

    @field_validator("bands")
    @classmethod
    def _ascending(cls, v: dict[str, list[float]]) -> dict[str, list[float]]:
        for name, edges in v.items():
            if not edges or any(b <= a for a, b in zip(edges, edges[1:], strict=False)):
                raise ValueError(f"audit.bands.{name}: band edges must be a non-empty ascending list, got {edges}")
        return v
