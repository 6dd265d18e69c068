"""The base of every params section: a strict frozen model, strict validation, and sections derived
from the library's settings dataclasses (each setting is declared once, there)."""

from __future__ import annotations

import dataclasses
import json
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model, model_validator

from recourselab.errors import ConfigError, did_you_mean
from recourselab.fields import BOUNDS, base_type

#: The largest seed: scikit-learn takes seeds below 2**32 and the split also draws with seed + 1.
MAX_SEED = 2**32 - 2


class StrictModel(BaseModel):
    """Base of every params section: frozen, unknown keys rejected, numbers finite."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


def validate_strict(model: type[StrictModel], data: dict[str, Any]) -> Any:
    """Validate a YAML-like mapping without lax coercions.

    Goes through pydantic's strict JSON mode: YAML lists still fill tuples and strings still fill
    paths and literals, but ``true`` is not a number, ``"yes"`` not a boolean and ``2.5`` not an
    integer (the lax mode turned ``budget: true`` into 1 and ``adjoint: "yes"`` into True).
    """
    return model.model_validate_json(json.dumps(data, default=str), strict=True)


def with_override(section: StrictModel, override: dict[str, Any], where: str,
                   exclude: frozenset[str] = frozenset()) -> Any:
    """``section`` with the keys of ``override`` replaced, validated as a whole (``exclude``: emptied).

    Raises ValueError naming ``where`` and the valid keys for unknown keys or invalid values.
    """
    cls = type(section)
    fields = set(cls.model_fields) - exclude
    unknown = sorted(set(override) - fields)
    if unknown:
        hint = did_you_mean(unknown[0], fields) if len(unknown) == 1 else ""
        raise ValueError(f"{where}: unknown keys {unknown}{hint}; valid keys: {', '.join(sorted(fields))}")
    base = section.model_dump(exclude=set(exclude))
    try:
        return validate_strict(cls, {**base, **override, **{k: {} for k in exclude}})
    except ValidationError as err:
        raise ValueError(f"{where}: {'; '.join(problem(e) for e in err.errors())}") from None


_TYPES: dict[str, type] = {"int": int, "float": float, "bool": bool, "str": str}


def _pydantic_field(f: dataclasses.Field) -> tuple[Any, Any]:
    """(annotation, pydantic Field) of a library settings field: its type, default and declared range."""
    base, optional = base_type(f)
    choices = f.metadata.get("choices")
    if base in _TYPES:
        annotation: Any = Literal[choices] if base == "str" and choices else _TYPES[base]
    else:  # a mapping of names to rules
        annotation = dict[str, Literal[choices]] if choices else dict[str, str]
    if optional:
        annotation = annotation | None
    bounds = {k: f.metadata[k] for k in BOUNDS if k in f.metadata}
    if f.default_factory is not dataclasses.MISSING:
        return annotation, Field(default_factory=f.default_factory, **bounds)
    return annotation, Field(default=f.default, **bounds)


def derived_section(name: str, rules: type[StrictModel], settings: type, fields: dict[str, str], *,
                    before: dict[str, Any] | None = None, after: dict[str, Any] | None = None,
                    doc: str | None = None) -> Any:
    """A params section whose keys ``fields`` (section key -> field) are fields of the library's ``settings``
    dataclass: same types, defaults and ranges, declared once there. ``before`` / ``after``: the section's
    own fields ((annotation, Field) by key), placed before / after the derived ones; ``rules``: the base
    class with the section's validators and helpers."""
    declared = {f.name: f for f in dataclasses.fields(settings)}
    spec = {**(before or {}), **{key: _pydantic_field(declared[field]) for key, field in fields.items()},
            **(after or {})}
    return create_model(name, __base__=rules, __doc__=doc or rules.__doc__, __module__=rules.__module__, **spec)


def library_check(section: StrictModel, settings: type, values: dict[str, Any]) -> Any:
    """``section`` if the library's ``settings`` accept ``values`` (its rules across fields), else ValueError."""
    try:
        settings(**values)
    except ConfigError as err:
        raise ValueError(str(err)) from None
    return section


def problem(e: Any) -> str:
    """``"a.b: message"`` for one pydantic error (no location for model-level errors), in YAML words
    and without pydantic's ``"Value error, "`` prefix for messages our validators raise (which may
    already begin with their own, longer location)."""
    key = ".".join(str(p) for p in e["loc"])
    msg = _JSON_WORDS.get(e["msg"], e["msg"]).removeprefix("Value error, ")
    return f"{key}: {msg}" if key and not msg.startswith(f"{key}.") else msg  # an override names its own place


#: Strict JSON-mode messages in YAML words.
_JSON_WORDS = {"Input should be an object": "Input should be a valid dictionary",
               "Input should be a valid array": "Input should be a valid list"}


class PerDatasetRules(StrictModel):
    """Checks every ``per_dataset`` entry at load time by applying it (``_apply`` names the method)."""

    _apply: ClassVar[str]

    @model_validator(mode="after")
    def _overrides_valid(self) -> Any:
        for name in self.per_dataset:
            getattr(self, self._apply)(name)
        return self

