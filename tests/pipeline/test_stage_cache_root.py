"""Shared stage helpers: where the task cache lives."""

from __future__ import annotations

from pathlib import Path

from recourselab.config import parse_params
from recourselab.pipeline.stage import cache_root


def test_cache_root_expands_the_home_folder_and_reads_relative_paths_from_the_params_folder(tmp_path):
    params_file = tmp_path / "conf" / "params.yaml"
    home = parse_params({"orchestration": {"cache_dir": "~/rl-cache"}})
    assert cache_root(home, params_file) == Path.home() / "rl-cache"  # not <project>/~/rl-cache
    relative = parse_params({"orchestration": {"cache_dir": "cache"}})
    assert cache_root(relative, params_file) == tmp_path / "conf" / "cache"
    absolute = parse_params({"orchestration": {"cache_dir": str(tmp_path / "abs")}})
    assert cache_root(absolute, params_file) == tmp_path / "abs"
