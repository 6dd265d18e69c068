"""DensityFlow: density-guided Neural ODE counterfactuals that stay valid across an ensemble.

Typical use::

    flow = DensityFlow(lambda_cost=0.4, lambda_den=0.1, epochs=60, schema=schema, seed=0)
    flow.fit(X_train, y_train)                  # alternating surrogate / generator training
    flow.distill(oracle, X_train, y_train, budget=500)   # align the surrogate with the black box
    result = flow.generate(X_query, target=1 - y_query)  # CounterfactualResult
    checked = result.verify(oracle)      # or generate(..., oracle=oracle): result.verdict per row

The estimator is assembled from its parts: settings in :mod:`~recourselab.densityflow.config`,
training in :mod:`~recourselab.densityflow.training`, distillation in
:mod:`~recourselab.densityflow.distillation`, inference in :mod:`~recourselab.densityflow.inference`
and persistence in :mod:`~recourselab.densityflow.persistence`; the Neural ODE itself is
:mod:`~recourselab.densityflow.ode`.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

import numpy as np
import pandas as pd
import torch

from recourselab.data.rows import encode_rows
from recourselab.data.schema import Schema
from recourselab.densityflow.config import DensityFlowConfig, class_labels
from recourselab.densityflow.distillation import DISTILL_BUDGET, DistillationMixin
from recourselab.densityflow.inference import CounterfactualResult, InferenceMixin
from recourselab.densityflow.ode import VelocityField
from recourselab.densityflow.persistence import PersistenceMixin
from recourselab.densityflow.surrogate import Surrogate
from recourselab.densityflow.training import TrainingMixin, TrainLog
from recourselab.errors import ConfigError, DataError, RecourselabError

log = logging.getLogger(__name__)


class DensityFlow(TrainingMixin, DistillationMixin, InferenceMixin, PersistenceMixin):
    """Density-guided Neural ODE counterfactual generator (see module docstring).

    Parameters
    ----------
    schema : the dataset schema (immutables, categorical decoding); optional for plain arrays.
    mutable : (d,) bool mask of changeable encoded columns; default: from ``schema``.
    monotone : (d,) of -1 / 0 / +1, encoded columns that may only shrink / move freely / only grow;
        default: from ``schema`` (:meth:`Schema.monotone_signs`), else none.
    device : torch device; default CPU.
    **settings : any field of :class:`DensityFlowConfig`.
    """

    def __init__(self, *, schema: Schema | None = None, mutable: np.ndarray | None = None,
                 monotone: np.ndarray | None = None, device: str = "cpu", **settings: Any) -> None:
        self.config = DensityFlowConfig()
        self.with_settings(**settings)
        self.schema = schema
        self._mutable = mutable
        self._monotone = monotone
        self.device = torch.device(device)
        self.surrogate: Surrogate | None = None
        self.field: VelocityField | None = None
        self.C: float | None = None
        self.n_classes: int | None = None
        self.log_ = TrainLog()
        self.queries_used_ = 0

    # ------------------------------------------------------------------ helpers
    def _tensor(self, X: np.ndarray) -> torch.Tensor:
        with np.errstate(over="ignore"):
            arr = np.asarray(X, dtype=np.float32)
        if not np.isfinite(arr).all():  # finite float64 values beyond float32's range become inf here
            raise DataError(f"rows hold NaN, infinite or values beyond the float32 range of the networks (|x| > "
                            f"{np.finfo(np.float32).max:.3g}): {int((~np.isfinite(arr)).any(axis=-1).sum())} row(s)")
        return torch.as_tensor(arr, device=self.device)

    def _encode(self, X: np.ndarray | pd.DataFrame, what: str) -> np.ndarray:
        width = None if self.field is None else self.field.mutable.numel()
        return encode_rows(X, self.schema, what=what, width=width)

    def _mutable_mask(self, d: int) -> np.ndarray:
        if self._mutable is not None:
            mask = np.asarray(self._mutable)
            if mask.shape != (d,) or not (mask.dtype == bool or np.isin(mask, (0, 1)).all()):
                raise DataError(f"mutable must be a boolean mask of the {d} encoded columns, got shape {mask.shape} "
                                f"and dtype {mask.dtype}")
            return mask.astype(bool)
        if self.schema is not None:
            return ~self.schema.immutable_mask()
        return np.ones(d, dtype=bool)

    def _monotone_signs(self, d: int) -> np.ndarray:
        if self._monotone is not None:
            signs = np.asarray(self._monotone)
            if signs.shape != (d,) or not np.isin(signs, (-1, 0, 1)).all():
                raise DataError(f"monotone must hold -1, 0 or 1 for each of the {d} encoded columns, got shape "
                                f"{signs.shape}")
            return signs.astype(np.int8)
        if self.schema is not None and self.schema.n_encoded == d:
            return self.schema.monotone_signs()
        return np.zeros(d, dtype=np.int8)

    def _flip(self, y: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
        k = self.n_classes
        if k == 2:
            return 1 - y
        return (y + torch.randint(1, k, y.shape, generator=gen).to(y.device)) % k  # gen lives on the CPU

    def _box_noise(self, n_rows: int, d: int, gen: torch.Generator) -> torch.Tensor:
        """NCE noise for a batch of ``n_rows`` real rows: ``noise_ratio`` times as many (at least one)
        uniform points in the box [-C, C]^d. Shape (max(1, round(r * n_rows)), d)."""
        n_noise = max(1, round(self.config.noise_ratio * n_rows))
        return ((torch.rand(n_noise, d, generator=gen) * 2 - 1) * self.C).to(self.device)

    def _require_fit(self) -> None:
        if self.surrogate is None:
            raise RecourselabError("DensityFlow is not fitted: call fit() or load() first")
    #: Settings that shape the networks: fixed once they are built (fit or load).
    ARCHITECTURE = ("hidden", "embed_dim", "score_mode", "field_spectral_norm")

    def with_settings(self, **settings: Any) -> DensityFlow:
        """Change settings in place (e.g. distillation or inference ones of a fitted model).

        Raises
        ------
        ConfigError
            An unknown setting (the valid ones are listed), a value out of range, or an
            architecture setting (:attr:`ARCHITECTURE`) of a model whose networks exist.
        """
        valid = {f.name for f in dataclasses.fields(DensityFlowConfig)}
        unknown = sorted(set(settings) - valid)
        if unknown:
            raise ConfigError(f"unknown DensityFlow settings {unknown}; valid: {', '.join(sorted(valid))}")
        fixed = sorted(k for k in settings if k in self.ARCHITECTURE and settings[k] != getattr(self.config, k))
        if fixed and getattr(self, "surrogate", None) is not None:
            raise ConfigError(f"cannot change {fixed} of a built DensityFlow (they shape its networks); "
                              "create and fit a new one")
        self.config = dataclasses.replace(self.config, **settings)
        return self


__all__ = ["DISTILL_BUDGET", "CounterfactualResult", "DensityFlow", "DensityFlowConfig", "class_labels"]
