"""Every recourse method by name, built through one constructor.

Typical use::

    method = make_method("nearest", box, schema=schema, X_train=X, y_train=y)
    method = make_method("wachter", box, schema=schema, threshold=0.7)
    method = make_method("betarce", box, schema=schema, base="growing_spheres", base_options={"n_samples": 50})
    cf = method.explain(X_query, target=1, budget=None)

Each factory takes ``(oracle, *, schema, X_train, y_train, seed, **options)`` and returns a
:class:`~recourselab.methods.base.CounterfactualMethod`. :data:`METHODS` holds the methods with a
class target per row; :data:`DISTRIBUTIONAL_METHODS` those whose target is a distribution of
scores (DISCOVER, DCE). Unknown names and unknown options are refused with the valid ones.

Methods and options (defaults in the classes' docstrings):

- ``nearest``: :class:`~recourselab.methods.nearest.NearestNeighbour`; train rows. Options
  ``selection`` (nearest / sample), ``metric`` (l2 / l1), ``budget_name``.
- ``nearest_line``: :class:`~recourselab.methods.nearest_line.NearestLine`; as ``nearest`` plus ``steps``.
- ``wachter``: :class:`~recourselab.methods.wachter.Wachter`; ``threshold`` (0.5, 0.7, 0.9, ...),
  ``member``, ``model``, ``distance``, ``lam``, ``lambda_growth``, ``rounds``, ``steps``, ``lr``, ``margin``.
- ``growing_spheres``: :class:`~recourselab.methods.growing_spheres.GrowingSpheres`; ``n_samples``,
  ``radius``, ``max_halvings``, ``max_layers``, ``sparsify``, ``budget_name``.
- ``betarce``: :class:`~recourselab.methods.betarce.BetaRCE`; ``base`` (a method name, default
  ``wachter``, or a method), ``base_options``, ``delta``, ``beta``, ``n_samples``, ``step``,
  ``max_steps``, ``budget_name``.
- ``dice``: :class:`~recourselab.methods.dice.DiCE` (extra ``dice``); train rows and labels.
  ``method`` (random / genetic), ``total_cfs``, ``options`` (DiCE's own), ``budget_name``.
- ``densityflow``: a fitted :class:`~recourselab.densityflow.DensityFlow` given as ``model``, or
  one fitted on the train rows and distilled with ``distill_budget`` oracle rows (default 480);
  other options are DensityFlow settings.
- ``discover``: :class:`~recourselab.discover.Discover` on the oracle (its queries count under the
  oracle budget ``budget``, default ``"search"``); options are DISCOVER settings. Its target is a
  distribution of scores, not a class.
- ``dce``: :class:`~recourselab.discover.dce.DCE` on the differentiable ``member`` (default
  ``mlp``, see :func:`~recourselab.methods.wachter.torch_mlp`); options are DISCOVER settings
  plus ``lr`` and ``max_iter``. White-box: its scores are not oracle queries.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import numpy as np

from recourselab.data.rows import encode_rows
from recourselab.data.schema import Schema
from recourselab.errors import DataError, UnknownKeyError
from recourselab.methods.base import CounterfactualMethod
from recourselab.methods.common import SEARCH_BUDGET, resolve_schema
from recourselab.models.oracle import BlackBox


class UnknownMethodError(UnknownKeyError):
    """A method name that the registry does not know."""


def _train(name: str, X_train: Any, y_train: Any, labels: bool) -> None:
    if X_train is None:
        raise DataError(f"method {name!r} needs training rows: pass X_train=")
    if labels and y_train is None:
        raise DataError(f"method {name!r} needs training labels: pass y_train=")


def _checked_options(name: str, cls: Any, options: dict[str, Any], extra: tuple[str, ...] = ()) -> None:
    """Refuse options that ``cls``'s constructor does not take (listing the valid ones)."""
    params = inspect.signature(cls.__init__).parameters
    valid = {p for p, v in params.items() if v.kind is inspect.Parameter.KEYWORD_ONLY} - {"schema"}
    unknown = sorted(set(options) - valid - set(extra))
    if unknown:
        raise UnknownKeyError(f"method {name!r}: unknown options {unknown}; valid: "
                              f"{', '.join(sorted(valid | set(extra)))}")


def _on_training_rows(name: str, cls: Any, oracle: BlackBox, schema: Schema | None, X_train: Any, y_train: Any,
                      seed: int, options: dict[str, Any], *, labels: bool) -> CounterfactualMethod:
    """``cls(oracle, X_train, y_train, schema=schema, seed=seed, **options)`` once the rows and options are checked."""
    _train(name, X_train, y_train, labels)
    _checked_options(name, cls, options)
    return cls(oracle, X_train, y_train, schema=schema, seed=seed, **options)


def nearest(oracle: BlackBox, *, schema: Schema | None = None, X_train: Any = None, y_train: Any = None,
            seed: int = 0, **options: Any) -> CounterfactualMethod:
    """:class:`~recourselab.methods.nearest.NearestNeighbour` (needs ``X_train``)."""
    from recourselab.methods.nearest import NearestNeighbour

    return _on_training_rows("nearest", NearestNeighbour, oracle, schema, X_train, y_train, seed, options, labels=False)


def nearest_line(oracle: BlackBox, *, schema: Schema | None = None, X_train: Any = None, y_train: Any = None,
                 seed: int = 0, **options: Any) -> CounterfactualMethod:
    """:class:`~recourselab.methods.nearest_line.NearestLine` (needs ``X_train``)."""
    from recourselab.methods.nearest_line import NearestLine

    return _on_training_rows("nearest_line", NearestLine, oracle, schema, X_train, y_train, seed, options,
                             labels=False)


def wachter(oracle: BlackBox, *, schema: Schema | None = None, X_train: Any = None, y_train: Any = None,
            seed: int = 0, **options: Any) -> CounterfactualMethod:
    """:class:`~recourselab.methods.wachter.Wachter` (deterministic: ``seed`` is not used)."""
    from recourselab.methods.wachter import Wachter

    _checked_options("wachter", Wachter, options)
    return Wachter(oracle, schema=schema, **options)


def growing_spheres(oracle: BlackBox, *, schema: Schema | None = None, X_train: Any = None, y_train: Any = None,
                    seed: int = 0, **options: Any) -> CounterfactualMethod:
    """:class:`~recourselab.methods.growing_spheres.GrowingSpheres`."""
    from recourselab.methods.growing_spheres import GrowingSpheres

    _checked_options("growing_spheres", GrowingSpheres, options)
    return GrowingSpheres(oracle, schema=schema, seed=seed, **options)


def betarce(oracle: BlackBox, *, schema: Schema | None = None, X_train: Any = None, y_train: Any = None,
            seed: int = 0, base: Any = "wachter", base_options: dict[str, Any] | None = None,
            **options: Any) -> CounterfactualMethod:
    """:class:`~recourselab.methods.betarce.BetaRCE` over ``base`` (a registered name, or a method)."""
    from recourselab.methods.betarce import BetaRCE

    _checked_options("betarce", BetaRCE, options)
    if isinstance(base, str):
        if base == "betarce":
            raise DataError("method 'betarce': its base cannot be betarce itself")
        base = make_method(base, oracle, schema=schema, X_train=X_train, y_train=y_train, seed=seed,
                           **(base_options or {}))
    elif base_options:
        raise DataError("method 'betarce': base_options only apply to a base given by name")
    return BetaRCE(oracle, base, schema=schema, seed=seed, **options)


def dice(oracle: BlackBox, *, schema: Schema | None = None, X_train: Any = None, y_train: Any = None,
         seed: int = 0, **options: Any) -> CounterfactualMethod:
    """:class:`~recourselab.methods.dice.DiCE` (needs ``X_train``, ``y_train`` and the ``dice`` extra)."""
    from recourselab.methods.dice import DiCE

    return _on_training_rows("dice", DiCE, oracle, schema, X_train, y_train, seed, options, labels=True)


def densityflow(oracle: BlackBox, *, schema: Schema | None = None, X_train: Any = None, y_train: Any = None,
                seed: int = 0, model: Any = None, distill_budget: int = 480, **settings: Any) -> CounterfactualMethod:
    """A fitted DensityFlow given as ``model``, or one fitted on the training rows and distilled."""
    from recourselab.densityflow import DensityFlow

    if model is not None:
        if settings:
            raise DataError(f"method 'densityflow': settings {sorted(settings)} cannot change a given fitted model")
        if not isinstance(model, DensityFlow):
            raise TypeError(f"method 'densityflow': model must be a fitted DensityFlow, got {type(model).__name__}")
        return model
    _train("densityflow", X_train, y_train, True)
    schema = resolve_schema(oracle, schema, "densityflow")
    flow = DensityFlow(schema=schema, seed=seed, **settings)
    X = encode_rows(X_train, schema, what="densityflow training rows")
    y = np.asarray(y_train)
    flow.fit(X, y, progress=False)
    if distill_budget:
        flow.distill(oracle, X, y, budget=distill_budget, progress=False)
    return flow


def discover(oracle: BlackBox, *, schema: Schema | None = None, X_train: Any = None, y_train: Any = None,
             seed: int = 0, **settings: Any) -> CounterfactualMethod:
    """DISCOVER on the oracle (its rows count under the oracle budget ``budget``, default ``"search"``)."""
    from recourselab.discover import Discover

    schema = resolve_schema(oracle, schema, "discover")
    return Discover(oracle, schema=schema, seed=seed, **({"budget": SEARCH_BUDGET} | settings))


def dce(oracle: BlackBox, *, schema: Schema | None = None, X_train: Any = None, y_train: Any = None,
        seed: int = 0, member: str = "mlp", **settings: Any) -> CounterfactualMethod:
    """Gradient DCE on the differentiable ``member`` (white-box: no oracle rows)."""
    from recourselab.discover.dce import DCE
    from recourselab.methods.wachter import torch_mlp

    schema = resolve_schema(oracle, schema, "dce")
    return DCE(torch_mlp(oracle.model(member)), schema=schema, seed=seed, **settings)


#: Class-target methods: name -> factory ``(oracle, *, schema, X_train, y_train, seed, **options)``.
METHODS: dict[str, Callable[..., CounterfactualMethod]] = {
    "nearest": nearest, "nearest_line": nearest_line, "wachter": wachter, "growing_spheres": growing_spheres,
    "betarce": betarce, "dice": dice, "densityflow": densityflow,
}
#: Methods whose target is a distribution of favourable scores (not a class per row), same factory shape.
DISTRIBUTIONAL_METHODS: dict[str, Callable[..., CounterfactualMethod]] = {"discover": discover, "dce": dce}
#: Methods that need training rows (``X_train``), and of those the ones that need labels (``y_train``) too.
NEEDS_TRAIN = ("nearest", "nearest_line", "dice", "densityflow")
NEEDS_LABELS = ("dice", "densityflow")


def get_method(name: str) -> Callable[..., CounterfactualMethod]:
    """The factory of method ``name`` (:data:`METHODS` or :data:`DISTRIBUTIONAL_METHODS`); unknown names list
    the valid ones."""
    every = METHODS | DISTRIBUTIONAL_METHODS
    try:
        return every[name]
    except KeyError:
        raise UnknownMethodError(f"unknown method {name!r}; valid methods: {', '.join(every)}") from None


def make_method(name: str, oracle: BlackBox, *, schema: Schema | None = None, X_train: Any = None,
                y_train: Any = None, seed: int = 0, **options: Any) -> CounterfactualMethod:
    """Build method ``name`` on ``oracle``.

    Parameters
    ----------
    name : a key of :data:`METHODS` or :data:`DISTRIBUTIONAL_METHODS`.
    oracle : the ensemble (search queries are counted there).
    schema : the dataset schema (default: the oracle's).
    X_train : (m, d) encoded training rows, for the methods that need them; y_train : (m,) labels.
    seed : the seed of the randomised methods.
    **options : the method's options (module docstring).

    Raises
    ------
    UnknownMethodError
        ``name`` is not registered (the valid names are listed).
    UnknownKeyError
        An option the method does not take.
    DataError
        Training rows or labels missing where the method needs them, or bad option values.
    """
    return get_method(name)(oracle, schema=schema, X_train=X_train, y_train=y_train, seed=seed, **options)


__all__ = ["DISTRIBUTIONAL_METHODS", "METHODS", "NEEDS_LABELS", "NEEDS_TRAIN", "UnknownMethodError", "get_method",
           "make_method"]
