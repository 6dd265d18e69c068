"""Small encoded moons splits shared by the model tests."""

from __future__ import annotations

import numpy as np
import pytest

from recourselab.data import Schema, dataset_from_params, prepare_splits
from recourselab.models.tuning import Split


@pytest.fixture(scope="session")
def moons_small():
    """(train, val, test) Splits of a 400-row moons dataset, seed 0."""
    from recourselab.config import parse_params

    params = parse_params({"prepare": {"n_synthetic": 400}})
    splits = prepare_splits(dataset_from_params("moons", params), 0, (0.6, 0.2, 0.2))
    return tuple(Split(*splits.arrays(s)) for s in ("train", "val", "test"))


@pytest.fixture(scope="session")
def moons_schema() -> Schema:
    from recourselab.config import parse_params

    params = parse_params({"prepare": {"n_synthetic": 400}})
    return prepare_splits(dataset_from_params("moons", params), 0, (0.6, 0.2, 0.2)).schema


def accuracy(model, split: Split) -> float:
    return float((model.predict_proba(split.X).argmax(1) == split.y).mean())


__all__ = ["accuracy", "np"]
