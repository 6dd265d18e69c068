"""Validity under model multiplicity, the evaluation query set, and over-seed summaries."""

from __future__ import annotations

import numbers
import statistics
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from recourselab.errors import DataError
from recourselab.models.oracle import EnsembleOutput


def query_set(output: EnsembleOutput, y: np.ndarray, cap: int, *, seed: int = 0) -> np.ndarray:
    """Indices of rows that every member classifies correctly, in ascending order.

    When more than ``cap`` rows qualify, ``cap`` of them are drawn at random (``seed``) from all
    of them, not taken from the top of the file.

    Raises
    ------
    DataError
        No row qualifies: there is nothing to explain.
    """
    correct = np.flatnonzero((output.member_labels == np.asarray(y)[None, :]).all(axis=0))
    if len(correct) == 0:
        raise DataError(f"the query set is empty: none of the {len(y)} rows is classified correctly by every "
                        f"member ({', '.join(output.member_names)})")
    if len(correct) <= cap:
        return correct
    return np.sort(np.random.default_rng(seed).choice(correct, cap, replace=False))


def validity_metrics(output: EnsembleOutput, target: np.ndarray) -> dict[str, Any]:
    """Validity of counterfactuals against every member.

    Returns ``per_model`` (name -> fraction labelled ``target``), ``mean_per_model`` (the
    paper's headline: mean of the per-model rates), ``unanimous`` (all members) and
    ``majority`` (a strict majority of the members, more than half; a tie is not valid) validity.
    """
    target = np.asarray(target)
    if len(target) == 0:
        raise DataError("validity needs at least one counterfactual, got 0 rows")
    hits = output.member_labels == target[None, :]  # (M, n)
    per_model = hits.mean(axis=1)
    return {"per_model": {n: float(v) for n, v in zip(output.member_names, per_model, strict=True)},
            "mean_per_model": float(per_model.mean()),
            "unanimous": float(hits.all(axis=0).mean()),
            "majority": float((2 * hits.sum(axis=0) > len(hits)).mean())}


#: The directions of :func:`validity_by_direction`: (key, factual favourable?, target favourable?).
DIRECTIONS = (("unfavourable_to_favourable", False, True), ("favourable_to_unfavourable", True, False),
              ("unfavourable_to_unfavourable", False, False))


def validity_by_direction(output: EnsembleOutput, target: np.ndarray, factual_labels: np.ndarray,
                          favourable: int) -> dict[str, dict[str, Any]]:
    """:func:`validity_metrics` apart per direction of change, with the row count ``n`` of each.

    ``unfavourable_to_favourable`` (the recourse case: factual label not ``favourable``, target
    ``favourable``) and ``favourable_to_unfavourable`` (the reverse) are always present; a
    direction without rows has ``n`` 0 and None values. ``unfavourable_to_unfavourable``
    (between two unfavourable classes, K > 2 only) is present when it has rows. Rows whose
    factual and target are both favourable belong to no direction.

    Parameters
    ----------
    output : the members' answers on the n counterfactuals, member_proba (M, n, K).
    target : (n,) target class of each counterfactual.
    factual_labels : (n,) class of each factual row.
    favourable : index of the favourable class.
    """
    target, factual_labels = np.asarray(target), np.asarray(factual_labels)
    if factual_labels.shape != target.shape:
        raise DataError(f"validity by direction needs one factual label per counterfactual: {len(factual_labels)} "
                        f"labels for {len(target)} targets")
    out: dict[str, dict[str, Any]] = {}
    for key, from_fav, to_fav in DIRECTIONS:
        rows = ((factual_labels == favourable) == from_fav) & ((target == favourable) == to_fav)
        if not rows.any():
            if key != "unfavourable_to_unfavourable":
                out[key] = {"n": 0, "per_model": dict.fromkeys(output.member_names), "mean_per_model": None,
                            "unanimous": None, "majority": None}
            continue
        part = EnsembleOutput(output.member_names, output.member_proba[:, rows])
        out[key] = {"n": int(rows.sum()), **validity_metrics(part, target[rows])}
    return out


def _flatten(d: Mapping[str, Any], prefix: str = "") -> dict[str, float]:
    out: dict[str, float] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, Mapping):
            out.update(_flatten(v, f"{key}."))
        elif isinstance(v, numbers.Real) and not isinstance(v, (bool, np.bool_)) and np.isfinite(v):
            out[key] = float(v)  # NaN (e.g. a correlation of a constant column) counts as missing, like None
    return out


def mean_std(values: Sequence[float]) -> dict[str, float | None]:
    """``{"mean", "std"}`` of per-seed values: the sample standard deviation (ddof 1), None for one value."""
    return {"mean": statistics.fmean(values), "std": statistics.stdev(values) if len(values) > 1 else None}


def summarize_seeds(per_seed: Mapping[int, Mapping[str, Any]]) -> dict[str, Any]:
    """Mean, sample standard deviation (ddof 1) and count ``n`` over seeds of every numeric (possibly nested) metric.

    A metric missing, None or NaN in some seeds (e.g. an iteration that never happened, or a
    correlation of a constant column) is summarised over the seeds that have it; ``n`` says how many
    (``std`` is None where ``n`` is 1).
    """
    flat = {s: _flatten(m) for s, m in per_seed.items()}
    keys = dict.fromkeys(k for f in flat.values() for k in f)
    summary = {}
    for k in keys:
        values = [flat[s][k] for s in flat if k in flat[s]]
        summary[k] = {**mean_std(values), "n": len(values)}
    return {"seeds": sorted(per_seed), "per_seed": {str(s): dict(m) for s, m in per_seed.items()}, "summary": summary}
