"""`dvc metrics show` prints one screen and `dvc plots show` / `dvc plots diff` render every declared plot.

A temporary git + DVC repository gets the project's dvc.yaml, params.yaml and plot templates, the
committed detailed metrics, and the summary files and plot tables written from them.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import numpy as np
import pytest
import yaml

from recourselab.io import json_bytes, write_bytes, write_json
from recourselab.pipeline.headline import PLOTS, SUMMARY_FILE, headline_summary, plot_tables
from tests.conftest import REPO_ROOT
from tests.pipeline.test_headline import _discover_tables

#: A valid 1x1 PNG, standing in for the evaluate stage's frontier picture.
PNG_1X1 = bytes.fromhex("89504e470d0a1a0a0000000d4948445200000001000000010806000000"
                        "1f15c4890000000d49444154789c6360000002000001e221bc330000000049454e44ae426082")
DATASETS = yaml.safe_load((REPO_ROOT / "params.yaml").read_text())["datasets"]


def _run(repo, *cmd):
    proc = subprocess.run(list(cmd), cwd=repo, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def _dvc(repo, *args):
    return _run(repo, sys.executable, "-m", "dvc", *args)


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    if not all((REPO_ROOT / "data" / "metrics" / d / "densityflow.json").is_file() for d in DATASETS):
        pytest.skip("the committed metrics of the default datasets are absent")
    repo = tmp_path_factory.mktemp("metrics") / "repo"
    repo.mkdir()
    _run(repo, "git", "init", "-q")
    _run(repo, "git", "config", "user.email", "t@example.com")
    _run(repo, "git", "config", "user.name", "t")
    _dvc(repo, "init", "-q")
    for name in ("dvc.yaml", "params.yaml"):
        shutil.copy(REPO_ROOT / name, repo / name)
    shutil.copytree(REPO_ROOT / ".dvc" / "plots", repo / ".dvc" / "plots")
    for dataset in DATASETS:
        metrics = shutil.copytree(REPO_ROOT / "data" / "metrics" / dataset, repo / "data" / "metrics" / dataset)
        discover = repo / "data" / "discover" / dataset
        _discover_tables(discover, np.random.default_rng(len(dataset)))
        write_json(metrics / SUMMARY_FILE, headline_summary(metrics))
        for name, table in plot_tables(metrics, discover).items():
            write_bytes(repo / "data" / "plots" / dataset / name, table.to_csv(index=False).encode())
        write_bytes(repo / "data" / "evaluate" / dataset / "frontier.png", PNG_1X1)  # the evaluate stage's image plot
    _run(repo, "git", "add", "-A")
    _run(repo, "git", "commit", "-q", "-m", "fixture run")
    return repo


def test_metrics_show_prints_one_short_row_per_dataset(repo):
    out = _dvc(repo, "metrics", "show")
    lines = out.rstrip("\n").splitlines()
    assert len(lines) <= 60 and max(map(len, lines)) < 150, out
    rows = {line.split()[0]: line for line in lines[1:]}
    assert sorted(rows) == sorted(f"data/metrics/{d}/{SUMMARY_FILE}" for d in DATASETS)
    assert lines[0].split()[1:] == sorted(headline_summary(repo / "data" / "metrics" / DATASETS[0]))
    assert "tune_ensemble" not in out and "discover.json" not in out  # the detailed files are not the default


def test_a_detailed_file_is_one_target_away(repo):
    out = _dvc(repo, "metrics", "show", "data/metrics/compas/discover.json")
    assert "mean_over_models.OT_x" in out


def test_metrics_diff_names_exactly_the_changed_number(repo):
    path = repo / "data" / "metrics" / "compas" / SUMMARY_FILE
    original = path.read_bytes()
    summary = json.loads(original)
    summary["validity"] = round(summary["validity"] - 0.1, 6)
    path.write_bytes(json_bytes(summary))
    try:
        out = _dvc(repo, "metrics", "diff")
    finally:
        path.write_bytes(original)
    changed = [line for line in out.splitlines()[1:] if line.strip()]
    assert len(changed) == 1 and changed[0].split()[:2] == ["data/metrics/compas/summary.json", "validity"], out


def test_plots_show_renders_every_declared_plot_with_its_template(repo):
    shown = json.loads(_dvc(repo, "plots", "show", "--json"))
    assert not shown.get("errors"), shown
    plots = shown["data"]
    assert sorted(plots) == sorted([*(f"data/plots/{d}/{name}" for d in DATASETS for name in PLOTS),
                                    *(f"data/evaluate/{d}/frontier.png" for d in DATASETS)])
    for path, renders in plots.items():
        assert len(renders) == 1, path
        if path.endswith(".png"):
            assert renders[0]["type"] == "image", path
            continue
        assert renders[0]["type"] == "vega", path
        assert renders[0]["content"]["data"]["values"], path
    scatter = plots["data/plots/compas/validity_cost.csv"][0]["content"]
    assert scatter["encoding"]["color"]["field"] == "method" and scatter["encoding"]["x"]["field"] == "cost_l2"
    cdf = plots["data/plots/compas/discover_cdf.csv"][0]["content"]
    assert cdf["encoding"]["color"]["field"] == "series"
    assert {v["series"] for v in cdf["data"]["values"]} == {"factual b(x')", "counterfactual b(x)", "target y*"}
    bars = plots["data/plots/compas/model_validity.csv"][0]["content"]
    assert bars["mark"]["type"] == "bar" and len(bars["data"]["values"]) == 7


def test_plots_diff_draws_both_revisions(repo):
    path = repo / "data" / "plots" / "compas" / "validity_cost.csv"
    original = path.read_bytes()
    path.write_bytes(original.replace(b"densityflow", b"densityflow_new"))
    try:
        shown = json.loads(_dvc(repo, "plots", "diff", "HEAD", "--json"))
    finally:
        path.write_bytes(original)
    render = shown["data"]["data/plots/compas/validity_cost.csv"][0]
    assert sorted(render["revisions"]) == ["HEAD", "workspace"]
    values = render["content"]["data"]["values"]
    assert {(v["rev"], v["method"]) for v in values} == {("HEAD", "densityflow"), ("workspace", "densityflow_new")}
