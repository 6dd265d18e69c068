"""The model zoo by name: fit a kind of :mod:`recourselab.models.kinds` with checked rows, labels and
hyperparameters, and load a saved one (native or safe formats only; nothing is ever unpickled: the TabNet
zip's weights go through ``torch.load``, whose default (torch >= 2.6, required) loads tensors only).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from recourselab.errors import ArtifactError, ConfigError, DataError, RecourselabError, UnknownKeyError
from recourselab.io import error_reason
from recourselab.models.kinds import MODEL_KINDS, FitContext, ModelKind

#: The model-multiplicity ensemble of DensityFlow, in this order.
ENSEMBLE = ("knn", "svm", "rf", "mlp", "xgboost", "catboost", "tabnet")


class UnknownModelError(UnknownKeyError):
    """A model kind that the registry does not know."""


@dataclass
class FittedModel:
    """A fitted estimator of one kind. ``predict_proba`` returns (n, n_classes)."""

    kind: str
    estimator: Any
    params: dict[str, Any]
    n_classes: int
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def n_features(self) -> int:
        """Width of the encoded rows the model was fitted on."""
        return int(MODEL_KINDS[self.kind].width(self.estimator))

    def predict_proba(self, X: np.ndarray) -> np.ndarray:
        """Class probabilities of encoded rows X (n, n_features): shape (n, n_classes), rows summing to 1.

        Raises
        ------
        DataError
            X is not 2-D, has another width than the training rows, or holds NaN / inf.
        """
        from recourselab.data.rows import encode_rows

        X = encode_rows(X, what=f"{self.kind} model input", width=self.n_features)
        X = np.ascontiguousarray(X, dtype=np.float32 if self.kind == "tabnet" else np.float64)
        return MODEL_KINDS[self.kind].predict_proba(self.estimator, X, self.n_classes)

    def save(self, path: str | Path) -> Path:
        return MODEL_KINDS[self.kind].save(self.estimator, Path(path))


def get_kind(name: str) -> ModelKind:
    """The :class:`ModelKind` called ``name``; unknown names list the valid ones."""
    try:
        return MODEL_KINDS[name]
    except KeyError:
        raise UnknownModelError(f"unknown model {name!r}; valid models: {', '.join(MODEL_KINDS)}") from None


def fit_model(name: str, params: Mapping[str, Any], X: np.ndarray, y: np.ndarray,
              ctx: FitContext) -> FittedModel:
    """Build and fit model ``name`` with hyperparameters ``params``.

    Parameters
    ----------
    X : (n, d) encoded training rows; y : (n,) class indices in ``range(ctx.n_classes)``.
    ctx : validation split (early stopping only), seed, threads, device.

    Raises
    ------
    DataError
        Rows not finite or 2-D, labels not one class index per row, or a class without rows.
    ConfigError
        The model's library refuses the hyperparameters (named with the library's reason).
    """
    from recourselab.data.rows import encode_rows

    kind = get_kind(name)
    unknown = sorted(set(params) - set(kind.hyperparameters))
    if unknown:
        raise RecourselabError(f"model {name!r}: unknown hyperparameters {unknown}; valid: "
                               f"{', '.join(kind.hyperparameters)}")
    X = np.ascontiguousarray(encode_rows(X, what=f"{name} training rows"), dtype=np.float64)
    y = _check_labels(name, y, len(X), ctx.n_classes)
    try:
        est = kind.fit(kind.build(dict(params), ctx), X, y, ctx)
    except RecourselabError:
        raise
    except (ValueError, TypeError) as err:  # the libraries' parameter checks raise these
        raise ConfigError(f"model {name!r} could not be fitted with hyperparameters {dict(params)}: "
                          f"{error_reason(err)}; check models.{name} in params.yaml") from err
    return FittedModel(kind=name, estimator=est, params=dict(params), n_classes=ctx.n_classes)


def _check_labels(name: str, y: Any, n_rows: int, n_classes: int) -> np.ndarray:
    """Labels as an int64 array of one class index in ``range(n_classes)`` per row, every class present."""
    y = np.asarray(y)
    if y.ndim != 1 or len(y) != n_rows:
        raise DataError(f"model {name!r}: labels must be 1-D with one per training row ({n_rows}), "
                        f"got shape {y.shape}")
    if not (np.issubdtype(y.dtype, np.integer) or (np.issubdtype(y.dtype, np.floating)
                                                  and np.isfinite(y).all() and (y == np.round(y)).all())):
        raise DataError(f"model {name!r}: labels must be class indices (integers), got dtype {y.dtype}")
    y = y.astype(np.int64)
    counts = np.bincount(y[(y >= 0) & (y < n_classes)], minlength=n_classes)
    outside = sorted(set(y[(y < 0) | (y >= n_classes)].tolist()))
    if outside:
        raise DataError(f"model {name!r}: labels {outside[:5]} are outside range({n_classes})")
    empty = np.flatnonzero(counts == 0).tolist()
    if empty:
        raise DataError(f"model {name!r}: class(es) {empty} have no training rows; every one of the "
                        f"{n_classes} classes needs rows")
    return y


def load_model(name: str, path: str | Path, params: Mapping[str, Any], n_classes: int) -> FittedModel:
    """Load a model saved by :meth:`FittedModel.save` (native/safe formats only).

    Raises
    ------
    ArtifactError
        The kind's loader cannot read ``path`` (damaged, or saved by another version of its library).
    """
    kind = get_kind(name)
    try:
        est = kind.load(Path(path))
    except RecourselabError:  # e.g. a skops file with types outside the allow-list
        raise
    except Exception as err:  # noqa: BLE001 - every library's own error type: one message
        raise ArtifactError(f"cannot load the {name} model from {path} ({error_reason(err)}); it is damaged or "
                            "was saved by another version of its library: re-run tune_ensemble") from err
    return FittedModel(kind=name, estimator=est, params=dict(params), n_classes=n_classes)
