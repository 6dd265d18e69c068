"""The ``audit`` stage on a tiny hand-made run: every section present, violations counted, absent inputs named,
a failed run keeps the previous report."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from recourselab.config import Params, dump_params
from recourselab.pipeline.audit import lock_entries, write_audit
from stages.audit import main as audit_stage
from tests.pipeline.audit_fixture import DATASET, write_fixture

SECTIONS = ("Validity", "Cost", "Plausibility and density", "Immutable and monotone features", "Query-budget use",
            "DISCOVER certification", "Subgroups", "Methods compared (evaluate stage)", "Provenance")


@pytest.fixture()
def params_file(tmp_path) -> Path:
    path = tmp_path / "params.yaml"
    path.write_text(dump_params(Params()))
    return path


def _stage(root: Path, out: Path, params_file: Path) -> int:
    return audit_stage(["--dataset", DATASET, "--root", str(root), "--out", str(out), "--params", str(params_file)])


def test_stage_writes_every_section(tmp_path, params_file):
    root = write_fixture(tmp_path / "run")
    assert _stage(root, tmp_path / "reports", params_file) == 0
    report = tmp_path / "reports" / DATASET
    md = (report / "audit.md").read_text()
    html = (report / "audit.html").read_text()
    for title in SECTIONS:
        assert f"## {title}" in md and f"<h2>{title}</h2>" in html
    assert "No recourse outputs" not in md and "absent" not in md.split("## Provenance")[0]
    assert "2 violations in 160 checked (row, feature) pairs; this must be 0." in md
    assert "**Flags:** 2 feature-rule violations (densityflow seed=0 sex (immutable): 2)" in md
    assert "1 of 2 runs certified (UCL_x < U_x and UCL_y < U_y), 1 after the polish" in md
    assert "validity gap by sex is 0.5" in md and "lightgbm seed=0 (UCL_x 0.3 > U_x 0.1)" in md
    assert "| dice (default) | evaluate |" in md  # the evaluate stage's table
    figures = sorted(p.name for p in (report / "figures").glob("*.png"))
    assert {"validity.png", "cost.png", "density.png", "subgroups_sex.png", "discover_lightgbm_output_cdf.png",
            "discover_lightgbm_input_cdf.png"} <= set(figures)
    for name in figures:
        assert f"figures/{name}" in md
    assert html.count("data:image/png;base64,") == len(figures) and 'src="figures/' not in html  # self-contained
    assert "| git revision |" in md and "| numpy |" in md


def test_absent_inputs_are_named_not_fatal(tmp_path, params_file):
    root = write_fixture(tmp_path / "run", evaluate=False, violations=())
    shutil.rmtree(root / "data" / "discover")
    assert _stage(root, tmp_path / "reports", params_file) == 0
    md = (tmp_path / "reports" / DATASET / "audit.md").read_text()
    assert f"_The evaluate stage's outputs (data/evaluate/{DATASET}/methods.json) are absent._" in md
    assert f"_No DISCOVER outputs (data/discover/{DATASET} is absent)._" in md
    assert "0 violations in 80 checked" in md
    assert "DISCOVER runs not certified" not in md


def test_failed_run_keeps_the_previous_report(tmp_path, params_file):
    root = write_fixture(tmp_path / "run")
    out = tmp_path / "reports"
    assert _stage(root, out, params_file) == 0
    before = (out / DATASET / "audit.html").read_bytes()
    (root / "data" / "recourse" / DATASET / "seed=0" / "counterfactuals.parquet").write_bytes(b"PAR1 truncated")
    assert _stage(root, out, params_file) == 1
    assert (out / DATASET / "audit.html").read_bytes() == before


def test_provenance_lists_the_dataset_lock_entries():
    lock = {"stages": {
        "generate@compas": {"deps": [{"path": "data/prepared/compas", "md5": "aa.dir"}, {"path": "stages/g.py",
                                                                                         "md5": "bb"}],
                            "outs": [{"path": "data/recourse/compas", "md5": "cc.dir"}],
                            "params": {"params.yaml": {"generate": {"n_starts": 4}}}},
        "generate@adult": {"deps": [{"path": "data/prepared/adult", "md5": "dd.dir"}]}}}
    frame = lock_entries(lock, "compas")
    assert list(frame["stage"].unique()) == ["generate@compas"]
    assert list(frame["kind"]) == ["dep", "dep", "out", "params"]
    assert frame.loc[0, "hash"] == "aa.dir"


def test_no_outputs_at_all_is_a_report_that_says_so(tmp_path):
    out = tmp_path / "report"
    result = write_audit(tmp_path, DATASET, Params(), out)
    assert result.rows.empty
    assert "No recourse outputs for compas" in (out / "audit.md").read_text()


def test_recourse_table_of_another_schema_version_is_refused(tmp_path):
    import re

    import pandas as pd

    from recourselab.io import RECOURSE_SCHEMA, SchemaVersionError, write_parquet
    from recourselab.pipeline.audit import load_run

    root = write_fixture(tmp_path / "run")
    path = root / "data" / "recourse" / DATASET / "seed=0" / "counterfactuals.parquet"
    write_parquet(path, pd.read_parquet(path), schema="recourse/0")
    with pytest.raises(SchemaVersionError, match=f"'recourse/0'.*{re.escape(repr(RECOURSE_SCHEMA))}"):
        load_run(root, DATASET, Params())
