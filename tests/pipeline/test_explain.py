"""`recourselab explain` on tiny artifacts built in a temp folder: a mixed numeric / categorical table
with immutable and integer features, a three-member ensemble and a briefly trained DensityFlow."""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from recourselab.config import dump_params, parse_params
from recourselab.data import Schema
from recourselab.densityflow import DensityFlow
from recourselab.errors import DataError, MissingArtifactError, UnknownKeyError
from recourselab.io import sha256_file, write_parquet
from recourselab.models import FitContext, fit_model, write_manifest
from recourselab.models.ensemble import member_entry, model_filename
from recourselab.pipeline.explain import (
    ImmutableFeatureChanged,
    MonotoneRuleBroken,
    check_immutables,
    check_monotone,
    explain,
)
from recourselab.pipeline.explain_output import render, show
from recourselab.runtime import limit_threads

DATASET = "toy"
MEMBERS = {"knn": {"n_neighbors": 7}, "rf": {"n_estimators": 25, "max_depth": 6}, "svm": {"C": 10, "gamma": 0.5}}
PARAMS = parse_params({"generate": {"n_starts": 4},
                       "discover": {"solver": {"max_iter": 4, "trials": 20, "metric_projections": 100,
                                               "holdout_sets": 2}}})
BAD_ROWS = {  # row number in the CSV below -> (column, words its error must hold)
    4: ("income", ["'income'", "value 1000000 is outside the training range [11.0058, 71.188]"]),
    5: ("job", ["'job'", "unknown category 'z'", "levels a, b, c"]),
    6: ("hours", ["'hours'", "missing", "an integer in the training range"]),
    7: (None, ["every feature is missing"]),
    8: ("hours", ["'hours'", "40.5", "not an integer"]),
    9: ("income", ["'income'", "missing (empty or NaN)"]),
    10: ("income", ["'income'", "'abc' is not a number"]),
}


def _table() -> pd.DataFrame:
    rng = np.random.default_rng(0)
    n = 300
    frame = pd.DataFrame({"age": rng.integers(20, 60, n), "hours": rng.integers(10, 60, n),
                          "income": rng.normal(50, 10, n), "sex": rng.choice(["f", "m"], n),
                          "job": rng.choice(["a", "b", "c"], n)})
    score = (frame["income"] + 0.4 * (frame["hours"] - 35) + 8 * (frame["job"] == "c") + 0.2 * (frame["age"] - 40)
             + 4 * (frame["sex"] == "m") + rng.normal(0, 2, n))
    frame["label"] = (score > 54).astype(int)
    return frame


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    """(data root, raw table, schema): prepared schema, ensemble and DensityFlow folders for seed 0."""
    root = tmp_path_factory.mktemp("explain") / "data"
    frame = _table()
    schema = Schema.fit(frame, dataset=DATASET, target="label", favourable=1, categorical=["sex", "job"],
                        integer=["age", "hours"], immutable=["sex", "age"])
    schema.save(root / "prepared" / DATASET / "seed=0" / "schema.json")
    X, y = schema.transform(frame), schema.encode_target(frame["label"])
    table = pd.DataFrame(X, columns=schema.encoded_columns).assign(y=y, row_id=np.arange(len(y)))
    for split, rows in {"train": slice(60, None), "val": slice(0, 60), "test": slice(0, 60)}.items():
        write_parquet(root / "prepared" / DATASET / "seed=0" / f"{split}.parquet", table.iloc[rows])
    ensemble_dir = root / "ensemble" / DATASET / "seed=0"
    ctx = FitContext(X_val=X[:60], y_val=y[:60], seed=0, n_classes=2)
    entries = {}
    for name, hyper in MEMBERS.items():
        path = fit_model(name, hyper, X, y, ctx).save(ensemble_dir / model_filename(name))
        entries[name] = member_entry(name, hyper, 2, sha256_file(path))
    write_manifest(ensemble_dir, entries, dataset=DATASET, seed=0, ensemble=list(MEMBERS))
    flow = DensityFlow(schema=schema, seed=0, epochs=12, hidden=32, batch_size=64, lr_g=3e-3, lr_phi=3e-3,
                       warmup_epochs=2, ema_decay=0.9, lambda_cost=0.2, lambda_den=0.3)
    with limit_threads(1):
        flow.fit(X, y).save(root / "distill" / DATASET / "seed=0")
    return root, frame, schema


def _csv(frame: pd.DataFrame) -> str:
    """Three good rows (with the label and a note column, which are ignored), then one bad row per case."""
    good = frame.iloc[:3].copy()
    good["note"] = "kept"
    lines = good.to_csv(index=False).splitlines()
    g = frame.iloc[0]
    lines += [f"{g.age},{g.hours},1000000,{g.sex},{g.job},0,x",  # 4: outside the range
              f"{g.age},{g.hours},{g.income},{g.sex},z,0,x",  # 5: unknown category
              f"{g.age},,{g.income},{g.sex},{g.job},0,x",  # 6: empty cell
              ",,,,,,",  # 7: all missing
              f"{g.age},40.5,{g.income},{g.sex},{g.job},0,x",  # 8: a fraction of an integer feature
              f"{g.age},{g.hours},NaN,{g.sex},{g.job},0,x",  # 9: NaN
              f"{g.age},{g.hours},abc,{g.sex},{g.job},0,x"]  # 10: not a number
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def explained(project):
    root, frame, _ = project
    return explain(io.StringIO(_csv(frame)), dataset=DATASET, params=PARAMS, data_root=root)


def test_good_rows_are_explained_and_each_bad_row_gets_its_own_error(project, explained):
    _, frame, schema = project
    assert [r.row for r in explained.rows] == list(range(1, 11))
    assert explained.n_explained == 3
    for r in explained.rows[:3]:
        given = frame.iloc[r.row - 1]
        assert r.error is None and r.counterfactual is not None
        assert r.counterfactual["age"] == given["age"] and r.counterfactual["sex"] == given["sex"]  # immutables
        assert "age" not in r.changed and "sex" not in r.changed
        assert r.changed == [c for c in schema.feature_names if r.counterfactual[c] != r.input[c]]
        assert r.changed, "a counterfactual changes some feature"
        assert r.counterfactual["job"] in ("a", "b", "c")
        assert all(type(r.counterfactual[c]) is int and type(r.input[c]) is int for c in ("age", "hours"))
        assert isinstance(r.counterfactual["income"], float)
        assert r.prediction in (0, 1) and r.target == 1 - r.prediction
        assert list(r.validity) == list(MEMBERS)
        assert r.agreement == pytest.approx(np.mean(list(r.validity.values())))
        lo, hi = schema.features[1].lower, schema.features[1].upper
        assert lo <= r.counterfactual["hours"] <= hi
    for row, (column, words) in BAD_ROWS.items():
        r = explained.rows[row - 1]
        assert r.counterfactual is None and r.validity is None, row
        for word in words:
            assert word in r.error, (row, r.error)
        if column is not None:
            assert r.error.count("column") == 1, r.error  # only the bad column is named
    assert explained.queries == 2 * 3  # one query for the target, one for the check, per good row


def test_densityflow_r_repairs_with_anchors_and_is_checked_by_every_member(project, explained):
    root, frame, _ = project
    text = frame.iloc[:6].to_csv(index=False)
    plain = explain(io.StringIO(text), dataset=DATASET, params=PARAMS, data_root=root)
    robust = explain(io.StringIO(text), dataset=DATASET, method="densityflow_r", params=PARAMS, data_root=root)
    assert robust.method == "densityflow_r" and robust.n_explained == 6
    for r in robust.rows:
        given = frame.iloc[r.row - 1]
        assert r.counterfactual["age"] == given["age"] and r.counterfactual["sex"] == given["sex"]  # immutables
        assert list(r.validity) == list(MEMBERS) and r.agreement == pytest.approx(np.mean(list(r.validity.values())))
    unanimous = [r.agreement == 1 for r in robust.rows]
    assert sum(unanimous) >= sum(r.agreement == 1 for r in plain.rows)  # the repair only fixes rows
    assert robust.queries > plain.queries  # its search queries the ensemble on top of target and check
    split = sum(r.agreement < 1 for r in plain.rows)
    hint = "`--method densityflow_r` repairs such counterfactuals"
    assert (hint in render(plain, "table")) == (split > 0)
    assert hint not in render(robust, "table") and "RobustFlow (densityflow_r), checked by" in render(robust, "table")
    again = explain(io.StringIO(text), dataset=DATASET, method="densityflow_r", params=PARAMS, data_root=root)
    assert [r.counterfactual for r in again.rows] == [r.counterfactual for r in robust.rows]  # deterministic


def test_densityflow_r_under_a_small_budget_says_what_it_needs(project):
    root, frame, _ = project
    text = frame.iloc[:4].to_csv(index=False)
    result = explain(io.StringIO(text), dataset=DATASET, method="densityflow_r", budget=9, params=PARAMS,
                     data_root=root)
    assert result.n_explained == 0 and result.queries == 4  # the target queries only
    assert all("at least 3 queries per row (--budget 12 or more" in r.error for r in result.rows)
    result = explain(io.StringIO(text), dataset=DATASET, method="densityflow_r", budget=12, params=PARAMS,
                     data_root=root)
    assert result.n_explained == 4 and result.queries <= 12 and all(r.validity is not None for r in result.rows)


def test_the_command_offers_every_method():
    from recourselab.cli import build_parser
    from recourselab.pipeline.explain import METHODS

    explain_parser = build_parser()._subparsers._group_actions[0].choices["explain"]
    method = next(a for a in explain_parser._actions if a.dest == "method")
    assert tuple(method.choices) == METHODS


def test_every_feature_of_the_dataset_must_be_a_column(project):
    root, frame, _ = project
    text = frame.drop(columns=["job"]).iloc[:2].to_csv(index=False)
    result = explain(io.StringIO(text), dataset=DATASET, params=PARAMS, data_root=root)
    assert result.n_explained == 0 and result.queries == 0
    assert all("column 'job' is missing from the input" in r.error for r in result.rows)
    with pytest.raises(DataError, match="none of the feature columns of dataset 'toy'"):
        explain(io.StringIO("a,b\n1,2\n"), dataset=DATASET, params=PARAMS, data_root=root)


def test_table_json_and_csv(project, explained):
    _, _, schema = project
    table = render(explained, "table")
    assert "row 7: ERROR every feature is missing" in table
    assert "3 of 10 rows explained; 6 rows sent to the models (unlimited)" in table
    block = table.split("row 1:")[1].split("row 2:")[0]
    shown = {line.split()[0] for line in block.splitlines()[2:] if line.startswith("  ") and
             not line.strip().startswith(("valid for", "unverified"))}
    assert shown == set(explained.rows[0].changed)  # only the changed features are listed
    assert (show(1.0), show(np.float64(0.1234567)), show(np.int64(3)), show("c")) == ("1.0", "0.123457", "3", "c")
    records = json.loads(render(explained, "json"))
    assert len(records) == 10 and records[3]["counterfactual"] is None and "outside" in records[3]["error"]
    first = records[0]
    assert set(first["changed"]) == set(explained.rows[0].changed)
    assert first["input"]["sex"] == first["counterfactual"]["sex"]
    assert set(first["validity"]) == set(MEMBERS) and 0.0 <= first["agreement"] <= 1.0
    frame = pd.read_csv(io.StringIO(render(explained, "csv")))
    assert len(frame) == 10 and frame["row"].tolist() == list(range(1, 11))
    assert {f"valid__{m}" for m in MEMBERS} <= set(frame.columns)
    assert (frame.loc[:2, "counterfactual__age"] == frame.loc[:2, "input__age"].astype(int)).all()
    text = pd.read_csv(io.StringIO(render(explained, "csv")), dtype=str)
    for column in ("counterfactual__age", "counterfactual__hours", "input__hours", "prediction", "target"):
        assert text.loc[:2, column].str.fullmatch(r"\d+").all(), text[column]  # integers written as integers
    assert frame.loc[3:, "error"].notna().all() and frame.loc[:2, "error"].isna().all()
    assert set(frame.loc[:2, "counterfactual__job"]) <= set(schema.features[4].levels)


@pytest.mark.parametrize("budget, explained_rows, verified_rows", [(5, 3, 2), (3, 3, 0), (2, 2, 0), (0, 0, 0)])
def test_the_budget_caps_the_queries_exactly_and_names_the_rows_left_out(project, budget, explained_rows,
                                                                          verified_rows):
    root, frame, _ = project
    text = frame.iloc[:3].to_csv(index=False)
    result = explain(io.StringIO(text), dataset=DATASET, params=PARAMS, data_root=root, budget=budget)
    assert result.queries == budget  # 2 rows per good row wanted, the budget is smaller: all of it is used
    assert result.n_explained == explained_rows
    assert sum(r.validity is not None for r in result.rows) == verified_rows
    for r in result.rows:
        if r.counterfactual is None:
            assert "query budget" in r.error and "--budget 6" in r.error
        elif r.validity is None:
            assert r.note.startswith("unverified") and "raise --budget" in r.note


def test_discover_takes_the_rows_as_its_population_and_reports_its_certificate(project):
    root, frame, schema = project
    text = frame.iloc[:12].to_csv(index=False)
    result = explain(io.StringIO(text), dataset=DATASET, method="discover", params=PARAMS, data_root=root)
    assert result.model == "svm"  # the first of discover.models that the ensemble holds
    cert = result.certification
    assert set(cert) >= {"certified", "UCL_x", "U_x", "UCL_y", "U_y"} and isinstance(cert["certified"], bool)
    assert result.n_explained == 12 and result.queries == cert["queries"] + 12
    for r in result.rows:
        given = frame.iloc[r.row - 1]
        assert r.counterfactual["age"] == given["age"] and r.counterfactual["sex"] == given["sex"]
        assert r.target == schema.classes[schema.favourable_index] and set(r.validity) == set(MEMBERS)
    assert "DISCOVER on svm over 12 rows:" in render(result, "table")
    with pytest.raises(UnknownKeyError, match="--model 'lightgbm' is not in the tuned ensemble"):
        explain(io.StringIO(text), dataset=DATASET, method="discover", model="lightgbm", params=PARAMS,
                data_root=root)
    starved = explain(io.StringIO(text), dataset=DATASET, method="discover", params=PARAMS, data_root=root, budget=15)
    assert starved.n_explained == 0 and starved.queries <= 15
    assert all("DISCOVER needs more queries than --budget 15" in r.error for r in starved.rows)


def test_a_missing_artifact_names_the_stage_to_run(project, tmp_path):
    root, frame, _ = project
    text = frame.iloc[:2].to_csv(index=False)
    with pytest.raises(MissingArtifactError, match=r"no prepared schema .*`recourselab repro`.*prepare@toy"):
        explain(io.StringIO(text), dataset=DATASET, params=PARAMS, data_root=tmp_path)
    with pytest.raises(MissingArtifactError, match=r"seed 3.*`dvc repro prepare@toy`.*seed 3 is not in params"):
        explain(io.StringIO(text), dataset=DATASET, seed=3, params=PARAMS, data_root=root)
    partial = tmp_path / "partial"
    for stage in ("prepared", "ensemble"):
        (partial / stage).mkdir(parents=True)
        (partial / stage / DATASET).symlink_to(root / stage / DATASET)
    with pytest.raises(MissingArtifactError, match=r"no distilled DensityFlow .*`dvc repro distill@toy`"):
        explain(io.StringIO(text), dataset=DATASET, params=PARAMS, data_root=partial)
    assert explain(io.StringIO(text), dataset=DATASET, method="discover", params=PARAMS,
                   data_root=partial).n_explained == 2  # DISCOVER needs no DensityFlow


def test_a_changed_immutable_is_an_error(project):
    _, frame, schema = project
    X = schema.transform(frame.iloc[:4])
    moved = X.copy()
    moved[2, schema.slices()["sex"]] = schema.transform(frame.assign(sex="m" if frame.sex[2] == "f" else "f")
                                                        .iloc[2:3])[0, schema.slices()["sex"]]
    check_immutables(schema, X, X)
    with pytest.raises(ImmutableFeatureChanged, match=r"immutable features \['sex'\] of 1 rows"):
        check_immutables(schema, X, moved)


def test_a_monotone_feature_moved_the_forbidden_way_is_an_error(project):
    import dataclasses

    _, frame, schema = project
    name = next(f.name for f in schema.features if f.kind == "numerical" and not f.immutable)
    ruled = dataclasses.replace(schema, features=tuple(
        dataclasses.replace(f, monotone="increasing" if f.name == name else None) for f in schema.features))
    X = ruled.transform(frame.iloc[:4])
    up, down = X.copy(), X.copy()
    up[1, ruled.slices()[name]] += 0.5
    down[1, ruled.slices()[name]] -= 0.5
    check_monotone(ruled, X, up)
    check_monotone(schema, X, down)  # no rule: any direction
    with pytest.raises(MonotoneRuleBroken, match=rf"monotone features \['{name}'\] the forbidden way in 1 rows"):
        check_monotone(ruled, X, down)


def test_the_command_reads_stdin_writes_out_and_exits_1_when_no_row_is_explained(project, tmp_path, monkeypatch,
                                                                                  capsys, caplog):
    from recourselab.cli import main

    root, frame, _ = project
    params = tmp_path / "params.yaml"
    params.write_text(dump_params(PARAMS))
    args = ["explain", "-", "--dataset", DATASET, "--params", str(params), "--data-root", str(root)]
    monkeypatch.setattr("sys.stdin", io.StringIO(frame.iloc[:2].to_csv(index=False)))
    assert main([*args, "--format", "json"]) == 0
    assert [r["row"] for r in json.loads(capsys.readouterr().out)] == [1, 2]
    out = tmp_path / "out" / "cf.csv"
    monkeypatch.setattr("sys.stdin", io.StringIO(frame.iloc[:2].to_csv(index=False)))
    assert main([*args, "--format", "csv", "--out", str(out)]) == 0
    assert capsys.readouterr().out == "" and len(pd.read_csv(out)) == 2
    for name, read in (("by-suffix.csv", lambda p: len(pd.read_csv(p))), ("by-suffix.JSON", lambda p: len(
            json.loads(p.read_text()))), ("by-suffix.txt", lambda p: p.read_text().count("\nrow "))):
        monkeypatch.setattr("sys.stdin", io.StringIO(frame.iloc[:2].to_csv(index=False)))
        assert main([*args, "--out", str(tmp_path / name)]) == 0  # no --format: the suffix chooses it
        assert read(tmp_path / name) == 2
    monkeypatch.setattr("sys.stdin", io.StringIO("age,hours,income,sex,job\n,,,,\n30,20,1e9,f,a\n"))
    assert main(args) == 1
    assert "0 of 2 rows explained" in capsys.readouterr().out
    assert main([*args[:1], str(tmp_path / "nope.csv"), *args[2:]]) == 1  # a clear error, no traceback
    assert main([*args[:1], str(tmp_path), *args[2:]]) == 1  # a folder: the same
    monkeypatch.setattr("sys.stdin", io.StringIO(frame.iloc[:2].to_csv(index=False)))
    assert main([*args, "--format", "csv", "--out", "-"]) == 0  # `-`: standard output, as for the input
    assert len(pd.read_csv(io.StringIO(capsys.readouterr().out))) == 2 and not Path("-").exists()
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    for bad, message in ((tmp_path, "is a folder"), (blocker / "cf.csv", "cannot write --out")):  # no traceback
        monkeypatch.setattr("sys.stdin", io.StringIO(frame.iloc[:2].to_csv(index=False)))
        caplog.clear()
        assert main([*args, "--out", str(bad)]) == 1
        assert message in caplog.text


def test_a_value_outside_declared_bounds_names_the_bounds_not_only_the_training_range():
    from recourselab.data.feature import Feature
    from recourselab.pipeline.explain_rows import check_value

    age = Feature(name="age", kind="numerical", integer=True, lower=18.0, upper=90.0, bounds=(0.0, 120.0))
    assert check_value(age, "45") == (45, None)
    value, problem = check_value(age, "150")
    assert value is None and "outside its declared bounds [0.0, 120.0]" in problem
    value, problem = check_value(age, "100")  # inside the bounds, outside the training range
    assert value is None and "outside the training range [18, 90]" in problem
