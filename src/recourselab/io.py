"""Artifact I/O: atomic writes, Parquet with provenance metadata, JSON, hashing.

Every write goes to a temporary file in the destination directory and is then moved into
place with :func:`os.replace`, so an interrupted run never leaves a truncated file that a
later stage would read.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import shlex
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from recourselab.errors import ArtifactError, ChecksumError, MissingArtifactError


class SchemaVersionError(ArtifactError):
    """A table's recorded schema version is missing or differs from the one this code reads."""

PROVENANCE_KEY = b"recourselab"
#: Parquet metadata key of a table's schema version (``"<kind>/<version>"``, e.g. ``"recourse/1"``).
SCHEMA_VERSION_KEY = b"recourselab.schema_version"
#: The layout of recourse tables (``counterfactuals.parquet``) that this code writes and reads; bump it
#: when a column is renamed, dropped or changes meaning, so old files fail loudly instead of misreading.
RECOURSE_SCHEMA = "recourse/1"

#: How to get a good copy of a damaged DVC output back (:func:`restore_hint` names the file and stage).
RESTORE_HINT = "restore it with `dvc checkout` or re-run the stage that wrote it"


def shown_path(path: str | Path) -> str:
    """``path`` as a user would type it: relative to the working directory when under it, shell-quoted."""
    path = Path(path)
    try:
        path = path.resolve().relative_to(Path.cwd().resolve())
    except (OSError, ValueError):
        pass
    return shlex.quote(str(path))


def restore_hint(path: str | Path, *, stage: str | None = None, dataset: str | None = None) -> str:
    """How to get a good copy of the pipeline artifact ``path`` back.

    Parameters
    ----------
    path : the damaged file.
    stage, dataset : the DVC stage that wrote it and its dataset; with both, the hint names the
        ``recourselab repro -f <stage>@<dataset>`` command that rebuilds it.

    Returns
    -------
    str
        e.g. ``"restore it with `dvc checkout --force data/ensemble/compas/seed=0/lightgbm.txt` or
        rebuild it with `recourselab repro -f tune_ensemble@compas`"``.
    """
    rebuild = (f"rebuild it with `recourselab repro -f {stage}@{dataset}`" if stage and dataset
               else "re-run the stage that wrote it")
    # --force: without it DVC refuses to overwrite a file that differs from its cached copy
    return f"restore it with `dvc checkout --force {shown_path(path)}` or {rebuild}"


def verify_sha256(path: str | Path, expected: str, *, listed_in: str | Path, stage: str | None = None,
                  dataset: str | None = None) -> None:
    """Check that the file ``path`` has the sha256 ``expected`` that the manifest ``listed_in`` records.

    Raises
    ------
    MissingArtifactError
        ``path`` does not exist.
    ChecksumError
        Its sha256 differs (a truncated, altered or replaced file); the message names the file and
        :func:`restore_hint`'s commands.
    """
    path = Path(path)
    if not path.is_file():
        raise MissingArtifactError(f"{listed_in} lists {path}, which is missing; "
                                   f"{restore_hint(path, stage=stage, dataset=dataset)}")
    got = sha256_file(path)
    if got != expected:
        raise ChecksumError(f"{path} is damaged: its sha256 {got[:12]}... is not the {expected[:12]}... that "
                            f"{Path(listed_in).name} records (truncated, altered or replaced); "
                            f"{restore_hint(path, stage=stage, dataset=dataset)}")


def _file_mode() -> int:
    """Mode of a plain new file under the current umask (mkstemp would give 0600)."""
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


FILE_MODE = _file_mode()


@contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; move it onto ``path`` only on success."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        yield Path(tmp)
        os.chmod(tmp, FILE_MODE)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_bytes(path: str | Path, data: bytes) -> Path:
    """Atomically write ``data`` to ``path``."""
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)
    return Path(path)


def _strict_json(obj: Any) -> Any:
    """``obj`` with every NaN / infinite float replaced by None (JSON has no such numbers)."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {key: _strict_json(value) for key, value in obj.items()}
    if isinstance(obj, list | tuple):
        return [_strict_json(value) for value in obj]
    return obj


def json_bytes(obj: Any) -> bytes:
    """``obj`` as indented, key-sorted, standard JSON (UTF-8, final newline).

    NaN and infinite floats (e.g. a correlation of a constant column) become ``null``:
    Python's bare ``NaN`` / ``Infinity`` tokens are not JSON, and strict readers (jq, browsers,
    other languages) reject the whole file.
    """
    return (json.dumps(_strict_json(obj), indent=2, sort_keys=True, allow_nan=False) + "\n").encode()


def write_json(path: str | Path, obj: Any) -> Path:
    """Atomically write ``obj`` as :func:`json_bytes`."""
    return write_bytes(path, json_bytes(obj))


def error_reason(err: BaseException) -> str:
    """The first line of an exception's message (its type name when the message is empty)."""
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__


def read_json(path: str | Path, keys: Sequence[str] = ()) -> Any:
    """The parsed content of the JSON file ``path``.

    Parameters
    ----------
    keys : with any, the content must be a JSON object holding all of them.

    Raises
    ------
    MissingArtifactError
        ``path`` does not exist.
    ArtifactError
        ``path`` is not valid UTF-8 JSON (e.g. truncated), or lacks one of ``keys``; the
        message names the file (and the keys).
    """
    path = Path(path)
    if not path.is_file():
        raise MissingArtifactError(f"missing file {path}")
    try:
        obj = json.loads(path.read_text())
    except ValueError as err:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise ArtifactError(f"{path} is damaged, not valid JSON ({error_reason(err)}); {restore_hint(path)}") from err
    if keys:
        missing = list(keys) if not isinstance(obj, dict) else [k for k in keys if k not in obj]
        if missing:
            raise ArtifactError(f"{path} lacks the keys {missing} (hand-edited, or written by other code); "
                                f"{restore_hint(path)}")
    return obj


def write_parquet(path: str | Path, frame: pd.DataFrame, provenance: dict[str, Any] | None = None, *,
                  schema: str | None = None) -> Path:
    """Atomically write ``frame`` (without its index) with ``provenance`` in the file metadata.

    ``schema`` (e.g. :data:`RECOURSE_SCHEMA`) is stored under :data:`SCHEMA_VERSION_KEY`, for
    :func:`check_schema` to compare on reading.
    """
    table = pa.Table.from_pandas(frame, preserve_index=False)
    meta = dict(table.schema.metadata or {})
    if provenance:
        meta[PROVENANCE_KEY] = json.dumps(provenance, sort_keys=True).encode()
    if schema:
        meta[SCHEMA_VERSION_KEY] = schema.encode()
    table = table.replace_schema_metadata(meta)
    with atomic_path(path) as tmp:
        pq.write_table(table, tmp)
    return Path(path)


def schema_version(path: str | Path) -> str | None:
    """The schema version recorded in the Parquet file ``path`` (None when it records none)."""
    raw = (pq.read_schema(path).metadata or {}).get(SCHEMA_VERSION_KEY)
    return raw.decode(errors="replace") if raw else None


def check_schema(path: str | Path, expected: str) -> None:
    """Check that the Parquet file ``path`` records the schema version ``expected``.

    Raises
    ------
    MissingArtifactError
        ``path`` does not exist.
    ArtifactError
        ``path`` is not a readable Parquet file.
    SchemaVersionError
        It records no version (written before versions were recorded, or by other code) or another
        one; the message names both versions and how to get a file of the expected one.
    """
    path = Path(path)
    if not path.is_file():
        raise MissingArtifactError(f"missing file {path}")
    try:
        found = schema_version(path)
    except (OSError, ValueError, pa.ArrowException) as err:
        raise ArtifactError(f"cannot read {path} as Parquet ({error_reason(err)}); {restore_hint(path)}") from err
    if found == expected:
        return
    fix = ("rebuild it with this version of recourselab (`recourselab repro`), or read it with the recourselab "
           "version that wrote it")
    if found is None:
        raise SchemaVersionError(f"{path} records no schema version (written before versions were recorded, or by "
                                 f"other code); this recourselab reads {expected!r}: {fix}")
    raise SchemaVersionError(f"{path} has schema version {found!r}, but this recourselab reads {expected!r}: {fix}")


def read_parquet(path: str | Path, columns: Sequence[str] | None = None, *,
                 schema: str | None = None) -> pd.DataFrame:
    """The table in the Parquet file ``path`` (only ``columns`` when given).

    With ``schema``, the file must record that schema version first (:func:`check_schema`).

    Raises
    ------
    MissingArtifactError
        ``path`` does not exist.
    ArtifactError
        ``path`` is not a readable Parquet file (e.g. truncated), or lacks one of ``columns``.
    SchemaVersionError
        With ``schema``: the file records no version or another one.
    """
    path = Path(path)
    if not path.is_file():
        raise MissingArtifactError(f"missing file {path}")
    if schema is not None:
        check_schema(path, schema)
    try:
        names = pq.read_schema(path).names
        missing = [c for c in columns or () if c not in names]
        frame = None if missing else pd.read_parquet(path, columns=None if columns is None else list(columns))
    except (OSError, ValueError, pa.ArrowException) as err:
        raise ArtifactError(f"cannot read {path} as Parquet ({error_reason(err)}); {restore_hint(path)}") from err
    if missing:
        raise ArtifactError(f"{path} lacks the columns {missing} (it holds {names}); {restore_hint(path)}")
    return frame


def read_recourse(path: str | Path, columns: Sequence[str] | None = None) -> pd.DataFrame:
    """A recourse table (``counterfactuals.parquet``) of the :data:`RECOURSE_SCHEMA` layout.

    Raises
    ------
    SchemaVersionError
        The file records no schema version or another one (naming both).
    """
    return read_parquet(path, columns, schema=RECOURSE_SCHEMA)


def read_provenance(path: str | Path) -> dict[str, Any]:
    """The provenance dictionary stored by :func:`write_parquet` (empty if none)."""
    meta = pq.read_schema(path).metadata or {}
    raw = meta.get(PROVENANCE_KEY)
    return json.loads(raw) if raw else {}


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_file(path: str | Path, chunk: int = 1 << 20) -> str:
    """Hex sha256 of a file, read in chunks."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            h.update(block)
    return h.hexdigest()


def copy_atomic(src: str | Path, dst: str | Path) -> Path:
    """Copy ``src`` onto ``dst`` atomically."""
    with atomic_path(dst) as tmp:
        shutil.copyfile(src, tmp)
    return Path(dst)
