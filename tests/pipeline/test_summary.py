"""The end-of-run summary: headline results per dataset and what each stage did."""

from __future__ import annotations

import json

from recourselab.pipeline.summary import (
    append_stage_run,
    format_seconds,
    headline,
    read_run_log,
    render_summary,
    stage_outcome,
)

STAGES = ["prepare", "tune_ensemble", "generate", "discover"]


def _metrics(root, dataset, accuracies=(0.81, 0.9), validity=0.75, cost=1.25, feasible=(True, False, True)):
    d = root / dataset
    d.mkdir(parents=True)
    members = {f"m{i}": {"test_accuracy": {"mean": a, "std": 0.0}} for i, a in enumerate(accuracies)}
    (d / "tune_ensemble.json").write_text(json.dumps({"members": members, "seeds": [0]}))
    (d / "densityflow.json").write_text(json.dumps(
        {"summary": {"mean_per_model": {"mean": validity}, "cost_l2": {"mean": cost}}}))
    per_seed = {str(s): {"feasible": f} for s, f in enumerate(feasible)}
    (d / "discover.json").write_text(json.dumps({"models": {"lightgbm": {"per_seed": per_seed}}}))


def test_headline_reads_each_metrics_file(tmp_path):
    _metrics(tmp_path, "moons")
    assert headline(tmp_path / "moons") == {
        "ensemble test accuracy": "0.810 - 0.900 (2 models)",
        "DensityFlow": "validity 0.750 (mean per model), L2 cost 1.250",
        "DISCOVER certified": "2 of 3 model x seed runs (67%)"}


def test_headline_of_missing_or_damaged_files_is_na(tmp_path):
    (tmp_path / "x").mkdir()
    (tmp_path / "x" / "densityflow.json").write_text("{not json")
    assert set(headline(tmp_path / "x").values()) == {"n/a"}


def test_the_summary_lists_every_dataset_that_ran(tmp_path):
    metrics = tmp_path / "metrics"
    _metrics(metrics, "moons")
    _metrics(metrics, "german", accuracies=(0.7,))
    log = tmp_path / "run.jsonl"
    append_stage_run(log, {"stage": "prepare", "dataset": "moons", "status": "ok", "wall_s": 3.2,
                           "tasks": 1, "cache_hits": 0})
    append_stage_run(log, {"stage": "tune_ensemble", "dataset": "moons", "status": "ok", "wall_s": 75,
                           "tasks": 8, "cache_hits": 8})
    append_stage_run(log, {"stage": "prepare", "dataset": "german", "status": "failed", "wall_s": 1.0})
    append_stage_run(log, {"stage": "prepare", "dataset": "extra", "status": "ok", "wall_s": 0.5})  # a target
    runs = read_run_log(log)
    text = render_summary(metrics, ["moons", "german"], STAGES, runs,
                          stale={"prepare@moons", "tune_ensemble@moons", "prepare@german", "generate@german"},
                          run_ok=False, wall_s=80)
    blocks = {b.splitlines()[0]: b for b in text.strip().split("\n\n")}
    assert list(blocks) == ["== moons", "== german", "== extra", "run wall time: 1 min 20 s"]
    moons = blocks["== moons"]
    assert "0.810 - 0.900 (2 models)" in moons and "2 of 3 model x seed runs" in moons
    rows = {line.split()[0]: line for line in moons.splitlines()[5:]}
    assert rows["prepare"].split()[1:] == ["ran", "3.2", "s"]
    assert "cached" in rows["tune_ensemble"] and "1 min 15 s" in rows["tune_ensemble"]
    assert "up to date" in rows["generate"] and rows["generate"].rstrip().endswith("-")
    german = {line.split()[0]: line for line in blocks["== german"].splitlines()[5:]}
    assert "failed" in german["prepare"] and "not run" in german["generate"]
    assert "up to date" in german["discover"]  # not stale: DVC had nothing to do there


def test_stage_outcome_without_a_status_report():
    assert stage_outcome(None, stale=None, run_ok=True) == "up to date"
    assert stage_outcome(None, stale=None, run_ok=False) == "not run"
    assert stage_outcome({"status": "ok"}, stale=True, run_ok=True) == "ran"
    assert stage_outcome({"status": "ok", "tasks": 3, "cache_hits": 1}, stale=True, run_ok=True) == \
        "ran (1 of 3 tasks cached)"


def test_a_stage_whose_tasks_ran_in_a_pool_reports_the_pools_work(tmp_path):
    pool = {"stage": "train_flow", "dataset": "moons", "status": "ok", "pool": True, "wall_s": 300.0,
            "tasks": 3, "cache_hits": 1}
    stage = {"status": "ok", "tasks": 3, "cache_hits": 3}
    assert stage_outcome(stage, stale=True, run_ok=True, pool=pool) == "ran in pool (1 of 3 tasks cached)"
    assert stage_outcome(stage, stale=True, run_ok=True, pool={**pool, "cache_hits": 3}) == "cached"
    # a failed pool: the stage ran the tasks itself
    assert stage_outcome({**stage, "cache_hits": 2}, stale=True, run_ok=True, pool={**pool, "status": "failed"}) \
        == "ran (2 of 3 tasks cached)"
    assert stage_outcome({"status": "failed"}, stale=True, run_ok=False, pool=pool) == "failed"
    log = tmp_path / "run.jsonl"
    append_stage_run(log, {**pool, "cache_hits": 0})
    append_stage_run(log, {"stage": "train_flow", "dataset": "moons", **stage, "wall_s": 4.0})
    text = render_summary(tmp_path / "metrics", ["moons"], ["train_flow"], read_run_log(log))
    row = next(line for line in text.splitlines() if line.split()[:1] == ["train_flow"])
    assert row.split()[1:] == ["ran", "in", "pool", "4.0", "s"]  # the stage's own wall time


def test_read_run_log_skips_a_torn_line(tmp_path, caplog):
    log = tmp_path / "run.jsonl"
    append_stage_run(log, {"stage": "prepare", "dataset": "moons", "status": "ok", "wall_s": 1})
    with open(log, "a") as f:
        f.write('{"stage": "tune_')
    assert [r["stage"] for r in read_run_log(log)] == ["prepare"]
    assert "run.jsonl:2 is not a stage record" in caplog.text
    assert read_run_log(tmp_path / "none.jsonl") == []


def test_format_seconds():
    assert [format_seconds(s) for s in (0.04, 59.94, 61, 3725)] == ["0.0 s", "59.9 s", "1 min 01 s", "1 h 02 min"]
