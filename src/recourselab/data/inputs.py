"""Tracked raw inputs: the exact bytes each dataset is read from, copied into the project.

The ``inputs`` stage copies every raw file that a dataset reads (a registry file after its
sha256 check, a file of the data directory, a ``data.custom`` file) into
``data/inputs/<dataset>/``, with a manifest (:data:`MANIFEST`) naming each file's origin and
sha256. That folder is a DVC output (cached, pushed to the remote) and a dependency of
``prepare``, which reads the copies (:func:`recourselab.data.sources.tracked_inputs`): a changed
byte of any input changes the folder's hash, so prepare and everything downstream rerun, and a
fresh clone that pulls the folder can rerun prepare without the original sources.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from recourselab.config import Params
from recourselab.data.registry import BUILTIN_DATASETS
from recourselab.data.sources import ARTIFACTS, FILES, KNOWN_FILES, read_registry_file, resolve_user_file
from recourselab.errors import ConfigError, DataError
from recourselab.io import read_json, sha256_bytes, sha256_file, write_bytes, write_json

log = logging.getLogger(__name__)

#: The manifest of an inputs folder: ``{"dataset", "files": {name: {"origin", "sha256", "bytes"}}}``.
MANIFEST = "inputs.json"

#: Registry files (keys of :data:`recourselab.data.sources.FILES`) each registry dataset reads.
REGISTRY_KEYS: dict[str, tuple[str, ...]] = {
    "adult": ("adult.data", "adult.test"), "compas": ("compas.csv",), "german": ("germancredit.csv",),
    "cardio": ("cardio.csv",)}


@dataclass(frozen=True)
class InputFile:
    """One raw file of a dataset.

    Attributes
    ----------
    name : its file name in the inputs folder.
    origin : where it comes from, machine-independent (registry requirement and member, or the path
        as declared).
    sha256 : the sha256 it must have (pinned or declared), None when nothing pins it.
    read : returns its bytes from the original source (verified against ``sha256`` when given).
    """

    name: str
    origin: str
    sha256: str | None
    read: Callable[[], bytes]


def input_files(dataset: str, params: Params) -> list[InputFile]:
    """The raw files that dataset ``dataset`` is read from ([] for a generated one).

    Raises
    ------
    ConfigError
        Two files of the dataset share a file name (they would overwrite each other).
    """
    files: list[InputFile] = []
    cache = params.data.cache_dir
    if dataset in params.data.custom:
        decl = params.data.custom[dataset]
        files.append(InputFile(Path(decl.path).name, str(decl.path), decl.sha256, lambda: resolve_user_file(
            decl.path, params.data.dir, dataset=dataset, sha256=decl.sha256, known=False).read_bytes()))
    elif dataset in REGISTRY_KEYS:
        for key in REGISTRY_KEYS[dataset]:
            spec = FILES[key]
            origin = f"{ARTIFACTS[spec.artifact].requirement}: {spec.member}"
            files.append(InputFile(key, origin, spec.sha256, lambda key=key: read_registry_file(key, cache)))
    elif BUILTIN_DATASETS[dataset].source == "path":
        for rel in BUILTIN_DATASETS[dataset].files:
            files.append(InputFile(Path(rel).name, rel, KNOWN_FILES.get(rel), lambda rel=rel: resolve_user_file(
                rel, params.data.dir, dataset=dataset).read_bytes()))
    names = [f.name for f in files]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ConfigError(f"dataset {dataset!r} reads several files named {twice}; rename one of them")
    return files


def sync_inputs(dataset: str, params: Params, folder: str | Path) -> dict[str, Any]:
    """Copy the raw files of ``dataset`` into ``folder`` and write its :data:`MANIFEST`.

    A file whose source cannot be read (no network for a registry download, a data directory
    that is not mounted here) keeps the copy already in ``folder`` when that copy has the pinned
    sha256, or, for a file nothing pins, with a warning. Files of ``folder`` the dataset no
    longer reads are removed. The manifest holds no time or machine-specific path, so unchanged
    inputs give a byte-identical folder (DVC then reruns nothing downstream).

    Returns
    -------
    dict
        The manifest written.

    Raises
    ------
    DataError
        A source cannot be read and no usable copy is in ``folder``; or a sha256 mismatch.
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    entries: dict[str, dict[str, Any]] = {}
    for f in input_files(dataset, params):
        target = folder / f.name
        try:
            data = f.read()
        except DataError as err:
            kept = sha256_file(target) if target.is_file() else None
            if kept is None or (f.sha256 is not None and kept != f.sha256):
                raise
            log.warning("dataset %r: cannot read %s (%s); keeping the tracked copy %s (sha256 %s...)",
                        dataset, f.origin, str(err).splitlines()[0], target, kept[:12])
            entries[f.name] = {"origin": f.origin, "sha256": kept, "bytes": target.stat().st_size}
            continue
        digest = sha256_bytes(data)
        if not target.is_file() or sha256_file(target) != digest:
            write_bytes(target, data)
        entries[f.name] = {"origin": f.origin, "sha256": digest, "bytes": len(data)}
    for stale in folder.iterdir():
        if stale.is_file() and stale.name not in entries and stale.name != MANIFEST:
            stale.unlink()
    manifest = {"dataset": dataset, "files": dict(sorted(entries.items()))}
    write_json(folder / MANIFEST, manifest)
    return manifest


def input_hashes(folder: str | Path) -> dict[str, str]:
    """File name -> sha256 of the tracked inputs in ``folder`` (from its manifest), for provenance."""
    manifest = read_json(Path(folder) / MANIFEST, keys=["files"])
    return {name: entry["sha256"] for name, entry in manifest["files"].items()}
