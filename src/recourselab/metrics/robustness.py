"""Validity under model multiplicity, the evaluation query set, and over-seed summaries."""

from __future__ import annotations

import statistics
from collections.abc import Mapping
from typing import Any

import numpy as np

from recourselab.models.oracle import EnsembleOutput


def query_set(output: EnsembleOutput, y: np.ndarray, cap: int) -> np.ndarray:
    """Indices (at most ``cap``, in order) of rows that every member classifies correctly."""
    correct = (output.member_labels == np.asarray(y)[None, :]).all(axis=0)
    return np.flatnonzero(correct)[:cap]


def validity_metrics(output: EnsembleOutput, target: np.ndarray) -> dict[str, Any]:
    """Validity of counterfactuals against every member.

    Returns ``per_model`` (name -> fraction labelled ``target``), ``mean_per_model`` (the
    paper's headline: mean of the per-model rates), ``unanimous`` (all members) and
    ``majority`` (most frequent member label) validity.
    """
    target = np.asarray(target)
    per_model = (output.member_labels == target[None, :]).mean(axis=1)
    return {"per_model": {n: float(v) for n, v in zip(output.member_names, per_model, strict=True)},
            "mean_per_model": float(per_model.mean()),
            "unanimous": float((output.unanimous == target).mean()),
            "majority": float((output.majority == target).mean())}


def _flatten(d: Mapping[str, Any], prefix: str = "") -> dict[str, float]:
    out: dict[str, float] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, Mapping):
            out.update(_flatten(v, f"{key}."))
        elif isinstance(v, (int, float)) and not isinstance(v, bool):
            out[key] = float(v)
    return out


def summarize_seeds(per_seed: Mapping[int, Mapping[str, Any]]) -> dict[str, Any]:
    """Mean and sample standard deviation (ddof 1) over seeds of every numeric (possibly nested) metric.

    A metric missing or None in some seeds (e.g. an iteration that never happened) is
    summarised over the seeds that have it.
    """
    flat = {s: _flatten(m) for s, m in per_seed.items()}
    keys = dict.fromkeys(k for f in flat.values() for k in f)
    summary = {}
    for k in keys:
        values = [flat[s][k] for s in flat if k in flat[s]]
        summary[k] = {"mean": statistics.fmean(values), "std": statistics.stdev(values) if len(values) > 1 else 0.0}
    return {"seeds": sorted(per_seed), "per_seed": {str(s): dict(m) for s, m in per_seed.items()}, "summary": summary}
