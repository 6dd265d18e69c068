"""Saving and loading a tuned ensemble: native model files plus a JSON manifest.

``manifest.json`` (one per dataset and seed) lists every member with its kind, file,
sha256, hyperparameters and number of classes. :func:`load_ensemble` verifies each file's
sha256 before loading it with the kind's native loader, and returns a :class:`BlackBox`;
:func:`checked_members` verifies them without loading (the flows' cache keys, so that a damaged
file is found on a cache hit too).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from recourselab.data.schema import Schema
from recourselab.errors import ArtifactError, DataError, MissingArtifactError
from recourselab.io import read_json, restore_hint, verify_sha256, write_json
from recourselab.models.oracle import BlackBox
from recourselab.models.registry import FittedModel, get_kind, load_model

MANIFEST = "manifest.json"
#: The DVC stage that writes ensembles (named in the hint of a damaged file).
STAGE = "tune_ensemble"


def model_filename(name: str) -> str:
    return f"{name}.{get_kind(name).ext}"


def member_entry(kind: str, params: dict[str, Any], n_classes: int, sha256: str) -> dict[str, Any]:
    """Manifest entry of one saved member of ``kind`` (its file is ``model_filename(kind)``)."""
    return {"kind": kind, "file": model_filename(kind), "sha256": sha256, "params": params,
            "n_classes": n_classes}


def write_manifest(directory: str | Path, members: dict[str, dict[str, Any]], **meta: Any) -> Path:
    """Write ``manifest.json`` listing ``members`` (name -> :func:`member_entry`)."""
    return write_json(Path(directory) / MANIFEST, {**meta, "members": members})


#: The keys of every manifest entry (see :func:`member_entry`).
ENTRY_KEYS = ("kind", "file", "sha256", "params", "n_classes")


def read_manifest(directory: str | Path) -> dict[str, Any]:
    """The checked content of ``directory/manifest.json``.

    Raises
    ------
    MissingArtifactError
        No manifest: the ``tune_ensemble`` stage has not run for this dataset and seed.
    ArtifactError
        A damaged manifest: not JSON, no ``members`` mapping, or an entry without one of
        :data:`ENTRY_KEYS`.
    """
    path = Path(directory) / MANIFEST
    if not path.is_file():
        raise MissingArtifactError(f"no ensemble manifest at {path}; run the tune_ensemble stage first")
    manifest = read_json(path, keys=["members"])
    members = manifest["members"]
    if isinstance(members, dict):
        bad = [name for name, e in members.items() if not isinstance(e, dict) or set(ENTRY_KEYS) - set(e)]
    else:
        bad = ["members"]
    if bad:
        raise ArtifactError(f"{path}: the entries {bad} are not members (each has {list(ENTRY_KEYS)}); "
                            f"{restore_hint(path, stage=STAGE, dataset=manifest.get('dataset'))}")
    return manifest


def checked_members(directory: str | Path, names: Sequence[str] | str | None = None,
                    manifest: dict[str, Any] | None = None) -> dict[str, dict[str, Any]]:
    """The manifest entries of ``names`` (all members by default), each file's sha256 verified.

    Parameters
    ----------
    directory : a ``tune_ensemble`` output folder (``<root>/<dataset>/seed=<s>``).
    names : members to check (one name or several).
    manifest : its :func:`read_manifest` content, when already read.

    Returns
    -------
    dict
        name -> manifest entry (see :func:`member_entry`), in the order of ``names``.

    Raises
    ------
    DataError
        The manifest lacks one of ``names``.
    MissingArtifactError
        A listed file is missing.
    ChecksumError
        A file differs from the sha256 its entry records (truncated, altered or replaced); the
        message names the file, ``dvc checkout --force <file>`` and ``recourselab repro -f
        tune_ensemble@<dataset>``.
    """
    directory = Path(directory)
    manifest = read_manifest(directory) if manifest is None else manifest
    entries = manifest["members"]
    names = list(entries) if names is None else [names] if isinstance(names, str) else list(names)
    missing = [n for n in names if n not in entries]
    if missing:
        raise DataError(f"{directory / MANIFEST} has no members {missing}; it holds {list(entries)}")
    dataset = manifest.get("dataset")
    for name in names:
        file = directory / entries[name]["file"]
        if not file.is_file():
            raise MissingArtifactError(f"{directory / MANIFEST} lists {name} in {file}, which is missing; "
                                       f"{restore_hint(file, stage=STAGE, dataset=dataset)}")
        verify_sha256(file, entries[name]["sha256"], listed_in=directory / MANIFEST, stage=STAGE, dataset=dataset)
    return {name: entries[name] for name in names}


def load_members(directory: str | Path, names: Sequence[str] | None = None, *,
                 dataset: str | None = None, seed: int | None = None) -> dict[str, FittedModel]:
    """Load (a subset of) the members listed in ``directory/manifest.json``, sha256-verified.

    With a ``dataset`` (a ``seed``), the manifest must record that dataset (seed): members of
    another dataset of the same width, or tuned on another seed's split, would otherwise answer
    silently.
    """
    directory = Path(directory)
    manifest = read_manifest(directory)
    saved = manifest.get("dataset")
    if dataset is not None and saved is not None and saved != dataset:
        raise DataError(f"the ensemble in {directory} was tuned on dataset {saved!r}, not on the requested {dataset!r}")
    saved_seed = manifest.get("seed")
    if seed is not None and saved_seed is not None and saved_seed != seed:
        raise DataError(f"the ensemble in {directory} was tuned on seed {saved_seed}'s split, "
                        f"not on the requested seed {seed}'s")
    return {name: load_model(e["kind"], directory / e["file"], e["params"], e["n_classes"])
            for name, e in checked_members(directory, names, manifest).items()}


def load_ensemble(directory: str | Path, names: Sequence[str] | None = None, *,
                  schema: Schema | None = None, budgets: dict[str, int] | None = None,
                  seed: int | None = None) -> BlackBox:
    """A :class:`BlackBox` over the saved members in ``directory`` (all of them by default).

    With a ``schema`` (a ``seed``), the manifest's dataset must be the schema's (its seed must be
    ``seed``); see :func:`load_members`.
    """
    members = load_members(directory, names, dataset=None if schema is None else schema.dataset, seed=seed)
    return BlackBox(members, schema=schema, budgets=budgets)
