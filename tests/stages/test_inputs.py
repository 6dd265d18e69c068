"""The inputs stage copies a dataset's raw files; prepare reads those copies and records their sha256."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from recourselab.config import render_profile
from recourselab.data.inputs import MANIFEST
from recourselab.io import read_json, read_provenance, sha256_file
from stages import inputs, prepare


def _project(tmp_path: Path) -> tuple[Path, Path]:
    csv = tmp_path / "mine.csv"
    rng = np.random.default_rng(0)
    pd.DataFrame({"x": rng.normal(size=60).round(4), "label": np.arange(60) % 2}).to_csv(csv, index=False)
    raw = render_profile("default").model_dump(mode="json")
    raw.update(datasets=["mine"], seeds=[0],
               data={**raw["data"], "custom": {"mine": {"path": str(csv), "target": "label", "favourable": 1}}})
    raw["orchestration"] = {**raw["orchestration"], "cache_dir": str(tmp_path / "cache")}
    params = tmp_path / "params.yaml"
    params.write_text(yaml.safe_dump(raw))
    return params, csv


def test_prepare_reads_the_tracked_copy_and_records_its_sha256(tmp_path, caplog):
    params, csv = _project(tmp_path)
    root = tmp_path / "inputs"
    with caplog.at_level(logging.INFO, logger="recourselab.stages"):
        assert inputs.main(["--dataset", "mine", "--params", str(params), "--out", str(root)]) == 0
    assert "mine.csv" in caplog.text and "sha256" in caplog.text
    tracked = root / "mine" / "mine.csv"
    assert tracked.read_bytes() == csv.read_bytes()
    manifest = read_json(root / "mine" / MANIFEST)
    assert manifest["files"]["mine.csv"]["sha256"] == sha256_file(csv)

    csv.write_text("x,label\nnot read,0\n")  # the source moves on after the copy: prepare reads the copy
    out = tmp_path / "prepared"
    assert prepare.main(["--dataset", "mine", "--params", str(params), "--out", str(out),
                         "--inputs", str(root)]) == 0
    train = out / "mine" / "seed=0" / "train.parquet"
    assert read_provenance(train)["inputs"] == {"mine.csv": sha256_file(tracked)}
    assert len(pd.read_parquet(train)) == 36


def test_a_failed_copy_keeps_the_previous_inputs(tmp_path, caplog):
    params, csv = _project(tmp_path)
    root = tmp_path / "inputs"
    assert inputs.main(["--dataset", "mine", "--params", str(params), "--out", str(root)]) == 0
    before = {p.name: p.read_bytes() for p in (root / "mine").iterdir()}
    raw = yaml.safe_load(params.read_text())
    raw["data"]["custom"]["mine"]["path"] = str(tmp_path / "absent.csv")
    params.write_text(yaml.safe_dump(raw))
    assert inputs.main(["--dataset", "mine", "--params", str(params), "--out", str(root)]) == 1
    assert "absent.csv" in caplog.text
    assert {p.name: p.read_bytes() for p in (root / "mine").iterdir()} == before
