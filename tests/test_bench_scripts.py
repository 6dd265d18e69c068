"""Every benchmark script under bench/ loads: its imports name things the library still has."""

from __future__ import annotations

import runpy
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = sorted(p.relative_to(ROOT).as_posix() for p in [*ROOT.glob("bench/*.py"), *ROOT.glob("bench/tools/*.py")])


@pytest.mark.parametrize("script", SCRIPTS)
def test_the_script_loads_without_running(script, monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT))
    monkeypatch.syspath_prepend(str(ROOT / "bench"))
    monkeypatch.setattr(sys, "argv", [script])
    names = runpy.run_path(str(ROOT / script), run_name="bench_script_under_test")  # not "__main__": no run
    assert callable(names.get("main")), f"{script} has no main() entry point"
