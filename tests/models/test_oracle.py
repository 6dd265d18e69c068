"""BlackBox oracle: ensemble summaries, row counting, budgets (incl. threads), inputs."""

from __future__ import annotations

import logging
import threading

import numpy as np
import pandas as pd
import pytest
from sklearn.datasets import make_moons
from sklearn.linear_model import LogisticRegression
from sklearn.tree import DecisionTreeClassifier

from recourselab.data.schema import Schema
from recourselab.errors import DataError, RecourselabError
from recourselab.models.oracle import (
    BlackBox,
    EnsembleOutput,
    Predictor,
    QueryBudgetExceeded,
    UnknownMemberError,
)


class TablePredictor:
    """Returns ``table[i]`` for a row whose first column is ``i``; records every call."""

    def __init__(self, table: list[list[float]]) -> None:
        self.table = np.asarray(table, dtype=float)
        self.calls: list[int] = []
        self._lock = threading.Lock()

    def predict_proba(self, X: np.ndarray) -> np.ndarray:
        with self._lock:
            self.calls.append(len(X))
        return self.table[X[:, 0].astype(int)]


# Rows 0..3, K = 3 classes. Member labels per row:
#   row 0: 0 0 0 (unanimous)   row 1: 1 1 2 (majority 1, mean label 2)
#   row 2: 0 1 2 (three-way tie -> majority 0)   row 3: 2 2 1 (majority 2)
TABLES = {
    "a": [[0.8, 0.1, 0.1], [0.1, 0.5, 0.4], [0.6, 0.3, 0.1], [0.1, 0.2, 0.7]],
    "b": [[0.5, 0.3, 0.2], [0.1, 0.5, 0.4], [0.2, 0.7, 0.1], [0.0, 0.4, 0.6]],
    "c": [[0.4, 0.3, 0.3], [0.0, 0.0, 1.0], [0.1, 0.1, 0.8], [0.2, 0.7, 0.1]],
}


def crafted() -> tuple[BlackBox, dict[str, TablePredictor], np.ndarray]:
    members = {name: TablePredictor(t) for name, t in TABLES.items()}
    X = np.arange(4, dtype=float)[:, None]
    return BlackBox(members), members, X


@pytest.fixture(scope="module")
def moons() -> tuple[np.ndarray, np.ndarray]:
    return make_moons(n_samples=200, noise=0.2, random_state=0)


@pytest.fixture(scope="module")
def sk_members(moons) -> dict[str, Predictor]:
    X, y = moons
    return {
        "logreg": LogisticRegression().fit(X, y),
        "tree": DecisionTreeClassifier(max_depth=3, random_state=0).fit(X, y),
    }


# ---------------------------------------------------------------------- summaries
def test_crafted_ensemble_summaries_are_exact():
    bb, _, X = crafted()
    out = bb.query(X)
    assert isinstance(out, EnsembleOutput)
    assert out.member_names == ("a", "b", "c")
    assert out.member_proba.shape == (3, 4, 3)
    expected_mean = np.mean([np.asarray(TABLES[m]) for m in "abc"], axis=0)
    np.testing.assert_allclose(out.mean_proba, expected_mean)
    np.testing.assert_array_equal(out.member_labels, [[0, 1, 0, 2], [0, 1, 1, 2], [0, 2, 2, 1]])
    np.testing.assert_array_equal(out.mean_label, [0, 2, 1, 2])
    np.testing.assert_array_equal(out.majority, [0, 1, 0, 2])
    np.testing.assert_array_equal(out.unanimous, [0, -1, -1, -1])
    np.testing.assert_allclose(out.agreement(2), [0, 1 / 3, 1 / 3, 2 / 3])
    np.testing.assert_allclose(out.agreement(np.array([0, 1, 2, 1])), [1, 2 / 3, 1 / 3, 1 / 3])
    with pytest.raises(DataError, match="target must be"):
        out.agreement(np.array([0, 1]))


def test_convenience_methods_match_query_and_each_count_once():
    bb, _, X = crafted()
    out = bb.query(X)
    np.testing.assert_allclose(bb.predict_proba(X), out.mean_proba)
    np.testing.assert_array_equal(bb.predict(X), out.mean_label)
    per_member = bb.member_proba(X)
    assert list(per_member) == ["a", "b", "c"]
    for i, name in enumerate("abc"):
        np.testing.assert_allclose(per_member[name], TABLES[name])
        np.testing.assert_allclose(out.member_proba[i], TABLES[name])
    assert bb.used() == 4 * 4


def test_sklearn_ensemble_mean_and_members(moons, sk_members):
    X, _ = moons
    bb = BlackBox(sk_members)
    assert bb.member_names == ("logreg", "tree")
    proba = bb.member_proba(X[:20])
    for name, model in sk_members.items():
        np.testing.assert_allclose(proba[name], model.predict_proba(X[:20]))
    expected = (proba["logreg"] + proba["tree"]) / 2
    np.testing.assert_allclose(bb.predict_proba(X[:20]), expected)
    np.testing.assert_array_equal(bb.predict(X[:20]), expected.argmax(axis=1))
    assert bb.used() == 60


# ---------------------------------------------------------------------- counting and budgets
def test_rows_count_once_regardless_of_member_count(moons, sk_members):
    X, _ = moons
    single = BlackBox({"logreg": sk_members["logreg"]})
    double = BlackBox(sk_members)
    single.query(X[:7])
    double.query(X[:7])
    double.query(X[:5], budget="audit")
    assert single.queries == {"default": 7}
    assert double.queries == {"default": 7, "audit": 5}
    counters = double.queries
    counters["default"] = 0  # a copy: the oracle's counters do not change
    assert double.used("default") == 7
    assert double.used("never") == 0
    assert double.remaining("default") is None


def test_budget_refuses_before_calling_members_and_keeps_counter():
    members = {name: TablePredictor(t) for name, t in TABLES.items()}
    bb = BlackBox(members, budgets={"audit": 10})
    rows = np.zeros((7, 1))
    bb.query(rows, budget="audit")
    assert all(m.calls == [7] for m in members.values())
    with pytest.raises(QueryBudgetExceeded, match=r"'audit'.*limit 10.*7 already used.*4 requested"):
        bb.query(np.zeros((4, 1)), budget="audit")
    assert all(m.calls == [7] for m in members.values())  # no member called
    assert bb.used("audit") == 7
    assert bb.remaining("audit") == 3
    # exactly the remaining rows are accepted, then nothing more
    bb.query(np.zeros((3, 1)), budget="audit")
    assert bb.used("audit") == 10 and bb.remaining("audit") == 0
    with pytest.raises(QueryBudgetExceeded):
        bb.predict(np.zeros((1, 1)), budget="audit")
    assert bb.used("audit") == 10
    assert all(m.calls == [7, 3] for m in members.values())
    # other budgets are unaffected; error types
    bb.query(np.zeros((2, 1)))
    assert bb.queries == {"audit": 10, "default": 2}
    assert issubclass(QueryBudgetExceeded, RecourselabError) and issubclass(QueryBudgetExceeded, RuntimeError)


def test_set_budget_and_invalid_limits():
    bb, _, X = crafted()
    bb.query(X)
    bb.set_budget("default", 5)
    assert bb.remaining("default") == 1
    with pytest.raises(QueryBudgetExceeded, match="limit 5"):
        bb.query(X)
    bb.set_budget("default", None)
    bb.query(X)
    assert bb.used() == 8 and bb.remaining() is None
    with pytest.raises(DataError, match="non-negative int"):
        bb.set_budget("default", -1)
    with pytest.raises(DataError, match="non-negative int"):
        bb.set_budget("default", 2.5)
    with pytest.raises(DataError, match="'x'.*non-negative int"):
        BlackBox({"a": TablePredictor(TABLES["a"])}, budgets={"x": -3})


def test_threads_never_exceed_budget_and_count_exactly():
    n_threads, n_queries, rows, limit = 8, 50, 3, 500
    members = {name: TablePredictor(t) for name, t in TABLES.items()}
    bb = BlackBox(members, budgets={"shared": limit})
    accepted, refused = [], []
    barrier = threading.Barrier(n_threads)
    X = np.zeros((rows, 1))

    def worker() -> None:
        barrier.wait()
        for _ in range(n_queries):
            try:
                bb.query(X, budget="shared")
                accepted.append(1)
            except QueryBudgetExceeded:
                refused.append(1)

    threads = [threading.Thread(target=worker) for _ in range(n_threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(accepted) + len(refused) == n_threads * n_queries
    assert len(accepted) == limit // rows
    assert bb.used("shared") == rows * len(accepted) <= limit
    assert all(sum(m.calls) == rows * len(accepted) for m in members.values())


def test_member_view_shares_counters_and_budgets():
    bb, members, X = crafted()
    bb.set_budget("default", 10)
    view = bb.member("b")
    assert view.member_names == ("b",)
    np.testing.assert_allclose(view.predict_proba(X), TABLES["b"])
    assert bb.used() == 4 and view.used() == 4
    bb.query(X)
    assert view.remaining() == 2
    with pytest.raises(QueryBudgetExceeded):
        view.query(X)
    assert members["b"].calls == [4, 4]
    view.set_budget("other", 1)
    assert bb.remaining("other") == 1


# ---------------------------------------------------------------------- inputs
@pytest.fixture(scope="module")
def toy_schema_model() -> tuple[Schema, pd.DataFrame, LogisticRegression]:
    rng = np.random.default_rng(0)
    n = 60
    frame = pd.DataFrame({
        "age": rng.integers(18, 70, n),
        "colour": rng.choice(["red", "green", "blue"], n),
        "income": rng.normal(50.0, 10.0, n),
        "y": rng.integers(0, 2, n),
    })
    schema = Schema.fit(frame, dataset="toy", target="y", favourable=1, categorical=["colour"])
    model = LogisticRegression().fit(schema.transform(frame), schema.encode_target(frame["y"]))
    return schema, frame, model


def test_dataframe_query_goes_through_schema(toy_schema_model):
    schema, frame, model = toy_schema_model
    assert schema.n_encoded == 4
    bb = BlackBox({"lr": model}, schema=schema)
    raw = frame.drop(columns="y").head(9)
    from_frame = bb.query(raw)
    from_array = bb.query(schema.transform(raw))
    np.testing.assert_allclose(from_frame.member_proba, from_array.member_proba)
    np.testing.assert_allclose(from_frame.mean_proba, model.predict_proba(schema.transform(raw)))
    assert bb.used() == 18
    with pytest.raises(DataError, match="query width 3 does not match the schema's 4"):
        bb.query(np.zeros((2, 3)))
    assert bb.used() == 18


def test_bad_inputs_raise_clear_errors_and_count_nothing(moons, sk_members):
    X, _ = moons
    bb = BlackBox(sk_members)
    bad = X[:4].copy()
    bad[2, 1] = np.nan
    with pytest.raises(DataError, match=r"non-finite values \(NaN\) in 1 rows, e.g. rows \[2\]"):
        bb.query(bad)
    bad[2, 1] = np.inf
    with pytest.raises(DataError, match=r"non-finite.*\(inf\)"):
        bb.predict(bad)
    with pytest.raises(DataError, match="2-D array.*1-D"):
        bb.query(X[0])
    with pytest.raises(DataError, match="needs a schema"):
        bb.query(pd.DataFrame(X[:3], columns=["x0", "x1"]))
    with pytest.raises(DataError, match="must be numeric"):
        bb.query(np.array([["a", "b"]]))
    assert bb.queries == {}
    with pytest.raises(UnknownMemberError, match=r"unknown member 'forest'.*\['logreg', 'tree'\]") as info:
        bb.member("forest")
    assert isinstance(info.value, KeyError) and isinstance(info.value, RecourselabError)


def test_zero_rows_give_empty_outputs_without_calling_members(toy_schema_model):
    schema, _, _ = toy_schema_model
    members = {"a": TablePredictor([[0.4, 0.6]]), "b": TablePredictor([[0.9, 0.1]])}
    bb = BlackBox(members, schema=schema, budgets={"selection": 0})
    out = bb.query(np.zeros((0, schema.n_encoded)), budget="selection")
    assert out.member_proba.shape == (2, 0, schema.n_classes)
    assert out.mean_proba.shape == (0, schema.n_classes) and out.mean_label.shape == (0,)
    assert bb.predict(np.zeros((0, schema.n_encoded))).shape == (0,)
    assert [m.calls for m in members.values()] == [[], []]
    assert bb.used("selection") == 0 and bb.used() == 0
    # without a schema the number of classes is unknown
    with pytest.raises(DataError, match="cannot query 0 rows without a schema"):
        BlackBox(members).query(np.zeros((0, 4)))


def test_constructor_rejects_empty_or_non_predictor_members():
    with pytest.raises(DataError, match="at least one member"):
        BlackBox({})
    with pytest.raises(TypeError, match="'bad'.*no predict_proba"):
        BlackBox({"bad": object()})


def test_member_output_shape_is_checked(toy_schema_model):
    schema, frame, _ = toy_schema_model
    three = TablePredictor([[0.2, 0.3, 0.5]] * 5)
    bb = BlackBox({"three": three}, schema=schema)
    with pytest.raises(DataError, match="'three' returned 3 classes.*'toy' has 2"):
        bb.query(np.zeros((2, 4)))
    mixed = BlackBox({"a": TablePredictor(TABLES["a"]), "two": TablePredictor([[0.5, 0.5]] * 4)})
    with pytest.raises(DataError, match="disagree on the number of classes"):
        mixed.query(np.zeros((2, 1)))


def test_each_query_logs_at_debug(caplog):
    bb, _, X = crafted()
    with caplog.at_level(logging.DEBUG, logger="recourselab.models.oracle"):
        bb.query(X, budget="audit")
    messages = [r.getMessage() for r in caplog.records if r.name == "recourselab.models.oracle"]
    assert len(messages) == 1 and "budget='audit'" in messages[0] and "rows=4" in messages[0]


def test_member_probabilities_outside_the_unit_interval_or_nan_are_refused():
    broken = TablePredictor([[0.5, 0.5], [np.nan, np.nan], [1.2, -0.2]])
    bb = BlackBox({"broken": broken})
    assert bb.query(np.zeros((1, 1))).member_proba.shape == (1, 1, 2)
    for row in (1, 2):
        with pytest.raises(DataError, match=r"member 'broken' returned probabilities outside \[0, 1\] or NaN in 1 "
                                            r"rows, e\.g\. rows \[0\]"):
            bb.query(np.full((1, 1), float(row)))


def test_agreement_target_must_be_a_class_index():
    out = EnsembleOutput(("a", "b"), np.array([[[0.2, 0.8]], [[0.6, 0.4]]]))
    assert out.agreement(1).tolist() == [0.5]
    for bad in (5, -1, np.array([2])):
        with pytest.raises(DataError, match=r"target must hold class indices in range\(2\)"):
            out.agreement(bad)


def test_without_a_schema_the_members_fix_the_query_width(moons_small):
    from recourselab.models.registry import FitContext, fit_model

    train, val, _ = moons_small
    model = fit_model("knn", {"n_neighbors": 5}, train.X, train.y,
                      FitContext(X_val=val.X, y_val=val.y, seed=0, n_classes=2))
    bb = BlackBox({"knn": model})
    with pytest.raises(DataError, match=r"query width 3 does not match the model's 2 encoded columns"):
        bb.query(np.zeros((4, 3)))
    assert bb.queries == {}  # refused before anything was counted
    assert bb.query(val.X[:4]).member_proba.shape == (1, 4, 2)
