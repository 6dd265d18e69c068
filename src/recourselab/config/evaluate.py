"""The ``evaluate`` params section: which recourse methods run at which settings, and what is scored."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

#: Settings of every method in the default comparison: method -> setting name -> keyword arguments
#: (``budget`` goes to ``explain``, every other key to the method's constructor).
DEFAULT_METHODS: dict[str, dict[str, dict[str, Any]]] = {
    "densityflow": {"paper": {}},
    "densityflow_r": {name: {"settings": name}
                      for name in ("default", "no_shortcut", "lean", "no_shrink", "anchors_only", "thorough")},
    "nearest": {"all": {}, "q480_sample": {"budget": 480, "selection": "sample"},
                "q480": {"budget": 480}, "q1000": {"budget": 1000}, "q2000": {"budget": 2000}},
    "nearest_line": {"all": {}, "q5000": {"budget": 5000}},
    "wachter": {"p0.5": {"threshold": 0.5}, "p0.7": {"threshold": 0.7}, "p0.9": {"threshold": 0.9}},
    "growing_spheres": {"default": {}},
}


class EvaluateParams(BaseModel):
    """Settings of the ``evaluate`` stage (every registered method on ``generate``'s query set)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    methods: dict[str, dict[str, dict[str, Any]]] = Field(
        default_factory=lambda: {m: {s: dict(kw) for s, kw in v.items()} for m, v in DEFAULT_METHODS.items()},
        description="method -> setting -> keyword arguments; a registered method not named here runs at its "
                    "defaults (setting 'default')")
    exclude: list[str] = Field(default_factory=lambda: ["dice"],
                               description="registered methods left out (DiCE's genetic search takes hours)")
    max_rows: int | None = Field(default=None, ge=1,
                                 description="cap on the query rows per seed (None: generate's whole query set)")
    plausibility: bool = Field(default=True, description="score LOF / IsolationForest plausibility")
    own: str = Field(default="densityflow_r", description="the method checked against the frontier")
    own_setting: str = Field(default="default", description="its setting checked against the frontier")

    @field_validator("methods")
    @classmethod
    def _settings_named(cls, v: dict[str, dict[str, dict[str, Any]]]) -> dict[str, dict[str, dict[str, Any]]]:
        for method, settings in v.items():
            if not settings:
                raise ValueError(f"method {method!r} has no settings; give at least one (e.g. default: {{}}) or "
                                 f"list it under evaluate.exclude")
            for name, kw in settings.items():
                budget = kw.get("budget")
                if budget is not None and (isinstance(budget, bool) or not isinstance(budget, int) or budget < 0):
                    raise ValueError(f"{method}/{name}: budget must be a non-negative integer or null, got {budget!r}")
        return v


__all__ = ["DEFAULT_METHODS", "EvaluateParams"]
