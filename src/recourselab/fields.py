"""Declared settings: one declaration of a setting's type, default and range, checked in one way.

The library's settings dataclasses (:class:`~recourselab.densityflow.DensityFlowConfig`,
:class:`~recourselab.discover.DiscoverSettings`) declare each field with :func:`setting`; their
``__post_init__`` checks the values with :func:`problems`, and :mod:`recourselab.config` derives
its params sections from the same declarations (pydantic bounds from the same metadata), so a
range is written once.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from collections.abc import Sequence
from typing import Any

import numpy as np

#: Metadata keys of a declared bound, as pydantic's ``Field`` names them.
BOUNDS = ("ge", "gt", "le", "lt")


def setting(default: Any = dataclasses.MISSING, *, factory: Any = dataclasses.MISSING, ge: float | None = None,
            gt: float | None = None, le: float | None = None, lt: float | None = None,
            choices: Sequence[str] | None = None, rule: str | None = None) -> Any:
    """A dataclass field with its declared range.

    Parameters
    ----------
    default, factory : the default value, or a factory of it.
    ge, gt, le, lt : bounds of a number (``>=``, ``>``, ``<=``, ``<``).
    choices : the allowed strings (of a string, or of each value of a mapping).
    rule : the rule's words in error messages when the bounds do not say it (e.g. a listed registry).
    """
    meta = {k: v for k, v in {"ge": ge, "gt": gt, "le": le, "lt": lt, "choices": None if choices is None
                                else tuple(choices), "rule": rule}.items() if v is not None}
    if factory is not dataclasses.MISSING:
        return dataclasses.field(default_factory=factory, metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


def base_type(f: dataclasses.Field) -> tuple[str, bool]:
    """(base type name, optional) of a field annotated as a string (``"float | None"`` -> ``("float", True)``)."""
    text = f.type if isinstance(f.type, str) else getattr(f.type, "__name__", str(f.type))
    return text.removesuffix(" | None"), text.endswith(" | None")


_TYPE_WORDS = {"int": "an integer", "float": "a finite number", "bool": "True or False", "str": "a string"}


def _type_ok(value: Any, base: str) -> bool:
    if base == "bool":
        return isinstance(value, bool | np.bool_)
    if isinstance(value, bool | np.bool_):
        return False
    if base == "int":
        return isinstance(value, numbers.Integral)
    if base == "float":
        return isinstance(value, numbers.Real) and math.isfinite(value)
    if base == "str":
        return isinstance(value, str)
    return True


def _number(v: float) -> str:
    return str(int(v)) if float(v).is_integer() else repr(v)


def rule_text(f: dataclasses.Field) -> str:
    """The rule of field ``f`` in words, e.g. ``"an integer >= 1"``, ``"None or in (0, 1)"``."""
    base, optional = base_type(f)
    meta = f.metadata
    if "rule" in meta:
        text = meta["rule"]
    elif "choices" in meta:
        text = " or ".join(repr(c) for c in meta["choices"])
        text = text if base == "str" else f"a mapping of names to {text}"
    else:
        lo = ("[", meta["ge"]) if "ge" in meta else ("(", meta["gt"]) if "gt" in meta else None
        hi = ("]", meta["le"]) if "le" in meta else (")", meta["lt"]) if "lt" in meta else None
        word = _TYPE_WORDS.get(base, base)
        if lo and hi:
            text = f"in {lo[0]}{_number(lo[1])}, {_number(hi[1])}{hi[0]}"
        elif lo:
            text = f"{word} {'>=' if lo[0] == '[' else '>'} {_number(lo[1])}"
        elif hi:
            text = f"{word} {'<=' if hi[0] == ']' else '<'} {_number(hi[1])}"
        else:
            text = word
    return f"None or {text}" if optional else text


_OPS = {"ge": lambda a, b: a >= b, "gt": lambda a, b: a > b, "le": lambda a, b: a <= b, "lt": lambda a, b: a < b}


def _holds(f: dataclasses.Field, value: Any) -> bool:
    base, optional = base_type(f)
    if value is None:
        return optional
    meta = f.metadata
    if base in _TYPE_WORDS and not _type_ok(value, base):
        return False
    if base in ("int", "float"):
        return all(_OPS[k](value, meta[k]) for k in BOUNDS if k in meta)
    if "choices" in meta:
        values = value.values() if isinstance(value, dict) else [value]
        return all(v in meta["choices"] for v in values)
    return True


def _problem(f: dataclasses.Field, value: Any) -> str:
    base, optional = base_type(f)
    if base in _TYPE_WORDS and value is not None and not _type_ok(value, base):  # the type first
        return f"{f.name}={value!r} ({_TYPE_WORDS[base]}{' or None' if optional else ''})"
    choices = f.metadata.get("choices")
    if choices and base == "str" and "rule" not in f.metadata:
        return f"unknown {f.name} {value!r}; valid: {', '.join(choices)}"
    return f"{f.name}={value!r} ({rule_text(f)})"


def problems(settings: Any) -> list[str]:
    """One line for every field of the dataclass ``settings`` that breaks its declaration: ``"name=value
    (type)"`` for a value of another type, ``"unknown name 'value'; valid: ..."`` for a string outside
    its choices, else ``"name=value (rule)"``."""
    return [_problem(f, getattr(settings, f.name)) for f in dataclasses.fields(settings)
            if not _holds(f, getattr(settings, f.name))]


def plain_numbers(settings: Any) -> None:
    """Replace numpy scalars of a frozen dataclass by Python numbers (JSON-safe, torch seeds)."""
    for f in dataclasses.fields(settings):
        if isinstance(getattr(settings, f.name), np.generic):
            object.__setattr__(settings, f.name, getattr(settings, f.name).item())


__all__ = ["BOUNDS", "base_type", "plain_numbers", "problems", "rule_text", "setting"]
