"""Fixtures of the baseline tests: moons with a fast 3-member ensemble, and a mixed toy with immutables."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
import pytest
from sklearn.ensemble import RandomForestClassifier
from sklearn.linear_model import LogisticRegression
from sklearn.neighbors import KNeighborsClassifier
from sklearn.neural_network import MLPClassifier

from recourselab.data.schema import Schema
from recourselab.models.oracle import BlackBox


@dataclass(frozen=True)
class Problem:
    """A dataset with its schema, training rows, fitted members and factuals (all members say class 0)."""

    schema: Schema
    X_train: np.ndarray
    y_train: np.ndarray
    members: dict
    factuals: np.ndarray

    def blackbox(self) -> BlackBox:
        """A fresh oracle (fresh counters) over the members."""
        return BlackBox(self.members, schema=self.schema)


def _factuals(members: dict, X: np.ndarray, n: int) -> np.ndarray:
    labels = np.stack([m.predict_proba(X).argmax(1) for m in members.values()])
    return X[(labels == 0).all(axis=0)][:n]


@pytest.fixture(scope="session")
def moons() -> Problem:
    """Moons (600 rows, seed 0) with knn, rf and mlp members; 30 test factuals of class 0."""
    from recourselab.config import parse_params
    from recourselab.data import load_dataset, prepare_splits

    params = parse_params({"prepare": {"n_synthetic": 600}})
    splits = prepare_splits(load_dataset("moons", params), 0, (0.6, 0.2, 0.2))
    X, y = splits.arrays("train")
    Xt, _ = splits.arrays("test")
    members = {"knn": KNeighborsClassifier(15).fit(X, y),
               "rf": RandomForestClassifier(30, max_depth=6, random_state=0).fit(X, y),
               "mlp": MLPClassifier((32, 32), max_iter=800, random_state=0).fit(X, y)}
    return Problem(splits.schema, X, y, members, _factuals(members, Xt, 30))


@pytest.fixture(scope="session")
def mixed() -> Problem:
    """400 rows: float and integer numericals, a 4-level categorical, an immutable categorical and an
    immutable numerical; lr, rf and knn members; 20 factuals of class 0."""
    rng = np.random.default_rng(0)
    n = 400
    df = pd.DataFrame({
        "income": rng.normal(50.0, 10.0, n),
        "age": rng.integers(18, 70, n),
        "job": rng.choice(["a", "b", "c", "d"], n),
        "sex": rng.choice(["f", "m"], n),
        "height": np.round(rng.normal(170.0, 10.0, n), 1),
    })
    logit = 0.15 * (df.income - 50) + 0.05 * (df.age - 40) + 1.5 * (df.job == "c") - 0.5
    df["y"] = (rng.random(n) < 1 / (1 + np.exp(-logit))).astype(int)
    schema = Schema.fit(df, dataset="mixed", target="y", favourable=1, categorical=["job", "sex"],
                        integer=["age"], immutable=["sex", "height"])
    X = schema.transform(df)
    y = df["y"].to_numpy()
    members = {"lr": LogisticRegression(max_iter=500).fit(X, y),
               "rf": RandomForestClassifier(30, max_depth=5, random_state=0).fit(X, y),
               "knn": KNeighborsClassifier(7).fit(X, y)}
    return Problem(schema, X, y, members, _factuals(members, X, 20))


def unanimous(problem: Problem, cf) -> np.ndarray:
    """Whether every member labels each counterfactual its target (checked outside the method's oracle)."""
    labels = np.stack([m.predict_proba(cf.counterfactuals).argmax(1) for m in problem.members.values()])
    return (labels == cf.target[None, :]).all(axis=0)


def majority(problem: Problem, cf) -> np.ndarray:
    labels = np.stack([m.predict_proba(cf.counterfactuals).argmax(1) for m in problem.members.values()])
    return 2 * (labels == cf.target[None, :]).sum(axis=0) > len(problem.members)


def immutables_kept(problem: Problem, cf) -> bool:
    imm = problem.schema.immutable_mask()
    return bool(np.array_equal(cf.counterfactuals[:, imm], cf.factuals[:, imm]))


@pytest.fixture(autouse=True, scope="session")
def _one_thread():
    """One torch / BLAS thread: the gradient searches are tiny, and threads only contend on shared cores."""
    from recourselab.runtime import limit_threads

    with limit_threads(1):
        yield
