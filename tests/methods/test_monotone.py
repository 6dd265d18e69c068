"""Monotone features: every method keeps a feature on its allowed side of the factual value."""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import pytest
from sklearn.neural_network import MLPClassifier

from recourselab.data.schema import Schema
from recourselab.methods.common import valid_points
from recourselab.methods.registry import make_method
from recourselab.metrics.recourse import monotone_violations
from tests.methods.conftest import Problem
from tests.methods.test_registry import FAST

RULES = {"age": "increasing", "income": "decreasing"}  # income may only fall: it works against the target


@pytest.fixture(scope="module")
def ruled(mixed) -> Problem:
    """The mixed toy with monotone rules on age (up) and income (down); the encoding is unchanged."""
    feats = tuple(dataclasses.replace(f, monotone=RULES.get(f.name)) for f in mixed.schema.features)
    return dataclasses.replace(mixed, schema=dataclasses.replace(mixed.schema, features=feats))


def test_signs_follow_the_rules(ruled):
    signs = dict(zip(ruled.schema.encoded_columns, ruled.schema.monotone_signs().tolist(), strict=True))
    assert signs["age"] == 1 and signs["income"] == -1
    assert {c: s for c, s in signs.items() if c not in RULES} == dict.fromkeys(set(signs) - set(RULES), 0)


def test_valid_points_move_a_monotone_feature_back_to_its_factual(ruled):
    Xf = ruled.factuals[:5]
    cols = ruled.schema.slices()
    moved = Xf.copy()
    moved[:, cols["age"].start] -= 1.0      # younger: forbidden
    moved[:, cols["income"].start] -= 1.0   # poorer: allowed
    out = valid_points(moved, Xf, ruled.schema)
    assert np.array_equal(out[:, cols["age"].start], Xf[:, cols["age"].start])
    assert (out[:, cols["income"].start] < Xf[:, cols["income"].start]).all()
    assert monotone_violations(Xf, out, ruled.schema.monotone_signs()) == 0
    assert monotone_violations(Xf, moved, ruled.schema.monotone_signs()) == 5


@pytest.mark.parametrize("name", sorted(FAST))
def test_no_baseline_breaks_a_monotone_rule(ruled, name):
    options = dict(FAST[name])
    if name == "wachter":  # the toy's members are not MLPs: give it one
        options["model"] = MLPClassifier((16,), max_iter=500, random_state=0).fit(ruled.X_train, ruled.y_train)
    method = make_method(name, ruled.blackbox(), X_train=ruled.X_train, y_train=ruled.y_train, **options)
    cf = method.explain(ruled.factuals, target=1)
    assert monotone_violations(cf.factuals, cf.counterfactuals, ruled.schema.monotone_signs()) == 0
    frame = cf.counterfactuals_original
    facts = ruled.schema.inverse_transform(ruled.factuals)
    assert (frame["age"].to_numpy() >= facts["age"].to_numpy()).all()
    assert (frame["income"].to_numpy() <= facts["income"].to_numpy() + 1e-9).all()


def test_nearest_skips_rows_on_the_forbidden_side(ruled, mixed):
    free = make_method("nearest", mixed.blackbox(), X_train=mixed.X_train, y_train=mixed.y_train)
    bound = make_method("nearest", ruled.blackbox(), X_train=ruled.X_train, y_train=ruled.y_train)
    a, b = free.explain(mixed.factuals, target=1), bound.explain(ruled.factuals, target=1)
    signs = ruled.schema.monotone_signs()
    assert monotone_violations(a.factuals, a.counterfactuals, signs) > 0  # the rule binds on this data
    assert monotone_violations(b.factuals, b.counterfactuals, signs) == 0


def test_densityflow_keeps_the_rules(ruled):
    box = ruled.blackbox()
    flow = make_method("densityflow", box, X_train=ruled.X_train, y_train=ruled.y_train, distill_budget=8,
                       epochs=2, hidden=16, distill_epochs=1, distill_inner=1, distill_points=8, n_starts=3, seed=1)
    cf = flow.explain(ruled.factuals, target=1)
    assert monotone_violations(cf.factuals, cf.counterfactuals, ruled.schema.monotone_signs()) == 0


def test_schema_fit_refuses_rules_on_other_features():
    df = pd.DataFrame({"a": [1.0, 2.0, 3.0, 4.0], "c": ["x", "y", "x", "y"], "s": [0.0, 1.0, 0.0, 1.0],
                       "y": [0, 1, 0, 1]})
    kw = {"dataset": "t", "target": "y", "favourable": 1, "categorical": ["c"], "immutable": ["s"]}
    schema = Schema.fit(df, **kw, monotone={"a": "increasing"})
    assert schema.features[0].monotone == "increasing"
    assert Schema.from_dict(schema.to_dict()) == schema
    assert "monotone" not in Schema.fit(df, **kw).to_dict()["features"][0]  # old schema files stay the same
    for name in ("c", "s", "nope"):
        with pytest.raises(Exception, match=rf"monotone rules for \['{name}'\], which are not mutable numerical"):
            Schema.fit(df, **kw, monotone={name: "increasing"})


def _age_income_problem():
    """Class 1 iff income > age; age may only grow. Returns schema, rows, labels and a 2-member oracle."""
    from recourselab.models.oracle import BlackBox

    rng = np.random.default_rng(0)
    df = pd.DataFrame({"age": rng.integers(18, 80, 300).astype(float), "income": rng.uniform(0, 100, 300)})
    df["y"] = (df.income > df.age).astype(int)
    schema = Schema.fit(df, dataset="t", target="y", favourable=1, categorical=[], integer=["age"],
                        monotone={"age": "increasing"})

    class Rule:
        def predict_proba(self, Z):  # noqa: N803
            raw = schema.inverse_transform(np.asarray(Z))
            p = (raw.income.to_numpy() > raw.age.to_numpy()).astype(float)
            return np.stack([1 - p, p], axis=1)

    return schema, schema.transform(df), df["y"].to_numpy(), BlackBox({"a": Rule(), "b": Rule()}, schema=schema)


def test_robustflow_anchors_respect_the_rule():
    from types import SimpleNamespace

    from recourselab.methods.robust import RobustFlow, RobustSettings

    schema, X, y, box = _age_income_problem()
    F = schema.transform(pd.DataFrame({"age": [20.0, 60.0], "income": [15.0, 10.0], "y": [0, 0]}))
    first = F.copy()
    first[0] = schema.transform(pd.DataFrame({"age": [20.0], "income": [25.0], "y": [1]}))[0]  # row 0 is solved
    flow = SimpleNamespace(generate=lambda X_, t: SimpleNamespace(counterfactuals=first.copy()), queries_used_=0)
    for settings in (RobustSettings(pool=0), RobustSettings()):  # row 0's point must not anchor the older row 1
        cf = RobustFlow(flow, box, X, y, schema=schema, settings=settings).explain(F, target=1)
        assert monotone_violations(cf.factuals, cf.counterfactuals, schema.monotone_signs()) == 0


def test_dice_asks_again_when_a_rule_moved_its_point():
    pytest.importorskip("dice_ml")
    schema, X, y, box = _age_income_problem()
    cf = make_method("dice", box, X_train=X, y_train=y, seed=0).explain(X[y == 0][:10], target=1)
    assert monotone_violations(cf.factuals, cf.counterfactuals, schema.monotone_signs()) == 0
    truth = box.query(cf.counterfactuals).member_labels[0] == 1
    assert np.array_equal(cf.valid, truth)
