"""Where a recourselab project (a checkout with ``dvc.yaml`` and ``stages/``) lies."""

from __future__ import annotations

from pathlib import Path

from recourselab.errors import RecourselabError


def project_root(start: Path | None = None) -> Path:
    """The nearest directory at or above ``start`` holding ``dvc.yaml`` and ``stages/``."""
    start = (start or Path.cwd()).resolve()
    for d in (start, *start.parents):
        if (d / "dvc.yaml").is_file() and (d / "stages").is_dir():
            return d
    raise RecourselabError(f"no recourselab project (dvc.yaml + stages/) at or above {start}")
