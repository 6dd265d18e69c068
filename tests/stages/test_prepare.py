"""The prepare stage's main(): outputs, exit codes, and artifacts left intact on bad input."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import yaml

from recourselab.config import dump_params, render_profile
from recourselab.io import read_provenance
from recourselab.provenance import library_versions
from stages import prepare


def _write_params(path: Path, **overrides) -> Path:
    raw = render_profile("default").model_dump(mode="json")
    raw.update(overrides)
    raw["orchestration"] = {**raw["orchestration"], "cache_dir": str(path.parent / "cache")}
    path.write_text(yaml.safe_dump(raw))
    return path


def _snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_main_writes_every_seed(tmp_path):
    params = _write_params(tmp_path / "params.yaml", datasets=["circles"], seeds=[0, 2],
                           prepare={**render_profile("default").prepare.model_dump(mode="json"),
                                    "n_synthetic": 300})
    out = tmp_path / "prepared"
    assert prepare.main(["--dataset", "circles", "--params", str(params), "--out", str(out)]) == 0
    for seed in (0, 2):
        d = out / "circles" / f"seed={seed}"
        sizes = {s: len(pd.read_parquet(d / f"{s}.parquet")) for s in ("train", "val", "test")}
        assert sizes == {"train": 180, "val": 60, "test": 60}
        prov = read_provenance(d / "train.parquet")
        assert prov["dataset"] == "circles" and prov["seed"] == seed and prov["split"] == "train"
        assert len(prov["params_hash"]) == 64
        assert prov["libraries"] == library_versions() and prov["libraries"]["torch"] != "absent"


def test_bad_input_fails_cleanly_and_keeps_artifacts(tmp_path, caplog):
    out = tmp_path / "prepared"
    good = _write_params(tmp_path / "params.yaml", datasets=["moons"], seeds=[0])
    assert prepare.main(["--dataset", "moons", "--params", str(good), "--out", str(out)]) == 0
    before = _snapshot(out)

    csv = tmp_path / "mine.csv"
    pd.DataFrame({"a": [1.0, 2.0, 3.0, 4.0], "label": [0, 1, 0, 1]}).to_csv(csv, index=False)
    custom = {"mine": {"path": str(csv), "target": "label", "favourable": 1, "categorical": ["colour"]}}
    data = {**render_profile("default").data.model_dump(mode="json"), "custom": custom}
    bad = _write_params(tmp_path / "bad.yaml", datasets=["mine"], seeds=[0], data=data)
    assert prepare.main(["--dataset", "mine", "--params", str(bad), "--out", str(out)]) == 1
    assert "colour" in caplog.text and "not found" in caplog.text

    typo = tmp_path / "typo.yaml"
    typo.write_text(dump_params(render_profile("default")).replace("n_synthetic:", "n_synthtic:"))
    assert prepare.main(["--dataset", "moons", "--params", str(typo), "--out", str(out)]) == 1
    assert "prepare.n_synthtic" in caplog.text

    assert _snapshot(out) == before
