"""Fixtures of the DISCOVER tests: a small mixed-type dataset, its schema and a fast model."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
import pytest
from sklearn.linear_model import LogisticRegression

from recourselab.data.schema import Schema
from recourselab.models.oracle import BlackBox


@dataclass(frozen=True)
class Toy:
    schema: Schema
    frame: pd.DataFrame
    X: np.ndarray
    model: LogisticRegression
    factuals: np.ndarray

    def blackbox(self) -> BlackBox:
        return BlackBox({"lr": self.model}, schema=self.schema)


@pytest.fixture(scope="session")
def toy() -> Toy:
    """400 rows: float, integer and count numericals; 4-level, binary and immutable categoricals."""
    rng = np.random.default_rng(0)
    n = 400
    df = pd.DataFrame({
        "income": rng.normal(50.0, 10.0, n),
        "age": rng.integers(18, 70, n),
        "debts": rng.poisson(2.0, n),
        "job": rng.choice(["a", "b", "c", "d"], n),
        "sex": rng.choice(["f", "m"], n),
        "owner": rng.choice(["no", "yes"], n),
    })
    logit = (0.08 * (df.income - 50) + 0.03 * (df.age - 40) - 0.5 * (df.debts - 2)
             + 1.0 * (df.job == "c") + 0.7 * (df.owner == "yes"))
    df["y"] = (rng.random(n) < 1 / (1 + np.exp(-logit))).astype(int)
    schema = Schema.fit(df, dataset="toy", target="y", favourable=1, categorical=["job", "sex", "owner"],
                        integer=["age", "debts"], immutable=["sex"])
    X = schema.transform(df)
    model = LogisticRegression(max_iter=500).fit(X, df["y"].to_numpy())
    scores = model.predict_proba(X)[:, 1]
    factuals = X[np.sort(np.argsort(scores)[:40])]  # the 40 least favourable rows
    return Toy(schema=schema, frame=df, X=X, model=model, factuals=factuals)
