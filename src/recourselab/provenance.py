"""Provenance of artifacts: library versions, code fingerprints and directory fingerprints.

The library and the pipeline both use these: a model records the code that made it, and a
stage's task key covers the code, library versions and upstream files it depends on.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from recourselab.io import sha256_file

#: Distributions whose code shapes the artifacts (numerics, model formats, Parquet); each entry
#: lists alternative distribution names of one library (``xgboost-cpu`` installs ``xgboost``).
LIBRARIES: tuple[tuple[str, ...], ...] = (
    ("numpy",), ("pandas",), ("pyarrow",), ("scipy",), ("scikit-learn",), ("torch",),
    ("torchdiffeq",), ("pot",), ("xgboost-cpu", "xgboost"), ("lightgbm",), ("catboost",),
    ("pytorch-tabnet",), ("skops",),
)


def library_versions() -> dict[str, str]:
    """Installed version of each of :data:`LIBRARIES` (``"absent"`` when none is installed).

    Returns
    -------
    dict
        First name of each entry -> version string, e.g. ``{"torch": "2.13.0", ...}``.
    """
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for names in LIBRARIES:
        out[names[0]] = "absent"
        for name in names:
            try:
                out[names[0]] = version(name)
                break
            except PackageNotFoundError:
                continue
    return out


def code_fingerprint(*packages: str) -> str:
    """sha256 over the source files of the given importable (sub)packages or modules.

    Task cache keys pass every module whose code shapes the task's outputs: the library
    packages it calls, ``recourselab.config`` and the flow module itself (helpers outside the
    task function, which Prefect's source hash of the task does not see). The package version
    and the versions of the numerical libraries (:func:`library_versions`) are part of the
    hash, so an upgrade of, say, torch or LightGBM never reuses artifacts made by the old one.
    """
    import importlib

    from recourselab._version import __version__

    h = hashlib.sha256(__version__.encode())  # provenance records the version: a bump is a new key
    for name, ver in sorted(library_versions().items()):
        h.update(f"{name}=={ver};".encode())
    for name in sorted(packages):
        mod = importlib.import_module(name)
        origin = Path(mod.__file__)
        files = sorted(origin.parent.rglob("*.py")) if origin.name == "__init__.py" else [origin]
        for f in files:
            h.update(f.name.encode())
            h.update(f.read_bytes())
    return h.hexdigest()


def code_provenance(code: str) -> dict[str, Any]:
    """The provenance entries naming the code behind an artifact.

    Parameters
    ----------
    code : the task's :func:`code_fingerprint`.

    Returns
    -------
    dict
        ``code_version`` (the package version), ``code_hash`` (``code``) and ``libraries``
        (:func:`library_versions`), so two outputs made by different library versions say which.
    """
    from recourselab._version import __version__

    return {"code_version": __version__, "code_hash": code, "libraries": library_versions()}


#: Keys of JSON reports that hold timings: left out of :func:`dir_fingerprint`.
TIMING_SUFFIX = "_time_s"


def dir_fingerprint(directory: str | Path, exclude: Sequence[str] = ()) -> str:
    """sha256 over the names and contents of the files directly in ``directory`` (upstream keys),
    except the file names in ``exclude`` (reports that are not inputs). A JSON object's top-level
    keys ending in :data:`TIMING_SUFFIX` are left out: a rerun that only took another time
    leaves the downstream keys as they were."""
    h = hashlib.sha256()
    for f in sorted(p for p in Path(directory).iterdir() if p.is_file() and p.name not in exclude):
        h.update(f.name.encode())
        h.update(_content_digest(f).encode())
    return h.hexdigest()


def _content_digest(path: Path) -> str:
    if path.suffix == ".json":
        try:
            data = json.loads(path.read_bytes())
        except ValueError:
            data = None
        if isinstance(data, dict):
            kept = {k: v for k, v in data.items() if not k.endswith(TIMING_SUFFIX)}
            return hashlib.sha256(json.dumps(kept, sort_keys=True).encode()).hexdigest()
    return sha256_file(path)
