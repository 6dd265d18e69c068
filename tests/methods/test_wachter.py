"""Wachter gradient counterfactuals: the torch copy of the MLP, thresholds, no search queries, immutables."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.neural_network import MLPClassifier

from recourselab.errors import DataError, UnknownKeyError
from recourselab.methods.wachter import Wachter, torch_mlp
from recourselab.models.oracle import UnknownMemberError
from tests.methods.conftest import unanimous


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
def test_torch_copy_matches_the_sklearn_mlp(moons):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(50, 2))
    mlp = moons.members["mlp"]
    np.testing.assert_allclose(torch_mlp(mlp).predict_proba(X), mlp.predict_proba(X), atol=1e-10)
    multi = MLPClassifier((8,), activation="tanh", max_iter=300, random_state=0).fit(
        rng.normal(size=(90, 3)), np.repeat([0, 1, 2], 30))
    Z = rng.normal(size=(20, 3))
    np.testing.assert_allclose(torch_mlp(multi).predict_proba(Z), multi.predict_proba(Z), atol=1e-10)


@pytest.mark.parametrize("threshold", [0.5, 0.7, 0.9])
def test_reaches_the_threshold_without_queries(moons, threshold):
    box = moons.blackbox()
    cf = Wachter(box, threshold=threshold).explain(moons.factuals, target=1)
    assert cf.queries == 0 and box.queries == {}
    assert cf.valid.mean() >= 0.9
    p = moons.members["mlp"].predict_proba(cf.counterfactuals)[:, 1]
    assert (p[cf.valid] >= threshold - 1e-9).all()
    checked = cf.verify(box)  # the ensemble's verdict is counted apart
    assert box.used("verify") == len(moons.factuals) and box.used("search") == 0
    assert np.array_equal(checked.valid, unanimous(moons, cf))


def test_higher_thresholds_cost_more(moons):
    costs = [Wachter(moons.blackbox(), threshold=t).explain(moons.factuals, target=1).cost_l2.mean()
             for t in (0.5, 0.9)]
    assert costs[0] < costs[1]


def test_immutables_kept_with_a_given_model(mixed):
    mlp = MLPClassifier((16,), max_iter=500, random_state=0).fit(mixed.X_train, mixed.y_train)
    cf = Wachter(mixed.blackbox(), model=mlp, threshold=0.6).explain(mixed.factuals)
    imm = mixed.schema.immutable_mask()
    assert np.array_equal(cf.counterfactuals[:, imm], cf.factuals[:, imm])
    np.testing.assert_allclose(mixed.schema.snap(cf.counterfactuals), cf.counterfactuals, atol=1e-9)
    assert (mlp.predict_proba(cf.counterfactuals)[cf.valid, 1] >= 0.6).all()
    assert cf.valid.mean() >= 0.9


def test_deterministic(moons):
    a, b = (Wachter(moons.blackbox(), threshold=0.7).explain(moons.factuals, target=1) for _ in range(2))
    np.testing.assert_array_equal(a.counterfactuals, b.counterfactuals)


def test_errors(moons, mixed):
    assert moons.blackbox().model("mlp") is moons.members["mlp"]  # the white-box member, uncounted
    with pytest.raises(UnknownMemberError, match="valid members"):
        Wachter(mixed.blackbox())  # the mixed ensemble has no "mlp" member
    with pytest.raises(DataError, match="differentiable"):
        Wachter(mixed.blackbox(), member="rf")
    with pytest.raises(DataError, match="threshold"):
        Wachter(moons.blackbox(), threshold=1.0)
    with pytest.raises(UnknownKeyError, match="l1, l2"):
        Wachter(moons.blackbox(), distance="cosine")
    with pytest.raises(DataError, match="width"):
        Wachter(moons.blackbox()).explain(np.zeros((2, 3)))
