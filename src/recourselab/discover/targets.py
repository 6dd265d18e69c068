"""Target output distributions y* for DISCOVER (seeded, serialisable).

A :class:`Target` is a small frozen description (kind, parameters, seed, optional size);
:meth:`Target.values` draws the ``n`` target outputs for a factual sample. Kinds (registry
:data:`TARGETS`, built with :func:`make_target`):

- ``constant(value=1.0)``: every target output equals ``value`` (e.g. all favourable).
- ``beta(a=0.1, b=0.9, oriented=True)``: i.i.d. Beta(a, b) draws. With ``oriented`` the
  draws are reflected (``1 - s``) when ``a < b`` so the mass sits on the favourable side
  (scores are P(favourable)); DCE/DISCOVER's Beta(0.1, 0.9) risk target becomes 1 - Beta(0.1, 0.9).
- ``shift(delta=0.3)``: the factual scores plus ``delta``, clipped to [0, 1].
- ``values(values=[...])``: explicit target outputs (fixes ``n``).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from recourselab.data.feature import float_array
from recourselab.errors import DataError, UnknownKeyError


class UnknownTargetError(UnknownKeyError):
    """A target kind that the registry does not hold."""


def _constant(n: int, rng: np.random.Generator, scores: np.ndarray | None, value: float = 1.0) -> np.ndarray:
    if not 0.0 <= value <= 1.0:
        raise DataError(f"constant target value must be in [0, 1], got {value}")
    return np.full(n, float(value))


def _beta(n: int, rng: np.random.Generator, scores: np.ndarray | None, a: float = 0.1, b: float = 0.9,
          oriented: bool = True) -> np.ndarray:
    if a <= 0 or b <= 0:
        raise DataError(f"beta target needs a > 0 and b > 0, got a={a}, b={b}")
    s = rng.beta(a, b, size=n)
    return 1.0 - s if oriented and a < b else s


def _shift(n: int, rng: np.random.Generator, scores: np.ndarray | None, delta: float = 0.3) -> np.ndarray:
    if scores is None:
        raise DataError("the shift target needs the factual scores")
    return np.clip(np.asarray(scores, dtype=float) + delta, 0.0, 1.0)


def _values(n: int, rng: np.random.Generator, scores: np.ndarray | None,
            values: tuple[float, ...] = ()) -> np.ndarray:
    out = np.asarray(values, dtype=float)
    if out.ndim != 1 or not np.isfinite(out).all() or ((out < 0) | (out > 1)).any():
        raise DataError("explicit target values must be a finite 1-D sequence in [0, 1]")
    return out.copy()


def _value_sequence(values: Any) -> tuple[float, ...]:
    """An explicit target's values as a non-empty tuple of floats (ranges are checked by :func:`_values`)."""
    if values is None or (isinstance(values, tuple | list | np.ndarray) and len(values) == 0):
        raise DataError("target 'values' needs a non-empty sequence values=[...] of outputs in [0, 1]")
    arr = float_array(values, "target 'values': values (numbers in [0, 1])", ndim=1, kind="a flat sequence")
    return tuple(float(v) for v in arr)


TargetFn = Callable[..., np.ndarray]
TARGETS: dict[str, TargetFn] = {"constant": _constant, "beta": _beta, "shift": _shift, "values": _values}
_PARAMS = {"constant": ("value",), "beta": ("a", "b", "oriented"), "shift": ("delta",), "values": ("values",)}


@dataclass(frozen=True)
class Target:
    """A seeded target output distribution.

    Attributes
    ----------
    kind : registry key (``constant``, ``beta``, ``shift``, ``values``).
    params : keyword parameters of the kind.
    seed : seed of the draws (same seed, same values).
    n : required sample size, or None for any (``values`` targets fix it).
    """

    kind: str
    params: Mapping[str, Any] = field(default_factory=dict)
    seed: int = 0
    n: int | None = None

    def __post_init__(self) -> None:
        """Check the kind, seed, size and parameters; store numbers as plain Python values."""
        kind = self.kind
        if not isinstance(kind, str) or kind not in TARGETS:
            raise UnknownTargetError(f"unknown target {kind!r}; valid targets: {', '.join(TARGETS)}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, numbers.Integral) or self.seed < 0:
            raise DataError(f"target {kind!r}: seed must be an integer >= 0, got {self.seed!r}")
        if self.n is not None and (isinstance(self.n, bool) or not isinstance(self.n, numbers.Integral)
                                   or self.n < 1):
            raise DataError(f"target {kind!r}: n must be None or an integer >= 1 (rows), got {self.n!r}")
        if not isinstance(self.params, Mapping):
            raise DataError(f"target {kind!r}: params must be a mapping of {', '.join(_PARAMS[kind])}, "
                            f"got {type(self.params).__name__}")
        params = dict(self.params)
        unknown = sorted(set(params) - set(_PARAMS[kind]))
        if unknown:
            raise DataError(f"target {kind!r}: unknown parameters {unknown}; valid: {', '.join(_PARAMS[kind])}")
        wrong = [f"{k}={v!r}" for k, v in params.items() if k not in ("values", "oriented")
                 and (isinstance(v, bool) or not isinstance(v, numbers.Real) or not math.isfinite(v))]
        if "oriented" in params and not isinstance(params["oriented"], bool | np.bool_):
            wrong.append(f"oriented={params['oriented']!r} (True or False)")
        if wrong:
            raise DataError(f"target {kind!r}: parameters must be finite numbers: {', '.join(wrong)}")
        params = {k: (bool(v) if k == "oriented" else float(v)) for k, v in params.items() if k != "values"}
        n = None if self.n is None else int(self.n)
        if kind == "values":
            vals = _value_sequence(self.params.get("values"))
            if n is not None and n != len(vals):
                raise DataError(f"target 'values' has {len(vals)} values but n={n}")
            params, n = {"values": vals}, len(vals)
        object.__setattr__(self, "params", params)
        object.__setattr__(self, "seed", int(self.seed))
        object.__setattr__(self, "n", n)
        if kind != "shift":
            self.values(n if n is not None else 1)  # the kind's own range rules (a, b > 0; values in [0, 1])

    def values(self, n: int, factual_scores: np.ndarray | None = None) -> np.ndarray:
        """The ``n`` target outputs y* in [0, 1], shape (n,).

        Raises
        ------
        DataError
            ``n`` differs from the target's fixed size, or the kind's parameters are invalid.
        """
        if self.n is not None and self.n != n:
            raise DataError(f"target {self.kind!r} has {self.n} values but there are {n} factual rows; "
                            "the target and the factual sample must have the same size")
        out = TARGETS[self.kind](n, np.random.default_rng(self.seed), factual_scores, **dict(self.params))
        if out.shape != (n,):
            raise DataError(f"target {self.kind!r} produced shape {out.shape}, expected ({n},)")
        return out

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe description (saved with the outputs); :meth:`from_dict` inverts it."""
        params = {k: (list(v) if isinstance(v, tuple | list | np.ndarray) else v)
                  for k, v in self.params.items()}
        return {"kind": self.kind, "params": params, "seed": self.seed, "n": self.n}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Target:
        """Inverse of :meth:`to_dict`; the kind's parameters may also sit at the top level.

        ``{"kind": "beta", "params": {"a": 0.1, "b": 0.9}, "seed": 0}`` and
        ``{"kind": "beta", "a": 0.1, "b": 0.9}`` give the same target; unknown parameters are
        rejected by :func:`make_target` (never silently replaced by defaults).
        """
        d = dict(d)
        if "kind" not in d:
            raise DataError(f"a target mapping needs a 'kind' ({', '.join(TARGETS)}), got keys {sorted(d)}")
        kind, seed, n = d.pop("kind"), d.pop("seed", 0), d.pop("n", None)
        params = dict(d.pop("params", None) or {})
        twice = sorted(set(params) & set(d))
        if twice:
            raise DataError(f"target {kind!r}: parameters {twice} given both at the top level and under 'params'")
        return make_target(kind, seed=seed, n=n, **params, **d)


def make_target(kind: str, *, seed: int = 0, n: int | None = None, **params: Any) -> Target:
    """Build a :class:`Target`; unknown kinds or parameters list the valid ones.

    Examples
    --------
    >>> make_target("beta", a=0.1, b=0.9, seed=0).values(3).round(3).tolist()  # doctest: +SKIP
    """
    return Target(kind, params=params, seed=seed, n=n)


__all__ = ["TARGETS", "Target", "UnknownTargetError", "make_target"]
