"""Checks ``recourselab repro`` runs before DVC touches anything, and the restore hints after a failure.

:func:`check_project` validates ``params.yaml``, the profile it names, every file ``dvc.yaml``
declares as a stage input that no stage produces, and every dataset's raw input (read and
validated as ``prepare`` would), so that bad input fails in seconds with one clear message.
:func:`missing_outputs` lists the outputs recorded in ``dvc.lock`` that are gone from the
workspace, :func:`classify_missing` says where each can come back from (the DVC cache, git, or only
a run), and :func:`missing_notes` / :func:`restore_hint` word it.
"""

from __future__ import annotations

import logging
import re
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass
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


def _locked(root: str | Path) -> dict[str, tuple[str, str | None]]:
    """Output path -> (stage, recorded md5 or None), of every output recorded in ``dvc.lock``."""
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
                outs[str(out["path"])] = (stage, out.get("md5"))
    return outs


def locked_outputs(root: str | Path) -> dict[str, str]:
    """Output path -> stage, of every output (metrics files included) recorded in ``dvc.lock``."""
    return {path: stage for path, (stage, _) in _locked(root).items()}


def missing_outputs(root: str | Path) -> list[str]:
    """The outputs recorded in ``dvc.lock`` that do not exist in the workspace, sorted."""
    root = Path(root)
    return sorted(p for p in locked_outputs(root) if not (root / p).exists())


@dataclass(frozen=True)
class MissingOutputs:
    """Missing outputs of ``dvc.lock``, by where their recorded version can come back from.

    Attributes
    ----------
    in_cache : list of str
        Their recorded version is in the DVC cache: ``dvc checkout`` restores them.
    in_git : list of str
        Committed to git (``cache: false`` metrics and tables): ``git checkout`` restores them.
    elsewhere : list of str
        In neither (a fresh clone, or a cleared cache): only a run (or ``dvc pull`` from a
        remote that holds them) brings them back.
    """

    in_cache: list[str]
    in_git: list[str]
    elsewhere: list[str]


def _in_dvc_cache(root: Path, hashes: dict[str, str | None]) -> set[str]:
    """The paths whose recorded md5 (``<md5>`` or ``<md5>.dir``) is an object of the project's DVC cache."""
    try:
        from dvc.repo import Repo

        with Repo(str(root)) as repo:
            odb = repo.cache.repo
            return {path for path, md5 in hashes.items() if md5 and Path(odb.oid_to_path(md5)).is_file()}
    except Exception as exc:  # no DVC repo or an unreadable config: nothing counts as restorable
        log.debug("DVC cache not readable under %s: %s", root, exc)
        return set()


def _in_git(root: Path, paths: list[str]) -> set[str]:
    """The ``paths`` that git tracks (files, or folders holding tracked files) in ``root``'s checkout."""
    if not paths:
        return set()
    try:
        listed = subprocess.run(["git", "ls-files", "-z", "--", *paths], cwd=root, capture_output=True,
                                check=True, timeout=30).stdout.decode().split("\0")
    except (OSError, subprocess.SubprocessError):
        return set()
    tracked = [f for f in listed if f]
    return {p for p in paths if any(f == p or f.startswith(p.rstrip("/") + "/") for f in tracked)}


def classify_missing(root: str | Path, paths: Iterable[str]) -> MissingOutputs:
    """Sort missing ``dvc.lock`` outputs by where they can be restored from (see :class:`MissingOutputs`)."""
    root = Path(root)
    paths = sorted(paths)
    recorded = _locked(root)
    cached = _in_dvc_cache(root, {p: recorded.get(p, ("", None))[1] for p in paths})
    rest = [p for p in paths if p not in cached]
    tracked = _in_git(root, rest)
    return MissingOutputs(in_cache=[p for p in paths if p in cached], in_git=[p for p in rest if p in tracked],
                          elsewhere=[p for p in rest if p not in tracked])


def _listing(paths: list[str], shown: int = 4) -> str:
    """``paths`` joined, or the first ``shown`` and how many more."""
    if len(paths) <= shown:
        return ", ".join(paths)
    return f"{', '.join(paths[:shown])} and {len(paths) - shown} more"


def restore_hint(paths: Iterable[str], *, git: bool = False) -> str:
    """One line saying that ``paths`` are missing and how to restore them: ``dvc checkout`` (from the
    DVC cache), or ``git checkout`` with ``git=True`` (committed outputs). Long lists are shortened,
    and the command then restores everything it tracks."""
    paths = list(paths)
    if git:
        command = f"git checkout -- {' '.join(paths)}" if len(paths) <= 8 else "git checkout -- data"
    else:
        command = f"dvc checkout {' '.join(paths)}" if len(paths) <= 8 else "dvc checkout"
    return (f"{len(paths)} output(s) recorded in dvc.lock are missing: {_listing(paths, 8)}; restore the "
            f"last good version with `{command}`")


def missing_notes(root: str | Path) -> list[tuple[int, str]]:
    """(logging level, message) lines about the outputs ``dvc.lock`` records that the workspace lacks.

    Outputs that a checkout can restore get a restore hint (a warning: the run would otherwise rebuild
    them); outputs that only a run can bring back (a fresh clone) get one informational line.
    """
    gone = classify_missing(root, missing_outputs(root))
    notes = []
    if gone.in_cache:
        notes.append((logging.WARNING, restore_hint(gone.in_cache)))
    if gone.in_git:
        notes.append((logging.WARNING, restore_hint(gone.in_git, git=True)))
    if gone.elsewhere:
        notes.append((logging.INFO, f"{len(gone.elsewhere)} output(s) recorded in dvc.lock are neither in the "
                                    f"workspace nor in the DVC cache ({_listing(gone.elsewhere)}): a fresh "
                                    "clone, or a cleared cache; the run builds them (`dvc pull` first fetches "
                                    "them if a remote holds them)"))
    return notes
