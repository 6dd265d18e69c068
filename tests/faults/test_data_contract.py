"""Bad data never passes silently: each bad-data case of the reliability issue, replayed.

Every case writes a small CSV and reads it through a ``data.custom`` declaration with
``load_dataset`` (what the ``prepare`` stage runs), or checks new rows against the prepared
schema (what ``explain`` runs). Each one gets a clear error naming the file's lines, or the
documented behaviour.
"""

from __future__ import annotations

import logging

import numpy as np
import pandas as pd
import pytest

from recourselab.data import dataset_from_params, prepare_splits
from recourselab.data.rows import encode_rows
from recourselab.data.schema import Schema
from recourselab.errors import DataError

N_ROWS = 4454


def _credit(n: int = N_ROWS, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame({
        "age": rng.integers(18, 80, n),
        "income": rng.normal(3000, 800, n).round(2),
        "city": rng.choice(["Bern", "Basel", "Chur"], n),
        "risk": rng.choice(["good", "bad"], n),
    })


def _params(params_factory, tmp_path, filename: str = "credit.csv", **decl):
    spec = {"path": filename, "target": "risk", "favourable": "good", "categorical": ["city"],
            "integer": ["age"], "immutable": ["age"], **decl}
    return params_factory(datasets=["credit"], data={"dir": str(tmp_path), "custom": {"credit": spec}})


def _write(tmp_path, frame: pd.DataFrame, filename: str = "credit.csv") -> None:
    frame.to_csv(tmp_path / filename, index=False)


def _line(row: int) -> int:
    """File line of 0-based data row ``row`` (header = line 1)."""
    return row + 2


# ---------------------------------------------------------------------------- labels
@pytest.mark.parametrize("n_bad", [60, 3])
def test_a_third_target_value_is_an_error_naming_value_count_and_lines(params_factory, tmp_path, n_bad):
    frame = _credit()
    rows = np.sort(np.random.default_rng(1).choice(N_ROWS, n_bad, replace=False))
    frame.loc[rows, "risk"] = "unknown"
    _write(tmp_path, frame)
    lines = ", ".join(str(_line(r)) for r in rows[:3])
    with pytest.raises(DataError, match=rf"target 'risk' has 3 values.*Not a class: 'unknown' \({n_bad} rows, "
                                        rf"lines {lines}\)") as info:
        dataset_from_params("credit", _params(params_factory, tmp_path))
    assert "on_bad_label: drop" in str(info.value) and "split" not in str(info.value)


def test_on_bad_label_drop_is_opt_in_and_logged_with_counts(params_factory, tmp_path, caplog):
    frame = _credit()
    frame.loc[[5, 17, 40], "risk"] = "unknown"
    _write(tmp_path, frame)
    params = _params(params_factory, tmp_path, classes=["good", "bad"], on_bad_label="drop")
    with caplog.at_level(logging.WARNING, logger="recourselab.data.datasets"):
        raw = dataset_from_params("credit", params)
    assert len(raw.frame) == N_ROWS - 3 and raw.classes == ["bad", "good"]
    assert f"dropped 3 of {N_ROWS} rows" in caplog.text and "'unknown' (3 rows, lines 7, 19, 42)" in caplog.text
    assert prepare_splits(raw, 0, (0.6, 0.2, 0.2)).schema.classes == ("bad", "good")


def test_a_declared_multiclass_target_is_accepted(params_factory, tmp_path):
    frame = _credit()
    frame.loc[frame.index[:60], "risk"] = "unknown"
    _write(tmp_path, frame)
    raw = dataset_from_params("credit", _params(params_factory, tmp_path, classes=["good", "bad", "unknown"]))
    assert raw.classes == ["bad", "good", "unknown"] and len(raw.frame) == N_ROWS


# ---------------------------------------------------------------------------- file format
@pytest.mark.parametrize(("edit", "fields"), [(lambda s: s.rsplit(",", 1)[0], 3), (lambda s: s + ",7", 5)])
def test_a_ragged_row_is_an_error_with_its_line(params_factory, tmp_path, edit, fields):
    _write(tmp_path, _credit(50))
    path = tmp_path / "credit.csv"
    text = path.read_text().splitlines()
    text[12] = edit(text[12])  # line 13
    path.write_text("\n".join(text) + "\n")
    with pytest.raises(DataError, match=rf"1 row\(s\) do not have the header's 4 fields \(line 13 has {fields}\)"):
        dataset_from_params("credit", _params(params_factory, tmp_path))


def test_a_latin1_file_names_the_line_and_the_encoding_option(params_factory, tmp_path):
    frame = _credit(50)
    frame.loc[20, "city"] = "Zürich"
    (tmp_path / "credit.csv").write_bytes(frame.to_csv(index=False).encode("latin-1"))
    with pytest.raises(DataError, match=r"is not utf-8 text: byte 0xfc on line 22 .*`encoding:`"):
        dataset_from_params("credit", _params(params_factory, tmp_path))
    raw = dataset_from_params("credit", _params(params_factory, tmp_path, encoding="latin-1"))
    assert raw.frame.loc[20, "city"] == "Zürich" and "Zürich" in raw.levels["city"]


# ---------------------------------------------------------------------------- values
def test_an_all_missing_row_is_refused_at_prepare_and_at_explain_time(params_factory, tmp_path):
    frame = _credit(200).astype({"age": float})
    frame.loc[30, ["age", "income", "city"]] = np.nan
    _write(tmp_path, frame)
    with pytest.raises(DataError, match=r"1 row\(s\) have a label but no feature value \(line 32\)"):
        dataset_from_params("credit", _params(params_factory, tmp_path))
    schema = _schema(params_factory, tmp_path)
    query = pd.DataFrame({"age": [40, np.nan], "income": [2500.0, np.nan], "city": ["Bern", np.nan]})
    problems = schema.check_rows(query)
    assert [(p.row, p.kind) for p in problems] == [(1, "all_missing")]
    with pytest.raises(DataError, match=r"1 query row\(s\) refused: row 1: every feature is missing"):
        encode_rows(query, schema, what="query")


def test_an_immutable_value_comes_back_exactly_as_given(params_factory, tmp_path):
    schema = _schema(params_factory, tmp_path)
    query = pd.DataFrame({"age": [45.5, 30], "income": [2500.0, 4000.0], "city": ["Bern", "Chur"]})
    X = encode_rows(query, schema, what="query")
    assert schema.inverse_transform(X)["age"].tolist() == [45.5, 30.0]
    assert schema.inverse_transform(schema.snap(X))["age"].tolist() == [45.5, 30.0]
    assert schema.inverse_transform(X, factuals=query)["age"].tolist() == [45.5, 30.0]


def test_age_150_is_an_error_with_bounds_at_prepare_and_at_explain_time(params_factory, tmp_path):
    frame = _credit(200)
    frame.loc[57, "age"] = 150
    _write(tmp_path, frame)
    with pytest.raises(DataError, match=r"1 value\(s\) of 'age' outside its bounds \[0, 120\]: 150 on line 59"):
        dataset_from_params("credit", _params(params_factory, tmp_path, bounds={"age": [0, 120]}))
    schema = _schema(params_factory, tmp_path, bounds={"age": [0, 120]})
    schema = Schema.from_dict(schema.to_dict())  # what explain reads back from schema.json
    query = pd.DataFrame({"age": [150, 40], "income": [2500.0, 4000.0], "city": ["Bern", "Chur"]})
    assert [(p.row, p.kind, p.column, p.value) for p in schema.check_rows(query)] == [
        (0, "out_of_bounds", "age", 150)]
    with pytest.raises(DataError, match=r"row 0: age = 150 is outside its bounds \[0, 120\]"):
        encode_rows(query, schema, what="query")


def _schema(params_factory, tmp_path, **decl) -> Schema:
    """The schema that ``prepare`` fits (seed 0) on a clean file."""
    _write(tmp_path, _credit(200), "clean.csv")
    raw = dataset_from_params("credit", _params(params_factory, tmp_path, filename="clean.csv", **decl))
    return prepare_splits(raw, 0, (0.6, 0.2, 0.2)).schema
