"""``recourselab audit diff`` between two commits of a tiny DVC-tracked run where one param changed.

Commit A holds the hand-made run; commit B changes ``generate.n_starts`` and the outputs: rows 5 and 9
move by 0.5, row 11 by 1e-9 (numerical noise), and every member rejects row 2 (its validity flips).
The outputs are DVC outputs of a stage (``dvc commit`` records them in dvc.lock and the cache) and are
pushed to a local remote; the cache is then emptied, so the diff reads them from the remote.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from recourselab import cli
from recourselab.config.audit import AuditParams
from recourselab.pipeline.audit_diff import GATE_EXIT, RevisionError, diff_revisions, gate
from tests.pipeline.audit_fixture import DATASET, write_fixture

DVC_YAML = {"stages": {"generate": {"foreach": [DATASET], "do": {
    "cmd": "true", "params": ["generate"],
    "outs": [f"data/{d}/${{item}}" for d in ("prepared", "recourse", "discover")]}}}}


def _run(cmd: list[str], cwd: Path) -> None:
    env = {**os.environ, "DVC_NO_ANALYTICS": "1", "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, f"{cmd}: {proc.stdout}{proc.stderr}"


def _commit(repo: Path, n_starts: int, message: str, **changes) -> None:
    for folder in ("prepared", "recourse", "discover"):
        shutil.rmtree(repo / "data" / folder / DATASET, ignore_errors=True)
    write_fixture(repo, **changes)
    (repo / "params.yaml").write_text(yaml.safe_dump({"seeds": [0], "datasets": [DATASET],
                                                      "generate": {"n_starts": n_starts}}))
    dvc = [sys.executable, "-m", "dvc"]
    _run([*dvc, "commit", "-f", "-q"], repo)
    _run(["git", "add", "-A"], repo)
    _run(["git", "commit", "-q", "-m", message], repo)
    _run([*dvc, "push", "-q"], repo)


@pytest.fixture(scope="module")
def repo(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("audit-diff")
    repo = root / "repo"
    repo.mkdir()
    _run(["git", "init", "-q"], repo)
    _run([sys.executable, "-m", "dvc", "init", "-q"], repo)
    _run([sys.executable, "-m", "dvc", "remote", "add", "-d", "local", str(root / "remote")], repo)
    (repo / "dvc.yaml").write_text(yaml.safe_dump(DVC_YAML, sort_keys=False))
    _commit(repo, 4, "A")
    _commit(repo, 8, "B", moved=(5, 9), noise=(11,), invalid=(2,))
    shutil.rmtree(repo / ".dvc" / "cache")  # read from the remote
    return repo


def test_finds_exactly_the_rows_that_changed(repo):
    diff = diff_revisions(repo, "HEAD~1", "HEAD", DATASET, AuditParams())
    df = diff.rows[diff.rows["method"] == "densityflow"]
    by_status = {s: sorted(int(r) - 100 for r in df.loc[df["status"] == s, "row_id"]) for s in set(df["status"])}
    assert by_status == {"moved": [5, 9], "flipped": [2], "noise": [11]}
    assert (diff.rows["method"] == "densityflow").all()  # DISCOVER's rows did not change
    assert diff.row_counts["moved"] == 2 and diff.row_counts["noise"] == 1 and diff.row_counts["flipped"] == 1
    moved = df.set_index(df["row_id"] - 100)["move"]
    assert moved[5] == pytest.approx(0.5) and 0 < moved[11] <= 1e-6
    metrics = diff.metrics.set_index("metric")
    assert metrics.loc["densityflow.validity", "status"] == "changed"
    assert metrics.loc["densityflow.validity", "delta"] == pytest.approx(-1 / 40)
    assert metrics.loc["discover:svm.validity", "status"] == "same"
    fp = diff.fingerprints
    params = fp[fp["kind"] == "params"]
    assert list(params["item"]) == ["generate.n_starts"] and (params["a"].item(), params["b"].item()) == (4, 8)
    assert set(fp.loc[fp["kind"] == "output", "item"]) == {f"data/recourse/{DATASET}"}


def test_same_revision_has_no_change(repo):
    diff = diff_revisions(repo, "HEAD", "HEAD", DATASET, AuditParams())
    assert diff.rows.empty and diff.fingerprints.empty and (diff.metrics["status"] == "same").all()


def test_gate_trips_on_validity_drop_only(repo):
    diff = diff_revisions(repo, "HEAD~1", "HEAD", DATASET, AuditParams())
    failed = gate(diff, validity_drop=0.01, gap_limit=None)
    assert any("densityflow.validity dropped by 0.025" in f for f in failed)
    assert gate(diff, validity_drop=0.05, gap_limit=None) == []
    assert gate(diff, validity_drop=None, gap_limit=0.6) == []
    assert any("densityflow validity gap by sex" in f for f in gate(diff, validity_drop=None, gap_limit=0.4))


def test_cli_exit_status_json_and_html(repo, tmp_path, capsys):
    base = ["audit", "diff", "HEAD~1", "HEAD", "--repo", str(repo), "--dataset", DATASET]
    assert cli.main([*base, "--fail-if-validity-drops", "0.01"]) == GATE_EXIT
    out = capsys.readouterr().out
    assert "2 moved, 1 validity flipped" in out and "1 numerical noise only" in out and "GATE FAILED" in out
    noise = out.split("(numerical noise, not change):")[1].split("subgroup gaps")[0]
    assert " 111 " in noise and " 105 " not in noise  # the sub-tolerance row is listed apart from the moved ones
    assert cli.main([*base, "--fail-if-validity-drops", "0.05", "--format", "json", "--html",
                     str(tmp_path / "diff.html")]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["gate_failures"] == [] and data["datasets"][DATASET]["row_counts"]["moved"] == 2
    page = (tmp_path / "diff.html").read_text()
    assert "<section id=\"diff\">" in page and "generate.n_starts" in page
    assert cli.main([*base, "--fail-if-subgroup-gap-exceeds", "0.4"]) == GATE_EXIT


def test_unknown_revision_is_a_clear_error(repo):
    with pytest.raises(RevisionError, match="cannot read revision 'nope'"):
        diff_revisions(repo, "nope", "HEAD", DATASET, AuditParams())


def test_stage_baseline_adds_the_diff_section(repo, tmp_path):
    from stages.audit import main as audit_stage

    out = tmp_path / "reports"
    assert audit_stage(["--dataset", DATASET, "--root", str(repo), "--baseline", "HEAD~1", "--out", str(out),
                        "--params", str(repo / "params.yaml")]) == 0
    md = (out / DATASET / "audit.md").read_text()
    html = (out / DATASET / "audit.html").read_text()
    assert "## Changes from HEAD~1 to working tree" in md and "<section id=\"diff\">" in html
    assert "Counterfactuals: 2 moved, 1 flipped validity, 0 added, 0 removed, 1 numerical noise only" in md
    assert md.index("## Changes from") < md.index("## Provenance")


def test_fingerprints_name_input_code_and_params(tmp_path):
    from recourselab.pipeline.audit_diff import fingerprint_diff

    def lock(code: str, data: str) -> dict:
        return {"stages": {f"generate@{DATASET}": {
            "deps": [{"path": "src/recourselab/densityflow", "md5": code}, {"path": f"data/prepared/{DATASET}",
                                                                             "md5": data}],
            "outs": [{"path": f"data/recourse/{DATASET}", "md5": code + data}]},
            "generate@adult": {"deps": [{"path": "data/prepared/adult", "md5": code}]}}}

    for side, (code, data, seeds) in {"a": ("c1", "d1", [0]), "b": ("c2", "d2", [0, 1])}.items():
        (tmp_path / side).mkdir()
        (tmp_path / side / "dvc.lock").write_text(yaml.safe_dump(lock(code, data)))
        (tmp_path / side / "params.yaml").write_text(yaml.safe_dump({"seeds": seeds}))
    fp = fingerprint_diff(tmp_path / "a", tmp_path / "b", DATASET)
    assert sorted(zip(fp["kind"], fp["item"], strict=True)) == [
        ("code", "src/recourselab/densityflow"), ("input", f"data/prepared/{DATASET}"),
        ("output", f"data/recourse/{DATASET}"), ("params", "seeds")]


def _rows(cf: list[float], valid: list[float]) -> Any:
    import pandas as pd

    from recourselab.report import audit as tables

    n = len(cf)
    return pd.DataFrame({"method": ["m"] * n, "seed": [0] * n, "row_id": list(range(n)), tables.OCCURRENCE: [0] * n,
                         "valid": valid, f"{tables.CF}x": cf})


def test_a_value_that_became_missing_moved_and_missing_validity_is_no_flip():
    from recourselab.pipeline.audit_diff import row_diff

    nan = float("nan")
    out = row_diff(_rows([1.0, 2.0, nan], [nan, nan, 1.0]), _rows([1.0, nan, 3.0], [nan, nan, 1.0]), 1e-6)
    assert out["status"].tolist() == ["same", "moved", "moved"]
    assert out["move"].tolist()[1:] == [float("inf")] * 2


def test_a_method_absent_at_b_fails_the_validity_gate():
    from recourselab.pipeline.audit_diff import AuditDiff, metric_diff

    metrics = metric_diff({"discover:mlp.validity": 0.8, "densityflow.validity": 1.0}, {"densityflow.validity": 1.0},
                          0.0)
    diff = AuditDiff(DATASET, "A", "B", metrics, *([None] * 2), None, None)
    assert gate(diff, validity_drop=0.5, gap_limit=None) == [
        f"{DATASET}: discover:mlp.validity was 0.8 at A and is absent at B"]


def test_summary_method_lists_are_compared_per_method_and_setting():
    from recourselab.pipeline.audit_diff import _flatten

    flat = _flatten({"certified": 0.5, "methods": [{"method": "densityflow_r", "setting": "lean", "validity": 0.9},
                                                   {"method": "nearest", "setting": "all", "validity": 1.0}]})
    assert flat == {"certified": 0.5, "methods.densityflow_r/lean.validity": 0.9, "methods.nearest/all.validity": 1.0}


def test_one_side_without_recourse_outputs_and_a_damaged_file_at_one_side(tmp_path):
    from recourselab.errors import ArtifactError
    from recourselab.pipeline.audit_diff import diff_roots

    a, b = write_fixture(tmp_path / "a"), write_fixture(tmp_path / "b")
    for folder in ("recourse", "discover", "evaluate"):  # A: only the prepared data (a revision before generate)
        shutil.rmtree(a / "data" / folder / DATASET, ignore_errors=True)
    diff = diff_roots(a, b, DATASET, AuditParams(), rev_a="old", rev_b="new")
    assert diff.row_counts["added"] > 0 and diff.row_counts["removed"] == 0
    (b / "data" / "metrics" / DATASET / "summary.json").write_text('{"certified": 0.')  # truncated
    with pytest.raises(ArtifactError, match=f"{DATASET} at revision new .*summary.json"):
        diff_roots(a, b, DATASET, AuditParams(), rev_a="old", rev_b="new")


@pytest.mark.parametrize("value", ["nan", "-0.1", "inf", "x"])
def test_gate_thresholds_must_be_finite_and_not_negative(value, capsys):
    from recourselab.pipeline.audit_diff import run_command

    with pytest.raises(SystemExit) as stop:
        run_command(["A", "B", "--fail-if-validity-drops", value])
    assert stop.value.code == 2 and "--fail-if-validity-drops" in capsys.readouterr().err
