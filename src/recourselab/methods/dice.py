"""DiCE (dice-ml 0.12, ``random`` and ``genetic``) with every model call through the counted oracle.

Needs the optional extra: ``pip install 'recourselab[dice]'`` (dice-ml 0.12 and raiutils; next to
xgboost-cpu, ``pip install --no-deps dice-ml==0.12 raiutils`` avoids a second xgboost).

Typical use::

    method = DiCE(box, X_train, y_train, schema=schema, method="random", seed=0)   # or "genetic"
    cf = method.explain(X_query, target=1)     # cf.queries: every row DiCE sent to the model

DiCE works on DataFrames in original units: the training rows are decoded through the schema
(categorical levels become strings, as DiCE keeps them), immutable features are left out of
``features_to_vary``, and the model DiCE sees is a wrapper whose ``predict_proba`` / ``predict``
encode DiCE's rows through the schema and query the :class:`~recourselab.models.BlackBox`
(mean probability of the members) under ``budget_name``. So ``queries`` is exactly the number of
rows DiCE had scored; with ``budget``, the call that would pass it raises
:class:`~recourselab.models.oracle.QueryBudgetExceeded` (DiCE cannot stop within a budget).

Each factual gets DiCE's first counterfactual (``total_cfs`` are asked for), made valid
(categorical levels, integers, training range; immutables exactly the factual's). ``valid`` is
DiCE's own criterion: the ensemble's mean probability gives the target. A factual without a
DiCE counterfactual keeps its row (``valid`` False). Factuals with the same target share one
DiCE call. Randomness: ``random`` takes ``seed`` as its ``random_seed``; ``genetic`` draws from
numpy's and Python's global generators, which are seeded with ``seed`` for the call and
restored afterwards.
"""

from __future__ import annotations

import contextlib
import io
import logging
import random
import time
import warnings
from typing import Any

import numpy as np
import pandas as pd

from recourselab.data.schema import Schema
from recourselab.errors import DataError, RecourselabError, UnknownKeyError
from recourselab.methods.base import Counterfactuals
from recourselab.methods.common import (
    SEARCH_BUDGET,
    Search,
    check_budget,
    encode_factuals_and_targets,
    encode_train,
    positive,
    resolve_schema,
    result,
    valid_points,
)
from recourselab.models.oracle import BlackBox

logger = logging.getLogger(__name__)

#: The DiCE search methods this wrapper offers.
DICE_METHODS = ("random", "genetic")
#: The dice-ml version the wrapper is written and tested against.
DICE_VERSION = "0.12"
#: The outcome column of the frames handed to DiCE.
OUTCOME = "__recourselab_class__"


class MissingExtraError(RecourselabError, ImportError):
    """An optional dependency that is not installed (its message names the pip extra)."""


def import_dice() -> Any:
    """The ``dice_ml`` module, or a :class:`MissingExtraError` naming the extra to install."""
    try:
        import dice_ml
    except ImportError as err:
        raise MissingExtraError("the DiCE baseline needs dice-ml: pip install 'recourselab[dice]' (or, next to "
                                f"xgboost-cpu, pip install --no-deps dice-ml=={DICE_VERSION} raiutils); {err}") from err
    return dice_ml


class OracleModel:
    """The model DiCE sees: DataFrames in original units -> the oracle's mean class probabilities.

    Parameters
    ----------
    schema : encodes the rows; search : counts every row (:class:`~recourselab.methods.common.Search`).
    """

    def __init__(self, schema: Schema, search: Search) -> None:
        self.schema = schema
        self.search = search
        self._levels = {f.name: {str(lv): lv for lv in f.levels} for f in schema.features if f.kind == "categorical"}

    def encode(self, frame: pd.DataFrame) -> np.ndarray:
        """DiCE rows (m, p) -> encoded rows (m, d); categorical strings map back to the schema's levels."""
        frame = frame[self.schema.feature_names].copy()
        for name, levels in self._levels.items():
            frame[name] = [levels.get(str(v), v) for v in frame[name]]
        return self.schema.transform(frame)

    def predict_proba(self, frame: pd.DataFrame) -> np.ndarray:
        """Mean member probabilities (m, K), one counted query."""
        return self.search.query(self.encode(frame)).mean_proba

    def predict(self, frame: pd.DataFrame) -> np.ndarray:
        """Argmax of the mean member probability (m,), one counted query."""
        return self.predict_proba(frame).argmax(axis=1)


@contextlib.contextmanager
def _seeded_globals(seed: int):  # noqa: ANN202
    """numpy's and Python's global generators seeded for the block, their states restored after."""
    np_state, py_state = np.random.get_state(), random.getstate()
    np.random.seed(seed)
    random.seed(seed)
    try:
        yield
    finally:
        np.random.set_state(np_state)
        random.setstate(py_state)


class DiCE:
    """DiCE through the counted oracle (module docstring).

    Parameters
    ----------
    oracle : the ensemble; every row DiCE scores counts under ``budget_name``.
    X_train : (m, d) encoded training rows (or a raw DataFrame); DiCE takes feature ranges and
        levels from them.
    y_train : (m,) training class indices (DiCE's data needs an outcome column).
    schema : the dataset schema (default: the oracle's).
    method : ``"random"`` or ``"genetic"`` (DiCE's search; ``log["dice_method"]``).
    total_cfs : counterfactuals DiCE looks for per factual (the first is returned). Default 1.
    seed : seed of DiCE's sampling.
    options : further keyword arguments of DiCE's ``generate_counterfactuals`` (e.g.
        ``sample_size`` for random, ``maxiterations`` for genetic).
    budget_name : the oracle budget of the search queries. Default ``"search"``.
    """

    name = "dice"

    def __init__(self, oracle: BlackBox, X_train: np.ndarray | pd.DataFrame, y_train: Any, *,
                 schema: Schema | None = None, method: str = "random", total_cfs: int = 1, seed: int = 0,
                 options: dict[str, Any] | None = None, budget_name: str = SEARCH_BUDGET) -> None:
        self.schema = resolve_schema(oracle, schema, self.name)
        if method not in DICE_METHODS:
            raise UnknownKeyError(f"{self.name}: unknown method {method!r}; valid: {', '.join(DICE_METHODS)}")
        import_dice()
        if y_train is None:
            raise DataError(f"{self.name}: needs the training labels y_train (DiCE's data has an outcome column)")
        self.oracle = oracle
        self.method = method
        X, y = encode_train(X_train, y_train, self.schema, self.name)
        frame = self.schema.inverse_transform(X)
        for f in self.schema.features:
            if f.kind == "categorical":
                frame[f.name] = frame[f.name].map(str)
        frame[OUTCOME] = y
        self.train_frame = frame
        self.total_cfs = positive(total_cfs, "total_cfs", self.name, integer=True)
        self.seed = int(seed)
        self.options = dict(options or {})
        self.budget_name = budget_name

    def _query_frame(self, Xf: np.ndarray) -> pd.DataFrame:
        frame = self.schema.inverse_transform(Xf)
        for f in self.schema.features:
            if f.kind == "categorical":
                frame[f.name] = frame[f.name].map(str)
        return frame

    def explain(self, factuals: np.ndarray | pd.DataFrame, target: Any = None, *,
                budget: int | None = None) -> Counterfactuals:
        """DiCE counterfactuals of every factual.

        Parameters and errors are those of :meth:`recourselab.methods.base.CounterfactualMethod.explain`
        (DiCE cannot stop within ``budget``: the call that would pass it raises).

        Returns
        -------
        Counterfactuals
            ``queries``: the rows DiCE scored; ``valid`` (n,): the mean probability gives the target.
        """
        dice_ml = import_dice()
        t0 = time.perf_counter()
        search = Search(self.oracle, self.budget_name, check_budget(budget, self.name), self.name)
        Xf, tgt = encode_factuals_and_targets(factuals, target, self.schema, self.name)
        model = OracleModel(self.schema, search)
        numerical = [f.name for f in self.schema.features if f.kind == "numerical"]
        vary = [f.name for f in self.schema.features if not f.immutable]
        data = dice_ml.Data(dataframe=self.train_frame, continuous_features=numerical, outcome_name=OUTCOME)
        dice_model = dice_ml.Model(model=model, backend="sklearn", model_type="classifier")
        queries = self._query_frame(Xf)
        cf, found = Xf.copy(), np.zeros(len(Xf), dtype=bool)
        with contextlib.redirect_stderr(io.StringIO()), _seeded_globals(self.seed), warnings.catch_warnings():
            warnings.filterwarnings("ignore", module="dice_ml")  # its pandas deprecations; stderr: its bars
            explainer = dice_ml.Dice(data, dice_model, method=self.method)
            for t in np.unique(tgt):
                rows = np.flatnonzero(tgt == t)
                kw = {"random_seed": self.seed} if self.method == "random" else {}
                res = explainer.generate_counterfactuals(
                    queries.iloc[rows].reset_index(drop=True), total_CFs=self.total_cfs, desired_class=int(t),
                    features_to_vary=vary, verbose=False, **kw | self.options)
                for i, example in zip(rows, res.cf_examples_list, strict=True):
                    out = example.final_cfs_df
                    if out is None or not len(out):
                        continue
                    first = out.iloc[[0]]
                    if int(first[OUTCOME].iloc[0]) != t:
                        continue
                    cf[i] = model.encode(first)[0]
                    found[i] = True
        made_valid = valid_points(cf[found], Xf[found], self.schema)
        ruled = self.schema.monotone_signs() != 0
        moved = np.flatnonzero(found)[~np.isclose(made_valid[:, ruled], cf[found][:, ruled], rtol=0.0,
                                                  atol=1e-12).all(axis=1)]
        cf[found] = made_valid
        valid = found.copy()
        if len(moved):  # a monotone feature was set back: DiCE's verdict was on another point, ask again (counted)
            valid[moved] = search.query(cf[moved]).mean_proba.argmax(axis=1) == tgt[moved]
        if (~found).any():
            logger.info("%s: no counterfactual for %d of %d factuals", self.name, int((~found).sum()), len(Xf))
        log = {"no_counterfactual": int((~found).sum()), "dice_method": self.method, "total_cfs": self.total_cfs,
               "monotone_rechecked": int(len(moved))}
        return result(self.name, self.schema, factuals, Xf, cf, tgt, search.rows, time.perf_counter() - t0,
                      valid, log)


__all__ = ["DICE_METHODS", "DICE_VERSION", "DiCE", "MissingExtraError", "OracleModel", "import_dice"]
