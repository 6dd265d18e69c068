"""Params files: strict YAML reading, profiles rendered over the defaults, atomic writes with a backup,
and stable section hashes."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel

from recourselab.config.params import Params, parse_params
from recourselab.errors import ConfigError, did_you_mean

PROFILES_DIR = "profiles"


class _StrictLoader(yaml.SafeLoader):
    """A safe YAML loader that refuses a key given twice in one mapping (YAML would keep the last)."""


def _unique_mapping(loader: _StrictLoader, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
    first: dict[Any, int] = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=True)
        try:
            if key in first:
                raise ConfigError(f"key {key!r} is given twice in one mapping (lines {first[key] + 1} and "
                                  f"{key_node.start_mark.line + 1}); YAML would silently keep only the last")
            first[key] = key_node.start_mark.line
        except TypeError:  # an unhashable key: the mapping constructor names it
            pass
    return loader.construct_mapping(node, deep=deep)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _unique_mapping)


def read_yaml(path: Path) -> Any:
    """The content of the YAML file ``path``; every problem is a :class:`ConfigError` naming it.

    Raises
    ------
    ConfigError
        Not UTF-8 text, not valid YAML, or a key given twice in one mapping.
    """
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        raise ConfigError(f"{path} is not UTF-8 text ({err.reason} at byte {err.start})") from None
    try:
        return yaml.load(text, Loader=_StrictLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as err:
        raise ConfigError(f"{path} is not valid YAML: {err}") from None
    except ConfigError as err:
        raise ConfigError(f"{path}: {err}") from None


def load_params(path: str | Path = "params.yaml") -> Params:
    """Read and validate ``params.yaml``."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"params file not found: {path}")
    return parse_params(read_yaml(path), source=str(path))


#: Mappings that a profile replaces whole instead of merging into (search spaces).
REPLACED_KEYS = ("grid", "fixed", "per_dataset")


def _deep_merge(base: dict[str, Any], overlay: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in overlay.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict) and key not in REPLACED_KEYS:
            out[key] = _deep_merge(out[key], value)
        else:
            out[key] = value
    return out


def available_profiles(root: str | Path = ".") -> list[str]:
    """Names of the profiles: ``default`` plus every ``profiles/<name>.yaml``."""
    found = sorted(p.stem for p in (Path(root) / PROFILES_DIR).glob("*.yaml"))
    return ["default", *[n for n in found if n != "default"]]


def _user_settings(current: Any, source: str) -> dict[str, Any]:
    """What a profile switch keeps of the params it replaces: the ``data`` section, the custom
    datasets listed in ``datasets`` and their ``prepare.immutable`` and ``prepare.monotone`` entries (an
    overlay mapping).

    Raises
    ------
    ConfigError
        ``current`` or one of those sections is not of the expected YAML type.
    """
    if current is None:
        return {}
    if not isinstance(current, dict):
        raise ConfigError(f"{source} must hold a mapping at the top level, got {type(current).__name__}")

    def section(mapping: dict[str, Any], key: str, kind: type, where: str) -> Any:
        value = mapping.get(key) or kind()
        if not isinstance(value, kind):
            raise ConfigError(f"{source}: {where} must be a {'mapping' if kind is dict else 'list'}, got "
                              f"{type(value).__name__}")
        return value

    data = section(current, "data", dict, "data")
    datasets = section(current, "datasets", list, "datasets")
    prepare = section(current, "prepare", dict, "prepare")
    custom = section(data, "custom", dict, "data.custom")
    kept: dict[str, Any] = {"data": data} if data else {}
    mine = [d for d in datasets if isinstance(d, str) and d in custom]
    if mine:
        kept["datasets"] = mine
    for key in ("immutable", "monotone"):
        rules = {d: v for d, v in section(prepare, key, dict, f"prepare.{key}").items() if d in custom}
        if rules:
            kept.setdefault("prepare", {})[key] = rules
    return kept


def render_profile(name: str, root: str | Path = ".", *, current: Any = None,
                   current_source: str = "the current params") -> Params:
    """The full params of a profile: the model defaults with ``profiles/<name>.yaml`` on top.

    Parameters
    ----------
    name : ``default`` or a profile of ``root/profiles``.
    root : the project folder.
    current : the mapping of the params file the profile replaces (as read from YAML), or None.
        Its ``data`` section (merged over the profile's), the custom datasets it lists in
        ``datasets`` (appended to the profile's) and their ``prepare.immutable`` and ``prepare.monotone``
        entries are kept:
        they describe the user's machine and data, not the profile.
    current_source : how errors name where ``current`` came from.

    Raises
    ------
    ConfigError
        An unknown or broken profile, or kept settings that do not validate (naming both files).
    """
    merged = Params().model_dump(mode="json")
    source = "default profile"
    if name != "default":
        path = Path(root) / PROFILES_DIR / f"{name}.yaml"
        if not path.is_file():
            valid = available_profiles(root)
            raise ConfigError(f"unknown profile {name!r}{did_you_mean(name, valid)}; valid: {', '.join(valid)}")
        overlay = read_yaml(path)
        if overlay is None:
            overlay = {}
        if not isinstance(overlay, dict):
            raise ConfigError(f"{path} must hold a mapping of params sections at the top level, got "
                              f"{type(overlay).__name__}")
        overlay["profile"] = name
        merged, source = _deep_merge(merged, overlay), str(path)
    kept = _user_settings(current, current_source)
    if kept:
        extra = [d for d in kept.pop("datasets", []) if d not in merged["datasets"]]
        merged = _deep_merge(merged, kept)
        merged["datasets"] = [*merged["datasets"], *extra]
        source = f"{source} with the data section and custom datasets kept from {current_source}"
    return parse_params(merged, source=source)


def write_params(path: str | Path, params: Params) -> Path | None:
    """Write ``params`` to ``path`` (atomically), first copying a different existing file to a backup.

    Returns
    -------
    The backup's path (``<name>.<YYYYmmdd-HHMMSS>.bak`` next to it, never overwriting an earlier
    backup), or None when there was nothing to keep (no file, or the same text).
    """
    from datetime import datetime

    from recourselab.io import copy_atomic, write_bytes

    path = Path(path)
    text = dump_params(params).encode()
    backup = None
    if path.is_file() and path.read_bytes() != text:
        stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
        backup = path.with_name(f"{path.name}.{stamp}.bak")
        n = 1
        while backup.exists():
            backup = path.with_name(f"{path.name}.{stamp}-{n}.bak")
            n += 1
        copy_atomic(path, backup)
    write_bytes(path, text)
    return backup


def dump_params(params: Params) -> str:
    """YAML text of ``params`` in declaration order (what ``params.yaml`` holds)."""
    header = (
        f"# recourselab parameters, profile {params.profile!r}.\n"
        "# Switch profile with `recourselab profile NAME`; every key is documented in docs/reference/parameters.md.\n"
    )
    return header + yaml.safe_dump(params.model_dump(mode="json"), sort_keys=False)


def section_hash(section: BaseModel | Any) -> str:
    """Stable sha256 of a params section (used in cache keys and provenance)."""
    payload = section.model_dump(mode="json") if isinstance(section, BaseModel) else section
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()
