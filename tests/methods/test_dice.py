"""The DiCE wrapper: every row DiCE scores goes through the oracle, exactly counted; immutables kept."""

from __future__ import annotations

import numpy as np
import pytest

from recourselab.methods import dice as dice_module
from recourselab.models.oracle import BlackBox, QueryBudgetExceeded

try:
    import dice_ml  # noqa: F401
    HAVE_DICE = True
except ImportError:
    HAVE_DICE = False

needs_dice = pytest.mark.skipif(not HAVE_DICE, reason="dice-ml is not installed: pip install 'recourselab[dice]'")


class Counting:
    """A member that counts the rows it is asked about."""

    def __init__(self, model):
        self.model = model
        self.rows = 0

    def predict_proba(self, X):
        self.rows += len(X)
        return self.model.predict_proba(X)


def tiny_box(problem):
    members = {name: Counting(m) for name, m in problem.members.items()}
    return BlackBox(members, schema=problem.schema), members


@needs_dice
@pytest.mark.parametrize("method, options", [("random", {"sample_size": 40}),
                                             ("genetic", {"maxiterations": 5})])
def test_every_dice_row_is_counted(mixed, method, options):
    box, members = tiny_box(mixed)
    dice = dice_module.DiCE(box, mixed.X_train, mixed.y_train, method=method, seed=0, options=options)
    assert dice.name == "dice"
    cf = dice.explain(mixed.factuals[:3], target=1)
    assert cf.log["dice_method"] == method and cf.queries > 0
    assert cf.queries == box.used("search") == members["lr"].rows == members["rf"].rows
    imm = mixed.schema.immutable_mask()
    assert np.array_equal(cf.counterfactuals[:, imm], cf.factuals[:, imm])
    np.testing.assert_allclose(mixed.schema.snap(cf.counterfactuals), cf.counterfactuals, atol=1e-9)
    mean = np.mean([m.model.predict_proba(cf.counterfactuals) for m in members.values()], axis=0)
    assert np.array_equal(cf.valid, cf.valid & (mean.argmax(1) == 1))
    assert cf.valid.mean() >= 2 / 3
    again = dice_module.DiCE(box, mixed.X_train, mixed.y_train, method=method, seed=0,
                             options=options).explain(mixed.factuals[:3], target=1)
    np.testing.assert_array_equal(again.counterfactuals, cf.counterfactuals)
    assert again.queries == cf.queries


@needs_dice
def test_moons_random_validity(moons):
    box = moons.blackbox()
    cf = dice_module.DiCE(box, moons.X_train, moons.y_train, method="random", options={"sample_size": 50}).explain(
        moons.factuals[:10], target=1)
    assert cf.valid.mean() >= 0.9 and cf.queries == box.used("search")


@needs_dice
def test_budget_raises_inside_dice(mixed):
    box, members = tiny_box(mixed)
    with pytest.raises(QueryBudgetExceeded, match="search budget of 5"):
        dice_module.DiCE(box, mixed.X_train, mixed.y_train, options={"sample_size": 40}).explain(
            mixed.factuals[:2], target=1, budget=5)
    assert box.used("search") <= 5 and members["lr"].rows <= 5


def test_missing_dice_names_the_extra(monkeypatch, mixed):
    import builtins

    real = builtins.__import__

    def no_dice(name, *args, **kwargs):
        if name == "dice_ml" or name.startswith("dice_ml."):
            raise ImportError("No module named 'dice_ml'")
        return real(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_dice)
    with pytest.raises(dice_module.MissingExtraError, match=r"pip install 'recourselab\[dice\]'"):
        dice_module.DiCE(mixed.blackbox(), mixed.X_train, mixed.y_train)
