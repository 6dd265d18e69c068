"""Checks ``recourselab repro`` runs before DVC touches anything, and the restore hints after a failure.

:func:`check_project` validates ``params.yaml``, the profile it names, every file ``dvc.yaml``
declares as a stage input that no stage produces, and every dataset's raw input (read and
validated as ``prepare`` would), so that bad input fails in seconds with one clear message.
:func:`missing_outputs` lists the outputs recorded in ``dvc.lock`` that are gone from the
workspace, and :func:`restore_hint` says how to get them back.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from recourselab.config import Params, available_profiles, read_yaml, render_profile
from recourselab.errors import RecourselabError
from recourselab.pipeline.validate import load_checked_params, validate_params

log = logging.getLogger(__name__)

_ITEM = re.compile(r"\$\{\s*item\s*\}")


class MissingInputError(RecourselabError, FileNotFoundError):
    """A file that ``dvc.yaml`` declares as a stage input is missing from the checkout."""


def _paths(entries: Iterable[Any]) -> list[str]:
    """Paths of a dvc.yaml ``deps`` / ``outs`` / ``metrics`` list (strings or one-key mappings)."""
    out = []
    for entry in entries or []:
        if isinstance(entry, str):
            out.append(entry)
        elif isinstance(entry, dict):
            out.extend(str(k) for k in entry)
    return out


def declared_inputs(dvc_yaml: dict[str, Any], datasets: Iterable[str]) -> dict[str, list[str]]:
    """Input path -> the stages (``name@dataset``) declaring it, for inputs no stage produces.

    Parameters
    ----------
    dvc_yaml : the parsed ``dvc.yaml``; ``foreach`` stages are expanded over ``datasets``.
    datasets : the values of ``${item}`` (the pipeline's datasets).
    """
    stages: dict[str, dict[str, Any]] = {}
    for name, stage in (dvc_yaml.get("stages") or {}).items():
        if isinstance(stage, dict) and "do" in stage:
            for item in datasets:
                stages[f"{name}@{item}"] = {k: _expand(v, item) for k, v in stage["do"].items()}
        elif isinstance(stage, dict):
            stages[name] = stage
    produced = {p.rstrip("/") for s in stages.values() for key in ("outs", "metrics", "plots")
                for p in _paths(s.get(key))}
    inputs: dict[str, list[str]] = {}
    for name, stage in stages.items():
        for dep in _paths(stage.get("deps")):
            dep = dep.rstrip("/")
            if "${" in dep or dep in produced or any(dep.startswith(p + "/") for p in produced):
                continue
            inputs.setdefault(dep, []).append(name)
    return inputs


def _expand(value: Any, item: str) -> Any:
    if isinstance(value, str):
        return _ITEM.sub(item, value)
    if isinstance(value, list):
        return [_expand(v, item) for v in value]
    if isinstance(value, dict):
        return {_expand(k, item): _expand(v, item) for k, v in value.items()}
    return value


def check_profile(params: Params, root: Path) -> None:
    """Render the profile ``params.yaml`` names (when it is one of the project's profiles), so a
    broken ``profiles/<name>.yaml`` is reported before a run, not at the next `recourselab profile`."""
    if params.profile in available_profiles(root):
        validate_params(render_profile(params.profile, root), f"profile {params.profile!r}")
    else:
        log.debug("params.yaml names profile %r, which has no profiles/%s.yaml", params.profile, params.profile)


def check_declared_inputs(root: Path, params: Params) -> None:
    """Every file ``dvc.yaml`` declares as an input that no stage produces must exist.

    Raises
    ------
    MissingInputError
        Naming each missing path, the stages that need it and how to restore it.
    """
    inputs = declared_inputs(read_yaml(root / "dvc.yaml") or {}, params.datasets)
    missing = {path: users for path, users in inputs.items() if not (root / path).exists()}
    if missing:
        listing = "; ".join(f"{p} (needed by {', '.join(users[:3])}{', ...' if len(users) > 3 else ''})"
                            for p, users in sorted(missing.items()))
        raise MissingInputError(f"dvc.yaml declares inputs that are missing: {listing}; restore them with "
                                f"`git checkout -- {' '.join(sorted(missing))}`")


def check_datasets(params: Params) -> None:
    """Read and validate the raw input of every dataset of ``params`` (as ``prepare`` does).

    Raises
    ------
    DataError
        The first dataset whose source is missing or invalid, with the loader's message.
    """
    from recourselab.data import dataset_from_params

    for name in params.datasets:
        dataset_from_params(name, params)


def check_project(root: str | Path) -> Params:
    """All checks of ``recourselab repro`` before DVC runs: params, profile, declared inputs, datasets.

    Must be called with the project root as the working folder (relative data paths are read
    from there, as the stages read them).

    Returns
    -------
    Params
        The validated ``params.yaml``.
    """
    root = Path(root)
    params = load_checked_params(root / "params.yaml")
    check_profile(params, root)
    check_declared_inputs(root, params)
    check_datasets(params)
    return params


def locked_outputs(root: str | Path) -> dict[str, str]:
    """Output path -> stage, of every output (metrics files included) recorded in ``dvc.lock``."""
    lock = Path(root) / "dvc.lock"
    if not lock.is_file():
        return {}
    try:
        data = read_yaml(lock) or {}
    except RecourselabError:
        return {}
    outs = {}
    for stage, entry in (data.get("stages") or {}).items():
        for out in (entry or {}).get("outs") or []:
            if isinstance(out, dict) and "path" in out:
                outs[str(out["path"])] = stage
    return outs


def missing_outputs(root: str | Path) -> list[str]:
    """The outputs recorded in ``dvc.lock`` that do not exist in the workspace, sorted."""
    root = Path(root)
    return sorted(p for p in locked_outputs(root) if not (root / p).exists())


def restore_hint(paths: Iterable[str]) -> str:
    """One line saying that ``paths`` are missing and that ``dvc checkout`` restores them."""
    paths = list(paths)
    return (f"{len(paths)} output(s) recorded in dvc.lock are missing: {', '.join(paths)}; restore the last "
            f"good version with `dvc checkout {' '.join(paths)}`")
