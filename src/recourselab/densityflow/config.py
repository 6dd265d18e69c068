"""Settings of DensityFlow: one frozen dataclass, the single declaration of every setting and its range.

The defaults are the pipeline's default profile (``params.yaml``); the paper's values live in the
``paper`` profile (``profiles/paper.yaml``); docs/reference/parameters.md lists both. The params
sections ``train_flow``, ``distill`` and ``generate`` are derived from this class
(:data:`SECTIONS` maps their keys onto its fields).
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from typing import Any

import numpy as np

from recourselab.errors import ConfigError, DataError
from recourselab.fields import plain_numbers, problems, setting

#: torchdiffeq's fixed and adaptive solvers (``scipy_solver`` needs options, so it is not offered);
#: tests/densityflow/test_config.py integrates with each so a torchdiffeq that drops one is noticed.
ODE_METHODS = ("adaptive_heun", "bosh3", "dopri5", "dopri8", "euler", "explicit_adams", "fehlberg2", "fixed_adams",
               "heun2", "heun3", "implicit_adams", "midpoint", "rk4")


@dataclass(frozen=True)
class DensityFlowConfig:
    """Every setting of DensityFlow, with the pipeline's default profile as defaults.

    Loss weights: ``lambda_valid`` (CE of the surrogate at x'), ``lambda_cost`` (kinetic
    energy e(T)), ``lambda_den`` (ReLU(margin - S(x'|y*))). The margin is ``log_tau``
    (log(noise_ratio) when None), or with ``density_quantile`` (extension) that quantile of
    S(x|y) over the batch's real rows of class y, i.e. counterfactuals are asked to reach the
    core of the target class. NCE: ``noise_ratio`` r = N_noise / N_data per batch,
    ``lambda_noise``, box half-width C = max(c_floor, beta * max|x|_inf). Training:
    ``epochs`` (raised so that training takes at least ``min_steps`` optimizer steps: small
    datasets get more epochs), ``batch_size``, AdamW ``lr_g`` / ``lr_phi`` / ``weight_decay``,
    linear warm-up for ``warmup_epochs`` then cosine to ``lr_min``, EMA ``ema_decay`` of all
    networks, a stratified subsample of ``max_train_rows`` rows (None: all). ODE: the training
    solves (fit and distillation) take ``train_steps`` fixed RK4 steps over t in [0, 1], or with
    ``train_steps`` None the adaptive torchdiffeq ``method`` (one of :data:`ODE_METHODS`) at
    (``rtol_train``, ``atol_train``); inference always solves adaptively with ``method`` at
    (``rtol_test``, ``atol_test``); ``adjoint`` switches to the
    adjoint method (direct backprop is faster on CPU at this size); ``field_spectral_norm``
    spectral-normalises the velocity field's layers (extension: keeps the ODE from stiffening
    in long runs). Distillation: ``distill_epochs`` x ``distill_inner`` x ``distill_points``
    queried rows, learning rates ``distill_lr_phi`` / ``distill_lr_g``; ``distill_replay``
    fits every surrogate step on all support points queried so far (no extra query; False:
    only the newest ``distill_points``), ``distill_gen_steps`` generator steps per
    distillation epoch. Inference: ``n_starts`` starts per query (the query + jitters of std
    ``jitter``), the starts of at most ``solve_queries`` queries per batched ODE solve (bounds
    the memory of large query sets; queries in one solve share its adaptive steps).
    """

    lambda_valid: float = setting(1.0, ge=0)
    lambda_cost: float = setting(0.2, ge=0)
    lambda_den: float = setting(1.0, ge=0)
    log_tau: float | None = setting(None)
    density_quantile: float | None = setting(0.8, gt=0, lt=1)
    noise_ratio: float = setting(0.2, gt=0)
    lambda_noise: float = setting(1.0, ge=0)
    beta: float = setting(1.2, gt=0)
    c_floor: float = setting(2.0, gt=0)
    score_mode: str = setting("target", choices=("target", "max"))
    hidden: int = setting(128, ge=1)
    embed_dim: int = setting(16, ge=1)
    epochs: int = setting(60, ge=1)
    min_steps: int = setting(0, ge=0)
    batch_size: int = setting(64, ge=1)
    lr_g: float = setting(1e-3, gt=0)
    lr_phi: float = setting(1e-3, gt=0)
    weight_decay: float = setting(1e-4, ge=0)
    warmup_epochs: int = setting(3, ge=0)
    lr_min: float = setting(1e-6, ge=0)
    ema_decay: float = setting(0.99, ge=0, lt=1)
    method: str = setting("dopri5", choices=ODE_METHODS, rule=f"a torchdiffeq method: {', '.join(ODE_METHODS)}")
    train_steps: int | None = setting(2, ge=1)
    rtol_train: float = setting(1e-3, gt=0)
    atol_train: float = setting(1e-3, gt=0)
    rtol_test: float = setting(1e-4, gt=0)
    atol_test: float = setting(1e-4, gt=0)
    adjoint: bool = setting(False)
    field_spectral_norm: bool = setting(False)
    max_train_rows: int | None = setting(6000, ge=2)
    distill_epochs: int = setting(20, ge=0)
    distill_inner: int = setting(3, ge=0)
    distill_points: int = setting(8, ge=1)
    distill_lr_phi: float = setting(1e-4, gt=0)
    distill_lr_g: float = setting(2e-4, gt=0)
    distill_replay: bool = setting(True)
    distill_gen_steps: int = setting(10, ge=0)
    n_starts: int = setting(30, ge=1)
    jitter: float = setting(0.05, ge=0)
    solve_queries: int = setting(1024, ge=1)
    seed: int = setting(0, ge=0)

    def __post_init__(self) -> None:
        plain_numbers(self)
        wrong = problems(self)
        numbers_ok = all(isinstance(v, float | int) and not isinstance(v, bool)
                         for v in (self.lr_min, self.lr_g, self.lr_phi))
        if numbers_ok and not wrong and self.lr_min > min(self.lr_g, self.lr_phi):
            wrong.append(f"lr_min={self.lr_min!r} (at most lr_g and lr_phi: the cosine schedule decays to it)")
        if wrong:
            raise ConfigError(f"invalid DensityFlow settings: {'; '.join(wrong)}")

    def train_solver(self) -> dict[str, Any]:
        """The solver keywords (method, tolerances or step size) of :func:`~recourselab.densityflow.ode.integrate`
        for the training solves."""
        if self.train_steps is None:
            return {"method": self.method, "rtol": self.rtol_train, "atol": self.atol_train}
        return {"method": "rk4", "step_size": 1.0 / self.train_steps}

    @property
    def margin(self) -> float:
        """The fixed density margin: ``log_tau``, or log(noise_ratio) when it is None."""
        return math.log(self.noise_ratio) if self.log_tau is None else self.log_tau


#: Params sections derived from :class:`DensityFlowConfig`: section -> (section key -> config field).
#: Settings that no section names (ODE tolerances, ``c_floor``, ...) keep the defaults above.
SECTIONS: dict[str, dict[str, str]] = {
    "train_flow": {k: k for k in ("lambda_valid", "lambda_cost", "lambda_den", "noise_ratio", "lambda_noise", "beta",
                                  "score_mode", "hidden", "epochs", "min_steps", "density_quantile", "batch_size",
                                  "lr_g", "lr_phi", "weight_decay", "warmup_epochs", "ema_decay", "adjoint",
                                  "field_spectral_norm", "max_train_rows", "train_steps")},
    "distill": {k: f"distill_{k}" for k in ("epochs", "inner", "points", "lr_phi", "lr_g", "replay", "gen_steps")},
    "generate": {k: k for k in ("n_starts", "jitter")},
}
#: Settings of the library only (the pipeline keeps their defaults, ``seed`` comes from ``seeds``).
LIBRARY_ONLY = ("log_tau", "c_floor", "embed_dim", "lr_min", "method", "rtol_train", "atol_train", "rtol_test",
                "atol_test", "solve_queries", "seed")


def settings_of(section: str, values: dict) -> dict:
    """DensityFlow keyword settings from a params section's mapping ``values`` (other keys are left out)."""
    return {field: values[key] for key, field in SECTIONS[section].items() if key in values}


# ---------------------------------------------------------------------------- checks of values
def is_int(v: Any) -> bool:
    return isinstance(v, int | np.integer) and not isinstance(v, bool)


def is_num(v: Any) -> bool:
    return isinstance(v, int | float | np.integer | np.floating) and not isinstance(v, bool) and math.isfinite(v)


def class_labels(y: Any, n_rows: int, what: str, n_classes: int | None = None) -> np.ndarray:
    """``y`` as int64 class indices (n_rows,), checked: one per row, integer-valued, in 0..K-1.

    Raises
    ------
    DataError
        Naming ``what`` and the problem (shape, non-integer or non-finite values, range).
    """
    arr = np.asarray(y)
    if arr.ndim != 1 or len(arr) != n_rows:
        raise DataError(f"{what}: expected {n_rows} class indices (one per row), got shape {arr.shape}")
    numeric = arr.dtype == bool or np.issubdtype(arr.dtype, np.number) or (
        arr.dtype == object and all(isinstance(v, numbers.Real) for v in arr))  # e.g. ints held as objects
    values = arr.astype(float) if numeric else None
    if values is None or not np.isfinite(values).all() or (values % 1 != 0).any():
        raise DataError(f"{what}: class indices must be finite integers, got e.g. {arr[:3].tolist()}")
    labels = arr.astype(np.int64)
    top = n_classes - 1 if n_classes is not None else None
    if n_rows and (labels.min() < 0 or (top is not None and labels.max() > top)):
        valid = f"0..{top}" if top is not None else ">= 0"
        raise DataError(f"{what}: class indices must lie in {valid}, got {sorted(set(labels.tolist()))[:10]}")
    return labels


__all__ = ["LIBRARY_ONLY", "ODE_METHODS", "SECTIONS", "DensityFlowConfig", "class_labels", "is_int", "is_num",
           "settings_of"]
