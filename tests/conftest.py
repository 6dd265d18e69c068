"""Test-session settings: quiet, offline Prefect in a reused temp home; shared fixtures."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

_PREFECT_HOME = Path(tempfile.gettempdir()) / "recourselab-test-prefect"
os.environ.setdefault("PREFECT_HOME", str(_PREFECT_HOME))
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "60")
os.environ.setdefault("DVC_NO_ANALYTICS", "1")

REPO_ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO_ROOT.parent / "shared" / "data"


@pytest.fixture(scope="session")
def shared_data_dir() -> Path:
    """Directory of user-supplied datasets (``$RECOURSELAB_DATA_DIR`` or ../shared/data)."""
    path = Path(os.environ.get("RECOURSELAB_DATA_DIR", SHARED_DATA))
    if not (path / "heloc" / "heloc.csv").is_file():
        pytest.skip(f"user-supplied datasets not found in {path}")
    return path


@pytest.fixture()
def params_factory():
    """Build validated Params from a partial mapping (on top of the defaults)."""
    from recourselab.config import Params, parse_params
    from recourselab.pipeline.validate import validate_params

    def make(**overrides) -> Params:
        base = Params().model_dump(mode="json")
        for key, value in overrides.items():
            if isinstance(value, dict) and isinstance(base.get(key), dict):
                base[key] = {**base[key], **value}
            else:
                base[key] = value
        return validate_params(parse_params(base))

    return make


def copy_checkout(dst: Path) -> Path:
    """Copy the files git would commit (tracked and untracked-not-ignored) of this checkout to ``dst``."""
    files = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"],
                           cwd=REPO_ROOT, capture_output=True, text=True, check=True).stdout.split()
    for rel in files:
        if (REPO_ROOT / rel).is_file():
            (dst / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO_ROOT / rel, dst / rel)
    return dst
